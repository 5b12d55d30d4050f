/**
 * The liveness watchdog (L1–L12). Runs on a thread of its own (watchdog-thread.ts, the default)
 * or on the supervisor's (tests, the harness, `watchdog.thread: false`); polls the activity clock of
 * every active turn — and only active turns, so idle workstreams cost nothing (L12).
 *
 * Decisions use the watchdog's own observation of the activity version: a change seen at
 * time t means progress happened at or before t, so `now - lastChangeAt >= timeoutMs` never
 * aborts a turn that made progress less than timeoutMs ago (L2). Sampling twice per pollMs
 * bounds detection by timeoutMs + pollMs after the last progress (L1).
 *
 * An abort attempt has two stages (L5): the observational one (`fired`: log, event, warning)
 * and, only if the commit CAS succeeds, the definitive one (`committed`). The commit is the
 * clock's single compare-and-swap against the sampled version (L6): any stamp after the sample
 * makes it decline (L4). Anything that throws before the CAS declines the abort with nothing
 * published (L7).
 *
 * Starvation is not a stall. Where the scheduler says what a thread did (Linux, sched.ts), a turn
 * silent for half its idle bound has its threads sampled once, and again at the bound: over that
 * window it is starved (runnable, not scheduled: the abort is deferred, logged and counted, and
 * the next window judged), wedged or stalled (aborted as always). Nothing is read for a turn that
 * stamps: a healthy turn costs the poll what it always did.
 */
import { type ActivityClock, activityName, isFenced } from '@turnwarden/clock';
import { SeamName, seam } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import type { WatchdogConfig } from '../config.js';
import { LatencyHistogram } from './latency.js';
import {
  classify,
  HostSaturation,
  type SchedReading,
  type SchedulerStats,
  STARVED_MAX_IDLE_FACTOR,
  type ThreadSched,
} from './sched.js';
import type { WatchdogCounts } from './watchdog-thread-protocol.js';

/**
 * Which bound fired: `idle` (no progress for timeoutMs since the last stamp, L1), `deadline`
 * (turnDeadlineMs since the turn started, L11), `dispatch` (dispatchMs without the worker's
 * first stamp: the worker never received or entered the turn).
 */
export type StallBound = 'idle' | 'deadline' | 'dispatch';

const NO_THREADS: readonly number[] = [];
const noThreads = () => NO_THREADS;

/**
 * The scheduler readings of one silence of a turn: the baseline of its current window, taken when
 * it had been silent for half its idle bound (then at each starved verdict). Stale as soon as
 * `since` is not the turn's `lastChangeAt` (it stamped, or a declined abort restarted its clock).
 * No threads: nothing could be read, and the turn is judged on its silence alone.
 */
class SilenceWindow {
  /** On-CPU time (ms) of the busiest thread, summed over this silence's windows: the CPU budget. */
  runMs = 0;
  deferrals = 0;

  constructor(
    readonly since: number,
    public at: number,
    public evaluateAt: number,
    /** The turn's own threads first (`own` of them), then the support threads (wait only). */
    readonly tids: readonly number[],
    readonly own: number,
    readonly run: number[],
    readonly wait: number[],
  ) {}
}

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
  /** What the scheduler said of this silence so far (only once it lasted half the idle bound). */
  silence: SilenceWindow | undefined = undefined;

  constructor(
    readonly slot: number,
    readonly workstreamId: string,
    readonly tenantId: string,
    readonly generation: number,
    /** Monotonic ms when the turn was armed. */
    readonly startedAt: number,
    version: number,
    /**
     * The OS threads the turn's progress depends on — today its session worker's — asked for
     * only when the turn has been silent for half its idle bound. A callback, so that the threads
     * may change while the turn runs (a shared thread serving its model call, say).
     */
    readonly threads: () => readonly number[] = noThreads,
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
  /** The idle bound only, where the scheduler could be read: why the turn was silent (wedged or stalled). */
  readonly sched?: SchedReading;
}

/** A turn past its idle bound whose threads were starved of CPU: its abort waits a window. */
export interface StarvedInfo {
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly generation: number;
  /** Supervisor-observed time without progress. */
  readonly idleMs: number;
  /** What the turn was doing at its last stamp. */
  readonly lastActivity: string;
  /** Consecutive starved windows of this silence, this one included. */
  readonly deferrals: number;
  readonly threads: readonly number[];
  readonly reading: SchedReading;
}

