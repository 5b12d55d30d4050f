/**
 * The warm pool of session workers (plain worker_threads; see docs/architecture.md, Decisions,
 * for why not piscina). Each worker owns one clock slot for its whole life; the slot returns to the free
 * list only after the thread has exited, so a dying worker can never stamp a slot that a new
 * turn already uses. An idle session holds no worker: workers go back to the pool between turns.
 */
import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import type {
  HarnessLink,
  HostApi,
  SeamContext,
  SeamFault,
  SeamName,
  WorkerApi,
  WorkerEvent,
} from '@turnwarden/protocol';
import { client, ErrorCode, goneSignal, serve, TurnwardenError } from '@turnwarden/protocol';
import { ARG, DECISION, Decision, RELEASED } from '@turnwarden/session';
import type { Logger } from 'pino';

export type WorkerState = 'starting' | 'warm' | 'busy' | 'dead';

export class WorkerHandle {
  state: WorkerState = 'starting';
  /** Receives the events of the turn the worker is serving. */
  onEvent: ((event: WorkerEvent) => void) | undefined;
  /** Set once `terminate` was asked for (escalation or crash cleanup). */
  terminating = false;
  /** Control-port events received from the worker (it counts what it posts the same way). */
  eventsReceived = 0;
  private waiters: { n: number; resolve: () => void }[] = [];

  constructor(
    readonly id: number,
    readonly slot: number,
    readonly worker: Worker,
    readonly api: WorkerApi,
    readonly control: MessagePort,
    /** Resolves when the thread has exited. */
    readonly exited: Promise<number>,
    /** Resolves when the worker serves its API. */
    readonly ready: Promise<void>,
  ) {}

  /**
   * Resolves once `n` control events have been received. Messages on different ports are not
   * ordered: a request or result that says how many events preceded it waits for them here.
   * Resolves at once when the worker is gone (nothing more will arrive).
   */
  caughtUp(n: number): Promise<void> {
    if (this.eventsReceived >= n || this.state === 'dead') return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ n, resolve }));
  }

  /** Counts one received event and wakes the waiters it satisfies. */
  received(): void {
    this.eventsReceived++;
    if (this.waiters.length === 0) return;
    const ready = this.waiters.filter((w) => w.n <= this.eventsReceived);
    this.waiters = this.waiters.filter((w) => w.n > this.eventsReceived);
    for (const w of ready) w.resolve();
  }

  /** The worker exited: no waiter may wait forever. */
  drainWaiters(): void {
    for (const w of this.waiters.splice(0)) w.resolve();
  }
}

export interface PoolOptions {
  readonly clock: SharedArrayBuffer;
  readonly maxWorkers: number;
  readonly warmWorkers: number;
  readonly workerUrl: URL;
  readonly pluginModules: readonly string[];
  readonly host: HostApi;
  readonly logger: Logger;
  readonly maxOldGenerationSizeMb?: number;
  /** A worker not ready this long after its spawn is terminated (its start fails with TIMEOUT). */
  readonly startTimeoutMs: number;
  /** How long `acquire` waits for a worker that is starting or exiting. */
  readonly acquireTimeoutMs: number;
  /** Workers starting at once. */
  readonly maxConcurrentSpawns: number;
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
}

/** Consecutive workers that died before serving: past this, the pool stops respawning in the background. */
const MAX_FAILED_STARTS = 3;

export class WorkerPool {
  private readonly freeSlots: number[];
  private readonly workers = new Set<WorkerHandle>();
  private readonly warm: WorkerHandle[] = [];
  private nextId = 1;
  private closed = false;
  private spawned = 0;
  private terminated = 0;
  private crashed = 0;
  private failedStarts = 0;
  private retired = 0;

  constructor(private readonly opts: PoolOptions) {
    this.freeSlots = Array.from({ length: opts.maxWorkers }, (_, i) => opts.maxWorkers - 1 - i);
  }

