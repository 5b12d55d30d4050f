/**
 * Claims waiting for a session worker (pool.ts), in arrival order. A waiting claim is served by
 * the next worker that becomes ready; it is refused only once the pool has made no progress — no
 * worker ready, none exited — for `timeoutMs`: a ramp from a cold pool, however long, refuses
 * nothing while spawns keep completing, and a pool that is stuck refuses within the bound.
 */
import type { CancelTimer, Timers } from '../liveness/timers.js';

interface Waiter<T> {
  readonly resolve: (item: T) => void;
  readonly reject: (e: unknown) => void;
  cancel: CancelTimer;
}

export class WaitingClaims<T> {
  private readonly waiters: Waiter<T>[] = [];
  private progressAt: number;

  constructor(
    private readonly timeoutMs: number,
    private readonly timers: Pick<Timers, 'after'>,
    private readonly now: () => number,
    /** What a claim that waited out the bound is refused with. */
    private readonly refusal: () => unknown,
  ) {
    this.progressAt = now();
  }

  get length(): number {
    return this.waiters.length;
  }

  /** Waits for the next item served, behind every claim already waiting. */
  wait(): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter<T> = { resolve, reject, cancel: () => {} };
      const arm = (ms: number) => {
        waiter.cancel = this.timers.after(ms, () => {
          const quiet = this.now() - this.progressAt;
          if (quiet < this.timeoutMs) {
            arm(this.timeoutMs - quiet); // the pool moved meanwhile: the bound counts from then
            return;
          }
          this.waiters.splice(this.waiters.indexOf(waiter), 1);
          reject(this.refusal());
        });
      };
      arm(this.timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** The pool made progress (a worker ready, a slot freed): the waiting claims' bound restarts. */
  progress(): void {
    this.progressAt = this.now();
  }

  /** Hands `item` to the claim waiting longest; false when none waits. */
  serve(item: T): boolean {
    this.progress();
    const waiter = this.waiters.shift();
    if (waiter === undefined) return false;
    waiter.cancel();
    waiter.resolve(item);
    return true;
  }

  /** Refuses every waiting claim (the pool is closing). */
  rejectAll(e: unknown): void {
    for (const w of this.waiters.splice(0)) {
      w.cancel();
      w.reject(e);
    }
  }
}
