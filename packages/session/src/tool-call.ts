/**
 * Runs one tool call occurrence of an assistant message. Bad model output (unknown tool,
 * oversize or malformed arguments) becomes a structurally complete error result with effect
 * `none`, never a crash (T6).
 */
import type { ToolCall, ToolResultMessage } from '@turnwarden/protocol';
import { isTurnwardenError } from '@turnwarden/protocol';
import { raceAbort } from './abort.js';
import type { Tool, ToolContext } from './contracts.js';

export interface ToolCallEnv {
  readonly tools: ReadonlyMap<string, Tool>;
  readonly maxToolArgBytes: number;
  /** The workstream as its tenant names it (ToolContext). */
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly signal: AbortSignal;
  readonly heartbeat: () => void;
  /** Called just before the tool starts: from here on its effect is `unknown` until it settles. */
  readonly onStart: () => void;
  /** Runs a thread-isolated task for this call (the turn loop's; absent in unit tests). */
  readonly runIsolated?: ToolContext['runIsolated'];
}

function refused(call: ToolCall, callIndex: number, reason: string): ToolResultMessage {
  return {
    role: 'tool',
    toolCallId: call.id,
    callIndex,
    name: call.name,
    content: reason,
    isError: true,
    effect: 'none',
  };
}

/** A call's arguments as a JSON object, or why they are not one (empty text is `{}`). */
export function parseToolArguments(text: string): Record<string, unknown> | string {
  let value: unknown;
  try {
    value = text.trim() === '' ? {} : JSON.parse(text);
  } catch (e) {
    return `malformed tool arguments: ${(e as Error).message}`;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return 'malformed tool arguments: expected a JSON object';
  }
  return value as Record<string, unknown>;
}

/** The effect a tool's error declares (see `toolError`), read by shape: plugins may bundle their own copy. */
export function declaredEffect(e: unknown): 'none' | 'applied' | undefined {
  const effect = typeof e === 'object' && e !== null ? (e as { toolEffect?: unknown }).toolEffect : undefined;
  return effect === 'none' || effect === 'applied' ? effect : undefined;
}

/**
 * An error a tool throws when it knows what happened to its effect: `none` — it never reached
 * its work (its server was down, its input was refused before anything ran); `applied` — the
 * work finished and its answer is an error. Any other error a tool throws is effect `unknown`.
 */
export function toolError(message: string, effect: 'none' | 'applied', cause?: unknown): Error {
  const e = new Error(message, cause === undefined ? undefined : { cause });
  return Object.assign(e, { toolEffect: effect });
}

/** Returns the result message; throws only when the turn is aborted. */
export async function runToolCall(
  call: ToolCall,
  callIndex: number,
  env: ToolCallEnv,
): Promise<ToolResultMessage> {
  const tool = env.tools.get(call.name);
  if (!tool) return refused(call, callIndex, `unknown tool: ${call.name}`);
  if (Buffer.byteLength(call.arguments, 'utf8') > env.maxToolArgBytes) {
    return refused(call, callIndex, `tool arguments exceed ${env.maxToolArgBytes} bytes`);
  }
  const args = parseToolArguments(call.arguments);
  if (typeof args === 'string') return refused(call, callIndex, args);

  const ctx: ToolContext = {
    signal: env.signal,
    heartbeat: env.heartbeat,
    callId: call.id,
    workstreamId: env.workstreamId,
    tenantId: env.tenantId,
    ...(env.runIsolated === undefined ? {} : { runIsolated: env.runIsolated }),
  };
  env.onStart();
  try {
    const content = await raceAbort(
      Promise.resolve().then(() => tool.run(args, ctx)),
      env.signal,
    );
    return {
      role: 'tool',
      toolCallId: call.id,
      callIndex,
      name: call.name,
      content,
      isError: false,
      effect: 'applied',
    };
  } catch (e) {
    if (env.signal.aborted) throw e;
    const message = isTurnwardenError(e) || e instanceof Error ? e.message : String(e);
    // The tool failed after it started: whether it had an effect is not known — unless the
    // tool says so (`toolError`): it never reached its work (`none`), or it finished and its
    // answer is an error (`applied`).
    return {
      role: 'tool',
      toolCallId: call.id,
      callIndex,
      name: call.name,
      content: `tool error: ${message}`,
      isError: true,
      effect: declaredEffect(e) ?? 'unknown',
    };
  }
}
