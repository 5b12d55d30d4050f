/**
 * The shared model threads (`models.placement: 'shared'`): a few threads — about one per core —
 * that run the model calls of every session's turns, so a token wakes one of them instead of
 * the session's own worker, and the providers' code, JIT and connection pools stay warm.
 *
 * Each thread owns a clock slot of its own and stamps it while its event loop turns; a thread
 * that stops stamping for `watchdog.timeoutMs` is wedged (a provider spinning) and is
 * terminated, its calls failed (their turns repair like any failed model call) and a new thread
 * started in its slot once the old one has exited. A thread that exits is replaced the same way.
 * Calls go to the thread with the fewest running; tokens come back in batches, in order, before
 * their call's result (one port per thread).
 */
import { Worker } from 'node:worker_threads';
import type {
  HistoryMessage,
  HistoryReaderSpec,
  ModelStepResult,
  ModelThreadCommand,
  ModelThreadEvent,
  ModelThreadInit,
  ModelToolSpec,
} from '@turnwarden/protocol';
import { errors, fromWire } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import {
  classify,
  type SchedReading,
  type SchedulerStats,
  STARVED_MAX_IDLE_FACTOR,
  type ThreadSched,
} from '../liveness/sched.js';
import type { CancelTimer, Timers } from '../liveness/timers.js';

/** Errors of calls and checks whose thread was lost under them (a check is retried once). */
const lost = new WeakSet<object>();

export interface ModelThreadsOptions {
  readonly clock: SharedArrayBuffer;
  /** Clock slots `firstSlot … firstSlot + threads - 1` are the threads' own. */
  readonly firstSlot: number;
  readonly threads: number;
  readonly url: URL;
  readonly pluginModules: readonly string[];
  readonly flushMs: number;
  /** A thread silent this long is wedged (the watchdog's `timeoutMs`). */
  readonly timeoutMs: number;
  /** How often the threads are checked (the watchdog's `pollMs`); they stamp twice as often. */
  readonly pollMs: number;
  readonly startTimeoutMs: number;
  readonly nice: number;
  readonly now: () => number;
  /** The clock slot's activity version (the supervisor's sample). */
  readonly sample: (slot: number) => number;
  readonly timers: Timers;
  /**
   * The threads' scheduler statistics (Linux): a thread silent because the host did not give it
   * a CPU is starved, not wedged, and is not replaced for it (the watchdog's rule, sched.ts).
   */
  readonly scheduler?: SchedulerStats;
  readonly logger: Logger;
}

/** What a model call needs of its turn, and tells it. */
export interface CallTarget {
  readonly workstreamId: string;
  readonly generation: number;
  /** The turn's clock slot: the thread stamps it on every event of the call. */
  readonly slot: number;
  /** A piece of the answer's text, in order. */
  readonly onText: (text: string) => void;
}

/** A model call on its way: its result, and how to abort it (the provider's request is aborted). */
export interface ModelCall {
  readonly result: Promise<ModelStepResult>;
  abort(reason: string): void;
  /** The OS thread id of the model thread running it, once it runs there (Linux). */
  readonly tid?: number | undefined;
}

export interface ModelCatalogue {
  readonly models: readonly string[];
  readonly checks: readonly string[];
  /** Per plugin module: whether it exports tools (only those are loaded by session workers). */
  readonly toolModules: readonly boolean[];
}

export interface ModelThreadStats {
  readonly threads: number;
  /** Calls running now, over every thread. */
  readonly running: number;
  readonly calls: number;
  readonly failed: number;
  /** Threads terminated because they stopped stamping their slot. */
  readonly wedged: number;
  /** Threads that exited on their own. */
  readonly crashed: number;
}

interface Pending {
  readonly target: CallTarget;
  readonly resolve: (r: ModelStepResult) => void;
  readonly reject: (e: unknown) => void;
}

class ModelThread {
  readonly calls = new Map<number, Pending>();
  readonly checks = new Map<number, { resolve: () => void; reject: (e: unknown) => void }>();
  ready!: Promise<ModelCatalogue>;
  exited!: Promise<void>;
  worker!: Worker;
  tid: number | undefined;
  alive = false;
  terminating = false;
  /** The slot's version last seen, and when it last moved. */
  version = -1;
  movedAt = 0;
  /** A silence's scheduler readings: the window's start, the CPU burnt over its windows so far. */
  silence: { at: number; sched: ThreadSched; runMs: number } | undefined;

