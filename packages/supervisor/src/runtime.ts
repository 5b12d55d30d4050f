/**
 * Turnwarden's embedded API: the supervisor a host runs on its main thread.
 *
 * A turn: claim (worker from the warm pool, lease with a fresh fencing token, durable user
 * row, clock armed at a new generation) → the worker runs the turn loop and journals rows
 * through `journal` → the watchdog watches the slot → finish (structural repair if needed,
 * lease released, worker back to the pool, `stream_end` then `idle`).
 */
import { randomUUID } from 'node:crypto';
import { ActivityClock, activityName, isFenced, type MonotonicMs } from '@turnwarden/clock';
import type {
  AbortReason,
  HostApi,
  JournalAck,
  JournalRequest,
  TurnOutcome,
  UserMessage,
  WorkerEvent,
} from '@turnwarden/protocol';
import {
  attachSeamController,
  detachSeamController,
  ErrorCode,
  type HarnessLink,
  Mutation,
  mutated,
  openToolCalls,
  SeamName,
  seam,
  TurnwardenError,
  toWire,
} from '@turnwarden/protocol';
import { parseScript, sessionWorkerUrl } from '@turnwarden/session';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { type Logger, pino } from 'pino';
import type { ActiveTurn } from './active-turn.js';
import { resolveConfig, type SupervisorConfig, type SupervisorConfigInput } from './config.js';
import { EventHub, type Listener } from './events.js';
import { WorkerPool } from './pool.js';
import { repairOpenCalls } from './repair.js';
import { newCounters, type RuntimeCounters } from './stats.js';
import type { SendInput, TurnHandle, TurnResult, WorkstreamInfo, WorkstreamStatus } from './types.js';
import {
  type StallInfo,
  Watchdog,
  type WatchdogHooks,
  type WatchdogStats,
  type WatchedTurn,
} from './watchdog.js';

export interface TurnwardenOptions extends SupervisorConfigInput {
  /** A store, or where to open the SQLite one (default `:memory:`). */
  readonly store?: Store | { readonly path: string };
  readonly logger?: Logger;
  /** Test and harness seams. */
  readonly hooks?: WatchdogHooks;
  /** Monotonic time source (tests inject one). */
  readonly now?: MonotonicMs;
  /** Attaches the interleaving harness (packages/harness): seams park, faults and mutations apply. */
  readonly harness?: HarnessLink;
  /** Do not run the watchdog's timer: the caller polls with `pollWatchdog()` (harness schedules). */
  readonly manualWatchdog?: boolean;
}

export interface RuntimeStats extends RuntimeCounters {
  readonly activeTurns: number;
  readonly watchdog: WatchdogStats;
  readonly pool: ReturnType<WorkerPool['stats']>;
}

const ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

function invalid(message: string, field: string): TurnwardenError {
  return new TurnwardenError(ErrorCode.INVALID_INPUT, message, { details: { field } });
}

function isStore(value: unknown): value is Store {
  return typeof (value as Partial<Store> | undefined)?.appendMessages === 'function';
}

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

export class Turnwarden {
  readonly config: SupervisorConfig;
  private readonly logger: Logger;
  private readonly clock: ActivityClock;
  private readonly events: EventHub;
  private readonly watchdog: Watchdog;
  private readonly pool: WorkerPool;
  private readonly active = new Map<string, ActiveTurn>();
  private readonly bySlot = new Map<number, ActiveTurn>();
  private readonly claiming = new Set<string>();
  private readonly cleanupPending = new Set<string>();
  private readonly counters = newCounters();
  private readonly holder = `tw-${randomUUID()}`;
  private closing = false;
  private shutdownPromise: Promise<void> | undefined;
  private readonly harness: HarnessLink | undefined;

