/**
 * The watchdog on a thread of its own (the default: `watchdog.thread`). The supervisor's thread
 * runs everything else — claims, the journal's writes, events, a thousand turns' model steps — and
 * with a thousand session threads runnable it waits for a CPU more than it runs (issue 24's scale
 * runs: 35 % of the time waiting, 24 % running; the watchdog's polls 90–160 ms late where a timer
 * in another process was 4–10 ms late). A thread that sleeps between polls is woken as promptly as
 * that timer, so here the watchdog polls, judges and commits (the clock's CAS sets the fence at
 * once, L6) and the supervisor's thread receives each stage in order — observational, then
 * definitive or declined (L5) — and runs the abort protocol as before.
 *
 * Kept on the supervisor's thread: nothing a poll decides. The supervisor publishes what the
 * thread cannot see: each turn's watch and unwatch (messages) and the OS threads its progress
 * depends on (shared words, read only for a long-silent turn). The supervisor's own thread is
 * every turn's support thread: a turn silent because that thread waited for a CPU is starved, not
 * stalled (it admits the turn's rows and dispatches its model steps).
 *
 * If the thread exits (it runs only this code; a resource limit, a bug), it is started again and
 * every watched turn is watched afresh from its arm: no turn goes unwatched, none is aborted
 * early (L2); detection of a stall in progress may take up to one more idle bound. A thread that
 * exits again before it ever polled is not tried a third time: the watchdog falls back to the
 * supervisor's thread, logged at error level.
 */
import { Worker } from 'node:worker_threads';
import { type ActivityClock, isFenced } from '@turnwarden/clock';
import type { Logger } from 'pino';
import type { WatchdogConfig } from '../config.js';
import { LatencyHistogram } from './latency.js';
import {
  latencyOf,
  type StallInfo,
  type TurnWatchdog,
  Watchdog,
  type WatchdogDelegate,
  type WatchdogScheduler,
  type WatchdogStats,
  WatchedTurn,
  type WatchInput,
} from './watchdog.js';
import {
  type FromWatchdogThread,
  readStats,
  STATS_WORDS,
  THREAD_WORDS,
  type ToWatchdogThread,
  type WatchdogCounts,
  type WatchdogThreadData,
  writeThreads,
} from './watchdog-thread-protocol.js';

/** The thread's entry in the built package (src resolves to the same file: the tests run the build). */
const watchdogThreadUrl: URL = new URL('../../dist/liveness/watchdog-thread-entry.js', import.meta.url);

/** The longest a start waits for the thread (it loads a few modules: about 0.1 s here). */
const READY_BOUND_MS = 10_000;

export interface ThreadedWatchdogOptions {
  readonly clock: ActivityClock;
  readonly config: WatchdogConfig;
  readonly delegate: WatchdogDelegate;
  readonly logger: Logger;
  /** The platform's scheduler (its `self` is the supervisor's thread); none: silence alone. */
  readonly scheduler?: WatchdogScheduler;
  /** The thread's entry (tests give one that fails). */
  readonly url?: URL;
}

/** A watched turn as the supervisor's thread holds it; the thread holds the one it polls. */
class Watch {
  /** The fallback's own record of the turn, once the watchdog polls on the supervisor's thread. */
  local: WatchedTurn | undefined = undefined;
  /** The thread's observational report of an attempt not yet committed or declined. */
  firing: StallInfo | undefined = undefined;

  constructor(
    readonly id: number,
    readonly turn: WatchedTurn,
    readonly input: WatchInput,
  ) {}
}

const ZERO: WatchdogCounts = {
  polls: 0,
  fired: 0,
  committed: 0,
  declined: 0,
  starved: 0,
  wedged: 0,
  stalled: 0,
  saturation: undefined,
};

