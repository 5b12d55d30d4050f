/**
 * The scale workload (issue 24): per session one turn of `tokens` tokens `delayMs` apart, a
 * `toolMs` tool that heartbeats every `heartbeatMs`, then `tokens` more. The same turn is a
 * script for the scripted model, a script the loopback server plays over HTTP, and a plain async
 * function for the in-process baseline, so all three pace their tokens alike: the first token
 * of a message at once, then one every `delayMs` (as the scripted model and the loopback do).
 */

export interface Workload {
  /** Tokens per model message (two messages per turn). */
  readonly tokens: number;
  /** Between two tokens of a message. */
  readonly delayMs: number;
  /** How long the tool runs. */
  readonly toolMs: number;
  /** How often the tool heartbeats. */
  readonly heartbeatMs: number;
}

export const DEFAULT_WORKLOAD: Workload = { tokens: 180, delayMs: 33, toolMs: 3_000, heartbeatMs: 250 };

/** Every token carries this many characters, so a listener counts tokens from text even when events coalesce. */
export const TOKEN_TEXT = 'tok ';

/** The text of one model message: `tokens` tokens of `TOKEN_TEXT`. */
export function messageText(w: Workload): string {
  return TOKEN_TEXT.repeat(w.tokens);
}

/** The tool call's arguments (the demo `heartbeat` tool of `@turnwarden/session/scripted`). */
export function toolArgs(w: Workload): { ms: number; everyMs: number } {
  return { ms: w.toolMs, everyMs: w.heartbeatMs };
}

/** The turn as a scripted-model script (packages/session/README.md, "Script language"). */
export function turnScript(w: Workload): string {
  const text = { text: messageText(w), chunks: w.tokens, delayMs: w.delayMs };
  return JSON.stringify({ script: [text, { tools: [{ name: 'heartbeat', args: toolArgs(w) }] }, text] });
}

/**
 * The shortest a turn can take: two messages of `tokens − 1` gaps each, plus the tool. (The
 * issue's 14.8 s for 180 tokens at 33 ms and a 3 s tool: 14,814 ms. Counting 180 gaps per
 * message instead would give 14,880 ms.)
 */
export function idealTurnMs(w: Workload): number {
  return 2 * Math.max(0, w.tokens - 1) * w.delayMs + w.toolMs;
}

/** Tokens of one turn (both messages). */
export function tokensPerTurn(w: Workload): number {
  return 2 * w.tokens;
}

/** Aggregate tokens/s if every one of `n` turns took the ideal time. */
export function idealTokensPerSecond(n: number, w: Workload): number {
  return (n * tokensPerTurn(w) * 1000) / idealTurnMs(w);
}
