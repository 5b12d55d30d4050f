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
import { errors, SeamName, seam, toWire } from '@turnwarden/protocol';
import { sessionWorkerUrl, stateOf } from '@turnwarden/session';
import type { Store } from '@turnwarden/store';
import type { Logger } from 'pino';
import { AbortProtocol } from './abort-protocol.js';
import type { ActiveTurn } from './active-turn.js';
import { Admission, type Permit } from './admission.js';
import {
  type Admitted,
  admissionRefusal,
  admit,
  type ClaimInput,
  claimable,
  newHolder,
  start,
} from './claim.js';
import { Cluster, channelOf, type RoutedOp } from './cluster.js';
import type { SupervisorConfig } from './config.js';
import { EventHub } from './events.js';
import { HostTools } from './host-tools.js';
import { IsolatedPool } from './isolation.js';
import { JournalGate } from './journal-gate.js';
import { LifecycleFeed } from './lifecycle-feed.js';
import { closeSession, compactIdle, leftover, repairLeftover, rewindIdle } from './maintenance.js';
import { WorkerPool } from './pool.js';
import { Recovery } from './recovery.js';
import { compactLive } from './rewrite.js';
import { type Announced, type SendClaim, SendQueue } from './send-queue.js';
import { claimRefusal, type SessionRecord, Sessions } from './sessions.js';
import { settle } from './settle.js';
import { newCounters } from './stats.js';
import { nodeTimers, type Timers } from './timers.js';
import type { ClaimedTurn, RewindResult, WorkstreamStatus } from './types.js';
import { variant } from './variants.js';
import { Watchdog, type WatchdogHooks } from './watchdog.js';
import { onWorkerEvent } from './worker-events.js';

export interface EngineOptions {
  readonly config: SupervisorConfig;
  readonly store: Store;
  readonly logger: Logger;
  /** The clock, the host tools and the worker pool, started before the store was opened. */
  readonly prelude: Prelude;
  readonly hooks?: WatchdogHooks;
  readonly timers?: Timers;
}

/**
 * What a start brings up before it opens the store: the activity clock, the host tools and the
 * worker pool (whose first worker reports what the plugins provide). Whatever they refuse — a
 * model no plugin provides, a plugin module the workers refuse or cannot import, workers that
 * exit or never become ready, a host tool module that fails to import — refuses the start
 * before a database file, a schema or a connection exists. The engine then built on the store
 * takes the parts over (`bind`); until then no turn can run, so nothing calls into it.
 */
export class Prelude {
  readonly clock: ActivityClock;
  readonly hostTools: HostTools;
  readonly pool: WorkerPool;
  private engine: TurnEngine | undefined;

  constructor(
    config: SupervisorConfig,
    logger: Logger,
    options: { readonly now?: MonotonicMs; readonly harness?: HarnessLink } = {},
  ) {
    this.clock = ActivityClock.create(config.pool.maxWorkers, options.now);
    this.hostTools = new HostTools({
      turnOf: (workstreamId) => this.engine?.sessions.peek(workstreamId)?.turn,
      clock: this.clock.buffer,
      logger,
    });
    const host: HostApi = {
      journal: (req) => this.bound().gate.journal(req, (turn, n) => turn.worker.caughtUp(n)),
      runIsolated: (req) => this.bound().isolation.run(req),
      cancelIsolated: async (workstreamId, taskId) => this.bound().isolation.cancel(workstreamId, taskId),
      callHostTool: (req) => this.hostTools.call(req),
      cancelHostTool: async (workstreamId, taskId) => this.hostTools.cancel(workstreamId, taskId),
    };
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
      hostTools: () => this.hostTools.specs(),
      host,
      logger,
      ...(options.harness ? { harness: options.harness } : {}),
      ...(config.pool.maxOldGenerationSizeMb === undefined
        ? {}
        : { maxOldGenerationSizeMb: config.pool.maxOldGenerationSizeMb }),
    });
  }

  /**
   * Host tools first (the workers offer them from their first spawn), then the warm workers.
   * When it throws nothing is left running: the pool closed itself, the host tools are closed.
   */
  async start(hostToolModules: readonly string[]): Promise<void> {
    try {
      await this.hostTools.load(hostToolModules);
      await this.pool.start();
    } catch (e) {
      await this.hostTools.close();
      throw e;
    }
  }

  /** The models the workers' plugins provide (known once a worker has started). */
  models(): readonly string[] {
    return this.pool.catalogue?.models ?? [];
  }

  /** Stops what `start` started: a start refused before the engine was built. */
  async close(): Promise<void> {
    await this.pool.close();
    await this.hostTools.close();
  }

  bind(engine: TurnEngine): void {
    this.engine = engine;
  }

  private bound(): TurnEngine {
    if (this.engine === undefined) {
      throw errors.internal('a worker called the host before the runtime started');
    }
    return this.engine;
  }
}

