import type { ToolCall } from '@turnwarden/protocol';
import { raceAbort } from './abort.js';
import type { ModelProvider, ModelRequest, TurnSignals } from './contracts.js';

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
 * waiting for it.
 */
export async function streamAssistant(
  model: ModelProvider,
  req: ModelRequest,
  signals: TurnSignals,
  hooks: StreamHooks,
): Promise<StreamedAssistant> {
  const iterator = model.stream(req, signals)[Symbol.asyncIterator]();
  let content = '';
  const calls: ToolCall[] = [];
  try {
    for (;;) {
      const step = await raceAbort(iterator.next(), signals.signal);
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
  }
  return { content, calls };
}