export interface WatchdogDelegate {
  /** Observational stage: may be followed by a decline. */
  fired(turn: WatchedTurn, info: StallInfo): void;
  /** The abort committed: the definitive stage (stop renewal, log, abort message, grace). */
  committed(turn: WatchedTurn, info: StallInfo): void;
  declined(turn: WatchedTurn, info: StallInfo, why: 'activity' | 'ended' | 'failed', err?: unknown): void;
  /** The idle bound was reached by a turn starved of CPU: nothing fired, it is judged again next window. */
  starved?(turn: WatchedTurn, info: StarvedInfo): void;
}

/** Where the scheduler can be read (sched.ts `platformScheduler`, or a test's). */
export interface WatchdogScheduler {
  readonly stats: SchedulerStats;
  /** The supervisor's own thread, for the host's saturation (`stats().saturation`). */
  readonly self?: number;
  /**
   * Threads every turn's progress waits on besides its own — the supervisor's, when the watchdog
   * runs on a thread of its own (it admits a turn's rows and dispatches its model steps). Read with
   * a silent turn's threads: their run-queue wait makes the turn starved; their CPU time never
   * makes it wedged (they are not the turn's, and terminating a worker would not free them).
   */
  readonly support?: readonly number[];
}

/** Where the figures live (the watchdog's own thread shares them with the supervisor's). */
export interface WatchdogBuffers {
  /** The poll-lateness histogram's memory (`LatencyHistogram.bytes`). */
  readonly latency?: ArrayBufferLike;
  /** Called after every poll of the timer (the thread publishes its counters there). */
  readonly polled?: () => void;
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
  /**
   * Idle bounds held because the turn's threads were starved of CPU: one per window (a turn
   * starved for three windows counts three). 0 where the scheduler cannot be read.
   */
  readonly starved: number;
  /** Idle aborts whose turn's thread was on a CPU for most of the window: running, not stamping. */
  readonly wedged: number;
  /** Idle aborts whose turn's threads were neither running nor starved: asleep, waiting on something. */
  readonly stalled: number;
  /**
   * The supervisor's own thread over about the last 10 s (Linux): the share of wall time it ran
   * and the share it waited for a CPU — the host's saturation as the watchdog feels it.
   * Undefined where the scheduler cannot be read, or before two readings a second apart.
   */
  readonly saturation:
    | { readonly runShare: number; readonly waitShare: number; readonly windowMs: number }
    | undefined;
}

/** What `watch` is given: the armed turn, and — from another thread — when it was armed and at which version. */
export interface WatchInput {
  readonly slot: number;
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly generation: number;
  readonly threads?: () => readonly number[];
  /** Monotonic ms when the slot was armed (default now). */
  readonly startedAt?: number;
  /** The slot's version right after the arm (default sampled now). */
  readonly version?: number;
}

export function latencyOf(h: LatencyHistogram): WatchdogStats['pollLateness'] {
  return { p50: h.quantile(0.5), p99: h.quantile(0.99), max: h.max() };
}

/**
 * What the supervisor asks of a watchdog, wherever it polls: on the supervisor's thread
 * (`Watchdog`: tests, the harness, `watchdog.thread: false`) or on a thread of its own
 * (`ThreadedWatchdog`, watchdog-thread.ts).
 */
export interface TurnWatchdog {
  watch(turn: WatchInput): WatchedTurn;
  unwatch(turn: WatchedTurn): void;
  /** The OS threads a watched turn's progress depends on changed (a model call started or ended). */
  threadsChanged(turn: WatchedTurn): void;
  idleMs(turn: WatchedTurn): number;
  /** Starts polling; resolves once the first poll can run (a thread of its own: once it is ready). */
  start(): void | Promise<void>;
  stop(): void | Promise<void>;
  /** One sampling pass (tests: only a watchdog on the supervisor's thread can be polled by hand). */
  poll(): void;
  stats(): WatchdogStats;
  readonly readsScheduler: boolean;
  active(): number;
}

