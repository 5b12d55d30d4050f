/** Plays one segment of a script: the steps of one model call. */
import { errors } from '@turnwarden/protocol';
import type { ModelEvent, TurnSignals } from '../contracts.js';
import { spinForever, stallForever } from '../tools/hang.js';
import { heartbeatFor, throwIfAborted, wait } from '../tools/wait.js';
import { streamText } from './stream-text.js';
import type { ScriptSegment } from './types.js';

export async function* playSegment(
  segment: ScriptSegment,
  ctx: TurnSignals,
): AsyncGenerator<ModelEvent, void, undefined> {
  for (const step of segment) {
    throwIfAborted(ctx.signal, 'scripted model');
    switch (step.kind) {
      case 'text':
        yield* streamText(step.text, step.chunks, step.delayMs, ctx.signal);
        break;
      case 'tools':
        for (const call of step.calls) yield { type: 'tool_call', call };
        return;
      case 'sleep':
        await wait(step.ms, ctx.signal, 'scripted model sleep');
        break;
      case 'heartbeat':
        await heartbeatFor(step.ms, step.everyMs, ctx, 'scripted model heartbeat');
        break;
      case 'stall':
        await stallForever();
        break;
      case 'wedge':
        spinForever();
        break;
      case 'fail':
        throw errors.modelError(step.message);
    }
  }
}
