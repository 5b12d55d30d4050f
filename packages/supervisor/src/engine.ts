/**
 * The turn lifecycle, on the supervisor's thread: claim → dispatch → journal gate → watchdog
 * delegate (observational and definitive stages) → abort commit and grace escalation → finish
 * (repair, lease release, worker back to the pool, `stream_end` then `idle`). The public API in
 * runtime.ts validates input and ownership, then calls in here.
 */
import { randomUUID } from 'node:crypto';
import { ActivityClock, activityName, isFenced, type MonotonicMs } from '@turnwarden/clock';
import type {
  AbortReason,
  HarnessLink,
  HistoryMessage,
  HostApi,
  JournalAck,
  JournalRequest,
  TurnOutcome,
  TurnStatus,
  UserMessage,
  WorkerEvent,
} from '@turnwarden/protocol';
import {
  ErrorCode,
  Mutation,
  mutated,
  openToolCalls,
  SeamName,
  seam,
  TurnwardenError,
  toWire,
} from '@turnwarden/protocol';
import { sessionWorkerUrl } from '@turnwarden/session';
import type { Lease, Store } from '@turnwarden/store';
import type { Logger } from 'pino';
import { AbortProtocol } from './abort-protocol.js';
import type { ActiveTurn } from './active-turn.js';
import type { SupervisorConfig } from './config.js';
import { EventHub } from './events.js';
import { WorkerPool } from './pool.js';
import { repairOpenCalls } from './repair.js';
import { describeAbort, LogMessage } from './reporting.js';
import { newCounters } from './stats.js';
import { nodeTimers, type Timers } from './timers.js';
import type { SendInput, TurnHandle, TurnResult, WorkstreamStatus } from './types.js';
import { Watchdog, type WatchdogHooks } from './watchdog.js';

export interface EngineOptions {
  readonly config: SupervisorConfig;
  readonly store: Store;
  readonly logger: Logger;
  readonly now?: MonotonicMs;
  readonly hooks?: WatchdogHooks;
  readonly harness?: HarnessLink;
  readonly timers?: Timers;
}

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

export class TurnEngine {
  readonly config: SupervisorConfig;
  readonly clock: ActivityClock;
  readonly events: EventHub;
  readonly watchdog: Watchdog;
  readonly pool: WorkerPool;
  readonly counters = newCounters();
  readonly holder = `tw-${randomUUID()}`;
  readonly store: Store;
  readonly logger: Logger;
  readonly aborts: AbortProtocol;
  readonly timers: Timers;
  private readonly active = new Map<string, ActiveTurn>();
  private readonly bySlot = new Map<number, ActiveTurn>();
  private readonly claiming = new Set<string>();
  private readonly cleanupPending = new Set<string>();

