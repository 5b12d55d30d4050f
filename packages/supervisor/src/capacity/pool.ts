/**
 * The warm pool of session workers (plain worker_threads; see docs/architecture.md, Decisions,
 * for why not piscina). Each worker owns one clock slot for its whole life; the slot returns to the free
 * list only after the thread has exited, so a dying worker can never stamp a slot that a new
 * turn already uses. An idle session holds no worker: workers go back to the pool between turns.
 */
import type { HarnessLink, HostApi, HostToolSpec, ModelPlacement } from '@turnwarden/protocol';
import { errors } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import { nodeTimers } from '../liveness/timers.js';
import { LoopTurns } from '../liveness/turns.js';
import { type Catalogue, spawnSessionWorker } from './spawn.js';
import { WaitingClaims } from './waiting-claims.js';
import type { WorkerHandle } from './worker-handle.js';

export type { WorkerHandle } from './worker-handle.js';

export interface PoolOptions {
  readonly clock: SharedArrayBuffer;
  readonly maxWorkers: number;
  readonly warmWorkers: number;
  readonly workerUrl: URL;
  /** The plugin modules each worker imports (read at each spawn). */
  readonly pluginModules: readonly string[] | (() => readonly string[]);
  /** `shared`: the workers ask the supervisor for their model calls (`HostApi.modelStep`). */
  readonly models?: ModelPlacement;
  /** The host tools workers offer (read at each spawn: they are loaded before the pool starts). */
  readonly hostTools?: () => readonly HostToolSpec[];
  readonly host: HostApi;
  readonly logger: Logger;
  readonly maxOldGenerationSizeMb?: number;
  readonly maxYoungGenerationSizeMb?: number;
  /** A worker not ready this long after its spawn is terminated (its start fails with TIMEOUT). */
  readonly startTimeoutMs: number;
  /** How long `acquire` waits without any worker becoming ready or exiting. */
  readonly acquireTimeoutMs: number;
  /** A warm worker beyond `warmWorkers` idle this long is stopped (0: never). */
  readonly idleTimeoutMs: number;
  /** Workers starting at once. */
  readonly maxConcurrentSpawns: number;
  /** Lowers each worker thread's scheduling priority by this much (Linux; default 0). */
  readonly workerNice?: number;
  /** The interleaving harness, when attached: every worker gets a seam channel. */
  readonly harness?: HarnessLink;
}

export interface PoolStats {
  readonly spawned: number;
  readonly terminated: number;
  readonly crashed: number;
  /** Workers terminated after a turn that did not end cleanly (see `retire`). */
  readonly retired: number;
  readonly warm: number;
  /** Workers serving a turn. */
  readonly busy: number;
  readonly starting: number;
  /** Workers being terminated (retired or escalated) that have not exited yet. */
  readonly exiting: number;
  /** Warm workers stopped after a peak (idle beyond `warmWorkers` for `idleTimeoutMs`). */
  readonly shrunk: number;
  /** Claims waiting for a worker to become ready. */
  readonly waiting: number;
}

/** Consecutive workers that died before serving: past this, the pool stops respawning in the background. */
const MAX_FAILED_STARTS = 3;

export class WorkerPool {
  private readonly freeSlots: number[];
  private readonly workers = new Set<WorkerHandle>();
  /** Workers asked to stop that have not exited yet (their slots free on exit). */
  private get exiting(): number {
    let n = 0;
    for (const h of this.stopping) if (h.state !== 'dead') n++;
    return n;
  }
  private readonly stopping = new Set<WorkerHandle>();
  /** Workers spawned that have not become ready or exited yet. */
  private readonly spawning = new Set<WorkerHandle>();
  private readonly warm: WorkerHandle[] = [];
  private nextId = 1;
  private closed = false;
  private spawned = 0;
  private terminated = 0;
  private crashed = 0;
  private failedStarts = 0;
  private retired = 0;
  /** What the workers can run, from the first one ready. */
  catalogue: Catalogue | undefined;
  private shrunk = 0;
  /** Claims waiting for a worker, in arrival order (refused after acquireTimeoutMs without progress). */
  private readonly waiters: WaitingClaims<WorkerHandle>;
  private readonly stopShrinking: () => void;
  private readonly loop = new LoopTurns();

  constructor(private readonly opts: PoolOptions) {
    this.freeSlots = Array.from({ length: opts.maxWorkers }, (_, i) => opts.maxWorkers - 1 - i);
    this.waiters = new WaitingClaims(
      opts.acquireTimeoutMs,
      nodeTimers,
      () => performance.now(),
      () => this.exhausted(true),
    );
    if (opts.idleTimeoutMs > 0) {
      const t = setInterval(() => this.shrink(), Math.max(10, Math.min(opts.idleTimeoutMs, 10_000)));
      t.unref();
      this.stopShrinking = () => clearInterval(t);
    } else this.stopShrinking = () => {};
  }

