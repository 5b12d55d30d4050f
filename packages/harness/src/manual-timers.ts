/**
 * Timers that fire only when the schedule moves their time: the supervisor's lease renewal and
 * grace escalation become scheduled steps (`A:wait`, `A:grace`) instead of wall-clock events,
 * so a run neither sleeps nor depends on how fast the machine is.
 */
import type { CancelTimer, Timers } from '@turnwarden/supervisor/harness';

interface Pending {
  at: number;
  readonly every: number | undefined;
  readonly fn: () => void;
}

export class ManualTimers implements Timers {
  private now = 0;
  private nextId = 0;
  private readonly pending = new Map<number, Pending>();
  /** Timers the runtime keeps for its whole life (the journal's sweep), armed before any run. */
  private readonly lifetime = new Set<number>();

  every(ms: number, fn: () => void): CancelTimer {
    return this.add({ at: this.now + ms, every: Math.max(1, ms), fn });
  }

  after(ms: number, fn: () => void): CancelTimer {
    return this.add({ at: this.now + ms, every: undefined, fn });
  }

  /** Marks every timer armed so far as the runtime's own: `size` no longer counts them. */
  markLifetime(): void {
    for (const id of this.pending.keys()) this.lifetime.add(id);
  }

  /**
   * Timers armed by runs and not yet cancelled or fired (a clean runtime between runs has none);
   * the runtime's lifetime timers are not counted.
   */
  get size(): number {
    let n = 0;
    for (const id of this.pending.keys()) if (!this.lifetime.has(id)) n++;
    return n;
  }

  /** Moves time by `ms`, firing every timer that falls due, in time order (ties: arming order). */
  advance(ms: number): void {
    const until = this.now + ms;
    for (;;) {
      let nextId: number | undefined;
      let next: Pending | undefined;
      for (const [id, p] of this.pending) {
        if (p.at <= until && (next === undefined || p.at < next.at)) {
          nextId = id;
          next = p;
        }
      }
      if (next === undefined || nextId === undefined) break;
      this.now = next.at;
      if (next.every === undefined) this.pending.delete(nextId);
      else next.at += next.every;
      next.fn();
    }
    this.now = until;
  }

  private add(p: Pending): CancelTimer {
    const id = this.nextId++;
    this.pending.set(id, p);
    return () => {
      this.pending.delete(id);
    };
  }
}