  private constructor(
    config: SupervisorConfig,
    private readonly store: Store,
    private readonly ownsStore: boolean,
    options: TurnwardenOptions,
  ) {
    this.config = config;
    this.harness = options.harness;
    this.logger = options.logger ?? pino({ name: 'turnwarden' }, pino.destination(2));
    this.clock = ActivityClock.create(config.pool.maxWorkers, options.now);
    this.events = new EventHub(this.logger);
    this.watchdog = new Watchdog(
      this.clock,
      config.watchdog,
      {
        fired: (w, info) => this.onWatchdogFired(w, info),
        committed: (w, info) => this.onAbortCommitted(w, info),
        declined: (w, info, why, err) => this.onAbortDeclined(w, info, why, err),
      },
      this.logger,
      options.hooks,
    );
    const host: HostApi = { journal: (req) => this.journal(req) };
    this.pool = new WorkerPool({
      clock: this.clock.buffer,
      maxWorkers: config.pool.maxWorkers,
      warmWorkers: config.pool.warmWorkers,
      workerUrl: sessionWorkerUrl,
      pluginModules: config.pluginModules,
      host,
      logger: this.logger,
      ...(options.harness ? { harness: options.harness } : {}),
      ...(config.pool.maxOldGenerationSizeMb === undefined
        ? {}
        : { maxOldGenerationSizeMb: config.pool.maxOldGenerationSizeMb }),
    });
  }

  /** Validates the configuration (INVALID_CONFIG naming the field), opens the store, warms the pool. */
  static async start(options: TurnwardenOptions = {}): Promise<Turnwarden> {
    const { store: storeOption, logger: _l, hooks: _h, now: _n, harness, manualWatchdog, ...rest } = options;
    const config = resolveConfig(rest);
    // A Store instance is used as given (and not closed by shutdown); a `{ path }` is opened here.
    const given = isStore(storeOption) ? storeOption : undefined;
    const store: Store =
      given ?? openSqliteStore({ path: (storeOption as { path?: string } | undefined)?.path ?? ':memory:' });
    const owns = given === undefined;
    if (harness) attachSeamController(harness.controller);
    const tw = new Turnwarden(config, store, owns, options);
    await tw.pool.start();
    if (!manualWatchdog) tw.watchdog.start();
    tw.logger.info(
      { holder: tw.holder, workers: config.pool.maxWorkers, watchdog: config.watchdog },
      'turnwarden supervisor started',
    );
    return tw;
  }

  /**
   * Escalates every committed abort now instead of after `graceMs` (terminates workers that have
   * not unwound). For harness schedules, where time is a scheduled step, not a timer.
   */
  expireGraceTimers(): number {
    let n = 0;
    for (const turn of this.active.values()) {
      if (turn.abort && !turn.finished && !turn.workerTerminated) {
        if (turn.graceTimer) clearTimeout(turn.graceTimer);
        this.escalate(turn);
        n++;
      }
    }
    return n;
  }

  /** One watchdog sampling pass, for harness schedules started with `manualWatchdog`. */
  pollWatchdog(): void {
    this.watchdog.poll();
  }

  /** The activity clock's shared buffer, for the interleaving harness and tests. */
  get clockBuffer(): SharedArrayBuffer {
    return this.clock.buffer;
  }

  // ── workstreams ────────────────────────────────────────────────────────────

  async createWorkstream(input: { tenantId: string; workstreamId?: string }): Promise<WorkstreamInfo> {
    this.assertOpen();
    this.checkId(input.tenantId, 'tenantId');
    const id = input.workstreamId ?? `ws-${randomUUID()}`;
    this.checkId(id, 'workstreamId');
    const rec = await this.store.createWorkstream({ id, tenantId: input.tenantId });
    this.logger.info({ workstreamId: id, tenantId: input.tenantId }, 'workstream created');
    return { workstreamId: rec.id, tenantId: rec.tenantId, incarnation: rec.incarnation };
  }

  subscribe(workstreamId: string, listener: Listener): () => void {
    return this.events.subscribe(workstreamId, listener);
  }

  async history(tenantId: string, workstreamId: string) {
    await this.owned(tenantId, workstreamId);
    return this.store.readHistory(workstreamId);
  }

  async status(tenantId: string, workstreamId: string): Promise<WorkstreamStatus> {
    const ws = await this.owned(tenantId, workstreamId);
    const turn = this.active.get(workstreamId);
    const base = {
      workstreamId,
      tenantId,
      state: ws.status === 'closed' ? ('closed' as const) : (turn?.state ?? ('idle' as const)),
      generation: ws.generation,
      cleanupPending: this.cleanupPending.has(workstreamId),
    };
    if (!turn) return base;
    return {
      ...base,
      activeTurn: {
        generation: turn.generation,
        idleMs: Math.round(this.clock.nowMs() - turn.watched.lastChangeAt),
        lastActivity: activityName(this.clock.lastCode(turn.worker.slot)),
        ...(turn.abort ? { abortReason: turn.abort.reason } : {}),
      },
    };
  }