export class TurnEngine {
  readonly config: SupervisorConfig;
  readonly clock: ActivityClock;
  readonly events: EventHub;
  /** Tenants' workstream lifecycle feeds (D5). */
  readonly lifecycle: LifecycleFeed;
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
  /** Claims, fences and the sends waiting behind running turns (C7). */
  readonly sends: SendQueue;
  /** Permits for turns, per host and per tenant, and the fair queue for them (T4). */
  readonly admission: Admission;
  /** The shared thread pool of thread-isolated tools. */
  readonly isolation: IsolatedPool;
  /** Tools that run on this thread (`hostToolModules`), offered to every worker. */
  readonly hostTools: HostTools;
  /** Shutdown began: claims still queued are refused. */
  closing = false;
  /** Several hosts on one store (cluster.ts): on when the store has a channel and the host an id. */
  readonly cluster: Cluster | undefined;
  get clustered(): boolean {
    return this.cluster !== undefined;
  }
  private readonly bySlot = new Map<number, ActiveTurn>();
  private cancelSweep: (() => void) | undefined;
  /**
   * Workstreams whose soft closes wait on their running turn (C1): latched while any of them
   * waits; the first to find the turn ended closes, the others join its close.
   */
  private readonly closeLatches = new Map<string, { waiting: number; closed: boolean }>();
  /**
   * D2: deletes under way or left ambiguous — hidden (not listed, gettable or openable), their
   * id not re-creatable, their journal never replayed (D4) — until retired on proof (D3).
   */
  private readonly tombstones = new Map<
    string,
    { readonly tenantId: string; readonly incarnation: string }
  >();

  constructor(options: EngineOptions) {
    const { config } = options;
    this.config = config;
    this.holder = newHolder(config.hostId);
    this.predecessors = config.hostId === undefined ? undefined : `${config.hostId}:`;
    this.store = options.store;
    this.logger = options.logger;
    this.timers = options.timers ?? nodeTimers;
    this.leaseTtlMs = config.lease.ttlMs;
    const { prelude } = options;
    this.clock = prelude.clock;
    this.hostTools = prelude.hostTools;
    this.pool = prelude.pool;
    // The parts with a harness variant are built through `variant` (variants.ts).
    this.events = new (variant(EventHub))(this.logger, config.events);
    this.lifecycle = new LifecycleFeed(this.logger);
    this.sessions = new Sessions(this.store, this.events, this.logger);
    this.gate = new (variant(JournalGate))(this);
    this.aborts = new (variant(AbortProtocol))(this);
    this.recovery = new Recovery(this);
    this.sends = new (variant(SendQueue))(config.limits.maxQueuedSends, () =>
      this.admission.oneTurnRetryAfterMs(),
    );
    this.admission = new Admission(
      { maxActive: config.pool.maxWorkers, ...config.admission },
      this.timers,
      () => performance.now(),
      (tenantId, waitedMs) =>
        this.logger.debug(
          { tenantId, waitedMs: Math.round(waitedMs) },
          'send admitted after waiting for a worker',
        ),
    );
    this.watchdog = new (variant(Watchdog))(
      this.clock,
      config.watchdog,
      this.aborts,
      this.logger,
      options.hooks,
    );
    this.isolation = new IsolatedPool(config.isolation, {
      turnOf: (workstreamId) => this.sessions.peek(workstreamId)?.turn,
      clock: this.clock.buffer,
      logger: this.logger,
    });
    const channel = channelOf(this.store);
    this.cluster =
      channel === undefined || config.hostId === undefined
        ? undefined
        : new Cluster(
            {
              store: this.store,
              holder: this.holder,
              hostId: config.hostId,
              predecessors: this.predecessors,
              events: this.events,
              timers: this.timers,
              logger: this.logger,
              lease: config.lease,
              runsHere: (workstreamId) => this.sessions.peek(workstreamId)?.turn !== undefined,
              runLocally: (workstreamId, op) => this.runRouted(workstreamId, op),
              repairIfLeft: (workstreamId) => this.repairIfLeft(workstreamId),
            },
            channel,
          );
    prelude.bind(this);
  }