  /**
   * Spawns the warm workers and waits until they serve. With no warm worker, one is started
   * and stopped, so a plugin module that cannot load fails here, not at the first turn.
   */
  async start(): Promise<void> {
    try {
      if (this.opts.warmWorkers === 0 && this.freeSlots.length > 0) {
        const probe = this.spawn();
        await probe.ready;
        await this.terminate(probe);
      }
      while (this.warm.length < this.opts.warmWorkers && this.freeSlots.length > 0) {
        const batch: Promise<void>[] = [];
        while (
          this.warm.length + batch.length < this.opts.warmWorkers &&
          batch.length < this.opts.maxConcurrentSpawns &&
          this.freeSlots.length > 0
        ) {
          const h = this.spawn();
          batch.push(h.ready.then(() => this.makeWarm(h)));
        }
        await Promise.all(batch);
      }
    } catch (e) {
      // A worker that cannot even start (a broken plugin module) would fail the same way on
      // every respawn: close instead of looping, and let the caller see why.
      await this.close();
      throw e;
    }
  }

  /**
   * A worker for one turn: a warm one when there is one (no spawn on the hot path), else the
   * next worker that becomes ready — spawned for it while under capacity, or the replacement of
   * one exiting — in arrival order, else a typed retryable refusal (T4). It waits while the
   * pool makes progress (a ramp from a cold pool spawns `maxConcurrentSpawns` at a time, for as
   * long as that takes) and is refused only after `acquireTimeoutMs` without any worker becoming
   * ready or exiting; when every worker is busy with a turn and none is starting or exiting it is
   * refused at once.
   */
  async acquire(): Promise<WorkerHandle> {
    if (this.closed) throw errors.shuttingDown('the worker pool is closed');
    const warm = this.warm.pop();
    if (warm) {
      warm.state = 'busy';
      this.replenish();
      return warm;
    }
    if (this.failedStarts >= MAX_FAILED_STARTS && this.freeSlots.length > 0) {
      // A crash loop: no background spawns; each claim tries one and meets its failure.
      const h = this.spawn();
      h.state = 'busy';
      await h.ready;
      return h;
    }
    const pending = this.freeSlots.length > 0 || this.spawning.size > 0 || this.exiting > 0;
    if (!pending) throw this.exhausted(false);
    if (this.opts.acquireTimeoutMs === 0) {
      // No wait at all: a free slot is spawned into for this claim, anything else refused.
      if (this.freeSlots.length === 0) throw this.exhausted(true);
      const h = this.spawn();
      h.state = 'busy';
      await h.ready;
      return h;
    }
    const served = this.waiters.wait();
    this.replenish();
    return served;
  }

  /** CAPACITY_EXHAUSTED: every worker busy (`pending` false), or none became free in time. */
  private exhausted(pending: boolean) {
    return errors.capacityExhausted(
      pending
        ? `no session worker became free within ${this.opts.acquireTimeoutMs} ms; retry later`
        : `all ${this.opts.maxWorkers} session workers are busy; retry later`,
      {
        reason: pending ? 'worker_exiting' : 'workers_busy',
        retryAfterMs: Math.min(60_000, Math.max(50, this.opts.acquireTimeoutMs)),
      },
    );
  }

  /** Workers spawned and not yet ready (a few at most: the set holds only those). */
  private starting(): number {
    let n = 0;
    for (const h of this.spawning) if (h.state === 'starting' && !h.terminating) n++;
    return n;
  }

  /** Returns a worker whose turn unwound to the pool. */
  release(h: WorkerHandle): void {
    h.onEvent = undefined;
    if (h.state === 'dead' || h.terminating) return;
    if (this.closed) {
      void this.terminate(h);
      return;
    }
    this.makeWarm(h);
  }

  /** Hard kill (L3 escalation, crash cleanup). Resolves once the thread is gone. */
  async terminate(h: WorkerHandle): Promise<void> {
    if (h.state !== 'dead' && !h.terminating) {
      h.terminating = true;
      this.stopping.add(h);
      this.terminated++;
      // Stopping a thread costs the caller a few ms: after an abort storm, grace expires for
      // every turn in the same timer phase, so terminations go one per loop turn (L12).
      await new Promise<void>((resolve, reject) =>
        this.loop.run(() => void h.worker.terminate().then(() => resolve(), reject)),
      );
    }
    await h.exited;
  }

