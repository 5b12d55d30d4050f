/**
 * Schedulers decide, at every step, which enabled step runs next. A step is labelled
 * `THREAD:what` (e.g. `W:worker.stream-event`, `S:watchdog.sample→commit`, `A:advance`); the
 * part before the colon is the logical thread PCT assigns priorities to.
 */
import { pickIndex, rng } from './rng.js';

export interface Scheduler {
  readonly kind: SchedulerKind;
  /** Returns one of `enabled` (never empty). */
  pick(enabled: readonly string[], step: number): string;
}

export type SchedulerKind = 'scripted' | 'random' | 'pct';

function threadOf(label: string): string {
  const i = label.indexOf(':');
  return i < 0 ? label : label.slice(0, i);
}

/** Replays a recorded list of choices (or the exact window a test names). */
export class ScriptedScheduler implements Scheduler {
  readonly kind = 'scripted' as const;
  constructor(private readonly choices: readonly string[]) {}

  pick(enabled: readonly string[], step: number): string {
    const want = this.choices[step];
    if (want === undefined) {
      // Past the script: the run continues deterministically with the first enabled step.
      return [...enabled].sort()[0]!;
    }
    if (!enabled.includes(want)) {
      throw new ScheduleDivergence(step, want, enabled);
    }
    return want;
  }
}

export class ScheduleDivergence extends Error {
  constructor(
    readonly step: number,
    readonly wanted: string,
    readonly enabled: readonly string[],
  ) {
    super(`schedule diverged at step ${step}: wanted ${wanted}, enabled [${enabled.join(', ')}]`);
    this.name = 'ScheduleDivergence';
  }
}

/** Uniform choice among the enabled steps. */
export class RandomScheduler implements Scheduler {
  readonly kind = 'random' as const;
  private readonly random: () => number;
  constructor(readonly seed: number) {
    this.random = rng(seed);
  }

  pick(enabled: readonly string[]): string {
    const sorted = [...enabled].sort();
    return sorted[pickIndex(this.random, sorted.length)]!;
  }
}

/**
 * PCT (Burckhardt, Kothari, Musuvathi, Nagarakatte: "A Randomized Scheduler with Probabilistic
 * Guarantees of Finding Bugs", ASPLOS 2010): every thread gets a random distinct priority; the
 * highest-priority enabled thread runs; at d−1 random change points (steps in 1..k) the running
 * thread drops below every initial priority. A bug of depth d is found with probability at
 * least 1/(n·k^(d−1)).
 */
export class PctScheduler implements Scheduler {
  readonly kind = 'pct' as const;
  private readonly random: () => number;
  private readonly priorities = new Map<string, number>();
  private readonly changePoints: Set<number>;
  private lowest = 0;

  constructor(
    readonly seed: number,
    readonly depth: number,
    readonly maxSteps: number,
  ) {
    this.random = rng(seed);
    this.changePoints = new Set();
    for (let i = 1; i < depth; i++) this.changePoints.add(1 + pickIndex(this.random, Math.max(1, maxSteps)));
  }

  pick(enabled: readonly string[], step: number): string {
    const sorted = [...enabled].sort();
    for (const label of sorted) {
      const thread = threadOf(label);
      // Initial priorities are above every changed one (d, d+1, …), drawn at first sight.
      if (!this.priorities.has(thread)) this.priorities.set(thread, this.depth + this.random() * 1_000);
    }
    let best = sorted[0]!;
    let bestPriority = Number.NEGATIVE_INFINITY;
    for (const label of sorted) {
      const p = this.priorities.get(threadOf(label))!;
      if (p > bestPriority) {
        best = label;
        bestPriority = p;
      }
    }
    if (this.changePoints.has(step)) this.priorities.set(threadOf(best), --this.lowest);
    return best;
  }
}