  // ── turns ──────────────────────────────────────────────────────────────────

  /**
   * Claims a turn and dispatches it to a worker. Bad input is refused with a typed error and
   * nothing written (T5); a busy workstream with TURN_IN_PROGRESS; unrepaired structural debt
   * with TOOL_CLEANUP_PENDING (S3); no free worker with CAPACITY_EXHAUSTED (T4, retryable).
   */
  async send(input: SendInput): Promise<TurnHandle> {
    this.assertOpen();
    const { workstreamId, tenantId } = input;
    this.checkInput(input);
    const ws = await this.owned(tenantId, workstreamId);
    if (ws.status === 'closed') {
      throw new TurnwardenError(ErrorCode.WORKSTREAM_CLOSED, `workstream ${workstreamId} is closed`);
    }
    if (this.active.has(workstreamId) || this.claiming.has(workstreamId)) {
      throw new TurnwardenError(ErrorCode.TURN_IN_PROGRESS, `a turn is already running on ${workstreamId}`);
    }
    if (this.cleanupPending.has(workstreamId)) {
      throw new TurnwardenError(
        ErrorCode.TOOL_CLEANUP_PENDING,
        `workstream ${workstreamId} has tool calls without results; cancel() repairs it`,
      );
    }
    this.claiming.add(workstreamId);
    let turn: ActiveTurn;
    let history: Awaited<ReturnType<Store['readHistory']>>;
    let userMessage: UserMessage;
    try {
      const worker = await this.pool.acquire();
      try {
        const lease = await this.store.acquireLease(workstreamId, this.holder, this.config.lease.ttlMs);
        if (!lease) {
          throw new TurnwardenError(
            ErrorCode.TURN_IN_PROGRESS,
            `the turn lease of ${workstreamId} is held elsewhere`,
          );
        }
        try {
          const generation = await this.store.nextGeneration(workstreamId);
          // Debt left by a crashed process is repaired before any new turn (S7).
          const leftover = await repairOpenCalls({
            store: this.store,
            workstreamId,
            generation,
            fencingToken: lease.token,
            why: 'interrupted by a crash',
            startedCalls: undefined,
          });
          if (leftover > 0) {
            this.counters.toolResultsSynthesized += leftover;
            this.logger.warn({ workstreamId, count: leftover }, 'repaired dangling tool calls before claim');
          }
          userMessage =
            input.principal === undefined
              ? { role: 'user', content: input.content }
              : { role: 'user', content: input.content, principal: input.principal };
          await this.store.appendMessages({
            workstreamId,
            generation,
            fencingToken: lease.token,
            entries: [{ commitKey: `g${generation}:u`, message: userMessage }],
          });
          history = await this.store.readHistory(workstreamId);
          turn = this.arm(worker, lease, tenantId, workstreamId, generation);
        } catch (e) {
          await this.store.releaseLease(workstreamId, this.holder, lease.token).catch(() => false);
          throw e;
        }
      } catch (e) {
        this.pool.release(worker);
        throw e;
      }
    } finally {
      this.claiming.delete(workstreamId);
    }

    this.events.emit(workstreamId, 'turn_started', turn.generation, { workerId: turn.worker.id });
    turn.log.info({ workerId: turn.worker.id, slot: turn.worker.slot }, 'turn started');
    const captured = seam(SeamName.claimCaptureToDispatch, { workstreamId, generation: turn.generation });
    (captured ?? Promise.resolve())
      .then(() =>
        turn.worker.api.runTurn({
          workstreamId,
          tenantId,
          generation: turn.generation,
          fencingToken: turn.lease.token,
          history: history.map((r) => r.message),
          input: userMessage,
          model: this.config.model,
          limits: {
            maxModelSteps: this.config.limits.maxModelSteps,
            maxToolArgBytes: this.config.limits.maxToolArgBytes,
          },
        }),
      )
      .then(
        (outcome) => this.finish(turn, outcome, undefined),
        (err: unknown) => this.finish(turn, undefined, err),
      )
      .catch((err: unknown) => turn.log.error({ err }, 'turn finish failed'));
    return { workstreamId, generation: turn.generation, done: turn.done };
  }