  // ── the public operations (runtime.ts) ────────────────────────────────────

  /**
   * A send (input and ownership already checked; its claim captured when the host called).
   * With no turn running and none waiting, the turn is claimed and dispatched now — once it holds
   * a permit (T4): when none is free for its tenant it waits for one in the fair admission queue,
   * out of the session's mailbox, then tries again. While a turn runs, the send waits in the
   * workstream's queue instead (QUEUE_FULL when full) and its turn is claimed when the turns
   * before it have ended. Either way the claim is revalidated in the session's mailbox, where it
   * would enqueue or start: one captured before a fence is revoked (C7), waiting or not.
   */
  async send(
    claim: SendClaim,
    input: ClaimInput,
    signal: AbortSignal | undefined,
    maxWaitMs: number = this.config.admission.maxWaitMs,
  ): Promise<ClaimedTurn> {
    const { workstreamId, tenantId } = input;
    let permit: Permit | undefined;
    try {
      const held = seam(SeamName.sendCaptureToEnqueue, { workstreamId });
      if (held !== undefined) await held;
      for (;;) {
        // Taken anew each time: a record left passive while the send waited was let go.
        const rec = this.sessions.record(workstreamId);
        type Step =
          | { readonly queued: Promise<ClaimedTurn> }
          | { readonly admitted: Admitted }
          | { readonly wait: true };
        let step: Step;
        try {
          step = await rec.run(async (): Promise<Step> => {
            this.sends.check(claim);
            const busy = rec.turn !== undefined || this.sends.depth(workstreamId) > 0;
            // T3: only the running turn's own principal queues behind it; another's message is an
            // interjection, refused (TURN_IN_PROGRESS) — as is any send while queueing is off.
            const own = rec.turn === undefined || rec.turn.principal === input.principal;
            if (busy && own && this.config.limits.maxQueuedSends > 0) {
              const refused = admissionRefusal(this, workstreamId);
              if (refused) throw refused;
              // A turn started while this send waited for a permit: it queues, the permit goes back.
              permit?.release();
              permit = undefined;
              const queued = this.sends.enqueue(claim, input, signal);
              this.logger.debug(
                { workstreamId, depth: this.sends.depth(workstreamId) },
                'send queued behind the running turn',
              );
              return { queued };
            }
            // T3, or queueing off: a turn runs (or is still settling, its machine perhaps idle).
            if (rec.turn !== undefined) throw claimRefusal(workstreamId, rec.state ?? 'streaming', true);
            if (!busy) {
              // Refusals first (closing, closed, debt): a send that cannot claim never waits.
              await claimable(this, rec, workstreamId);
              permit ??= this.admission.tryAcquire(tenantId);
              if (permit === undefined) return { wait: true };
            }
            if (permit === undefined) {
              throw errors.internal(`a claim on ${workstreamId} reached admission without a permit`);
            }
            return { admitted: await admit(this, rec, input, permit) };
          });
        } finally {
          this.sessions.release(rec);
        }
        if ('wait' in step) {
          permit = await this.waitForPermit(claim, tenantId, signal, maxWaitMs);
          continue;
        }
        if ('queued' in step) return await step.queued;
        permit = undefined; // the turn holds it now; its end releases it
        return start(this, rec, step.admitted, claim, input.tools);
      }
    } catch (e) {
      permit?.release();
      throw e;
    } finally {
      this.sends.settled(claim);
    }
  }

  /** T4: waits in the fair admission queue; a fence revokes the wait as it would a queued send (C7). */
  private async waitForPermit(
    claim: SendClaim,
    tenantId: string,
    signal: AbortSignal | undefined,
    maxWaitMs: number,
  ): Promise<Permit> {
    const { workstreamId } = claim;
    this.logger.debug(
      { workstreamId, tenantId, ...this.admission.stats() },
      'send waits for a session worker',
    );
    return this.admission.acquire(tenantId, {
      signal,
      maxWaitMs,
      revocable: (revoke) => this.sends.park(claim, revoke),
    });
  }

