/**
 * The turn engine's composition: it owns the parts — the activity clock, the watchdog and the
 * abort protocol, the worker pool, the session actors, the journal gate — and wires them
 * together through the narrow host interfaces each part declares. The work itself lives in
 * the parts: claim.ts (claim and dispatch), journal-gate.ts, worker-events.ts, settle.ts (a
 * turn's end), abandon.ts (force-abandoning and repair), maintenance.ts (sessions without a
 * running turn). The public API (runtime.ts) checks input and tenancy, then calls in here.
 */
import { ActivityClock, activityName, isFenced, type MonotonicMs } from '@turnwarden/clock';
import type {
  AbortReason,
  HarnessLink,
  HostApi,
  SessionSnapshotData,
  TurnOutcome,
} from '@turnwarden/protocol';
import { ErrorCode, TurnwardenError, toWire } from '@turnwarden/protocol';
import { sessionWorkerUrl, stateOf } from '@turnwarden/session';
import type { Store } from '@turnwarden/store';
import type { Logger } from 'pino';
import { AbortProtocol } from './abort-protocol.js';
import type { ActiveTurn } from './active-turn.js';
import { type ClaimInput, claim, newHolder } from './claim.js';
import type { SupervisorConfig } from './config.js';
import { EventHub } from './events.js';
import { JournalGate } from './journal-gate.js';
import { closeSession, compactIdle, leftover, repairLeftover } from './maintenance.js';
import { WorkerPool } from './pool.js';
import { Recovery } from './recovery.js';
import { compactLive } from './rewrite.js';
import { type SessionRecord, Sessions } from './sessions.js';
import { settle } from './settle.js';
import { newCounters } from './stats.js';
import { nodeTimers, type Timers } from './timers.js';
import type { ClaimedTurn, WorkstreamStatus } from './types.js';
import { Watchdog, type WatchdogHooks } from './watchdog.js';
import { onWorkerEvent } from './worker-events.js';

export interface EngineOptions {
  readonly config: SupervisorConfig;
  readonly store: Store;
  readonly logger: Logger;
  readonly now?: MonotonicMs;
  readonly hooks?: WatchdogHooks;
  readonly harness?: HarnessLink;
  readonly timers?: Timers;
}

export class TurnEngine {
  readonly config: SupervisorConfig;
  readonly clock: ActivityClock;
  readonly events: EventHub;
  readonly watchdog: Watchdog;
  readonly pool: WorkerPool;
  readonly counters = newCounters();
  readonly holder: string;
  /** `<hostId>:` — leases an earlier process of this host left are taken over at once (S7). */
  readonly predecessors: string | undefined;
  readonly store: Store;
  readonly logger: Logger;
  readonly timers: Timers;
  readonly aborts: AbortProtocol;
  readonly sessions: Sessions;
  readonly gate: JournalGate;
  readonly leaseTtlMs: number;
  readonly recovery: Recovery;
  /** Shutdown began: claims still queued are refused. */
  closing = false;
  private readonly bySlot = new Map<number, ActiveTurn>();
  private cancelSweep: (() => void) | undefined;
  /** Workstreams whose soft close waits on their running turn (C1). */
  private readonly closeLatches = new Set<string>();