export class ThreadedWatchdog implements TurnWatchdog {
  private worker: Worker | undefined;
  /** By id: watched, or unwatched and not yet acknowledged by the thread (its reports still come). */
  private readonly watches = new Map<number, Watch>();
  /** The turns watched now. */
  private readonly bySlot = new Map<number, Watch>();
  private nextId = 1;
  private stopping = false;
  private started = false;
  private restarts = 0;
  /** What earlier threads counted (a restarted thread counts from zero). */
  private base: WatchdogCounts = ZERO;
  /** Shared with the thread: its counters, its lateness histogram, each slot's OS threads. */
  private readonly stats64 = new Float64Array(new SharedArrayBuffer(STATS_WORDS * 8));
  private readonly latencyBuffer = new SharedArrayBuffer(LatencyHistogram.bytes);
  private readonly lateness = new LatencyHistogram(this.latencyBuffer);
  private readonly threadWords: Int32Array;
  /** Where the watchdog runs if its thread cannot (it exited before it ever polled). */
  private fallback: Watchdog | undefined;
  /** The fallback's records of turns, to the records their callers hold. */
  private readonly byLocal = new WeakMap<WatchedTurn, WatchedTurn>();
  /** Commands not yet posted to the thread (`post`). */
  private outbox: ToWatchdogThread[] = [];
  private readonly ready: Promise<void>;
  private becameReady: () => void = () => undefined;

  constructor(private readonly options: ThreadedWatchdogOptions) {
    this.threadWords = new Int32Array(new SharedArrayBuffer(options.clock.slots * THREAD_WORDS * 4));
    this.ready = new Promise<void>((resolve) => {
      this.becameReady = resolve;
      setTimeout(resolve, READY_BOUND_MS).unref();
    });
  }

  get readsScheduler(): boolean {
    return this.options.scheduler !== undefined;
  }

  /** Where the polls run now: `thread`, or `supervisor` after a fallback. */
  get placement(): 'thread' | 'supervisor' {
    return this.fallback === undefined ? 'thread' : 'supervisor';
  }

  /** Times the thread was started again after it exited. */
  get restarted(): number {
    return this.restarts;
  }

  /** The thread now (tests end it to see it replaced). */
  protected get thread(): Worker | undefined {
    return this.worker;
  }

  /**
   * Starts the thread; resolves once it polls (its first turn is watched on time), or once it fell
   * back to the supervisor's thread — never later than `READY_BOUND_MS` (the thread then starts in
   * the background, its turns queued for it).
   */
  start(): Promise<void> {
    if (!this.started) {
      this.started = true;
      this.spawn();
    }
    return this.ready;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.fallback?.stop();
    const worker = this.worker;
    this.worker = undefined;
    if (worker !== undefined) await worker.terminate();
  }

  watch(input: WatchInput): WatchedTurn {
    const { clock } = this.options;
    const armed: WatchInput = {
      ...input,
      startedAt: input.startedAt ?? clock.nowMs(),
      version: input.version ?? clock.sample(input.slot),
    };
    const turn = new WatchedTurn(
      armed.slot,
      armed.workstreamId,
      armed.tenantId,
      armed.generation,
      armed.startedAt!,
      armed.version!,
      armed.threads,
    );
    const w = new Watch(this.nextId++, turn, armed);
    this.bySlot.set(turn.slot, w);
    this.watches.set(w.id, w);
    if (this.fallback !== undefined) {
      this.watchLocally(this.fallback, w);
    } else {
      this.publishThreads(turn);
      this.send(w);
    }
    return turn;
  }

  unwatch(turn: WatchedTurn): void {
    const w = this.bySlot.get(turn.slot);
    if (w?.turn !== turn) return;
    this.bySlot.delete(turn.slot);
    if (this.fallback !== undefined) {
      this.watches.delete(w.id);
      if (w.local !== undefined) this.fallback.unwatch(w.local);
    } else if (this.worker !== undefined) {
      // Kept by id until the thread acknowledges: a report it sent before still finds its turn.
      this.post({ t: 'unwatch', id: w.id });
    } else {
      this.watches.delete(w.id);
    }
  }