export class Watchdog implements TurnWatchdog {
  private readonly turns = new Map<number, WatchedTurn>();
  private timer: NodeJS.Timeout | undefined;
  private readonly intervalMs: number;
  private nextDueAt = 0;
  private polls = 0;
  private firedCount = 0;
  private committedCount = 0;
  private declinedCount = 0;
  private starvedCount = 0;
  private wedgedCount = 0;
  private stalledCount = 0;
  readonly lateness: LatencyHistogram;
  /** Silent for this long (half the idle bound), a turn's threads are read once (sched.ts). */
  private readonly probeMs: number;
  private readonly sched: SchedulerStats | undefined;
  private readonly saturation: HostSaturation | undefined;
  private readonly support: readonly number[];
  private readonly polled: (() => void) | undefined;

  constructor(
    protected readonly clock: ActivityClock,
    private readonly config: WatchdogConfig,
    private readonly delegate: WatchdogDelegate,
    private readonly logger: Logger,
    private readonly hooks: WatchdogHooks = {},
    scheduler?: WatchdogScheduler,
    buffers: WatchdogBuffers = {},
  ) {
    this.intervalMs = Math.max(1, config.pollMs / 2);
    this.probeMs = config.timeoutMs / 2;
    this.sched = scheduler?.stats;
    this.support = scheduler?.support ?? NO_THREADS;
    this.lateness = new LatencyHistogram(buffers.latency);
    this.polled = buffers.polled;
    this.saturation =
      scheduler?.self === undefined ? undefined : new HostSaturation(scheduler.stats, scheduler.self);
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

  /**
   * Starts watching a freshly armed turn (the caller armed the slot). `threads`: the OS threads
   * its progress depends on (`WatchedTurn.threads`); without them it is judged on silence alone.
   */
  watch(turn: WatchInput): WatchedTurn {
    const watched = new WatchedTurn(
      turn.slot,
      turn.workstreamId,
      turn.tenantId,
      turn.generation,
      turn.startedAt ?? this.clock.nowMs(),
      turn.version ?? this.clock.sample(turn.slot),
      turn.threads,
    );
    this.turns.set(turn.slot, watched);
    return watched;
  }

  unwatch(turn: WatchedTurn): void {
    if (this.turns.get(turn.slot) === turn) this.turns.delete(turn.slot);
  }

  /** The turn's threads changed: read lazily here (`WatchedTurn.threads`), so nothing to do. */
  threadsChanged(_turn: WatchedTurn): void {}

  /** How long the turn has been silent as the watchdog saw it (`describe`'s idle time). */
  idleMs(turn: WatchedTurn): number {
    return this.clock.nowMs() - turn.lastChangeAt;
  }

  /** The scheduler can be read: silent turns are judged starved, wedged or stalled (sched.ts). */
  get readsScheduler(): boolean {
    return this.sched !== undefined;
  }

  active(): number {
    return this.turns.size;
  }

  stats(): WatchdogStats {
    return {
      watched: this.turns.size,
      ...this.counts(),
      pollLateness: latencyOf(this.lateness),
    };
  }

  /** The counters alone (what the watchdog's own thread publishes after every poll). */
  counts(): WatchdogCounts {
    return {
      polls: this.polls,
      fired: this.firedCount,
      committed: this.committedCount,
      declined: this.declinedCount,
      starved: this.starvedCount,
      wedged: this.wedgedCount,
      stalled: this.stalledCount,
      saturation: this.saturation?.read(),
    };
  }

  private tick(): void {
    const now = this.clock.nowMs();
    this.lateness.record(now - this.nextDueAt);
    this.nextDueAt = Math.max(this.nextDueAt, now) + this.intervalMs;
    this.poll();
    this.polled?.();
  }

  /** One sampling pass over the active turns. Public for deterministic tests. */
  poll(): void {
    this.polls++;
    const now = this.clock.advance();
    this.saturation?.observe(now);
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
        // Before anything fires: a turn whose threads the host starved is not aborted (yet).
        const reading = this.sched === undefined ? undefined : this.judge(turn, now);
        if (reading !== 'held') {
          this.attempt(turn, version, 'idle', now, reading);
          continue;
        }
      } else if (this.sched !== undefined && now - turn.lastChangeAt >= this.probeMs) {
        // Silent for half its bound: its threads' baseline, once per silence.
        if (turn.silence?.since !== turn.lastChangeAt) {
          this.probe(turn, now, Math.max(turn.lastChangeAt + timeoutMs, now + this.intervalMs));
        }
      }
      if (turnDeadlineMs !== undefined && now - turn.startedAt >= turnDeadlineMs) {
        this.attempt(turn, version, 'deadline', now);
      }
    }
  }

  /**
   * A turn at its idle bound, where the scheduler can be read: `held` (its window is not over, or
   * its threads were starved: not aborted now), its reading (wedged or stalled: abort), or
   * undefined (nothing could be read: abort, judged on silence alone as without a scheduler).
   */
  private judge(turn: WatchedTurn, now: number): SchedReading | 'held' | undefined {
    let w = turn.silence;
    if (w?.since !== turn.lastChangeAt) {
      // The poll at half the bound did not come (this thread ran late): a window of one poll
      // period from here, or — nothing to read — the abort as always.
      w = this.probe(turn, now, now + this.intervalMs);
      return w.own > 0 ? 'held' : undefined;
    }
    if (w.own === 0) return undefined;
    if (now < w.evaluateAt) return 'held';
    const reading = this.read(w, now);
    if (reading === undefined) return undefined;
    if (reading.verdict === 'wedged') this.wedgedCount++;
    else if (reading.verdict === 'stalled') this.stalledCount++;
    if (reading.verdict !== 'starved') return reading;
    // Starved: the host, not the turn, holds the silence. Judged again over the next window —
    // bounded by the CPU budget (a wedge is starved too on a saturated host), the deadline (L11)
    // and, whatever the verdict, a silence of STARVED_MAX_IDLE_FACTOR × timeoutMs.
    if (now - turn.lastChangeAt >= STARVED_MAX_IDLE_FACTOR * this.config.timeoutMs) return reading;
    this.starvedCount++;
    w.deferrals++;
    const info: StarvedInfo = {
      workstreamId: turn.workstreamId,
      tenantId: turn.tenantId,
      generation: turn.generation,
      idleMs: Math.round(now - turn.lastChangeAt),
      lastActivity: activityName(this.clock.lastCode(turn.slot)),
      deferrals: w.deferrals,
      threads: w.tids.slice(0, w.own),
      reading,
    };
    this.safely('starved', () => this.delegate.starved?.(turn, info));
    return 'held';
  }

  /** The baseline of a silence's first window: the turn's threads as the scheduler has them now. */
  private probe(turn: WatchedTurn, now: number, evaluateAt: number): SilenceWindow {
    let asked: readonly number[];
    try {
      asked = turn.threads();
    } catch {
      asked = NO_THREADS;
    }
    const tids: number[] = [];
    const run: number[] = [];
    const wait: number[] = [];
    const add = (tid: number) => {
      const s = this.sample(tid);
      if (s === undefined) return;
      tids.push(tid);
      run.push(s.runNs);
      wait.push(s.waitNs);
    };
    for (const tid of asked) add(tid);
    const own = tids.length;
    // Nothing of the turn's own could be read: judged on silence alone, support or not.
    if (own > 0) for (const tid of this.support) add(tid);
    const w = new SilenceWindow(turn.lastChangeAt, now, evaluateAt, tids, own, run, wait);
    turn.silence = w;
    return w;
  }

  /**
   * The window's reading over its busiest thread; the reading's end is the next window's baseline.
   * A support thread's wait counts, its CPU does not (WatchdogScheduler.support).
   */
  private read(w: SilenceWindow, now: number): SchedReading | undefined {
    let runNs = 0;
    let waitNs = 0;
    let answered = 0;
    for (let i = 0; i < w.tids.length; i++) {
      const s = this.sample(w.tids[i]!);
      if (s === undefined) continue; // the thread exited
      if (i < w.own) {
        runNs = Math.max(runNs, s.runNs - w.run[i]!);
        answered++;
      }
      waitNs = Math.max(waitNs, s.waitNs - w.wait[i]!);
      w.run[i] = s.runNs;
      w.wait[i] = s.waitNs;
    }
    if (answered === 0) return undefined;
    w.runMs += runNs / 1e6;
    const reading = classify(now - w.at, runNs / 1e6, waitNs / 1e6, w.runMs, this.probeMs);
    w.at = now;
    w.evaluateAt = now + this.probeMs;
    return reading;
  }

  /** A sampler that throws is one that cannot say: never let it break the poll of other turns. */
  private sample(tid: number): ThreadSched | undefined {
    try {
      return this.sched?.sample(tid);
    } catch {
      return undefined;
    }
  }

  private attempt(
    turn: WatchedTurn,
    sampled: number,
    bound: StallBound,
    now: number,
    sched?: SchedReading,
  ): void {
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
      ...(sched === undefined ? {} : { sched }),
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