  /**
   * Force cancel. A running turn: the abort commits unconditionally, results are synthesized
   * before the slot is released, and this resolves once the workstream is idle. An idle
   * workstream with unrepaired debt: repaired. An idle clean one: a silent no-op (false).
   */
  async cancel(tenantId: string, workstreamId: string): Promise<boolean> {
    await this.owned(tenantId, workstreamId);
    const turn = this.active.get(workstreamId);
    if (turn) {
      if (!turn.abort && this.clock.fence(turn.worker.slot)) this.commitAbort(turn, 'cancel');
      await turn.done;
      return true;
    }
    return this.repairIdle(workstreamId);
  }

  /**
   * History rewrite (L8): replaces rows 1..throughSeq with a system summary. While a turn runs
   * it is fenced by that turn's abort: refused once the abort has committed (a rewrite that has
   * not started is revoked); one already in flight completes before the abort's repair runs
   * (never torn); a declined abort changes nothing. On an idle workstream it runs under a lease.
   */
  async compact(
    tenantId: string,
    workstreamId: string,
    input: { throughSeq: number; summary: string; commitKey?: string },
  ): Promise<{ removed: number }> {
    await this.owned(tenantId, workstreamId);
    if (typeof input.summary !== 'string' || input.summary.length === 0) {
      throw invalid('summary must be a non-empty string', 'summary');
    }
    const summary = {
      commitKey: input.commitKey ?? `compact:${randomUUID()}`,
      message: { role: 'system' as const, content: input.summary },
    };
    const turn = this.active.get(workstreamId);
    if (turn) {
      if (turn.abort) {
        throw new TurnwardenError(
          ErrorCode.FENCED,
          `history rewrite of ${workstreamId} revoked: the turn's abort (${turn.abort.reason}) has committed`,
        );
      }
      const rewrite = this.store.compactHistory({
        workstreamId,
        generation: turn.generation,
        fencingToken: turn.lease.token,
        throughSeq: input.throughSeq,
        summary,
      });
      turn.rewrites.add(rewrite);
      try {
        return await rewrite;
      } finally {
        turn.rewrites.delete(rewrite);
      }
    }
    if (this.claiming.has(workstreamId)) {
      throw new TurnwardenError(ErrorCode.TURN_IN_PROGRESS, `a turn is being claimed on ${workstreamId}`);
    }
    const lease = await this.store.acquireLease(workstreamId, this.holder, this.config.lease.ttlMs);
    if (!lease)
      throw new TurnwardenError(
        ErrorCode.TURN_IN_PROGRESS,
        `the turn lease of ${workstreamId} is held elsewhere`,
      );
    try {
      const ws = await this.store.getWorkstream(workstreamId);
      return await this.store.compactHistory({
        workstreamId,
        generation: ws?.generation ?? 0,
        fencingToken: lease.token,
        throughSeq: input.throughSeq,
        summary,
      });
    } finally {
      await this.store.releaseLease(workstreamId, this.holder, lease.token).catch(() => false);
    }
  }

  /** Closes an idle workstream; listeners receive `ws_closed` and are removed. */
  async close(tenantId: string, workstreamId: string): Promise<void> {
    await this.owned(tenantId, workstreamId);
    if (this.active.has(workstreamId) || this.claiming.has(workstreamId)) {
      throw new TurnwardenError(
        ErrorCode.TURN_IN_PROGRESS,
        `cannot close ${workstreamId} while a turn runs; cancel first`,
      );
    }
    await this.store.closeWorkstream(workstreamId);
    this.events.closeWorkstream(workstreamId, { reason: 'closed' });
    this.logger.info({ workstreamId }, 'workstream closed');
  }

  stats(): RuntimeStats {
    return {
      ...this.counters,
      activeTurns: this.active.size,
      watchdog: this.watchdog.stats(),
      pool: this.pool.stats(),
    };
  }

  /** Aborts running turns (reason `shutdown`), waits for them to settle, stops the pool and store. */
  shutdown(): Promise<void> {
    // Every caller waits for the same, complete shutdown.
    this.shutdownPromise ??= this.doShutdown();
    return this.shutdownPromise;
  }

  private async doShutdown(): Promise<void> {
    this.closing = true;
    const turns = [...this.active.values()];
    for (const turn of turns) {
      if (!turn.abort && this.clock.fence(turn.worker.slot)) this.commitAbort(turn, 'shutdown');
    }
    await Promise.all(turns.map((t) => t.done));
    this.watchdog.stop();
    await this.pool.close();
    if (this.ownsStore) await this.store.close();
    if (this.harness) detachSeamController(this.harness.controller);
    this.logger.info({ ...this.counters }, 'turnwarden supervisor stopped');
  }