  threadsChanged(turn: WatchedTurn): void {
    if (this.bySlot.get(turn.slot)?.turn === turn) this.publishThreads(turn);
  }

  /** Since the slot's last stamp (or its arm), on the time the thread publishes at every poll. */
  idleMs(turn: WatchedTurn): number {
    const local = this.bySlot.get(turn.slot)?.local;
    if (this.fallback !== undefined && local !== undefined) return this.fallback.idleMs(local);
    return Math.max(0, this.options.clock.idleMs(turn.slot));
  }

  poll(): void {
    if (this.fallback === undefined)
      throw new Error(
        'the watchdog polls on its own thread; a test that polls by hand starts with manualWatchdog',
      );
    this.fallback.poll();
  }

  active(): number {
    return this.bySlot.size;
  }

  /** Records kept: turns watched, and unwatched ones the thread has not acknowledged yet. */
  held(): number {
    return this.watches.size;
  }

  stats(): WatchdogStats {
    const counts = this.fallback?.counts() ?? readStats(this.stats64);
    return {
      watched: this.bySlot.size,
      ...add(this.base, counts),
      pollLateness: latencyOf(this.lateness),
    };
  }

  private publishThreads(turn: WatchedTurn): void {
    let tids: readonly number[];
    try {
      tids = turn.threads();
    } catch {
      tids = [];
    }
    writeThreads(this.threadWords, turn.slot, tids);
  }

  /**
   * Commands go to the thread before the task that made them ends — several in one message when
   * one task makes several (an abort of every turn, a recovery). Never later: a watch held back
   * by a timer waits for the supervisor's event loop, and a supervisor blocked right after a
   * claim would leave its turn unwatched (watchdog-thread.test's blocked runtime caught that).
   */
  private post(msg: ToWatchdogThread): void {
    this.outbox.push(msg);
    if (this.outbox.length === 1) queueMicrotask(() => this.flush());
  }

  private flush(): void {
    if (this.outbox.length === 0) return;
    const batch = this.outbox;
    this.outbox = [];
    this.worker?.postMessage(batch);
  }

  private send(w: Watch): void {
    const { input } = w;
    this.post({
      t: 'watch',
      id: w.id,
      slot: input.slot,
      workstreamId: input.workstreamId,
      tenantId: input.tenantId,
      generation: input.generation,
      startedAt: input.startedAt!,
      version: input.version!,
    });
  }

  private spawn(): void {
    const { clock, config, scheduler } = this.options;
    this.stats64.fill(0);
    const data: WatchdogThreadData = {
      clock: clock.buffer,
      epochMs: clock.epoch,
      perfStart: clock.nowMs(),
      hrStart: process.hrtime.bigint().toString(),
      config,
      stats: this.stats64.buffer as SharedArrayBuffer,
      latency: this.latencyBuffer,
      threads: this.threadWords.buffer as SharedArrayBuffer,
      mainTid: scheduler?.self,
      schedstat: scheduler !== undefined,
    };
    // Commands for the thread before this one are void: the turns watched now are sent below.
    this.outbox = [];
    const worker = new Worker(this.options.url ?? watchdogThreadUrl, {
      workerData: data,
      // It holds one small record per active turn.
      resourceLimits: { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 8 },
    });
    worker.unref();
    this.worker = worker;
    worker.on('message', (msg: FromWatchdogThread) => this.received(msg));
    worker.on('error', (err) => this.options.logger.error({ err }, 'watchdog thread failed'));
    worker.on('exit', (code) => this.exited(worker, code));
    // A restart: the turns watched now are watched afresh from their arm; the old thread's
    // unacknowledged unwatches have nothing left to report.
    for (const [id, w] of this.watches) {
      if (this.bySlot.get(w.turn.slot) !== w) {
        this.watches.delete(id);
        continue;
      }
      this.publishThreads(w.turn);
      this.send(w);
    }
  }