  /**
   * The next waiting send of a workstream whose turn has ended: given a permit (T4), then
   * revalidated and claimed in the session's mailbox. A refused one is answered with its refusal
   * and the next one tried.
   */
  private pump(workstreamId: string): void {
    const head = this.sends.peek(workstreamId);
    if (head === undefined) return;
    const { tenantId } = head.input;
    // Its sends were accepted into the workstream's queue already: the wait is not capped again.
    this.admission.acquire(tenantId, { maxWaitMs: this.config.admission.maxWaitMs, accepted: true }).then(
      (permit) => this.pumpWith(workstreamId, permit),
      (err: unknown) => {
        // No permit for it (the queue full, the wait run out, shutdown): the head send is answered.
        const waiting = this.sends.shift(workstreamId);
        waiting?.reject(err);
        if (waiting !== undefined) this.pump(workstreamId);
      },
    );
  }

  private pumpWith(workstreamId: string, permit: Permit): void {
    const rec = this.sessions.record(workstreamId);
    let waiting: ReturnType<SendQueue['shift']>;
    rec
      .run(async () => {
        // A turn started meanwhile: its end pumps again.
        if (rec.turn !== undefined) return undefined;
        waiting = this.sends.shift(workstreamId);
        if (waiting === undefined) return undefined;
        this.sends.check(waiting.claim);
        return admit(this, rec, waiting.input, permit);
      })
      .then(
        (admitted) => {
          if (admitted !== undefined && waiting !== undefined)
            waiting.resolve(start(this, rec, admitted, waiting.claim, waiting.input.tools));
          else permit.release();
        },
        (err: unknown) => {
          permit.release();
          waiting?.reject(err);
          this.pump(workstreamId);
        },
      )
      .finally(() => this.sessions.release(rec));
  }

  /** A turn ended poisoned — its history still open: sends captured before it cannot start (C7). */
  private fenceIfPoisoned(rec: SessionRecord): void {
    const state = rec.state;
    if (state !== undefined && state !== 'idle' && state !== 'closed') {
      const revoked = this.sends.fence(rec.workstreamId, this.sends.ticket(), 'poison');
      if (revoked > 0)
        this.logger.warn(
          { workstreamId: rec.workstreamId, revoked },
          'queued sends revoked: the turn ended poisoned',
        );
    }
  }

  /**
   * Force cancel. A running turn: the abort commits unconditionally, results are synthesized
   * before the slot is released; resolves once the session is idle. Without one: debt is
   * repaired (true), or it is a silent no-op (false).
   */
  async cancel(
    workstreamId: string,
    fence: Announced = this.sends.announce(workstreamId),
    routed = false,
  ): Promise<boolean> {
    try {
      return await this.cancelFenced(workstreamId, fence, routed);
    } finally {
      fence.done();
    }
  }