  /**
   * Retires a worker whose turn did not end cleanly (aborted, failed): it may still hold work
   * the turn leaked — timers, promises that ignored their signal — which must never run during
   * another session's turn. It is terminated in the background and replaced like any exit.
   */
  retire(h: WorkerHandle): void {
    h.onEvent = undefined;
    if (h.state === 'dead' || h.terminating) return;
    h.terminating = true;
    this.stopping.add(h);
    this.retired++;
    // Stopping a thread costs the caller a few ms: retirements go one per loop turn (L12).
    this.loop.run(() => void h.worker.terminate());
  }

  stats(): PoolStats {
    let busy = 0;
    let starting = 0;
    let exiting = 0;
    for (const h of this.workers) {
      if (h.terminating) exiting++;
      else if (h.state === 'busy') busy++;
      else if (h.state === 'starting') starting++;
    }
    return {
      spawned: this.spawned,
      terminated: this.terminated,
      crashed: this.crashed,
      retired: this.retired,
      warm: this.warm.length,
      busy,
      starting,
      exiting,
      shrunk: this.shrunk,
      waiting: this.waiters.length,
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    this.stopShrinking();
    this.warm.length = 0;
    this.waiters.rejectAll(errors.shuttingDown('the worker pool is closed'));
    await Promise.all([...this.workers].map((h) => this.terminate(h)));
  }

  /** A worker ready for a turn: to the first waiting claim, else warm (idle since now). */
  private makeWarm(h: WorkerHandle): void {
    if (h.state === 'dead' || h.terminating) return;
    if (this.waiters.length > 0) {
      h.state = 'busy';
      this.waiters.serve(h);
      return;
    }
    this.waiters.progress();
    h.state = 'warm';
    h.idleSince = performance.now();
    this.warm.push(h);
  }

  /**
   * After a peak the pool shrinks back to `warmWorkers`: a warm worker idle longer than
   * `idleTimeoutMs` beyond that number is stopped (the longest idle first), one per loop turn.
   */
  shrink(now = performance.now()): number {
    if (this.opts.idleTimeoutMs === 0) return 0;
    let stopped = 0;
    while (this.warm.length > this.opts.warmWorkers) {
      const oldest = this.warm[0]!;
      if (now - oldest.idleSince < this.opts.idleTimeoutMs) break;
      this.warm.shift();
      oldest.terminating = true;
      this.stopping.add(oldest);
      this.shrunk++;
      stopped++;
      this.loop.run(() => void oldest.worker.terminate());
    }
    if (stopped > 0)
      this.opts.logger.info({ stopped, warm: this.warm.length }, 'idle session workers stopped after a peak');
    return stopped;
  }

  /** Keeps `warmWorkers` ready, starting at most `maxConcurrentSpawns` at once. */
  private replenish(): void {
    if (this.closed) return;
    if (this.failedStarts >= MAX_FAILED_STARTS) return; // crash loop: spawn on demand only
    let starting = this.starting();
    // Enough to keep `warmWorkers` ready and to serve every claim waiting for a worker.
    const wanted = this.opts.warmWorkers + this.waiters.length;
    while (
      this.warm.length + starting < wanted &&
      starting < this.opts.maxConcurrentSpawns &&
      this.freeSlots.length > 0
    ) {
      const h = this.spawn();
      starting++;
      h.ready.then(
        () => {
          if (h.state === 'starting') this.makeWarm(h);
          this.replenish();
        },
        () => {},
      );
    }
  }

  private spawn(): WorkerHandle {
    const slot = this.freeSlots.pop();
    if (slot === undefined) throw errors.capacityExhausted('no free clock slot');
    const id = this.nextId++;
    this.spawned++;
    const log = this.opts.logger.child({ workerId: id, slot });
    const h = spawnSessionWorker(this.opts, id, slot, {
      ready: (handle, catalogue) => {
        this.spawning.delete(handle);
        this.failedStarts = 0;
        this.catalogue ??= catalogue;
      },
      startTimedOut: () => {
        this.failedStarts++;
      },
      crashed: (handle) => {
        if (!handle.terminating) this.crashed++;
      },
      exited: (handle, how) => {
        if (!how.terminated && how.beforeReady) {
          this.failedStarts++;
          if (this.failedStarts === MAX_FAILED_STARTS) {
            log.error(
              { failedStarts: this.failedStarts },
              'session workers fail to start; background respawn stopped',
            );
          }
        }
        this.workers.delete(handle);
        this.spawning.delete(handle);
        this.stopping.delete(handle);
        const i = this.warm.indexOf(handle);
        if (i >= 0) this.warm.splice(i, 1);
        // Only now may another worker stamp this slot.
        this.freeSlots.push(slot);
        this.waiters.progress();
        this.replenish();
      },
    });
    this.workers.add(h);
    this.spawning.add(h);
    return h;
  }
}
