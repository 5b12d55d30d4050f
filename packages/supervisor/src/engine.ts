/**
 * (Over 300 lines on purpose: the composition root and its prelude — the two halves of a start,
 * which hand each other the clock, the pool and the host tools.)
 *
 * The composition root. It builds the parts — the activity clock, the watchdog and its abort
 * delegate, the worker pool, the session actors, the journal gate, the send queue, admission,
 * the cluster — and the commands over them (commands/: sends, cancels, closes, deletes,
 * rewrites, workstreams; a turn's own lifecycle is turn/), wires each through the narrow
 * interface it declares, and owns start and stop in one order. The public facade (runtime.ts)
 * checks input and tenancy, then calls the `Commands` this answers with.
 */
import { ActivityClock, isFenced, type MonotonicMs } from '@turnwarden/clock';
import type {
  AbortReason,
  ApprovalQuestion,
  DoubleTexting,
  HarnessLink,
  HostApi,
  ModelStepRequest,
  ModelStepResult,
  SessionSnapshotData,
} from '@turnwarden/protocol';
import { errors, keyTenantId, keyWorkstreamId, workstreamKey } from '@turnwarden/protocol';
import { modelThreadUrl, parseToolArguments, sessionWorkerUrl, waitingApproval } from '@turnwarden/session';
import { type QueuedSends, queuedSendsOf, type Store } from '@turnwarden/store';
import type { Logger } from 'pino';
import { Admission } from './capacity/admission.js';
import { WorkerPool } from './capacity/pool.js';
import { TenantSlots } from './capacity/tenant-slots.js';
import { Cluster, channelOf, type RoutedOp } from './cluster/cluster.js';
import type { EventRelay } from './cluster/relay.js';
import { Approvals, type Decided, type DecisionInput } from './commands/approvals.js';
import { Cancels } from './commands/cancels.js';
import { Closes } from './commands/closes.js';
import { Deletes, type Tombstone } from './commands/deletes.js';
import { DoubleTexts } from './commands/double-texting.js';
import { DurableSends } from './commands/durable-sends.js';
import type { Commands } from './commands/index.js';
import { Rewrites, type Summary } from './commands/rewrites.js';
import { type Announced, type SendClaim, SendQueue } from './commands/send-queue.js';
import { Sends } from './commands/sends.js';
import { type ListQuery, type PageQuery, Workstreams } from './commands/workstreams.js';
import type { SupervisorConfig } from './config.js';
import { JournalGate } from './journal/journal-gate.js';
import { AbortProtocol } from './liveness/abort-protocol.js';
import { nodeTimers, type Timers } from './liveness/timers.js';
import {
  type TurnWatchdog,
  Watchdog,
  type WatchdogHooks,
  type WatchdogScheduler,
} from './liveness/watchdog.js';
import { ThreadedWatchdog } from './liveness/watchdog-thread.js';
import { ModelSteps } from './models/steps.js';
import { ModelThreads } from './models/threads.js';
import type { TestControls } from './runtime.js';
import { leftover, repairLeftover } from './sessions/maintenance.js';
import { Recovery } from './sessions/recovery.js';
import { Sessions } from './sessions/sessions.js';
import { newCounters, type RuntimeStats } from './stats.js';
import {
  type Earlier,
  EventHub,
  type Listener,
  type StartAt,
  type TurnwardenEvent,
} from './streams/events.js';
import { LifecycleFeed, type LifecycleListener } from './streams/lifecycle-feed.js';
import { HostTools } from './tools/host-tools.js';
import { IsolatedPool } from './tools/isolation.js';
import { type ClaimHost, type ClaimInput, newHolder } from './turn/claim.js';
import { TurnSlots } from './turn/slots.js';
import type { Turn } from './turn/turn.js';
import type {
  ApprovalPolicyFn,
  ClaimedTurn,
  HistoryPage,
  HistoryRead,
  RewindResult,
  WorkstreamInfo,
  WorkstreamStatus,
} from './types.js';
import { variant } from './variants.js';