  private async cancelFenced(workstreamId: string, fence: Announced, routed: boolean): Promise<boolean> {
    const { ticket } = fence;
    if (!routed && this.cluster) {
      // The turn runs on another host: the cancel is its to carry out (cluster.ts).
      const r = await this.cluster.route(workstreamId, { op: 'cancel' });
      if (r.ran) return r.result === true;
    }
    const running = this.sessions.peek(workstreamId)?.turn;
    if (running) {
      this.revoke(workstreamId, ticket, 'cancel');
      this.aborts.abort(running, 'cancel');
      // Committed: a dispatch waiting on this call sees the abort (C7); the cancel waits on.
      fence.done();
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
    const rewriting = this.sessions.peek(workstreamId)?.rewrites ?? 0;
    if (rewriting > 0) {
      // C6: a history rewrite of the idle session is queued or in flight in its mailbox. One
      // that has begun cannot be abandoned, and the cancel does not wait for it: it fences the
      // workstream — a rewrite that has not begun is revoked, as are earlier sends — and
      // returns. Debt (C5) is looked for after the rewrite, without the caller waiting.
      this.revoke(workstreamId, ticket, 'cancel');
      this.logger.info(
        { workstreamId, rewrites: rewriting },
        'cancel returns before a history rewrite of the idle workstream; it completes unless it had not begun',
      );
      this.idle(workstreamId, (rec) =>
        rec.turn ? Promise.resolve(false) : this.repairIdle(rec, ticket),
      ).catch((err: unknown) => this.logger.warn({ err, workstreamId }, 'repair after a cancel failed'));
      return true;
    }
    return this.idle(workstreamId, async (rec) => {
      if (rec.turn) {
        this.revoke(workstreamId, ticket, 'cancel');
        this.aborts.abort(rec.turn, 'cancel');
        return true;
      }
      return this.repairIdle(rec, ticket);
    });
  }

  /** C5: an idle session's debt is repaired (true); an idle clean one is a silent no-op (false). */
  private async repairIdle(rec: SessionRecord, ticket: number): Promise<boolean> {
    const { workstreamId } = rec;
    const rows = rec.state === 'idle' ? await this.store.readHistory(workstreamId) : undefined;
    // Sends on their way to a clean workstream are left alone.
    if (!leftover(rec, rows)) return false;
    this.revoke(workstreamId, ticket, 'cancel');
    await repairLeftover(this, rec, 'cancelled');
    return true;
  }

  /**
   * Force-cancels one turn, named by its `done` promise — the turn's identity: a later turn on
   * the workstream is left alone (C4), and so is a turn of a workstream created again under the
   * id, whose generations start over (D4).
   */
  cancelTurn(workstreamId: string, turn: Promise<unknown>): void {
    const running = this.sessions.peek(workstreamId)?.turn;
    if (running && running.done === turn) {
      this.revoke(workstreamId, this.sends.ticket(), 'cancel');
      this.aborts.abort(running, 'cancel');
    }
  }

  /** Fences the workstream's earlier claims (C7) and says so when waiting sends were dropped. */
  private revoke(workstreamId: string, ticket: number, reason: 'cancel' | 'close' | 'gone'): void {
    const revoked = this.sends.fence(workstreamId, ticket, reason);
    if (revoked > 0) this.logger.info({ workstreamId, revoked, reason }, 'queued sends revoked');
  }

  /**
   * Closes a session: the machine's CLOSE; listeners receive `ws_closed` and are removed. With a
   * running turn it refuses at once (`waitMs` 0) or, soft, latches the workstream — no new turn
   * is admitted — and waits up to `waitMs` for the turn to end (its tools finished or repaired),
   * then closes a structurally complete history (C1). On timeout the latch is rolled back, the
   * turn keeps running and the workstream stays usable; a force cancel repairs it (C2). Soft
   * closes at once share the latch (it holds until the last of them has ended) and the CLOSE:
   * one closes, the others — and a close meeting one on its way — resolve with it. Resolves
   * true when this call closed the workstream, false when it joined another's close.
   */
  async close(
    workstreamId: string,
    waitMs = 0,
    fence: Announced = this.sends.announce(workstreamId),
    routed = false,
  ): Promise<boolean> {
    try {
      return await this.closeFenced(workstreamId, waitMs, fence, routed);
    } finally {
      fence.done();
    }
  }

  private async closeFenced(
    workstreamId: string,
    waitMs: number,
    fence: Announced,
    routed: boolean,
  ): Promise<boolean> {
    const { ticket } = fence;
    if (!routed && this.cluster) {
      const r = await this.cluster.route(workstreamId, { op: 'close', waitMs });
      if (r.ran) {
        this.revoke(workstreamId, ticket, 'close');
        // Joined a close there: that one told the listeners.
        if (r.result === false) return false;
        this.events.closeWorkstream(workstreamId, { reason: 'closed' });
        return true;
      }
    }
    const running = this.sessions.peek(workstreamId)?.turn;
    let latch = this.closeLatches.get(workstreamId);
    // At once: a close that will not wait for the running turn (refused by the machine), or one
    // of an idle workstream no soft close is about to close.
    if (running !== undefined ? waitMs === 0 : latch === undefined) {
      await this.idle(workstreamId, async (rec) => {
        await closeSession(this, rec);
        this.revoke(workstreamId, ticket, 'close');
      });
    } else {
      if (latch === undefined) {
        latch = { waiting: 0, closed: false };
        this.closeLatches.set(workstreamId, latch);
      }
      const mine = latch;
      mine.waiting++;
      // Latched: sends captured before the close never start, even if the close times out (C7).
      this.revoke(workstreamId, ticket, 'close');
      // A soft close waits for the turn — whose dispatch may be waiting on this call (C7).
      fence.done();
      this.logger.info({ workstreamId, waitMs }, 'soft close waiting for the running turn');
      try {
        if (running !== undefined) {
          let cancelTimer = () => {};
          const timedOut = new Promise<true>((resolve) => {
            cancelTimer = this.timers.after(waitMs, () => resolve(true));
          });
          const ended = await Promise.race([running.done.then(() => false as const), timedOut]);
          cancelTimer();
          if (ended !== false) {
            this.logger.warn({ workstreamId, waitMs }, 'soft close timed out; the turn keeps running');
            throw errors.timeout(
              `soft close of ${workstreamId} timed out after ${waitMs} ms: its turn is still running (cancel() forces it)`,
              { waitMs },
            );
          }
        }
        // Deleted under the turn (P5), the close's own write is discarded: it succeeds.
        const closedHere = await this.idle(workstreamId, async (rec) => {
          if (mine.closed) return false;
          await closeSession(this, rec);
          mine.closed = true;
          return true;
        });
        if (!closedHere) return false;
      } finally {
        // The last soft close to end lifts the latch; one that timed out leaves it to the others.
        if (--mine.waiting === 0 && this.closeLatches.get(workstreamId) === mine)
          this.closeLatches.delete(workstreamId);
      }
    }
    this.events.closeWorkstream(workstreamId, { reason: 'closed' });
    this.cluster?.ended(workstreamId, 'closed');
    return true;
  }

  closeLatched(workstreamId: string): boolean {
    return this.closeLatches.has(workstreamId);
  }

  /** The tombstone of a delete under way or left ambiguous (D2), if any. */
  tombstone(workstreamId: string): { readonly tenantId: string; readonly incarnation: string } | undefined {
    return this.tombstones.get(workstreamId);
  }

  deleting(workstreamId: string): boolean {
    return this.tombstones.has(workstreamId);
  }

  /**
   * Deletes one incarnation of a workstream (D1; the caller checked tenant and incarnation).
   * The tombstone goes up first: the workstream is hidden and takes no new turn, its waiting
   * sends are revoked, a running turn is aborted and has settled before the store deletes. An
   * ambiguous store failure (an error, a lost acknowledgement) leaves the tombstone (D2) and
   * rejects; a retry finishes. The tombstone retires only on proof — the row deleted, missing,
   * or another incarnation's (D3) — and then listeners get `ws_closed` (`deleted`), once (D6).
   */
  async deleteWorkstream(
    workstreamId: string,
    tenantId: string,
    incarnation: string,
    {
      fence = this.sends.announce(workstreamId),
      routed = false,
    }: { readonly fence?: Announced; readonly routed?: boolean } = {},
  ): Promise<void> {
    try {
      await this.deleteFenced(workstreamId, tenantId, incarnation, fence, routed);
    } finally {
      fence.done();
    }
  }

  private async deleteFenced(
    workstreamId: string,
    tenantId: string,
    incarnation: string,
    fence: Announced,
    routed: boolean,
  ): Promise<void> {
    if (!this.tombstones.has(workstreamId)) {
      this.tombstones.set(workstreamId, { tenantId, incarnation });
      this.logger.info({ workstreamId, incarnation }, 'workstream deleting');
    }
    this.revoke(workstreamId, fence.ticket, 'gone');
    if (!routed && this.cluster) {
      // Its turn runs on another host, which aborts it and deletes; an error leaves the tombstone (D2).
      const r = await this.cluster.route(workstreamId, { op: 'delete', tenantId, incarnation });
      if (r.ran) {
        this.retire(workstreamId, 'deleted');
        return;
      }
    }
    const rec = this.sessions.peek(workstreamId);
    const turn = rec?.turn;
    if (turn !== undefined) {
      this.aborts.abort(turn, 'workstream_gone');
      fence.done(); // committed: a dispatch waiting on this call sees the abort (C7)
      await turn.done;
    }
    // Whatever was queued on the session (a repair, a rewrite) has run.
    if (rec !== undefined) {
      await rec.run(async () => {}).finally(() => this.sessions.release(rec));
    }
    try {
      await this.store.deleteWorkstream(workstreamId, incarnation);
    } catch (err) {
      this.logger.warn(
        { err, workstreamId, incarnation },
        'workstream delete ambiguous: hidden until a retry or the sweep proves it gone',
      );
      throw err;
    }
    this.retire(workstreamId, 'deleted');
  }

  /** D3: a tombstone proven gone — its row missing or another incarnation's — retires; listeners are closed once. */
  private retire(workstreamId: string, how: 'deleted' | 'proven'): void {
    const t = this.tombstones.get(workstreamId);
    if (t === undefined) return;
    this.tombstones.delete(workstreamId);
    this.logger.info({ workstreamId, how }, 'workstream deleted');
    this.events.closeWorkstream(workstreamId, { reason: 'deleted' });
    this.cluster?.ended(workstreamId, 'deleted');
    this.lifecycle.closed(t.tenantId, workstreamId, 'deleted');
  }

  /**
   * D3: the sweep's look at each tombstone. Retired when the store proves its incarnation gone;
   * kept when the row is still that incarnation's, or the store cannot say. It never deletes,
   * and never writes a row (D4): the explicit retry finishes a delete.
   */
  async probeTombstones(): Promise<void> {
    for (const [workstreamId, t] of [...this.tombstones]) {
      const row = await this.store.getWorkstream(workstreamId).catch(() => 'unknown' as const);
      if (row === 'unknown' || row?.incarnation === t.incarnation) continue;
      this.retire(workstreamId, 'proven');
    }
  }

  /** See `Turnwarden.compact`. */
  async compact(
    workstreamId: string,
    throughSeq: number,
    summary: { commitKey: string; message: { role: 'system'; content: string } },
  ): Promise<{ removed: number }> {
    // A turn that has begun to settle takes no rewrite: its end no longer waits for one, and its
    // lease is about to be released (a compact called during the turn whose ownership read came
    // back only then was written under that released lease and refused FENCED, found by the
    // harness on PostgreSQL under load). Such a compact runs in the mailbox, after the turn's end.
    const current = this.sessions.peek(workstreamId)?.turn;
    const running = current?.finished === true ? undefined : current;
    const result = await (running
      ? compactLive(this, running, throughSeq, summary)
      : this.rewriting(workstreamId, (rec) =>
          rec.turn
            ? compactLive(this, rec.turn, throughSeq, summary)
            : compactIdle(this, rec, { workstreamId, throughSeq, summary }),
        ));
    if (result.removed > 0) this.rewritten(workstreamId);
    return result;
  }

  /** A rewrite committed: what listeners hold of the history, and every handoff token before it, is stale (E2). */
  private rewritten(workstreamId: string): void {
    this.events.emit(workstreamId, 'history_resync', undefined, { reason: 'rewritten' });
    this.cluster?.rewritten(workstreamId);
  }

  /**
   * See `Turnwarden.rewind`: drops the last `turns` turns of an idle session (TURN_IN_PROGRESS
   * while a turn runs; the machine must be idle). The claim was captured when the host called:
   * a cancel after it revokes the rewind unless its write has begun (C6).
   */
  async rewind(claim: SendClaim, turns: number, ifLastSeq: number | undefined): Promise<RewindResult> {
    const { workstreamId } = claim;
    try {
      const result = await this.rewriting(workstreamId, async (rec) => {
        if (rec.turn !== undefined) {
          throw errors.turnInProgress(
            `rewind of ${workstreamId} refused: a turn is running (cancel it or wait for its end)`,
            { workstreamId },
          );
        }
        const refused = admissionRefusal(this, workstreamId);
        if (refused) throw refused;
        const state = rec.state!;
        if (state !== 'idle') throw claimRefusal(workstreamId, state, false);
        return rewindIdle(this, rec, {
          turns,
          ifLastSeq,
          revokedBy: () => this.sends.fencedSince(claim),
        });
      });
      if (result.removed > 0) this.rewritten(workstreamId);
      return result;
    } finally {
      this.sends.settled(claim);
    }
  }

  /** An idle-session command that rewrites history: counted while queued or in flight (C6). */
  private async rewriting<T>(workstreamId: string, command: (rec: SessionRecord) => Promise<T>): Promise<T> {
    const rec = this.sessions.record(workstreamId);
    rec.rewrites++;
    try {
      return await this.idle(workstreamId, command);
    } finally {
      rec.rewrites--;
    }
  }

  /** The live part of a session's status; `durable` is the stored snapshot of a passive one. */
  status(
    workstreamId: string,
    durable: SessionSnapshotData | undefined,
  ): Pick<WorkstreamStatus, 'state' | 'cleanupPending' | 'persistence' | 'queuedSends' | 'activeTurn'> {
    const rec = this.sessions.peek(workstreamId);
    const snapshot = rec?.snapshot ?? durable;
    const state = snapshot === undefined ? 'idle' : stateOf(snapshot);
    const turn = rec?.turn;
    const cleanupPending = turn === undefined && state !== 'idle' && state !== 'closed';
    const persistence = this.gate.status(workstreamId);
    const queuedSends = this.sends.depth(workstreamId);
    if (!turn) return { state, cleanupPending, persistence, queuedSends };
    return {
      state,
      cleanupPending,
      persistence,
      queuedSends,
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
      if (this.tombstones.size > 0) {
        this.probeTombstones().catch((err: unknown) => this.logger.warn({ err }, 'tombstone probe failed'));
      }
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

  /** A call another host routed here (cluster.ts): run as if called on this host. */
  private runRouted(workstreamId: string, op: RoutedOp): Promise<unknown> {
    switch (op.op) {
      case 'cancel':
        return this.cancel(workstreamId, this.sends.announce(workstreamId), true);
      case 'close':
        return this.close(workstreamId, op.waitMs, this.sends.announce(workstreamId), true);
      case 'delete':
        return this.deleteWorkstream(workstreamId, op.tenantId, op.incarnation, { routed: true });
    }
  }

  /** Rows became durable: other hosts following the workstream read them (cluster.ts). */
  journaled(workstreamId: string, first: number, last: number): void {
    this.cluster?.journaled(workstreamId, first, last);
  }

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

  /**
   * P5: the workstream was deleted under its session. Latched once per session: listeners get
   * one `history_resync` (reason `workstream_gone`), waiting sends are revoked, a running turn
   * is aborted (`workstream_gone`) and its finalizers run with their writes discarded; no turn
   * or rewrite is admitted again. Nothing is an error: the deletion is what happened.
   */
  workstreamGone(workstreamId: string): void {
    const rec = this.sessions.peek(workstreamId);
    if (rec === undefined || rec.gone) return;
    rec.gone = true;
    const turn = rec.turn;
    this.logger.warn(
      { workstreamId, ...(turn ? { generation: turn.generation } : {}) },
      'workstream deleted under its session: its writes are discarded and no new turn is admitted',
    );
    this.events.emit(workstreamId, 'history_resync', undefined, { reason: 'workstream_gone' });
    const revoked = this.sends.fence(workstreamId, this.sends.ticket(), 'gone');
    if (revoked > 0) this.logger.info({ workstreamId, revoked, reason: 'gone' }, 'queued sends revoked');
    if (turn !== undefined && turn.abort === undefined) this.aborts.abort(turn, 'workstream_gone');
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
      .run(async () => {
        await settle(this, rec, turn, outcome, err);
        this.fenceIfPoisoned(rec);
      })
      .catch((e: unknown) => {
        // Never leave `done` (and so shutdown) hanging on an unexpected failure while finishing.
        turn.log.error({ err: e }, 'turn finish failed');
        this.detach(turn);
        if (rec.turn === turn) rec.turn = undefined;
        turn.permit.release(); // idempotent: settle may have released it already
        this.fenceIfPoisoned(rec);
        turn.resolve({
          workstreamId: turn.workstreamId,
          generation: turn.generation,
          status: 'failed',
          error: toWire(e),
          synthesized: 0,
          workerTerminated: turn.workerTerminated,
        });
      })
      .finally(() => {
        this.sessions.release(rec);
        this.pump(turn.workstreamId);
      });
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
