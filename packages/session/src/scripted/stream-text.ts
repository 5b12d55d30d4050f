import type { ModelEvent } from '../contracts.js';
import { throwIfAborted, wait } from '../tools/wait.js';
import { splitChunks } from './chunks.js';

/** Streams `text` as `chunks` text events, waiting `delayMs` between two of them (honouring `signal`). */
export async function* streamText(
  text: string,
  chunks: number,
  delayMs: number,
  signal: AbortSignal,
): AsyncGenerator<ModelEvent, void, undefined> {
  const pieces = splitChunks(text, chunks);
  for (const [index, piece] of pieces.entries()) {
    if (index > 0 && delayMs > 0) await wait(delayMs, signal, 'scripted model text delay');
    throwIfAborted(signal, 'scripted model text');
    yield { type: 'text', text: piece };
  }
}
