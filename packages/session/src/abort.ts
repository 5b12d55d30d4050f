import { errors, TurnwardenError } from '@turnwarden/protocol';

/** What an aborted turn's await rejects with: the signal's TurnwardenError, or TURN_ABORTED. */
export function abortError(signal: AbortSignal): TurnwardenError {
  const r: unknown = signal.reason;
  if (r instanceof TurnwardenError) return r;
  return errors.turnAborted('turn aborted');
}

/**
 * Awaits `p` unless the turn is aborted first. Model and tool code may ignore the signal (a
 * stalled promise): the turn must still unwind cooperatively, so every await of foreign code
 * goes through here. `p` is pre-caught: when it settles after we gave up on it, a rejection
 * must not become an unhandled rejection, which would kill the worker thread. Exported for
 * plugins that race foreign code the same way (the MCP client).
 */
export function raceAbort<T>(
  p: Promise<T>,
  signal: AbortSignal,
  /** What the race rejects with on abort (default: the signal's TurnwardenError, or TURN_ABORTED). */
  reason: (signal: AbortSignal) => unknown = abortError,
): Promise<T> {
  p.catch(() => {});
  if (signal.aborted) return Promise.reject(reason(signal));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(reason(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