  /** Spawns the warm workers and waits until they serve. */
  async start(): Promise<void> {
    try {
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
   * A worker for one turn: a warm one when there is one (no spawn on the hot path), else a
   * fresh spawn while under capacity, else a typed retryable refusal (T4). It waits only for a
   * worker that is starting or exiting, and at most `acquireTimeoutMs`.
   */
  async acquire(): Promise<WorkerHandle> {
    const deadline = Date.now() + this.opts.acquireTimeoutMs;
    for (;;) {
      if (this.closed) throw new TurnwardenError(ErrorCode.SHUTTING_DOWN, 'the worker pool is closed');
      const warm = this.warm.pop();
      if (warm) {
        warm.state = 'busy';
        this.replenish();
        return warm;
      }
      if (this.freeSlots.length > 0 && this.starting() < this.opts.maxConcurrentSpawns) {
        const h = this.spawn();
        h.state = 'busy';
        await h.ready;
        this.replenish();
        return h;
      }
      // No warm worker to take. Capacity is only exhausted if every worker is busy with a turn:
      // a worker being retired or warming up frees or fills a slot shortly.
      const pending = [...this.workers].filter((w) => w.terminating || w.state === 'starting');
      const left = deadline - Date.now();
      if (pending.length === 0 || left <= 0) {
        throw new TurnwardenError(
          ErrorCode.CAPACITY_EXHAUSTED,
          pending.length === 0
            ? `all ${this.opts.maxWorkers} session workers are busy; retry later`
            : `no session worker became free within ${this.opts.acquireTimeoutMs} ms; retry later`,
        );
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        ...pending.map((w) => (w.terminating ? w.exited : w.ready.catch(() => undefined))),
        new Promise((resolve) => {
          timer = setTimeout(resolve, left);
        }),
      ]);
      clearTimeout(timer);
    }
  }

  /** Workers spawned and not yet ready. */
  private starting(): number {
    let n = 0;
    for (const h of this.workers) if (h.state === 'starting' && !h.terminating) n++;
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
      this.terminated++;
      await h.worker.terminate();
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
    this.retired++;
    void h.worker.terminate();
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
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    this.warm.length = 0;
    await Promise.all([...this.workers].map((h) => this.terminate(h)));
  }

  private makeWarm(h: WorkerHandle): void {
    if (h.state === 'dead' || h.terminating) return;
    h.state = 'warm';
    this.warm.push(h);
  }

  /** Keeps `warmWorkers` ready, starting at most `maxConcurrentSpawns` at once. */
  private replenish(): void {
    if (this.closed) return;
    if (this.failedStarts >= MAX_FAILED_STARTS) return; // crash loop: spawn on demand only
    let starting = this.starting();
    while (
      this.warm.length + starting < this.opts.warmWorkers &&
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

  /** The supervisor's end of a worker's seam channel (see session/src/seam-client.ts). */
  private harnessChannel(workerId: number, link: HarnessLink) {
    const buffer = new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT);
    const words = new Int32Array(buffer);
    const { port1, port2 } = new MessageChannel();
    port1.on('message', (m: { t: 'seam'; ticket: number; name: SeamName; ctx: SeamContext }) => {
      let released = false;
      link.workerArrived(workerId, { name: m.name, ctx: m.ctx }, (fault?: SeamFault) => {
        if (released) return;
        released = true;
        // `lose-ack` applies to the journal seam only: a worker seam proceeds.
        const decision =
          fault === undefined || fault.kind === 'lose-ack'
            ? Decision.proceed
            : fault.kind === 'crash'
              ? Decision.crash
              : fault.kind === 'delay'
                ? Decision.delay
                : Decision.throw;
        Atomics.store(words, DECISION, decision);
        Atomics.store(words, ARG, fault?.kind === 'delay' ? fault.ms : 0);
        Atomics.store(words, RELEASED, m.ticket);
        Atomics.notify(words, RELEASED);
      });
    });
    return { worker: { buffer, port: port2 }, close: () => port1.close() };
  }

  private spawn(): WorkerHandle {
    const slot = this.freeSlots.pop();
    if (slot === undefined) throw new TurnwardenError(ErrorCode.CAPACITY_EXHAUSTED, 'no free clock slot');
    const id = this.nextId++;
    const control = new MessageChannel();
    const workerRpc = new MessageChannel();
    const hostRpc = new MessageChannel();
    const harness = this.opts.harness ? this.harnessChannel(id, this.opts.harness) : undefined;
    const worker = new Worker(this.opts.workerUrl, {
      workerData: {
        clock: this.opts.clock,
        slot,
        workerId: id,
        pluginModules: this.opts.pluginModules,
        control: control.port2,
        workerRpc: workerRpc.port2,
        hostRpc: hostRpc.port2,
        ...(harness ? { harness: harness.worker } : {}),
      },
      transferList: [
        control.port2,
        workerRpc.port2,
        hostRpc.port2,
        ...(harness ? [harness.worker.port] : []),
      ],
      ...(this.opts.maxOldGenerationSizeMb === undefined
        ? {}
        : { resourceLimits: { maxOldGenerationSizeMb: this.opts.maxOldGenerationSizeMb } }),
    });
    this.spawned++;
    const { gone, markGone } = goneSignal();
    let markReady!: () => void;
    let failReady!: (e: unknown) => void;
    const ready = new Promise<void>((resolve, reject) => {
      markReady = resolve;
      failReady = reject;
    });
    ready.catch(() => {});
    const exited = new Promise<number>((resolve) => worker.once('exit', resolve));
    // A worker that never becomes ready (a plugin module whose import hangs) holds its slot
    // forever otherwise: it is terminated and its start fails with a typed error.
    const startTimer = setTimeout(() => {
      if (h.state !== 'starting' || h.terminating) return;
      log.error(
        { startTimeoutMs: this.opts.startTimeoutMs },
        'session worker did not become ready; terminating it',
      );
      failReady(
        new TurnwardenError(
          ErrorCode.TIMEOUT,
          `session worker ${id} did not become ready within ${this.opts.startTimeoutMs} ms (check pluginModules)`,
        ),
      );
      this.failedStarts++;
      h.terminating = true;
      void worker.terminate();
    }, this.opts.startTimeoutMs);
    startTimer.unref();
    const h = new WorkerHandle(
      id,
      slot,
      worker,
      client<WorkerApi>(workerRpc.port1, gone),
      control.port1,
      exited,
      ready,
    );
    this.workers.add(h);
    serve(hostRpc.port1, this.opts.host);
    const log = this.opts.logger.child({ workerId: id, slot });

    control.port1.on('message', (event: WorkerEvent) => {
      h.received();
      if (event.t === 'ready') {
        clearTimeout(startTimer);
        this.failedStarts = 0;
        markReady();
        return;
      }
      if (event.t === 'log') {
        log[event.level](event.data ?? {}, event.msg);
        return;
      }
      h.onEvent?.(event);
    });
    worker.on('error', (err) => {
      log.error({ err }, 'session worker crashed');
      if (!h.terminating) this.crashed++;
    });
    void exited.then((code) => {
      clearTimeout(startTimer);
      const wasTerminating = h.terminating;
      if (!wasTerminating && h.state === 'starting') {
        this.failedStarts++;
        if (this.failedStarts === MAX_FAILED_STARTS) {
          log.error(
            { failedStarts: this.failedStarts },
            'session workers fail to start; background respawn stopped',
          );
        }
      }
      h.state = 'dead';
      h.drainWaiters();
      const reason = wasTerminating
        ? `worker ${id} was terminated`
        : `worker ${id} exited unexpectedly with code ${code}`;
      markGone(reason);
      failReady(new TurnwardenError(ErrorCode.WORKER_EXITED, reason));
      this.workers.delete(h);
      const i = this.warm.indexOf(h);
      if (i >= 0) this.warm.splice(i, 1);
      control.port1.close();
      harness?.close();
      workerRpc.port1.close();
      hostRpc.port1.close();
      // Only now may another worker stamp this slot.
      this.freeSlots.push(slot);
      log.debug({ code, terminated: wasTerminating }, 'session worker exited');
      this.replenish();
    });
    return h;
  }
}
