/**
 * The liveness watchdog (L1–L12). Runs on the supervisor's thread; polls the activity clock of
 * every active turn — and only active turns, so idle workstreams cost nothing (L12).
 *
 * Decisions use the supervisor's own observation of the activity version: a change seen at
 * time t means progress happened at or before t, so `now - lastChangeAt >= timeoutMs` never
 * aborts a turn that made progress less than timeoutMs ago (L2). Sampling twice per pollMs
 * bounds detection by timeoutMs + pollMs after the last progress (L1).
 *
 * An abort attempt has two stages (L5): the observational one (`fired`: log, event, warning)
 * and, only if the commit CAS succeeds, the definitive one (`committed`). The commit is the
 * clock's single compare-and-swap against the sampled version (L6): any stamp after the sample
 * makes it decline (L4). Anything that throws before the CAS declines the abort with nothing
 * published (L7).
 */
import { type ActivityClock, activityName, isFenced } from '@turnwarden/clock';
import { SeamName, seam } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import type { WatchdogConfig } from '../config.js';
import { LatencyHistogram } from './latency.js';

/**
 * Which bound fired: `idle` (no progress for timeoutMs since the last stamp, L1), `deadline`
 * (turnDeadlineMs since the turn started, L11), `dispatch` (dispatchMs without the worker's
 * first stamp: the worker never received or entered the turn).
 */
export type StallBound = 'idle' | 'deadline' | 'dispatch';

/**
 * One watched turn. A class (one hidden class for every instance) because `poll` reads these
 * fields for every active turn on every tick: object spreads gave each its own shape and made
 * the poll megamorphic (13–30× slower, measured by `turnwarden bench --only poll`).
 */
export class WatchedTurn {
  lastVersion: number;
  lastChangeAt: number;
  /** The worker stamped the turn's entry: from here the idle bound runs (before, the dispatch bound). */
  entered = false;
  attempting = false;
  committed = false;

  constructor(
    readonly slot: number,
    readonly workstreamId: string,
    readonly tenantId: string,
    readonly generation: number,
    /** Monotonic ms when the turn was armed. */
    readonly startedAt: number,
    version: number,
  ) {
    this.lastVersion = version;
    this.lastChangeAt = startedAt;
  }
}

export interface StallInfo {
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly generation: number;
  readonly slot: number;
  readonly bound: StallBound;
  /** Supervisor-observed time without progress. */
  readonly idleMs: number;
  /** What the turn was doing at its last stamp. */
  readonly lastActivity: string;
  readonly sampledVersion: number;
}

export interface WatchdogDelegate {
  /** Observational stage: may be followed by a decline. */
  fired(turn: WatchedTurn, info: StallInfo): void;
  /** The abort committed: the definitive stage (stop renewal, log, abort message, grace). */
  committed(turn: WatchedTurn, info: StallInfo): void;
  declined(turn: WatchedTurn, info: StallInfo, why: 'activity' | 'ended' | 'failed', err?: unknown): void;
}

export interface WatchdogHooks {
  /**
   * Test and harness seam between the stall sample and the commit. A returned promise holds
   * the window open; a throw (or rejection) declines the abort fail-closed (L7).
   */
  beforeCommit?(info: StallInfo): void | Promise<void>;
}

export interface WatchdogStats {
  /** Turns watched now (active turns only: idle workstreams are never polled, L12). */
  readonly watched: number;
  readonly polls: number;
  readonly fired: number;
  readonly committed: number;
  readonly declined: number;
  /** How late poll ticks ran against their schedule (ms). */
  readonly pollLateness: { readonly p50: number; readonly p99: number; readonly max: number };
}

export class Watchdog {
  private readonly turns = new Map<number, WatchedTurn>();
  private timer: NodeJS.Timeout | undefined;
  private readonly intervalMs: number;
  private nextDueAt = 0;
  private polls = 0;
  private firedCount = 0;
  private committedCount = 0;
  private declinedCount = 0;
  readonly lateness = new LatencyHistogram();

  constructor(
    protected readonly clock: ActivityClock,
    private readonly config: WatchdogConfig,
    private readonly delegate: WatchdogDelegate,
    private readonly logger: Logger,
    private readonly hooks: WatchdogHooks = {},
  ) {
    this.intervalMs = Math.max(1, config.pollMs / 2);
  }