export interface EngineOptions {
  readonly config: SupervisorConfig;
  readonly store: Store;
  /** The store was opened by the runtime (not given by the host): stop closes it. */
  readonly ownsStore: boolean;
  readonly logger: Logger;
  /** The clock, the host tools and the worker pool, started before the store was opened. */
  readonly prelude: Prelude;
  readonly hooks?: WatchdogHooks;
  readonly timers?: Timers;
  /** Where the watchdog reads the scheduler (runtime.ts: the platform's, or a test's); none: silence alone. */
  readonly scheduler?: WatchdogScheduler;
  /**
   * The watchdog polls on a thread of its own (watchdog-thread.ts). runtime.ts decides: the
   * configuration's `watchdog.thread`, unless a test polls by hand, injects time, hooks or the
   * scheduler, or the harness is attached — those need the polls on the supervisor's thread.
   */
  readonly watchdogThread?: boolean;
  /** Cluster mode: the event relay (default: the store's channel; relay.ts). */
  readonly relay?: EventRelay;
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
  /** The shared model threads (`models.placement: 'shared'`), else undefined. */
  readonly models: ModelThreads | undefined;
  private engine: TurnEngine | undefined;
  private readonly config: SupervisorConfig;

  constructor(
    config: SupervisorConfig,
    logger: Logger,
    options: {
      readonly now?: MonotonicMs;
      readonly harness?: HarnessLink;
      readonly timers?: Timers;
      /** The scheduler statistics the model threads' liveness reads (a starved thread is not wedged). */
      readonly scheduler?: WatchdogScheduler;
      /** The host's approval policy (TurnwardenOptions.approvalPolicy). */
      readonly approvalPolicy?: ApprovalPolicyFn;
    } = {},
  ) {
    this.config = config;
    const shared = config.models.placement === 'shared';
    // The session workers' slots first, then one per shared model thread (its liveness).
    const threads = shared ? config.models.threads : 0;
    this.clock = ActivityClock.create(config.pool.maxWorkers + threads, options.now);
    const clock = this.clock;
    this.models = shared
      ? new ModelThreads({
          clock: clock.buffer,
          firstSlot: config.pool.maxWorkers,
          threads,
          url: modelThreadUrl,
          pluginModules: config.pluginModules,
          flushMs: config.models.flushMs,
          timeoutMs: config.watchdog.timeoutMs,
          pollMs: config.watchdog.pollMs,
          startTimeoutMs: config.pool.startTimeoutMs,
          nice: config.models.nice,
          now: () => clock.nowMs(),
          sample: (slot) => clock.sample(slot),
          timers: options.timers ?? nodeTimers,
          ...(options.scheduler ? { scheduler: options.scheduler.stats } : {}),
          logger,
        })
      : undefined;
    this.hostTools = new HostTools({
      turnOf: (workstreamId) => this.engine?.sessions.peek(workstreamId)?.turn,
      clock: this.clock.buffer,
      logger,
    });
    const host: HostApi = {
      journal: (req) => this.bound().gate.journal(req, (turn, n) => turn.worker.caughtUp(n)),
      modelStep: (req) => this.bound().modelStep(req),
      runIsolated: (req) => this.bound().isolation.run(req),
      cancelIsolated: async (workstreamId, taskId) => this.bound().isolation.cancel(workstreamId, taskId),
      callHostTool: (req) => this.hostTools.call(req),
      cancelHostTool: async (workstreamId, taskId) => this.hostTools.cancel(workstreamId, taskId),
      approvalNeeded: (req) => askPolicy(options.approvalPolicy, req, logger),
    };
    this.pool = new WorkerPool({
      clock: this.clock.buffer,
      maxWorkers: config.pool.maxWorkers,
      warmWorkers: config.pool.warmWorkers,
      startTimeoutMs: config.pool.startTimeoutMs,
      acquireTimeoutMs: config.pool.acquireTimeoutMs,
      idleTimeoutMs: config.pool.idleTimeoutMs,
      maxConcurrentSpawns: config.pool.maxConcurrentSpawns,
      workerNice: config.pool.workerNice,
      workerUrl: sessionWorkerUrl,
      // With shared model threads a session worker loads only the plugin modules that export
      // tools (known once the threads have loaded them all): no provider code, a cheaper spawn.
      pluginModules: () => this.workerModules(),
      ...(shared ? { models: 'shared' as const } : {}),
      hostTools: () => this.hostTools.specs(),
      host,
      logger,
      ...(options.harness ? { harness: options.harness } : {}),
      ...(config.pool.maxOldGenerationSizeMb === undefined
        ? {}
        : { maxOldGenerationSizeMb: config.pool.maxOldGenerationSizeMb }),
      ...(config.pool.maxYoungGenerationSizeMb === undefined
        ? {}
        : { maxYoungGenerationSizeMb: config.pool.maxYoungGenerationSizeMb }),
    });
  }