  // ── worker-facing ──────────────────────────────────────────────────────────

  /**
   * The only path by which a turn's rows become durable. Refuses rows from a turn whose
   * abort has committed (L3: nothing a dead turn had in flight reaches history) — the check
   * and the store write run in one synchronous step on this thread, which is also the only
   * thread that commits aborts, so no commit can fall between them.
   */
  private journal(req: JournalRequest): Promise<JournalAck> {
    const held = seam(SeamName.journalAdmit, { workstreamId: req.workstreamId, generation: req.generation });
    return held === undefined ? this.admit(req) : held.then(() => this.admit(req));
  }

  /** Admission and write: one synchronous step (see `journal`). */
  private admit(req: JournalRequest): Promise<JournalAck> {
    const turn = this.active.get(req.workstreamId);
    const fenced =
      !turn ||
      turn.generation !== req.generation ||
      turn.abort !== undefined ||
      isFenced(this.clock.sample(turn.worker.slot));
    if (fenced && !mutated(Mutation.admitFencedJournal)) {
      this.counters.journalRefusedFenced++;
      return Promise.reject(
        new TurnwardenError(
          ErrorCode.FENCED,
          `turn ${req.generation} of ${req.workstreamId} is no longer live`,
        ),
      );
    }
    return this.store.appendMessages(req).then((seqs) => {
      for (const entry of req.entries) {
        this.events.emit(req.workstreamId, 'message', req.generation, {
          commitKey: entry.commitKey,
          message: entry.message,
        });
      }
      return { seqs };
    });
  }

  private onWorkerEvent(turn: ActiveTurn, event: WorkerEvent): void {
    if (!('generation' in event) || event.generation !== turn.generation || turn.finished) return;
    switch (event.t) {
      case 'state':
        // Once an abort committed the supervisor owns the state (force-abandoning → idle).
        if (turn.abort) return;
        turn.state = event.state;
        this.events.emit(turn.workstreamId, 'state', turn.generation, { state: event.state });
        return;
      case 'token':
        this.events.emit(turn.workstreamId, 'token', turn.generation, { text: event.text });
        return;
      case 'tool_started':
        this.events.emit(turn.workstreamId, 'tool_started', turn.generation, {
          callIndex: event.callIndex,
          id: event.id,
          name: event.name,
        });
        return;
      case 'tool_finished':
        this.events.emit(turn.workstreamId, 'tool_finished', turn.generation, {
          callIndex: event.callIndex,
          isError: event.isError,
        });
        return;
    }
  }

  // ── watchdog delegate ──────────────────────────────────────────────────────

  private onWatchdogFired(w: WatchedTurn, info: StallInfo): void {
    this.counters.watchdogFired++;
    const turn = this.bySlot.get(w.slot);
    const log = turn?.log ?? this.logger;
    // L5, observational stage: may still decline.
    log.error(
      {
        workstreamId: info.workstreamId,
        idleMs: info.idleMs,
        lastActivity: info.lastActivity,
        bound: info.bound,
      },
      'turn liveness watchdog fired; attempting recovery',
    );
    this.events.emit(info.workstreamId, 'watchdog_fired', info.generation, { ...info });
    if (mutated(Mutation.publishBeforeCommit)) {
      log.error({ idleMs: info.idleMs }, 'watchdog aborted turn; lease renewal stopped');
    }
    this.events.emit(info.workstreamId, 'warning', info.generation, {
      stage: 'observational',
      message:
        info.bound === 'deadline'
          ? `The turn exceeded its deadline of ${this.config.watchdog.turnDeadlineMs} ms; attempting recovery.`
          : `No progress for ${(info.idleMs / 1000).toFixed(1)}s (last: ${info.lastActivity}); attempting recovery.`,
    });
  }

  private onAbortDeclined(w: WatchedTurn, info: StallInfo, why: string, err: unknown): void {
    this.counters.abortsDeclined++;
    const log = this.bySlot.get(w.slot)?.log ?? this.logger;
    if (why === 'failed') {
      log.warn(
        { err, workstreamId: info.workstreamId },
        'watchdog abort declined: publish failed; still watching',
      );
    } else {
      log.info({ workstreamId: info.workstreamId, why }, 'watchdog abort declined');
    }
    this.events.emit(info.workstreamId, 'watchdog_declined', info.generation, { why });
  }

