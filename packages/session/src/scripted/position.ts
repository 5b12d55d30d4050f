/** Where a model call stands in its turn: what the stateless scripted model reads from the history. */
import type { HistoryMessage } from '@turnwarden/protocol';
import { errors } from '@turnwarden/protocol';

export interface TurnPosition {
  /** The content of the last user message: the script (or the text to echo). */
  readonly content: string;
  /** The model call of the turn, from 0: the number of assistant messages after that user message. */
  readonly modelCall: number;
}

export function turnPosition(history: readonly HistoryMessage[]): TurnPosition {
  let modelCall = 0;
  for (let i = history.length - 1; i >= 0; i -= 1) {
    const message = history[i];
    if (message?.role === 'user') return { content: message.content, modelCall };
    if (message?.role === 'assistant') modelCall += 1;
  }
  throw errors.modelError('scripted model: the history has no user message');
}
