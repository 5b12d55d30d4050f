/**
 * Waiting that honours an AbortSignal — the one implementation shared by the scripted model
 * and the demo tools. Every wait rejects promptly with TurnwardenError(TURN_ABORTED) once the
 * signal is aborted (or at once if it already is).
 */
import { errors, type TurnwardenError } from '@turnwarden/protocol';
import type { TurnSignals } from '../contracts.js';

/** Default interval between two heartbeats of `heartbeatFor`. */
export const DEFAULT_HEARTBEAT_EVERY_MS = 20;

function describeReason(reason: unknown): string | undefined {
  if (typeof reason === 'string') return reason;
  if (reason instanceof Error) return reason.message;
  return undefined;
}

/** The error a wait rejects with when `signal` is aborted; the signal's reason is its cause. */
export function abortError(signal: AbortSignal, what = 'wait'): TurnwardenError {
  const reason = describeReason(signal.reason);
  return errors.turnAborted(`${what} aborted${reason ? `: ${reason}` : ''}`, undefined, {
    cause: signal.reason,
  });
}

/** Throws `abortError` if `signal` is aborted. */
export function throwIfAborted(signal: AbortSignal, what?: string): void {
  if (signal.aborted) throw abortError(signal, what);
}

/**
 * Resolves after `ms` milliseconds. With a signal, rejects with TURN_ABORTED as soon as it is
 * aborted (and clears the timer). Without one, nothing interrupts it.
 */
export function wait(ms: number, signal?: AbortSignal, what = 'wait'): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortError(signal, what));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      if (signal) reject(abortError(signal, what));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Stays alive for `ms` milliseconds, calling `ctx.heartbeat()` at the start and after every
 * `everyMs` (the last interval may be shorter): `1 + ceil(ms / everyMs)` beats in all, however
 * late the timers fire. Rejects with TURN_ABORTED when `ctx.signal` is aborted.
 * Resolves with the number of beats.
 */
export async function heartbeatFor(
  ms: number,
  everyMs: number,
  ctx: TurnSignals,
  what = 'heartbeat',
): Promise<number> {
  throwIfAborted(ctx.signal, what);
  ctx.heartbeat();
  let beats = 1;
  for (let remaining = ms; remaining > 0; remaining -= everyMs) {
    await wait(Math.min(everyMs, remaining), ctx.signal, what);
    ctx.heartbeat();
    beats += 1;
  }
  return beats;
}