  private exited(worker: Worker, code: number): void {
    if (this.worker !== worker || this.stopping) return;
    this.worker = undefined;
    const counts = readStats(this.stats64);
    this.base = add(this.base, counts);
    this.commitLost();
    if (counts.polls > 0) {
      this.restarts++;
      this.options.logger.error({ code, restarts: this.restarts }, 'watchdog thread exited; started again');
      this.spawn();
      return;
    }
    this.options.logger.error(
      { code },
      'watchdog thread exited before it polled; the watchdog polls on the supervisor thread from now on',
    );
    this.fallBack();
  }

  /**
   * The thread exited between an attempt's observational report and its outcome. If the slot is
   * fenced, its CAS committed and the report was lost with the thread: the abort is reported now
   * (a fence nobody reported would otherwise leave a wedged turn unaborted). Else the attempt
   * never committed, and the new thread watches the turn afresh.
   */
  private commitLost(): void {
    for (const w of this.bySlot.values()) {
      const info = w.firing;
      w.firing = undefined;
      if (info === undefined || !isFenced(this.options.clock.sample(w.turn.slot))) continue;
      this.options.logger.error(
        { workstreamId: info.workstreamId },
        'watchdog thread exited after committing an abort it had not reported; reported now',
      );
      w.turn.committed = true;
      this.options.delegate.committed(w.turn, info);
    }
  }

  /** The last resort: the supervisor's thread, every watched turn carried over from its arm. */
  private fallBack(): void {
    const { clock, config, delegate, logger, scheduler } = this.options;
    // Reports name the turn's own record (the one its caller holds), not the fallback's.
    const own = (local: WatchedTurn) => this.byLocal.get(local) ?? local;
    const local = new Watchdog(
      clock,
      config,
      {
        fired: (t, info) => delegate.fired(own(t), info),
        committed: (t, info) => {
          own(t).committed = true;
          delegate.committed(own(t), info);
        },
        declined: (t, info, why, err) => delegate.declined(own(t), info, why, err),
        starved: (t, info) => delegate.starved?.(own(t), info),
      },
      logger,
      {},
      scheduler,
      { latency: this.latencyBuffer },
    );
    this.fallback = local;
    this.outbox = [];
    for (const [id, w] of this.watches) {
      if (this.bySlot.get(w.turn.slot) === w) this.watchLocally(local, w);
      else this.watches.delete(id);
    }
    local.start();
    this.becameReady();
  }

  private watchLocally(local: Watchdog, w: Watch): void {
    w.local = local.watch(w.input);
    this.byLocal.set(w.local, w.turn);
  }

  private received(msg: FromWatchdogThread): void {
    if (msg.t === 'ready') {
      this.becameReady();
      return;
    }
    if (msg.t === 'log') {
      this.options.logger.error({ detail: msg.detail }, `watchdog thread: ${msg.msg}`);
      return;
    }
    if (msg.t === 'unwatched') {
      for (const id of msg.ids) this.watches.delete(id);
      return;
    }
    const w = this.watches.get(msg.id);
    if (w === undefined) return;
    const { delegate } = this.options;
    // The protocol finds the slot's turn and acts only if it is this watch's (abort-protocol.ts).
    if (msg.t === 'fired') {
      w.firing = msg.info;
      delegate.fired(w.turn, msg.info);
    } else if (msg.t === 'committed') {
      w.firing = undefined;
      w.turn.committed = true;
      delegate.committed(w.turn, msg.info);
    } else if (msg.t === 'declined') {
      w.firing = undefined;
      delegate.declined(w.turn, msg.info, msg.why, msg.err);
    } else if (msg.t === 'starved') delegate.starved?.(w.turn, msg.info);
  }
}

function add(a: WatchdogCounts, b: WatchdogCounts): WatchdogCounts {
  return {
    polls: a.polls + b.polls,
    fired: a.fired + b.fired,
    committed: a.committed + b.committed,
    declined: a.declined + b.declined,
    starved: a.starved + b.starved,
    wedged: a.wedged + b.wedged,
    stalled: a.stalled + b.stalled,
    saturation: b.saturation,
  };
}