  private onAbortCommitted(w: WatchedTurn, info: StallInfo): void {
    const turn = this.bySlot.get(w.slot);
    if (!turn || turn.watched !== w) return;
    this.commitAbort(turn, info.bound === 'deadline' ? 'deadline' : 'watchdog', info);
  }

  /**
   * The definitive stage, after the fence is set (by the watchdog's CAS, or `fence` for
   * cancel/shutdown/lease loss). Order matters: lease renewal stops first (L3), then the
   * definitive log and events (L5), then the abort message, then the grace timer.
   */
  private commitAbort(turn: ActiveTurn, reason: AbortReason, info?: StallInfo): void {
    if (turn.abort) return;
    turn.abort = { reason, at: this.clock.nowMs() };
    this.counters.abortsCommitted++;
    if (!mutated(Mutation.renewAfterAbort)) this.stopRenewal(turn);
    turn.state = 'force-abandoning';
    const step = (fn: () => void) => {
      try {
        fn();
      } catch (err) {
        turn.log.error({ err }, 'abort step failed after commit');
      }
    };
    step(() => {
      if (reason === 'watchdog' || reason === 'deadline') {
        turn.log.error(
          { idleMs: info?.idleMs, lastActivity: info?.lastActivity, bound: info?.bound },
          'watchdog aborted turn; lease renewal stopped',
        );
      } else {
        turn.log.warn({ reason }, 'turn aborted; lease renewal stopped');
      }
    });
    step(() => this.events.emit(turn.workstreamId, 'turn_aborted', turn.generation, { reason }));
    step(() => this.events.emit(turn.workstreamId, 'state', turn.generation, { state: 'force-abandoning' }));
    if (reason === 'watchdog' || reason === 'deadline') {
      step(() =>
        this.events.emit(turn.workstreamId, 'warning', turn.generation, {
          stage: 'definitive',
          message:
            reason === 'deadline'
              ? 'Turn aborted by the liveness watchdog: it exceeded its deadline. You can retry.'
              : `Turn aborted by the liveness watchdog after ${((info?.idleMs ?? 0) / 1000).toFixed(1)}s without progress. You can retry.`,
        }),
      );
    }
    const post = () =>
      step(() => turn.worker.control.postMessage({ t: 'abort', generation: turn.generation, reason }));
    const held = seam(SeamName.watchdogCommitToPublish, {
      workstreamId: turn.workstreamId,
      generation: turn.generation,
    });
    if (held === undefined) post();
    else
      held.then(post, (err: unknown) =>
        turn.log.error({ err }, 'abort message seam failed; the fence stands'),
      );
    turn.graceTimer = setTimeout(() => this.escalate(turn), this.config.watchdog.graceMs);
  }

  /** L3: the turn did not unwind within graceMs — terminate its worker. */
  private escalate(turn: ActiveTurn): void {
    if (turn.finished) return;
    turn.workerTerminated = true;
    this.counters.workersTerminated++;
    turn.log.warn(
      { graceMs: this.config.watchdog.graceMs, workerId: turn.worker.id },
      'turn did not unwind within grace; terminating worker',
    );
    void this.pool.terminate(turn.worker);
  }

  // ── lifecycle internals ────────────────────────────────────────────────────

  private arm(
    worker: Awaited<ReturnType<WorkerPool['acquire']>>,
    lease: ActiveTurn['lease'],
    tenantId: string,
    workstreamId: string,
    generation: number,
  ): ActiveTurn {
    this.clock.arm(worker.slot, generation);
    const watched = this.watchdog.watch({ slot: worker.slot, workstreamId, tenantId, generation });
    const { promise, resolve } = deferred<TurnResult>();
    const turn: ActiveTurn = {
      workstreamId,
      tenantId,
      generation,
      lease,
      worker,
      watched,
      log: this.logger.child({ workstreamId, tenantId, generation }),
      state: 'claimed',
      abort: undefined,
      rewrites: new Set(),
      renewTimer: undefined,
      graceTimer: undefined,
      workerTerminated: false,
      finished: false,
      resolve,
      done: promise,
    };
    this.active.set(workstreamId, turn);
    this.bySlot.set(worker.slot, turn);
    worker.onEvent = (event) => this.onWorkerEvent(turn, event);
    this.counters.turnsStarted++;
    turn.renewTimer = setInterval(() => this.renew(turn), this.config.lease.renewMs);
    turn.renewTimer.unref();
    return turn;
  }

