import type { ModelEvent } from '../contracts.js';
import { abortError, throwIfAborted } from '../tools/wait.js';
import { splitChunks } from './chunks.js';

/**
 * Streams `text` as `chunks` text events, `delayMs` apart (piece i due `i × delayMs` after the
 * first, as a server streams at its own pace), rejecting
 * with TURN_ABORTED as soon as `signal` is aborted. One abort listener serves the whole text,
 * not one per chunk: adding and removing an EventTarget listener costs more than the chunk on a
 * model thread that streams for thousands of sessions.
 */
export async function* streamText(
  text: string,
  chunks: number,
  delayMs: number,
  signal: AbortSignal,
): AsyncGenerator<ModelEvent, void, undefined> {
  const pieces = splitChunks(text, chunks);
  let timer: NodeJS.Timeout | undefined;
  let interrupt: ((e: unknown) => void) | undefined;
  const onAbort = () => {
    clearTimeout(timer);
    interrupt?.(abortError(signal, 'scripted model text delay'));
  };
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    const start = performance.now();
    for (const [index, piece] of pieces.entries()) {
      if (index > 0 && delayMs > 0) {
        throwIfAborted(signal, 'scripted model text delay');
        // Piece i is due at start + i × delayMs — a server's pace: a piece that came late (a busy
        // thread) does not push back the ones after it.
        const due = start + index * delayMs - performance.now();
        await new Promise<void>((resolve, reject) => {
          interrupt = reject;
          timer = setTimeout(resolve, Math.max(0, due));
        });
        interrupt = undefined;
      }
      throwIfAborted(signal, 'scripted model text');
      yield { type: 'text', text: piece };
    }
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', onAbort);
  }
}