  constructor(
    readonly index: number,
    readonly slot: number,
  ) {}
}

export class ModelThreads {
  private readonly threads: ModelThread[] = [];
  private nextId = 1;
  private closed = false;
  private reader: HistoryReaderSpec | undefined;
  private cancelMonitor: CancelTimer | undefined;
  /** Calls and checks waiting for a thread while every thread is being replaced. */
  private readonly waiters = new Set<(thread: ModelThread | undefined) => void>();
  private counts = { calls: 0, failed: 0, wedged: 0, crashed: 0 };
  catalogue: ModelCatalogue | undefined;

  constructor(private readonly opts: ModelThreadsOptions) {}

  /** Starts every thread and waits until they serve; the first one's catalogue is kept. */
  async start(): Promise<void> {
    for (let i = 0; i < this.opts.threads; i++) this.threads.push(this.spawn(i));
    const catalogues = await Promise.all(this.threads.map((t) => t.ready));
    this.catalogue = catalogues[0];
    this.cancelMonitor = this.opts.timers.every(this.opts.pollMs, () => this.monitor());
  }

  /** Where the threads read a turn's context from now on (the store, once it is open). */
  setReader(reader: HistoryReaderSpec | undefined): void {
    this.reader = reader;
    if (reader === undefined) return;
    for (const t of this.threads) if (t.alive) this.post(t, { t: 'reader', reader });
  }

  /** The threads read the context themselves (else each call carries it). */
  get readsContext(): boolean {
    return this.reader !== undefined;
  }

  /**
   * One model call of a turn, on the least busy thread — or, while every thread is being
   * replaced, on the first that becomes ready (at most `startTimeoutMs`).
   */
  run(
    target: CallTarget,
    model: string,
    tools: readonly ModelToolSpec[],
    history: readonly HistoryMessage[] | undefined,
  ): ModelCall {
    const id = this.nextId++;
    this.counts.calls++;
    let thread: ModelThread | undefined;
    let aborted: string | undefined;
    const result = this.available().then(
      (t) =>
        new Promise<ModelStepResult>((resolve, reject) => {
          if (aborted !== undefined) {
            reject(errors.turnAborted(`turn aborted: ${aborted}`));
            return;
          }
          thread = t;
          t.calls.set(id, { target, resolve, reject });
          this.post(t, {
            t: 'run',
            id,
            workstreamId: target.workstreamId,
            generation: target.generation,
            slot: target.slot,
            model,
            tools,
            ...(history === undefined ? {} : { history }),
          });
        }),
    );
    result.catch(() => this.counts.failed++);
    return {
      result,
      abort: (reason) => {
        aborted ??= reason;
        if (thread?.calls.has(id)) this.post(thread, { t: 'abort', id, reason });
      },
      get tid() {
        return thread?.tid;
      },
    };
  }