  /** Lease renewal is never progress: it does not touch the clock. */
  private renew(turn: ActiveTurn): void {
    if ((turn.abort && !mutated(Mutation.renewAfterAbort)) || turn.finished) return;
    this.store
      .refreshLease(turn.workstreamId, this.holder, turn.lease.token, this.config.lease.ttlMs)
      .then((ok) => {
        if ((turn.abort && !mutated(Mutation.renewAfterAbort)) || turn.finished) return;
        if (ok) {
          this.counters.leaseRenewals++;
          return;
        }
        this.counters.leaseLosses++;
        turn.log.error({ token: turn.lease.token }, 'turn lease lost; aborting turn');
        if (this.clock.fence(turn.worker.slot)) this.commitAbort(turn, 'lease_lost');
      })
      .catch((err: unknown) => turn.log.warn({ err }, 'lease renewal failed; will retry'));
  }

  private stopRenewal(turn: ActiveTurn): void {
    if (turn.renewTimer) clearInterval(turn.renewTimer);
    turn.renewTimer = undefined;
  }

  private async finish(turn: ActiveTurn, outcome: TurnOutcome | undefined, err: unknown): Promise<void> {
    if (turn.finished) return;
    turn.finished = true;
    this.stopRenewal(turn);
    if (turn.graceTimer) clearTimeout(turn.graceTimer);
    this.watchdog.unwatch(turn.watched);

    const workerGone = outcome === undefined;
    if (workerGone && !turn.abort) {
      // T7: the worker died under a live turn — treat it like a committed abort.
      this.clock.fence(turn.worker.slot);
      turn.abort = { reason: 'crash', at: this.clock.nowMs() };
      this.counters.workersCrashed++;
      turn.log.error({ err }, 'session worker died mid-turn');
      void this.pool.terminate(turn.worker);
    }
    if (turn.rewrites.size > 0) {
      // L8: a rewrite already in flight completes before the abort's repair reads history.
      turn.log.info({ rewrites: turn.rewrites.size }, 'turn end waiting for history rewrite in flight');
      await Promise.allSettled([...turn.rewrites]);
    }
    const status = outcome?.status ?? (turn.abort?.reason === 'crash' ? 'failed' : 'interrupted');
    let synthesized = 0;
    if (status !== 'completed' && !mutated(Mutation.skipRepair)) {
      turn.state = 'force-abandoning';
      try {
        synthesized = await repairOpenCalls({
          store: this.store,
          workstreamId: turn.workstreamId,
          generation: turn.generation,
          fencingToken: turn.lease.token,
          why: this.describeAbort(turn, outcome),
          startedCalls: workerGone ? undefined : outcome.startedCalls,
        });
        if (synthesized > 0) {
          this.counters.toolResultsSynthesized += synthesized;
          turn.log.warn({ count: synthesized }, 'tool results synthesized');
          this.events.emit(turn.workstreamId, 'tool_results_synthesized', turn.generation, {
            count: synthesized,
          });
        }
      } catch (e) {
        // S3: the debt stays and claims are refused until a repair succeeds.
        this.cleanupPending.add(turn.workstreamId);
        turn.log.error({ err: e }, 'tool cleanup failed; workstream refuses claims until repaired');
      }
    }
    await this.store.releaseLease(turn.workstreamId, this.holder, turn.lease.token).catch((e: unknown) => {
      turn.log.warn({ err: e }, 'lease release failed; it will expire');
      return false;
    });
    this.active.delete(turn.workstreamId);
    this.bySlot.delete(turn.worker.slot);
    if (!workerGone && !turn.workerTerminated) this.pool.release(turn.worker);

    if (status === 'completed') this.counters.turnsCompleted++;
    else if (status === 'interrupted') this.counters.turnsInterrupted++;
    else this.counters.turnsFailed++;
    turn.state = 'idle';
    // C3: stream_end then idle, before any successor turn can publish.
    this.events.emit(turn.workstreamId, 'stream_end', turn.generation, { status });
    this.events.emit(turn.workstreamId, 'idle', turn.generation, {});
    const error = outcome?.error ?? (err === undefined ? undefined : toWire(err));
    const abortReason = turn.abort?.reason ?? outcome?.abortReason;
    turn.log.info(
      { status, synthesized, workerTerminated: turn.workerTerminated || workerGone },
      'turn finished',
    );
    turn.resolve({
      workstreamId: turn.workstreamId,
      generation: turn.generation,
      status,
      ...(outcome?.finalText === undefined ? {} : { finalText: outcome.finalText }),
      ...(abortReason === undefined ? {} : { abortReason }),
      ...(error === undefined ? {} : { error }),
      synthesized,
      workerTerminated: turn.workerTerminated || workerGone,
    });
  }

