/**
 * The scripted model over HTTP: a loopback fallback that plays the script in a turn's user
 * message (the `@turnwarden/session/scripted` language) as a real server would stream it, so the
 * demo and the tests can run scripted turns through a real provider. Model call k of a turn —
 * counted as the assistant messages since the last user message — plays the script's segment k:
 *
 * - `text` → content deltas, `chunks` of them, `delayMs` apart;
 * - `tools` → tool-call deltas (each call's arguments in two pieces) and `finish: tool_calls`;
 * - `heartbeat` → reasoning deltas every `everyMs` for `ms` (progress without answer text);
 * - `sleep` → silence; `stall` and `wedge` → a hang (a server cannot block the client's thread);
 * - `fail` → HTTP 500.
 *
 * A message that is not a script is answered with a short text.
 */
import type { ScriptStep } from '@turnwarden/session';
import { parseScript } from '@turnwarden/session';
import type { Chunk, Reply, RequestBody } from './server.js';

interface Message {
  readonly role?: unknown;
  readonly content?: unknown;
}

function text(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((p) => (typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : ''))
      .join('');
  }
  return '';
}

function split(s: string, pieces: number): string[] {
  const n = Math.max(1, Math.min(pieces, s.length));
  const size = Math.ceil(s.length / n);
  const out: string[] = [];
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size));
  return out;
}

function render(step: ScriptStep, chunks: Chunk[]): 'hang' | 'fail' | undefined {
  switch (step.kind) {
    case 'text':
      // Each text step paced from its own start, as the scripted model paces it.
      chunks.push({ pauseMs: 0 });
      split(step.text, step.chunks).forEach((piece, i) => {
        if (i > 0 && step.delayMs > 0) chunks.push({ delayMs: step.delayMs });
        chunks.push({ text: piece });
      });
      return undefined;
    case 'tools':
      step.calls.forEach((call, index) => {
        const half = Math.floor(call.arguments.length / 2);
        chunks.push({
          toolCall: { index, id: call.id, name: call.name, args: call.arguments.slice(0, half) },
        });
        chunks.push({ toolCall: { index, args: call.arguments.slice(half) } });
      });
      return undefined;
    case 'heartbeat':
      for (let t = 0; t < step.ms; t += step.everyMs)
        chunks.push({ reasoning: '.' }, { pauseMs: step.everyMs });
      return undefined;
    case 'sleep':
      chunks.push({ pauseMs: step.ms });
      return undefined;
    case 'stall':
    case 'wedge':
      return 'hang';
    case 'fail':
      return 'fail';
  }
}

/** A `LoopbackOptions.fallback` that plays scripts. */
export function playScripts(body: RequestBody): Reply {
  const messages = (body.messages ?? []) as readonly Message[];
  let lastUser = -1;
  messages.forEach((m, i) => {
    if (m.role === 'user') lastUser = i;
  });
  const content = lastUser < 0 ? '' : text(messages[lastUser]?.content);
  let script: ReturnType<typeof parseScript>;
  try {
    script = parseScript(content);
  } catch {
    script = undefined;
  }
  if (script === undefined) {
    const answer = `You said: ${content.slice(0, 80)}`;
    return {
      chunks: [...split(answer, 4).map((t): Chunk => ({ text: t })), { finish: 'stop' }, { done: true }],
    };
  }
  const call = messages.slice(lastUser + 1).filter((m) => m.role === 'assistant').length;
  const segment = script.segments[call] ?? [];
  const chunks: Chunk[] = [];
  let tools = false;
  for (const step of segment) {
    const end = render(step, chunks);
    if (end === 'hang') return { chunks: [...chunks, { hang: true }] };
    if (end === 'fail')
      return { status: 500, body: { error: { message: step.kind === 'fail' ? step.message : 'fail' } } };
    if (step.kind === 'tools') tools = true;
  }
  return { chunks: [...chunks, { finish: tools ? 'tool_calls' : 'stop' }, { done: true }] };
}
