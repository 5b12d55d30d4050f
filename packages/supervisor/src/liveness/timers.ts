/**
 * The timers behind the supervisor's own schedules — lease renewal and the grace period before a
 * terminate. Injectable (`TurnwardenOptions.timers`) so the interleaving harness decides when
 * they fire instead of the wall clock; production uses Node's timers.
 */

/** Stops a timer; calling it again does nothing. */
export type CancelTimer = () => void;

export interface Timers {
  /** Calls `fn` every `ms` until cancelled. Must not keep the process alive on its own. */
  every(ms: number, fn: () => void): CancelTimer;
  /** Calls `fn` once after `ms` unless cancelled first. */
  after(ms: number, fn: () => void): CancelTimer;
}

export const nodeTimers: Timers = {
  every(ms, fn) {
    const t = setInterval(fn, ms);
    t.unref();
    return () => clearInterval(t);
  },
  after(ms, fn) {
    const t = setTimeout(fn, ms);
    return () => clearTimeout(t);
  },
};
