import type { ToolCall } from '@turnwarden/protocol';
import { abortError } from './abort.js';
import type { ModelEvent, ModelProvider, ModelRequest, TurnSignals } from './contracts.js';

export interface StreamedAssistant {
  readonly content: string;
  readonly calls: readonly ToolCall[];
}

export interface StreamHooks {
  /** Every event is progress; text is also forwarded to listeners. */
  readonly onText: (text: string) => void;
  readonly onToolCall: () => void;
}

/**
 * Streams one assistant message. Each `next()` is raced against the abort so a model that
 * ignores its signal cannot hold the turn; on abort the iterator is told to return, without
 * waiting for it. One abort listener serves the whole message (an EventTarget listener per event
 * costs more than the event on a thread that streams thousands a second).
 */
export async function streamAssistant(
  model: ModelProvider,
  req: ModelRequest,
  signals: TurnSignals,
  hooks: StreamHooks,
): Promise<StreamedAssistant> {
  const { signal } = signals;
  const iterator = model.stream(req, signals)[Symbol.asyncIterator]();
  let content = '';
  const calls: ToolCall[] = [];
  let rejectStep: ((e: unknown) => void) | undefined;
  const onAbort = () => rejectStep?.(abortError(signal));
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    for (;;) {
      if (signal.aborted) throw abortError(signal);
      const next = iterator.next();
      const step = await new Promise<IteratorResult<ModelEvent, unknown>>((resolve, reject) => {
        rejectStep = reject;
        next.then(resolve, reject);
      });
      rejectStep = undefined;
      if (step.done) break;
      const event = step.value;
      if (event.type === 'text') {
        content += event.text;
        hooks.onText(event.text);
      } else {
        calls.push(event.call);
        hooks.onToolCall();
      }
    }
  } catch (e) {
    iterator.return?.(undefined)?.catch(() => {});
    throw e;
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  return { content, calls };
}