  /**
   * The provider's own check of a user message (`ModelProvider.checkInput`), on a thread. A check
   * whose thread is lost before it answers (wedged, exited) runs again on another: it is only a
   * check.
   */
  async checkInput(model: string, content: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const thread = await this.available();
      const id = this.nextId++;
      try {
        return await new Promise<void>((resolve, reject) => {
          thread.checks.set(id, { resolve, reject });
          this.post(thread, { t: 'check', id, model, content });
        });
      } catch (e) {
        if (attempt >= 2 || !lost.has(e as object)) throw e;
      }
    }
  }

  /** The threads' OS thread ids (for scheduler statistics), where known. */
  tids(): number[] {
    return this.threads.flatMap((t) => (t.alive && t.tid !== undefined ? [t.tid] : []));
  }

  stats(): ModelThreadStats {
    let running = 0;
    for (const t of this.threads) running += t.calls.size;
    return { threads: this.threads.filter((t) => t.alive).length, running, ...this.counts };
  }

  async close(): Promise<void> {
    this.closed = true;
    this.cancelMonitor?.();
    for (const w of this.waiters) w(undefined);
    this.waiters.clear();
    await Promise.all(
      this.threads.map(async (t) => {
        t.terminating = true;
        await t.worker.terminate();
        await t.exited;
      }),
    );
  }

  /**
   * Liveness: a thread whose slot has not moved for `timeoutMs` is wedged — terminated and
   * replaced. Where the scheduler says (Linux), the silence is judged first, like a turn's
   * (sched.ts): read at half the bound, then over each window from there; a thread that waited
   * for a CPU for a quarter of the window (and did not burn half a window's CPU) is starved, not
   * wedged, and is kept — until its silence reaches `STARVED_MAX_IDLE_FACTOR × timeoutMs`.
   */
  monitor(): void {
    const { timeoutMs, scheduler, logger } = this.opts;
    const now = this.opts.now();
    for (const t of this.threads) {
      if (!t.alive || t.terminating) continue;
      const v = this.opts.sample(t.slot);
      if (v !== t.version) {
        t.version = v;
        t.movedAt = now;
        t.silence = undefined;
        // It serves again (it was only slow): the calls waiting for a thread may go to it.
        if (this.waiters.size > 0) {
          for (const w of this.waiters) w(t);
          this.waiters.clear();
        }
        continue;
      }
      const silentMs = now - t.movedAt;
      const sched = scheduler !== undefined && t.tid !== undefined ? scheduler.sample(t.tid) : undefined;
      if (silentMs >= timeoutMs / 2 && sched !== undefined && t.silence === undefined) {
        t.silence = { at: now, sched, runMs: 0 };
      }
      if (silentMs < timeoutMs) continue;
      let verdict: SchedReading | undefined;
      if (sched !== undefined && t.silence !== undefined && now > t.silence.at) {
        const runMs = (sched.runNs - t.silence.sched.runNs) / 1e6;
        const budget = t.silence.runMs + runMs;
        verdict = classify(
          now - t.silence.at,
          runMs,
          (sched.waitNs - t.silence.sched.waitNs) / 1e6,
          budget,
          timeoutMs / 2,
        );
        t.silence = { at: now, sched, runMs: budget };
        if (verdict.verdict === 'starved' && silentMs < STARVED_MAX_IDLE_FACTOR * timeoutMs) {
          logger.warn(
            { thread: t.index, silentMs: Math.round(silentMs), ...verdict },
            'model thread starved of CPU; not replaced, still watching',
          );
          continue;
        }
      }
      this.counts.wedged++;
      logger.error(
        { thread: t.index, silentMs: Math.round(silentMs), calls: t.calls.size, ...(verdict ?? {}) },
        'model thread wedged; terminating it and failing its calls',
      );
      t.terminating = true;
      void t.worker.terminate();
    }
  }

  /** A serving thread: the least busy now, or the first to become ready (bounded). */
  private available(): Promise<ModelThread> {
    const t = this.pick();
    if (t !== undefined) return Promise.resolve(t);
    if (this.closed) return Promise.reject(errors.shuttingDown('the model threads are closed'));
    return new Promise<ModelThread>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(
          errors.modelError(
            `no model thread became ready within ${this.opts.startTimeoutMs} ms; retry`,
            undefined,
            { retryable: true },
          ),
        );
      }, this.opts.startTimeoutMs);
      timer.unref();
      const waiter = (thread: ModelThread | undefined) => {
        clearTimeout(timer);
        if (thread === undefined) reject(errors.shuttingDown('the model threads are closed'));
        else resolve(thread);
      };
      this.waiters.add(waiter);
    });
  }

  /**
   * The least busy thread that is serving — not one whose slot has been silent for two poll
   * periods (it stamps twice a period while its loop turns: silent, it is wedged or starved, and
   * the monitor is judging it). With none, calls wait for one (`available`).
   */
  private pick(): ModelThread | undefined {
    let best: ModelThread | undefined;
    const now = this.opts.now();
    for (const t of this.threads) {
      if (!t.alive || t.terminating) continue;
      if (this.opts.sample(t.slot) === t.version && now - t.movedAt >= 2 * this.opts.pollMs) continue;
      if (best === undefined || t.calls.size < best.calls.size) best = t;
    }
    return best;
  }

  private post(t: ModelThread, cmd: ModelThreadCommand): void {
    t.worker.postMessage(cmd);
  }

  private spawn(index: number): ModelThread {
    const { opts } = this;
    const t = new ModelThread(index, opts.firstSlot + index);
    const log = opts.logger.child({ modelThread: index });
    const init: ModelThreadInit = {
      clock: opts.clock,
      slot: t.slot,
      threadId: index,
      pluginModules: opts.pluginModules,
      beatMs: Math.max(1, Math.floor(opts.pollMs / 2)),
      flushMs: opts.flushMs,
      ...(opts.nice > 0 ? { nice: opts.nice } : {}),
      ...(this.reader === undefined ? {} : { reader: this.reader }),
    };
    const worker = new Worker(opts.url, { workerData: init });
    t.worker = worker;
    let markReady!: (c: ModelCatalogue) => void;
    let failReady!: (e: unknown) => void;
    t.ready = new Promise<ModelCatalogue>((resolve, reject) => {
      markReady = resolve;
      failReady = reject;
    });
    t.ready.catch(() => {});
    const startTimer = setTimeout(() => {
      failReady(
        errors.timeout(`model thread ${index} did not become ready within ${opts.startTimeoutMs} ms`),
      );
      t.terminating = true;
      void worker.terminate();
    }, opts.startTimeoutMs);
    startTimer.unref();
    worker.on('message', (event: ModelThreadEvent) => {
      switch (event.t) {
        case 'ready':
          clearTimeout(startTimer);
          t.alive = true;
          t.tid = event.tid;
          t.version = opts.sample(t.slot);
          t.movedAt = opts.now();
          if (this.reader !== undefined) this.post(t, { t: 'reader', reader: this.reader });
          markReady({ models: event.models, checks: event.checks, toolModules: event.toolModules });
          for (const w of this.waiters) w(t);
          this.waiters.clear();
          return;
        case 'fatal':
          clearTimeout(startTimer);
          failReady(fromWire(event.error));
          return;
        case 'tokens': {
          const { items } = event;
          for (let i = 0; i + 1 < items.length; i += 2) {
            t.calls.get(items[i] as number)?.target.onText(items[i + 1] as string);
          }
          return;
        }
        case 'done':
          this.settle(t, event.id)?.resolve(event.result);
          return;
        case 'failed':
          this.settle(t, event.id)?.reject(fromWire(event.error));
          return;
        case 'checked': {
          const c = t.checks.get(event.id);
          t.checks.delete(event.id);
          if (event.error === undefined) c?.resolve();
          else c?.reject(fromWire(event.error));
          return;
        }
        case 'log':
          log[event.level](event.data ?? {}, event.msg);
          return;
      }
    });
    worker.on('error', (err) => log.error({ err }, 'model thread crashed'));
    t.exited = new Promise<void>((resolve) => {
      worker.once('exit', (code) => {
        clearTimeout(startTimer);
        const wasAlive = t.alive;
        const expected = t.terminating;
        t.alive = false;
        failReady(errors.workerExited(`model thread ${index} exited with code ${code}`));
        const why = expected ? 'was terminated' : `exited with code ${code}`;
        for (const [id, p] of t.calls) {
          t.calls.delete(id);
          p.reject(
            errors.modelError(`the model thread running this call ${why}`, undefined, { retryable: true }),
          );
        }
        for (const [id, c] of t.checks) {
          t.checks.delete(id);
          const e = errors.modelError(`the model thread ${why}; retry`, undefined, { retryable: true });
          lost.add(e);
          c.reject(e);
        }
        if (!expected) {
          this.counts.crashed++;
          log.error({ code }, 'model thread exited; starting another');
        }
        resolve();
        // Replaced in the same slot, only now that the old thread can no longer stamp it.
        if (!this.closed && (wasAlive || expected)) this.replace(index);
      });
    });
    return t;
  }

  private replace(index: number): void {
    const t = this.spawn(index);
    this.threads[index] = t;
    t.ready.catch((err: unknown) => {
      this.opts.logger.error({ err, modelThread: index }, 'model thread failed to start; retrying in 1 s');
      this.opts.timers.after(1_000, () => {
        if (!this.closed && this.threads[index] === t) this.replace(index);
      });
    });
  }

  private settle(t: ModelThread, id: number): Pending | undefined {
    const p = t.calls.get(id);
    t.calls.delete(id);
    return p;
  }
}