  constructor(options: EngineOptions) {
    const { config } = options;
    this.config = config;
    this.store = options.store;
    this.logger = options.logger;
    this.timers = options.timers ?? nodeTimers;
    this.clock = ActivityClock.create(config.pool.maxWorkers, options.now);
    this.events = new EventHub(this.logger);
    this.aborts = new AbortProtocol(this);
    this.watchdog = new Watchdog(this.clock, config.watchdog, this.aborts, this.logger, options.hooks);
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

  turnOnSlot(slot: number): ActiveTurn | undefined {
    return this.bySlot.get(slot);
  }

  activeTurns(): number {
    return this.active.size;
  }

  /** A turn is running or being claimed on this workstream. */
  busy(workstreamId: string): boolean {
    return this.active.has(workstreamId) || this.claiming.has(workstreamId);
  }

  /** The live part of a workstream's status. */
  liveStatus(workstreamId: string): Pick<WorkstreamStatus, 'cleanupPending' | 'activeTurn'> & {
    state?: ActiveTurn['state'];
  } {
    const cleanupPending = this.cleanupPending.has(workstreamId);
    const turn = this.active.get(workstreamId);
    if (!turn) return { cleanupPending };
    return {
      cleanupPending,
      state: turn.state,
      activeTurn: {
        generation: turn.generation,
        idleMs: Math.round(this.clock.nowMs() - turn.watched.lastChangeAt),
        lastActivity: activityName(this.clock.lastCode(turn.worker.slot)),
        ...(turn.abort ? { abortReason: turn.abort.reason } : {}),
      },
    };
  }

  // ── claim and dispatch ─────────────────────────────────────────────────────

  /** Claims a turn (input and ownership already checked) and dispatches it. */
  async claim(input: SendInput): Promise<TurnHandle> {
    const { workstreamId, tenantId } = input;
    if (this.busy(workstreamId)) {
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
    let history: HistoryMessage[];
    let userMessage: UserMessage;
    try {
      const worker = await this.pool.acquire();
      try {
        const lease = await this.acquireLease(workstreamId);
        try {
          const generation = await this.store.nextGeneration(workstreamId);
          let rows = await this.store.readHistory(workstreamId);
          if (openToolCalls(rows).length > 0) {
            // Debt left by a crashed process is repaired before any new turn (S7).
            const leftover = await repairOpenCalls({
              store: this.store,
              workstreamId,
              generation,
              fencingToken: lease.token,
              why: 'interrupted by a crash',
              startedCalls: undefined,
            });
            this.counters.toolResultsSynthesized += leftover;
            this.logger.warn({ workstreamId, count: leftover }, 'repaired dangling tool calls before claim');
            rows = await this.store.readHistory(workstreamId);
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
          history = [...rows.map((r) => r.message), userMessage];
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
          history,
          input: userMessage,
          model: this.config.model,
          limits: {
            maxModelSteps: this.config.limits.maxModelSteps,
            maxToolArgBytes: this.config.limits.maxToolArgBytes,
          },
        }),
      )
      .then(
        // Every event the worker posted before returning is delivered before the turn ends.
        (outcome) =>
          turn.worker.caughtUp(outcome.eventsPosted).then(() => this.finish(turn, outcome, undefined)),
        (err: unknown) => this.finish(turn, undefined, err),
      )
      .catch((err: unknown) => {
        // Never leave `done` (and so shutdown) hanging on an unexpected failure while finishing.
        turn.log.error({ err }, 'turn finish failed');
        if (this.active.get(workstreamId) === turn) this.active.delete(workstreamId);
        if (this.bySlot.get(turn.worker.slot) === turn) this.bySlot.delete(turn.worker.slot);
        turn.resolve({
          workstreamId,
          generation: turn.generation,
          status: 'failed',
          error: toWire(err),
          synthesized: 0,
          workerTerminated: turn.workerTerminated,
        });
      });
    return { workstreamId, generation: turn.generation, done: turn.done };
  }

  /**
   * Force cancel of a running turn: the abort commits unconditionally, results are synthesized
   * before the slot is released; resolves once the workstream is idle. Without a running turn:
   * repairs unrepaired debt (true) or is a silent no-op (false).
   */
  async cancel(workstreamId: string): Promise<boolean> {
    const turn = this.active.get(workstreamId);
    if (turn) {
      this.aborts.abort(turn, 'cancel');
      await turn.done;
      return true;
    }
    return this.repairIdle(workstreamId);
  }

  /** Aborts every running turn (shutdown) and resolves once all are idle. */
  async abortAll(reason: AbortReason): Promise<void> {
    const turns = [...this.active.values()];
    for (const turn of turns) this.aborts.abort(turn, reason);
    await Promise.all(turns.map((t) => t.done));
  }

  /** Escalates every committed abort now instead of after `graceMs` (harness schedules). */
  expireGraceTimers(): number {
    return this.aborts.expireGraceTimers(this.active.values());
  }

  /** See `Turnwarden.compact`. */
  async compact(
    workstreamId: string,
    throughSeq: number,
    summary: { commitKey: string; message: { role: 'system'; content: string } },
  ): Promise<{ removed: number }> {
    const turn = this.active.get(workstreamId);
    if (turn) {
      if (turn.abort && !mutated(Mutation.rewriteIgnoresAbort)) {
        throw new TurnwardenError(
          ErrorCode.FENCED,
          `history rewrite of ${workstreamId} revoked: the turn's abort (${turn.abort.reason}) has committed`,
        );
      }
      // Admitted: from here the rewrite is in flight and the turn's end waits for it.
      const held = seam(SeamName.rewriteAdmitToWrite, { workstreamId, generation: turn.generation });
      const write = () =>
        this.store.compactHistory({
          workstreamId,
          generation: turn.generation,
          fencingToken: turn.lease.token,
          throughSeq,
          summary,
        });
      const rewrite = held === undefined ? write() : held.then(write);
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
    return this.withIdleLease(workstreamId, (lease, generation) =>
      this.store.compactHistory({ workstreamId, generation, fencingToken: lease.token, throughSeq, summary }),
    );
  }

  private async acquireLease(workstreamId: string): Promise<Lease> {
    const lease = await this.store.acquireLease(workstreamId, this.holder, this.config.lease.ttlMs);
    if (!lease) {
      throw new TurnwardenError(
        ErrorCode.TURN_IN_PROGRESS,
        `the turn lease of ${workstreamId} is held elsewhere`,
      );
    }
    return lease;
  }

  /** Runs maintenance on an idle workstream under a lease of its own (P6), then releases it. */
  private async withIdleLease<T>(
    workstreamId: string,
    fn: (lease: Lease, generation: number) => Promise<T>,
  ): Promise<T> {
    const lease = await this.acquireLease(workstreamId);
    try {
      const ws = await this.store.getWorkstream(workstreamId);
      return await fn(lease, ws?.generation ?? 0);
    } finally {
      await this.store.releaseLease(workstreamId, this.holder, lease.token).catch(() => false);
    }
  }

  // ── worker-facing ──────────────────────────────────────────────────────────

  /**
   * The only path by which a turn's rows become durable. Refuses rows from a turn whose
   * abort has committed (L3: nothing a dead turn had in flight reaches history) — the check
   * and the store write run in one synchronous step on this thread, which is also the only
   * thread that commits aborts, so no commit can fall between them.
   */
  private journal(req: JournalRequest): Promise<JournalAck> {
    const { eventsPosted, ...append } = req;
    const turn = this.active.get(req.workstreamId);
    // The turn's earlier events (tokens) reach listeners before the row they make up.
    const caught =
      turn && eventsPosted !== undefined ? turn.worker.caughtUp(eventsPosted) : Promise.resolve();
    return caught.then(() => {
      const held = seam(SeamName.journalAdmit, {
        workstreamId: req.workstreamId,
        generation: req.generation,
      });
      if (held === undefined) return this.admit(append);
      return held.then(async (fault) => {
        const ack = await this.admit(append);
        if (fault?.kind === 'lose-ack') {
          // Injected: the rows are durable, the worker never hears so (S6, P1 retries).
          throw new TurnwardenError(ErrorCode.STORE_ERROR, 'journal acknowledgement lost', {
            details: { injected: true },
          });
        }
        return ack;
      });
    });
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
      stopRenewal: undefined,
      cancelGrace: undefined,
      workerTerminated: false,
      finished: false,
      resolve,
      done: promise,
    };
    this.active.set(workstreamId, turn);
    this.bySlot.set(worker.slot, turn);
    worker.onEvent = (event) => this.onWorkerEvent(turn, event);
    this.counters.turnsStarted++;
    this.aborts.startRenewal(turn);
    return turn;
  }

  private async finish(turn: ActiveTurn, outcome: TurnOutcome | undefined, err: unknown): Promise<void> {
    if (turn.finished) return;
    turn.finished = true;
    this.aborts.stopRenewal(turn);
    turn.cancelGrace?.();
    this.watchdog.unwatch(turn.watched);

    const workerGone = outcome === undefined;
    if (workerGone && !turn.abort) {
      // T7: the worker died under a live turn — treat it like a committed abort.
      this.clock.fence(turn.worker.slot);
      turn.abort = { reason: 'crash', at: this.clock.nowMs() };
      this.counters.workersCrashed++;
      turn.log.error({ err }, LogMessage.workerDied);
      void this.pool.terminate(turn.worker);
    }
    if (turn.rewrites.size > 0 && !mutated(Mutation.abortTearsRewrite)) {
      // L8: a rewrite already in flight completes before the abort's repair reads history.
      turn.log.info({ rewrites: turn.rewrites.size }, 'turn end waiting for history rewrite in flight');
      await Promise.allSettled([...turn.rewrites]);
    }
    // A committed abort decides the status unless the turn completed first; a crash is a failure.
    const status: TurnStatus =
      outcome?.status === 'completed'
        ? 'completed'
        : turn.abort?.reason === 'crash'
          ? 'failed'
          : turn.abort
            ? 'interrupted'
            : (outcome?.status ?? 'failed');
    let synthesized = 0;
    if (status !== 'completed' && !mutated(Mutation.skipRepair)) {
      turn.state = 'force-abandoning';
      try {
        synthesized = await repairOpenCalls({
          store: this.store,
          workstreamId: turn.workstreamId,
          generation: turn.generation,
          fencingToken: turn.lease.token,
          why: describeAbort(turn.abort?.reason, outcome),
          startedCalls: workerGone ? undefined : outcome.startedCalls,
        });
        if (synthesized > 0) {
          this.counters.toolResultsSynthesized += synthesized;
          turn.log.warn({ count: synthesized }, LogMessage.synthesized);
          this.events.emit(turn.workstreamId, 'tool_results_synthesized', turn.generation, {
            count: synthesized,
          });
        }
      } catch (e) {
        // S3: the debt stays and claims are refused until a repair succeeds.
        this.cleanupPending.add(turn.workstreamId);
        turn.log.error({ err: e }, LogMessage.cleanupFailed);
      }
    }
    await this.store.releaseLease(turn.workstreamId, this.holder, turn.lease.token).catch((e: unknown) => {
      turn.log.warn({ err: e }, 'lease release failed; it will expire');
      return false;
    });
    this.active.delete(turn.workstreamId);
    this.bySlot.delete(turn.worker.slot);
    if (!workerGone && !turn.workerTerminated) {
      // Only a worker whose turn completed goes back to the pool; one that was aborted or failed
      // may hold leaked work and is retired (replaced in the background).
      if (status === 'completed') this.pool.release(turn.worker);
      else this.pool.retire(turn.worker);
    }

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

  private async repairIdle(workstreamId: string): Promise<boolean> {
    const rows = await this.store.readHistory(workstreamId);
    if (openToolCalls(rows).length === 0) {
      this.cleanupPending.delete(workstreamId);
      return false;
    }
    const n = await this.withIdleLease(workstreamId, (lease, generation) =>
      repairOpenCalls({
        store: this.store,
        workstreamId,
        generation,
        fencingToken: lease.token,
        why: 'cancelled',
        startedCalls: undefined,
      }),
    );
    this.counters.toolResultsSynthesized += n;
    this.cleanupPending.delete(workstreamId);
    this.logger.warn({ workstreamId, count: n }, 'tool results synthesized for idle workstream');
    return true;
  }
}