  private describeAbort(turn: ActiveTurn, outcome: TurnOutcome | undefined): string {
    switch (turn.abort?.reason) {
      case 'watchdog':
        return 'aborted by the liveness watchdog';
      case 'deadline':
        return 'aborted at its deadline';
      case 'cancel':
        return 'cancelled';
      case 'shutdown':
        return 'interrupted by shutdown';
      case 'lease_lost':
        return 'aborted because its lease was lost';
      case 'crash':
        return 'interrupted by a worker crash';
      default:
        return outcome?.error ? `failed (${outcome.error.code})` : 'interrupted';
    }
  }

  private async repairIdle(workstreamId: string): Promise<boolean> {
    const rows = await this.store.readHistory(workstreamId);
    if (openToolCalls(rows).length === 0) {
      this.cleanupPending.delete(workstreamId);
      return false;
    }
    const lease = await this.store.acquireLease(workstreamId, this.holder, this.config.lease.ttlMs);
    if (!lease)
      throw new TurnwardenError(
        ErrorCode.TURN_IN_PROGRESS,
        `the turn lease of ${workstreamId} is held elsewhere`,
      );
    try {
      const ws = await this.store.getWorkstream(workstreamId);
      const n = await repairOpenCalls({
        store: this.store,
        workstreamId,
        generation: ws?.generation ?? 0,
        fencingToken: lease.token,
        why: 'cancelled',
        startedCalls: undefined,
      });
      this.counters.toolResultsSynthesized += n;
      this.cleanupPending.delete(workstreamId);
      this.logger.warn({ workstreamId, count: n }, 'tool results synthesized for idle workstream');
      return true;
    } finally {
      await this.store.releaseLease(workstreamId, this.holder, lease.token).catch(() => false);
    }
  }

  // ── input checks ───────────────────────────────────────────────────────────

  private assertOpen(): void {
    if (this.closing) throw new TurnwardenError(ErrorCode.SHUTTING_DOWN, 'turnwarden is shutting down');
  }

  private checkId(value: unknown, field: string): void {
    if (typeof value !== 'string' || !ID_RE.test(value)) {
      throw invalid(`${field} must be 1–128 characters of A–Z a–z 0–9 . _ : -`, field);
    }
  }

  /** T5: refuse bad input before anything is written. */
  private checkInput(input: SendInput): void {
    if (typeof input !== 'object' || input === null) throw invalid('send input must be an object', 'input');
    for (const key of Object.keys(input)) {
      if (!['tenantId', 'workstreamId', 'content', 'principal'].includes(key))
        throw invalid(`unknown field ${key}`, key);
    }
    this.checkId(input.tenantId, 'tenantId');
    this.checkId(input.workstreamId, 'workstreamId');
    if (input.principal !== undefined) this.checkId(input.principal, 'principal');
    if (typeof input.content !== 'string' || input.content.length === 0) {
      throw invalid('content must be a non-empty string', 'content');
    }
    if (Buffer.byteLength(input.content, 'utf8') > this.config.limits.maxMessageBytes) {
      throw invalid(`content exceeds ${this.config.limits.maxMessageBytes} bytes`, 'content');
    }
    if (this.config.model === 'scripted') parseScript(input.content); // INVALID_SCRIPT, nothing written
  }

  /** T2: another tenant's workstream is simply not found. */
  private async owned(tenantId: string, workstreamId: string) {
    this.checkId(tenantId, 'tenantId');
    this.checkId(workstreamId, 'workstreamId');
    const ws = await this.store.getWorkstream(workstreamId);
    if (!ws || ws.tenantId !== tenantId) {
      throw new TurnwardenError(ErrorCode.WORKSTREAM_NOT_FOUND, `workstream ${workstreamId} not found`);
    }
    return ws;
  }
}