  constructor(options: EngineOptions) {
    const { config } = options;
    this.config = config;
    this.holder = newHolder(config.hostId);
    this.predecessors = config.hostId === undefined ? undefined : `${config.hostId}:`;
    this.store = options.store;
    this.logger = options.logger;
    this.timers = options.timers ?? nodeTimers;
    this.leaseTtlMs = config.lease.ttlMs;
    this.clock = ActivityClock.create(config.pool.maxWorkers, options.now);
    this.events = new EventHub(this.logger);
    this.sessions = new Sessions(this.store, this.events, this.logger);
    this.gate = new JournalGate(this);
    this.aborts = new AbortProtocol(this);
    this.recovery = new Recovery(this);
    this.watchdog = new Watchdog(this.clock, config.watchdog, this.aborts, this.logger, options.hooks);
    const host: HostApi = { journal: (req) => this.gate.journal(req, (turn, n) => turn.worker.caughtUp(n)) };
    this.pool = new WorkerPool({
      clock: this.clock.buffer,
      maxWorkers: config.pool.maxWorkers,
      warmWorkers: config.pool.warmWorkers,
      startTimeoutMs: config.pool.startTimeoutMs,
      acquireTimeoutMs: config.pool.acquireTimeoutMs,
      maxConcurrentSpawns: config.pool.maxConcurrentSpawns,
      workerNice: config.pool.workerNice,
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

  // ── the public operations (runtime.ts) ────────────────────────────────────

  /** Claims a turn and dispatches it (input and ownership already checked). */
  async claim(input: ClaimInput): Promise<ClaimedTurn> {
    const rec = this.sessions.record(input.workstreamId);
    try {
      return await claim(this, rec, input);
    } finally {
      this.sessions.release(rec);
    }
  }

  /**
   * Force cancel. A running turn: the abort commits unconditionally, results are synthesized
   * before the slot is released; resolves once the session is idle. Without one: debt is
   * repaired (true), or it is a silent no-op (false).
   */
  async cancel(workstreamId: string): Promise<boolean> {
    const running = this.sessions.peek(workstreamId)?.turn;
    if (running) {
      this.aborts.abort(running, 'cancel');
      // C6: a history rewrite in flight cannot be abandoned and the turn's end waits for it (L8);
      // the cancel does not. It returns once the abort is committed and signalled; the turn
      // finishes — results synthesized, stream_end, idle — when the rewrite is done.
      if (running.rewrites.size > 0) {
        this.logger.info(
          { workstreamId, rewrites: running.rewrites.size },
          'cancel returns before a history rewrite in flight; the turn ends after it',
        );
        return true;
      }
      await running.done;
      return true;
    }
    return this.idle(workstreamId, async (rec) => {
      if (rec.turn) {
        this.aborts.abort(rec.turn, 'cancel');
        return true;
      }
      const rows = rec.state === 'idle' ? await this.store.readHistory(workstreamId) : undefined;
      if (!leftover(rec, rows)) return false;
      await repairLeftover(this, rec, 'cancelled');
      return true;
    });
  }

  /** Force-cancels one turn, by generation: a later turn on the workstream is left alone. */
  cancelTurn(workstreamId: string, generation: number): void {
    const running = this.sessions.peek(workstreamId)?.turn;
    if (running && running.generation === generation) this.aborts.abort(running, 'cancel');
  }

  /**
   * Closes a session: the machine's CLOSE; listeners receive `ws_closed` and are removed. With a
   * running turn it refuses at once (`waitMs` 0) or, soft, latches the workstream — no new turn
   * is admitted — and waits up to `waitMs` for the turn to end (its tools finished or repaired),
   * then closes a structurally complete history (C1). On timeout the latch is rolled back, the
   * turn keeps running and the workstream stays usable; a force cancel repairs it (C2).
   */
  async close(workstreamId: string, waitMs = 0): Promise<void> {
    const running = this.sessions.peek(workstreamId)?.turn;
    if (running === undefined || waitMs === 0) {
      await this.idle(workstreamId, (rec) => closeSession(this, rec));
    } else {
      if (this.closeLatches.has(workstreamId)) {
        throw new TurnwardenError(
          ErrorCode.TURN_IN_PROGRESS,
          `a close of ${workstreamId} is already waiting`,
        );
      }
      this.closeLatches.add(workstreamId);
      try {
        let cancelTimer = () => {};
        const timedOut = new Promise<true>((resolve) => {
          cancelTimer = this.timers.after(waitMs, () => resolve(true));
        });
        const ended = await Promise.race([running.done.then(() => false as const), timedOut]);
        cancelTimer();
        if (ended !== false) {
          this.logger.warn({ workstreamId, waitMs }, 'soft close timed out; the turn keeps running');
          throw new TurnwardenError(
            ErrorCode.TIMEOUT,
            `soft close of ${workstreamId} timed out after ${waitMs} ms: its turn is still running (cancel() forces it)`,
            { details: { waitMs } },
          );
        }
        await this.idle(workstreamId, (rec) => closeSession(this, rec));
      } finally {
        this.closeLatches.delete(workstreamId);
      }
    }
    this.events.closeWorkstream(workstreamId, { reason: 'closed' });
  }

  closeLatched(workstreamId: string): boolean {
    return this.closeLatches.has(workstreamId);
  }

  /** See `Turnwarden.compact`. */
  async compact(
    workstreamId: string,
    throughSeq: number,
    summary: { commitKey: string; message: { role: 'system'; content: string } },
  ): Promise<{ removed: number }> {
    const running = this.sessions.peek(workstreamId)?.turn;
    if (running) return compactLive(this, running, throughSeq, summary);
    return this.idle(workstreamId, (rec) =>
      rec.turn
        ? compactLive(this, rec.turn, throughSeq, summary)
        : compactIdle(this, rec, { workstreamId, throughSeq, summary }),
    );
  }

  /** The live part of a session's status; `durable` is the stored snapshot of a passive one. */
  status(
    workstreamId: string,
    durable: SessionSnapshotData | undefined,
  ): Pick<WorkstreamStatus, 'state' | 'cleanupPending' | 'persistence' | 'activeTurn'> {
    const rec = this.sessions.peek(workstreamId);
    const snapshot = rec?.snapshot ?? durable;
    const state = snapshot === undefined ? 'idle' : stateOf(snapshot);
    const turn = rec?.turn;
    const cleanupPending = turn === undefined && state !== 'idle' && state !== 'closed';
    const persistence = this.gate.status(workstreamId);
    if (!turn) return { state, cleanupPending, persistence };
    return {
      state,
      cleanupPending,
      persistence,
      activeTurn: {
        generation: turn.generation,
        idleMs: Math.round(this.clock.nowMs() - turn.watched.lastChangeAt),
        lastActivity: activityName(this.clock.lastCode(turn.worker.slot)),
        ...(turn.abort ? { abortReason: turn.abort.reason } : {}),
      },
    };
  }

  activeTurns(): number {
    return this.bySlot.size;
  }

  /** Aborts every running turn and lets every queued command (claims included) settle. */
  async abortAll(reason: AbortReason): Promise<void> {
    for (;;) {
      const records = this.sessions.all();
      const turns = records.flatMap((r) => (r.turn ? [r.turn] : []));
      for (const turn of turns) this.aborts.abort(turn, reason);
      await Promise.all([...turns.map((t) => t.done), ...records.map((r) => r.run(async () => {}))]);
      if (!this.sessions.all().some((r) => r.turn !== undefined)) return;
    }
  }

  /**
   * S7: sessions a crashed process left mid-turn or unrepaired are repaired at start, each under
   * a lease of its own; one whose lease another holder still holds is left for its next claim.
   */
  /** P4: the journal's maintenance sweep, every `journal.sweepMs` while the runtime runs. */
  startSweep(): void {
    this.stopSweep();
    this.cancelSweep = this.timers.every(this.config.journal.sweepMs, () => {
      const woken = this.gate.sweep();
      if (woken.length > 0) this.logger.info({ workstreams: woken }, 'journal sweep retried writes now');
    });
  }

  stopSweep(): void {
    this.cancelSweep?.();
    this.cancelSweep = undefined;
  }

  /** S7 at start: see recovery.ts. */
  recoverLeftovers(): Promise<number> {
    return this.recovery.atStart();
  }

  /** A session without a running turn that holds debt is repaired (recovery's host). */
  repairIfLeft(workstreamId: string): Promise<boolean> {
    return this.idle(workstreamId, async (rec) => {
      if (rec.turn !== undefined || !leftover(rec, undefined)) return false;
      await repairLeftover(this, rec, 'interrupted by a crash');
      return true;
    });
  }

  // ── hosts of the parts ─────────────────────────────────────────────────────

  turnOnSlot(slot: number): ActiveTurn | undefined {
    return this.bySlot.get(slot);
  }

  turnOf(workstreamId: string): ActiveTurn | undefined {
    return this.sessions.peek(workstreamId)?.turn;
  }

  fenced(turn: ActiveTurn): boolean {
    return isFenced(this.clock.sample(turn.worker.slot));
  }

  refused(): void {
    this.counters.journalRefusedFenced++;
  }

  attach(turn: ActiveTurn): void {
    const rec = this.sessions.peek(turn.workstreamId)!;
    this.bySlot.set(turn.worker.slot, turn);
    turn.worker.onEvent = (event) => onWorkerEvent(this, rec, turn, event);
  }

  detach(turn: ActiveTurn): void {
    if (this.bySlot.get(turn.worker.slot) === turn) this.bySlot.delete(turn.worker.slot);
  }

  startRenewal(turn: ActiveTurn): void {
    this.aborts.startRenewal(turn);
  }

  stopRenewal(turn: ActiveTurn): void {
    this.aborts.stopRenewal(turn);
  }

  abandoning(turn: ActiveTurn, reason: AbortReason): void {
    const rec = this.sessions.peek(turn.workstreamId);
    if (rec?.turn === turn) this.sessions.apply(rec, { type: 'ABORT', reason }, turn.generation);
  }

  settleLater(rec: SessionRecord, turn: ActiveTurn, outcome: TurnOutcome | undefined, err: unknown): void {
    // In the session's mailbox, on a loop turn of its own: an abort storm's turn ends do not
    // block the watchdog's timer (L12).
    rec
      .run(() => settle(this, rec, turn, outcome, err))
      .catch((e: unknown) => {
        // Never leave `done` (and so shutdown) hanging on an unexpected failure while finishing.
        turn.log.error({ err: e }, 'turn finish failed');
        this.detach(turn);
        if (rec.turn === turn) rec.turn = undefined;
        turn.resolve({
          workstreamId: turn.workstreamId,
          generation: turn.generation,
          status: 'failed',
          error: toWire(e),
          synthesized: 0,
          workerTerminated: turn.workerTerminated,
        });
      })
      .finally(() => this.sessions.release(rec));
  }

  // ── internals ──────────────────────────────────────────────────────────────

  /** Runs a command in the session's mailbox, on its loaded machine; passivates it afterwards. */
  private async idle<T>(workstreamId: string, command: (rec: SessionRecord) => Promise<T>): Promise<T> {
    const rec = this.sessions.record(workstreamId);
    try {
      return await rec.run(async () => {
        await this.sessions.load(rec);
        return command(rec);
      });
    } finally {
      this.sessions.release(rec);
    }
  }
}