  start(): void {
    if (this.timer) return;
    this.nextDueAt = this.clock.nowMs() + this.intervalMs;
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Starts watching a freshly armed turn (the caller armed the slot). */
  watch(turn: { slot: number; workstreamId: string; tenantId: string; generation: number }): WatchedTurn {
    const watched = new WatchedTurn(
      turn.slot,
      turn.workstreamId,
      turn.tenantId,
      turn.generation,
      this.clock.nowMs(),
      this.clock.sample(turn.slot),
    );
    this.turns.set(turn.slot, watched);
    return watched;
  }

  unwatch(turn: WatchedTurn): void {
    if (this.turns.get(turn.slot) === turn) this.turns.delete(turn.slot);
  }

  active(): number {
    return this.turns.size;
  }

  stats(): WatchdogStats {
    return {
      watched: this.turns.size,
      polls: this.polls,
      fired: this.firedCount,
      committed: this.committedCount,
      declined: this.declinedCount,
      pollLateness: {
        p50: this.lateness.quantile(0.5),
        p99: this.lateness.quantile(0.99),
        max: this.lateness.max(),
      },
    };
  }

  private tick(): void {
    const now = this.clock.nowMs();
    this.lateness.record(now - this.nextDueAt);
    this.nextDueAt = Math.max(this.nextDueAt, now) + this.intervalMs;
    this.poll();
  }

  /** One sampling pass over the active turns. Public for deterministic tests. */
  poll(): void {
    this.polls++;
    const now = this.clock.advance();
    const { timeoutMs, turnDeadlineMs, dispatchMs } = this.config;
    for (const turn of this.turns.values()) {
      if (turn.attempting || turn.committed) continue;
      const version = this.clock.sample(turn.slot);
      if (isFenced(version)) continue; // another path (cancel, shutdown) committed first
      if (version !== turn.lastVersion) {
        turn.lastVersion = version;
        turn.lastChangeAt = now;
        turn.entered = true;
      } else if (!turn.entered) {
        // Not yet received by its worker (a spawn storm, a busy thread): never charged to the
        // turn's idle bound; the dispatch bound ends a turn whose worker never takes it.
        if (now - turn.startedAt >= dispatchMs) {
          this.attempt(turn, version, 'dispatch', now);
          continue;
        }
      } else if (now - turn.lastChangeAt >= timeoutMs) {
        this.attempt(turn, version, 'idle', now);
        continue;
      }
      if (turnDeadlineMs !== undefined && now - turn.startedAt >= turnDeadlineMs) {
        this.attempt(turn, version, 'deadline', now);
      }
    }
  }

  private attempt(turn: WatchedTurn, sampled: number, bound: StallBound, now: number): void {
    turn.attempting = true;
    this.firedCount++;
    const info: StallInfo = {
      workstreamId: turn.workstreamId,
      tenantId: turn.tenantId,
      generation: turn.generation,
      slot: turn.slot,
      bound,
      idleMs: Math.round(now - turn.lastChangeAt),
      lastActivity: activityName(this.clock.lastCode(turn.slot)),
      sampledVersion: sampled,
    };
    this.safely('fired', () => this.delegate.fired(turn, info));
    let held: Promise<unknown> | undefined;
    try {
      held =
        this.hooks.beforeCommit?.(info) ??
        seam(SeamName.watchdogSampleToCommit, {
          workstreamId: info.workstreamId,
          generation: info.generation,
          slot: info.slot,
          sampledVersion: sampled,
          bound,
        });
    } catch (err) {
      this.failClosed(turn, info, err);
      return;
    }
    if (held instanceof Promise) {
      held.then(
        () => this.commit(turn, sampled, info),
        (err: unknown) => this.failClosed(turn, info, err),
      );
    } else {
      this.commit(turn, sampled, info);
    }
  }

  protected commit(turn: WatchedTurn, sampled: number, info: StallInfo): void {
    turn.attempting = false;
    if (this.turns.get(turn.slot) !== turn) {
      this.declinedCount++;
      this.safely('declined', () => this.delegate.declined(turn, info, 'ended'));
      return;
    }
    let won: boolean;
    try {
      won = this.fence(turn, sampled, info);
    } catch (err) {
      this.failClosed(turn, info, err);
      return;
    }
    if (!won) {
      this.declinedCount++;
      turn.lastVersion = this.clock.sample(turn.slot);
      turn.lastChangeAt = this.clock.nowMs();
      this.safely('declined', () => this.delegate.declined(turn, info, 'activity'));
      return;
    }
    turn.committed = true;
    this.committedCount++;
    this.safely('committed', () => this.delegate.committed(turn, info));
  }

  /**
   * L6: one CAS checks the sampled version and publishes the fence; false when the turn stamped
   * since. The deadline bound ignores activity by definition (L11), so it fences
   * unconditionally. The dispatch bound uses the CAS: a first stamp that lands meanwhile means
   * the worker did take the turn.
   */
  protected fence(turn: WatchedTurn, sampled: number, info: StallInfo): boolean {
    return info.bound === 'deadline'
      ? this.clock.fence(turn.slot)
      : this.clock.commitAbort(turn.slot, sampled);
  }

  /** L7: nothing was published; keep sampling as if the attempt never happened. */
  protected failClosed(turn: WatchedTurn, info: StallInfo, err: unknown): void {
    turn.attempting = false;
    turn.lastChangeAt = this.clock.nowMs();
    this.declinedCount++;
    this.safely('declined', () => this.delegate.declined(turn, info, 'failed', err));
  }

  private safely(stage: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.logger.error({ err, stage }, 'watchdog delegate threw');
    }
  }
}