  /**
   * Host tools first (the workers offer them from their first spawn), then the warm workers.
   * When it throws nothing is left running: the pool closed itself, the host tools are closed.
   */
  async start(hostToolModules: readonly string[]): Promise<void> {
    try {
      await this.hostTools.load(hostToolModules);
      await this.models?.start();
      await this.pool.start();
    } catch (e) {
      await this.pool.close();
      await this.models?.close();
      await this.hostTools.close();
      throw e;
    }
  }

  /** The models the plugins provide (known once a model thread, or a worker, has started). */
  modelNames(): readonly string[] {
    return (this.models ? this.models.catalogue?.models : this.pool.catalogue?.models) ?? [];
  }

  /** Stops what `start` started: a start refused before the engine was built. */
  async close(): Promise<void> {
    await this.pool.close();
    await this.models?.close();
    await this.hostTools.close();
  }

  /** The plugin modules a session worker loads: all, or only those with tools when models run shared. */
  private workerModules(): readonly string[] {
    const all = this.config.pluginModules;
    const toolModules = this.models?.catalogue?.toolModules;
    return toolModules === undefined ? all : all.filter((_, i) => toolModules[i] === true);
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

export class TurnEngine implements Commands {
  readonly config: SupervisorConfig;
  /** This process's lease holder (claim.ts `newHolder`). */
  readonly holder: string;
  readonly clock: ActivityClock;
  readonly sessions: Sessions;
  readonly gate: JournalGate;
  readonly isolation: IsolatedPool;
  readonly watchdog: TurnWatchdog;
  private readonly store: Store;
  private readonly ownsStore: boolean;
  private readonly logger: Logger;
  private readonly timers: Timers;
  private readonly counters = newCounters();
  private readonly events: EventHub;
  private readonly lifecycle: LifecycleFeed;
  private readonly pool: WorkerPool;
  private readonly hostTools: HostTools;
  private readonly slots = new TurnSlots();
  private readonly queue: SendQueue;
  private readonly admission: Admission;
  private readonly recovery: Recovery;
  private readonly cluster: Cluster | undefined;
  /** Cluster mode: sends queued durably in the store (durable-sends.ts). */
  private readonly durable: DurableSends | undefined;
  /** Cluster mode with `admission.maxActivePerTenantInCluster`: sends over it wait here (T4 across hosts). */
  private readonly tenantSlots: TenantSlots | undefined;
  private readonly sends: Sends;
  private readonly cancels: Cancels;
  private readonly approvals: Approvals;
  private readonly closes: Closes;
  private readonly deletes: Deletes;
  private readonly rewrites: Rewrites;
  private readonly doubleTexts: DoubleTexts;
  private readonly workstreams: Workstreams;
  /** Model calls on the shared model threads (`models.placement: 'shared'`). */
  private readonly modelThreads: ModelThreads | undefined;
  private readonly modelSteps: ModelSteps | undefined;
  /** What a claim, its turn and the work on idle sessions need (claim.ts, turn/, maintenance.ts). */
  private readonly maintenance: ClaimHost;
  private shuttingDown = false;
  private cancelSweep: (() => void) | undefined;

  constructor(options: EngineOptions) {
    const { config, prelude } = options;
    this.config = config;
    this.holder = newHolder(config.hostId);
    const predecessors = config.hostId === undefined ? undefined : `${config.hostId}:`;
    const store = options.store;
    const logger = options.logger;
    const timers = options.timers ?? nodeTimers;
    this.store = store;
    this.ownsStore = options.ownsStore;
    this.logger = logger;
    this.timers = timers;
    const { clock, hostTools, pool } = prelude;
    this.clock = clock;
    this.hostTools = hostTools;
    this.pool = pool;
    this.modelThreads = prelude.models;
    const { counters, slots, holder } = this;
    // The parts with a harness variant are built through `variant` (variants.ts).
    const events = new (variant(EventHub))(logger, config.events);
    const lifecycle = new LifecycleFeed(logger);
    const sessions = new Sessions(store, events, logger);
    this.events = events;
    this.lifecycle = lifecycle;
    this.sessions = sessions;
    const turnOf = (workstreamId: string) => sessions.peek(workstreamId)?.turn;
    this.gate = new (variant(JournalGate))({
      store,
      events,
      logger,
      timers,
      config,
      turnOf,
      fenced: (turn) => isFenced(clock.sample(turn.worker.slot)),
      refused: () => void counters.journalRefusedFenced++,
      workstreamGone: (workstreamId) => this.deletes.gone(workstreamId),
      deleting: (workstreamId) => this.deletes.tombstone(workstreamId) !== undefined,
    });
    const aborts = new (variant(AbortProtocol))({
      config,
      events,
      counters,
      logger,
      turnOnSlot: (slot) => slots.on(slot),
    });
    this.watchdog = options.watchdogThread
      ? new ThreadedWatchdog({
          clock,
          config: config.watchdog,
          delegate: aborts,
          logger,
          ...(options.scheduler ? { scheduler: options.scheduler } : {}),
        })
      : new (variant(Watchdog))(clock, config.watchdog, aborts, logger, options.hooks, options.scheduler);
    this.queue = new (variant(SendQueue))(config.limits.maxQueuedSends, () =>
      this.admission.oneTurnRetryAfterMs(),
    );
    this.admission = new Admission(
      { maxActive: config.pool.maxWorkers, ...config.admission },
      timers,
      () => performance.now(),
      (tenantId, waitedMs) =>
        logger.debug(
          { tenantId, waitedMs: Math.round(waitedMs) },
          'send admitted after waiting for a worker',
        ),
    );
    this.isolation = new IsolatedPool(config.isolation, { turnOf, clock: clock.buffer, logger });
    const channel = channelOf(store);
    this.cluster =
      channel === undefined || config.hostId === undefined
        ? undefined
        : new Cluster(
            {
              store,
              holder,
              hostId: config.hostId,
              predecessors,
              events,
              timers,
              logger,
              lease: config.lease,
              runsHere: (workstreamId) => turnOf(workstreamId) !== undefined,
              runLocally: (workstreamId, op) => this.runRouted(workstreamId, op),
              repairIfLeft: (workstreamId) => this.repairIfLeft(workstreamId),
              reclaimQueued: (workstreamId, token) =>
                this.durable?.reclaim(workstreamId, token) ?? Promise.resolve(),
              queuedChanged: (ids) => this.durable?.changed(ids),
              tenantsFreed: (tenantIds) => {
                this.tenantSlots?.freed(tenantIds);
                this.sends.tenantFreed(tenantIds);
              },
              approvalWaiting: (workstreamId, nonce, expiresAt) => {
                this.logger.debug(
                  { workstreamId, expiresAt },
                  'approval wait on another host; its timeout is kept here too',
                );
                this.approvals.waiting(workstreamId, nonce, expiresAt, { heard: true });
              },
              approvalEnded: (workstreamId, nonce) =>
                this.approvals.ended(workstreamId, { heard: true, nonce }),
            },
            channel,
            options.relay,
          );
    const queued = queuedSendsOf(store);
    const clustered = this.cluster;
    this.durable =
      clustered === undefined || queued === undefined
        ? undefined
        : new DurableSends({
            store: store as Store & QueuedSends,
            holder,
            logger,
            timers,
            pollMs: config.lease.renewMs,
            maxQueued: config.limits.maxQueuedSends,
            maxQueuedPerTenant: config.limits.maxQueuedSendsPerTenant,
            retryAfterMs: () => this.admission.oneTurnRetryAfterMs(),
            tell: (origin, ids) => clustered.tellQueued(origin, ids),
            cancelTurn: (workstreamId, generation) => this.cancelGeneration(workstreamId, generation),
            pump: (workstreamId) => this.sends.pump(workstreamId),
          });
    const tenantLimit = clustered === undefined ? undefined : config.admission.maxActivePerTenantInCluster;
    this.tenantSlots = tenantLimit === undefined ? undefined : new TenantSlots(timers, config.lease.renewMs);
    const { cluster, gate, watchdog, isolation, queue, durable, tenantSlots } = this;
    // The shared model threads read a turn's context through the store's own read-only view
    // (off this thread); where the store has none, each call carries it.
    this.modelThreads?.setReader(store.historyReader?.());
    this.modelSteps =
      this.modelThreads === undefined
        ? undefined
        : new ModelSteps(
            { store, events, turnOf, fenced: (turn) => isFenced(clock.sample(turn.worker.slot)) },
            this.modelThreads,
          );
    const engine = this;
    const claims: ClaimHost = {
      config,
      store,
      logger,
      timers,
      holder,
      predecessors,
      leaseTtlMs: config.lease.ttlMs,
      clock,
      events,
      counters,
      pool,
      ...(this.modelThreads === undefined ? {} : { models: this.modelThreads }),
      sessions,
      gate,
      watchdog,
      isolation,
      hostTools,
      slots,
      sends: queue,
      ...(cluster === undefined ? {} : { published: () => cluster.published() }),
      get closing() {
        return engine.shuttingDown;
      },
      closeLatched: (workstreamId) => this.closes.latched(workstreamId),
      turnEnded: (rec) => this.sends.turnEnded(rec),
      pump: (workstreamId) => {
        // A turn ended (its lease released): sends waiting on its tenant's limit claim again.
        if (tenantSlots !== undefined) {
          const tenantId = keyTenantId(workstreamId);
          tenantSlots.freed([tenantId]);
          this.sends.tenantFreed([tenantId]);
          cluster?.freed(tenantId);
        }
        this.sends.pump(workstreamId);
      },
      ...(tenantLimit === undefined ? {} : { tenantLimit }),
      approvals: {
        // A turn ended waiting: this host keeps the timeout (and tells the other hosts, approvals.ts).
        waiting: (workstreamId, nonce, expiresAt) => this.approvals.waiting(workstreamId, nonce, expiresAt),
        ended: (workstreamId) => this.approvals.ended(workstreamId),
      },
    };
    this.maintenance = claims;
    this.recovery = new Recovery({
      store,
      timers,
      logger,
      clustered: cluster !== undefined,
      repairIfLeft: (workstreamId) => this.repairIfLeft(workstreamId),
      // Waits found at start: kept here (every host that starts finds them).
      approvals: {
        waiting: (workstreamId, nonce, expiresAt) =>
          this.approvals.waiting(workstreamId, nonce, expiresAt, { heard: true }),
      },
    });
    const { admission } = this;
    this.sends = new Sends({
      config,
      logger,
      sessions,
      queue,
      admission,
      claims,
      durable,
      slots: tenantSlots,
      rollback: (workstreamId, generation) => this.rewrites.rollback(workstreamId, generation),
    });
    this.cancels = new Cancels({ logger, sessions, queue, cluster, durable, maintenance: claims });
    this.approvals = new Approvals({
      claims,
      sessions,
      admission: this.admission,
      queue,
      timers,
      logger,
      counters,
      config,
      ...(cluster === undefined
        ? {}
        : {
            cluster: {
              waiting: (workstreamId, nonce, expiresAt) =>
                cluster.approvalWaiting(workstreamId, nonce, expiresAt),
              ended: (workstreamId, nonce) => cluster.approvalEnded(workstreamId, nonce),
            },
          }),
    });
    this.closes = new Closes({
      logger,
      timers,
      sessions,
      queue,
      cluster,
      events,
      lifecycle,
      maintenance: claims,
      durable,
    });
    this.deletes = new Deletes({ logger, store, events, lifecycle, sessions, queue, cluster, durable });
    this.rewrites = new Rewrites({
      sessions,
      events,
      queue,
      maintenance: claims,
      admission: claims,
    });
    this.doubleTexts = new DoubleTexts({
      logger,
      sessions,
      queue,
      sends: this.sends,
      cancels: this.cancels,
      rewrites: this.rewrites,
      store,
      durable,
      holder,
    });
    this.workstreams = new Workstreams({
      store,
      events,
      lifecycle,
      logger,
      deletes: this.deletes,
      sessions,
      gate,
      queue,
      clock,
      watchdog: this.watchdog,
    });
    prelude.bind(this);
  }

  // ── start and stop ─────────────────────────────────────────────────────────

  /**
   * S7 first: sessions a crashed process left mid-turn or unrepaired are repaired, each under a
   * lease of its own (one another holder still holds is left for its expiry, recovery.ts); then
   * the watchdog's timer (unless a test polls it), the journal's sweep (P4) and the cluster.
   */
  async start({ watchdogTimer = true }: { readonly watchdogTimer?: boolean } = {}): Promise<void> {
    const repaired = await this.recovery.atStart();
    if (repaired > 0) this.logger.warn({ repaired }, 'sessions left mid-turn by an earlier process repaired');
    if (watchdogTimer) await this.watchdog.start();
    this.startSweep();
    await this.cluster?.start();
    this.logger.info(
      {
        holder: this.holder,
        workers: this.config.pool.maxWorkers,
        watchdog: this.config.watchdog,
        // Whether a silent turn's threads can be asked about (starved, wedged, stalled).
        schedstat: this.watchdog.readsScheduler,
        // Where the watchdog polls: a thread of its own, or this one (tests, the harness).
        watchdogThread: this.watchdog instanceof ThreadedWatchdog,
      },
      'turnwarden supervisor started',
    );
  }

  /**
   * The one shutdown order: nothing new is admitted (recovery, takeovers, queued and waiting
   * sends refused); the calls already on their way (`inFlight`) finish their admission; every
   * running turn is aborted (`shutdown`) and settled, histories complete; then the timers, the
   * cluster, the workers, the isolated pool, the host tools and — if the runtime opened it — the
   * store stop.
   */
  async stop(inFlight: () => Promise<unknown>): Promise<void> {
    this.shuttingDown = true;
    this.recovery.stop();
    this.approvals.stop();
    // No more takeovers of other hosts' workstreams; routed calls are answered SHUTTING_DOWN.
    this.cluster?.beginShutdown();
    // Sends waiting behind a turn never start now.
    const down = () => errors.shuttingDown('turnwarden shut down before the send could start');
    this.queue.rejectAll(down);
    this.admission.rejectAll(down);
    this.tenantSlots?.rejectAll(down);
    await this.durable?.stop();
    // Sends already on their way finish their admission (or are refused) before turns are aborted.
    await inFlight();
    await this.abortAll('shutdown');
    await this.cluster?.stop();
    await this.watchdog.stop();
    this.stopSweep();
    await this.pool.close();
    await this.modelThreads?.close();
    await this.isolation.close();
    await this.hostTools.close();
    if (this.ownsStore) await this.store.close();
    this.logger.info({ ...this.counters }, 'turnwarden supervisor stopped');
  }

  get closing(): boolean {
    return this.shuttingDown;
  }

  /** What tests and the harness reach (`testControls`). */
  controls(): TestControls {
    const { watchdog, gate, clock } = this;
    return {
      pollWatchdog: () => watchdog.poll(),
      sweepJournal: () => gate.sweep(),
      probeTombstones: () => this.deletes.probe(),
      expireApprovals: () => this.approvals.expireNow(),
      approvalTimeouts: () => this.approvals.kept,
      clockBuffer: clock.buffer,
      turnSlot: (tenantId, workstreamId) => this.slots.slotOf(workstreamKey(tenantId, workstreamId)),
    };
  }

  // ── the commands (commands/index.ts), each a part's ───────────────────────

  capture(workstreamId: string): SendClaim {
    return this.queue.capture(workstreamId);
  }

  announce(workstreamId: string): Announced {
    return this.queue.announce(workstreamId);
  }

  settled(claim: SendClaim): void {
    this.queue.settled(claim);
  }

  createWorkstream(
    id: string,
    tenantId: string,
    principal: string,
    doubleTexting: DoubleTexting | undefined,
  ): Promise<WorkstreamInfo> {
    return this.workstreams.create(id, tenantId, principal, doubleTexting);
  }

  listWorkstreams(query: ListQuery): ReturnType<Workstreams['list']> {
    return this.workstreams.list(query);
  }

  tombstone(workstreamId: string): Tombstone | undefined {
    return this.deletes.tombstone(workstreamId);
  }

  deleteWorkstream(
    workstreamId: string,
    tenantId: string,
    incarnation: string,
    fence: Announced,
  ): Promise<void> {
    return this.deletes.delete(workstreamId, tenantId, incarnation, { fence });
  }

  probeTombstones(): Promise<void> {
    return this.deletes.probe();
  }

  subscribeWorkstreams(tenantId: string, listener: LifecycleListener): () => void {
    return this.lifecycle.subscribe(tenantId, listener);
  }

  history(workstreamId: string): Promise<HistoryRead> {
    return this.workstreams.history(workstreamId);
  }

  historyPage(workstreamId: string, query: PageQuery): Promise<HistoryPage> {
    return this.workstreams.historyPage(workstreamId, query);
  }

  status(
    workstreamId: string,
    durable: SessionSnapshotData | undefined,
  ): Pick<
    WorkstreamStatus,
    'state' | 'cleanupPending' | 'persistence' | 'queuedSends' | 'activeTurn' | 'awaitingApproval'
  > {
    return this.workstreams.status(workstreamId, durable);
  }

  close(workstreamId: string, tenantId: string, waitMs: number, fence: Announced): Promise<boolean> {
    return this.closes.close(workstreamId, { waitMs, fence, tenantId });
  }

  listen(workstreamId: string, listener: Listener, from: StartAt, earlier?: Earlier): () => void {
    return this.events.subscribe(workstreamId, listener, from, earlier);
  }

  catchUp(workstreamId: string, from: StartAt): Promise<Earlier | undefined> | undefined {
    if (this.cluster === undefined || from.kind === 'live') return undefined;
    return this.cluster.catchUp(workstreamId, from.kind === 'after' ? from.id : from.position);
  }

  closeLate(listener: Listener, notice: () => TurnwardenEvent | undefined, off: () => void): boolean {
    return this.events.closeLate(listener, notice, off);
  }

  position(workstreamId: string): number {
    return this.events.position(workstreamId);
  }

  get listenerBuffer(): number {
    return this.events.listenerBuffer;
  }

  tools(): readonly string[] | undefined {
    return this.pool.catalogue?.tools;
  }

  send(
    claim: SendClaim,
    input: ClaimInput,
    signal: AbortSignal | undefined,
    maxWaitMs: number | undefined,
    doubleTexting: DoubleTexting,
    stored: SessionSnapshotData | undefined,
  ): Promise<ClaimedTurn> {
    switch (doubleTexting) {
      case 'interrupt':
      case 'rollback':
        return this.doubleTexts.interrupt(claim, input, signal, maxWaitMs, doubleTexting, stored);
      case 'reject':
        return this.sends.send(claim, input, signal, maxWaitMs, { reject: true });
      case 'enqueue':
        return this.sends.send(claim, input, signal, maxWaitMs);
    }
  }

  queuedDurably(workstreamId: string): Promise<number> | undefined {
    return this.durable?.count(workstreamId);
  }

  decide(claim: SendClaim, input: DecisionInput): Promise<Decided> {
    return this.approvals.decide(claim, input);
  }

  decisionMade(workstreamId: string, decision: Promise<unknown>): void {
    this.approvals.track(workstreamId, decision);
  }

  cancel(workstreamId: string, fence: Announced): Promise<boolean> {
    return this.cancels.cancel(workstreamId, fence);
  }

  cancelTurn(workstreamId: string, done: Promise<unknown>): void {
    this.cancels.cancelTurn(workstreamId, done);
  }

  compact(workstreamId: string, throughSeq: number, summary: Summary): Promise<{ removed: number }> {
    return this.rewrites.compact(workstreamId, throughSeq, summary);
  }

  rewind(claim: SendClaim, turns: number, ifLastSeq: number | undefined): Promise<RewindResult> {
    return this.rewrites.rewind(claim, turns, ifLastSeq);
  }

  stats(): RuntimeStats {
    return {
      ...this.counters,
      activeTurns: this.slots.size,
      watchdog: this.watchdog.stats(),
      pool: this.pool.stats(),
      admission: this.admission.stats(),
      isolation: this.isolation.stats(),
      ...(this.modelThreads ? { models: this.modelThreads.stats() } : {}),
      journal: this.gate.stats(),
      events: this.events.stats(),
      ...(this.cluster ? { cluster: this.cluster.stats() } : {}),
    };
  }

  /** A worker's model call (`HostApi.modelStep`), on the shared model threads. */
  modelStep(req: ModelStepRequest): Promise<ModelStepResult> {
    if (this.modelSteps === undefined) {
      return Promise.reject(
        errors.internal('model calls run in the session workers (models.placement: session)'),
      );
    }
    return this.modelSteps.step(req, (turn, n) => turn.worker.caughtUp(n));
  }

  // ── internals ──────────────────────────────────────────────────────────────

  /** Aborts every running turn and lets every queued command (claims included) settle. */
  private async abortAll(reason: AbortReason): Promise<void> {
    for (;;) {
      const records = this.sessions.all();
      const turns = records.flatMap((r) => (r.turn ? [r.turn] : []));
      for (const turn of turns) turn.abort(reason);
      await Promise.all([...turns.map((t: Turn) => t.done), ...records.map((r) => r.run(async () => {}))]);
      if (!this.sessions.all().some((r) => r.turn !== undefined)) return;
    }
  }

  /** P4: the journal's maintenance sweep, every `journal.sweepMs` while the runtime runs. */
  private startSweep(): void {
    this.stopSweep();
    this.cancelSweep = this.timers.every(this.config.journal.sweepMs, () => {
      const woken = this.gate.sweep();
      if (woken.length > 0) this.logger.info({ workstreams: woken }, 'journal sweep retried writes now');
      if (this.deletes.pending > 0) {
        this.deletes.probe().catch((err: unknown) => this.logger.warn({ err }, 'tombstone probe failed'));
      }
    });
  }

  private stopSweep(): void {
    this.cancelSweep?.();
    this.cancelSweep = undefined;
  }

  /** A session without a running turn that holds debt is repaired (recovery's and the cluster's). */
  private repairIfLeft(workstreamId: string): Promise<boolean> {
    return this.sessions.idle(workstreamId, async (rec) => {
      // A wait for an approval is not debt a crash left: it is decided, or ends by its timeout.
      if (rec.turn !== undefined || !leftover(rec, undefined) || waitingApproval(rec.snapshot!)) return false;
      await repairLeftover(this.maintenance, rec, 'interrupted by a crash');
      return true;
    });
  }

  /**
   * Cancels the workstream's turn of `generation` — here, or routed to the host running it — and
   * not a later one (C4): the handle of a send queued durably, whose turn may run anywhere.
   */
  private cancelGeneration(workstreamId: string, generation: number): void {
    const running = this.sessions.peek(workstreamId)?.turn;
    if (running?.generation === generation) {
      this.cancels.cancelTurn(workstreamId, running.done);
      return;
    }
    // Only a cancel that found its turn fences (as cancelTurn here): a late handle's cancel, its
    // turn over, must not revoke the sends queued after it (C4). The holder revoked its waiting
    // sends as it aborted the turn; this host's own, on their way, are revoked after.
    const ticket = this.queue.ticket();
    void Promise.resolve(this.cluster?.route(workstreamId, { op: 'cancel', generation }))
      .then((r) =>
        r?.ran === true && r.result === true ? this.cancels.revokeEarlier(workstreamId, ticket) : undefined,
      )
      .catch((err: unknown) => {
        this.logger.warn({ err, workstreamId, generation }, 'cancel of a turn on another host failed');
      });
  }

  /** A call another host routed here (cluster.ts): run as if called on this host. */
  private async runRouted(workstreamId: string, op: RoutedOp): Promise<unknown> {
    const fence = this.queue.announce(workstreamId);
    switch (op.op) {
      case 'cancel': {
        if (op.generation === undefined) return this.cancels.cancel(workstreamId, fence, true);
        fence.done();
        const running = this.sessions.peek(workstreamId)?.turn;
        if (running?.generation !== op.generation) {
          // The turn is over; an interrupt's earlier sends are revoked all the same (M3).
          if (op.keepFrom !== undefined)
            await this.durable?.revoke(workstreamId, 'cancel', undefined, op.keepFrom);
          return false;
        }
        this.cancels.cancelTurn(workstreamId, running.done, op.keepFrom);
        await running.done;
        return true;
      }
      case 'close':
        return this.closes.close(workstreamId, { waitMs: op.waitMs, fence, routed: true });
      case 'delete':
        return this.deletes.delete(workstreamId, op.tenantId, op.incarnation, { fence, routed: true });
    }
  }
}

/**
 * What the host's approval policy says of a call (A1): one that throws or is absent asks for
 * approval when asked (fail closed; the worker asks only where a policy was given).
 */
async function askPolicy(
  policy: ApprovalPolicyFn | undefined,
  req: ApprovalQuestion,
  logger: Logger,
): Promise<boolean> {
  if (policy === undefined) return true;
  const parsed = parseToolArguments(req.arguments);
  const args = typeof parsed === 'string' ? undefined : parsed;
  try {
    return (
      (await policy({
        tenantId: req.tenantId,
        workstreamId: keyWorkstreamId(req.workstreamId),
        name: req.name,
        arguments: req.arguments,
        ...(args === undefined ? {} : { args }),
      })) === true
    );
  } catch (err) {
    logger.warn(
      { err, workstreamId: req.workstreamId, tool: req.name },
      'approval policy threw; the call waits for approval',
    );
    return true;
  }
}
