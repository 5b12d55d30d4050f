/**
 * (Over 300 lines on purpose: this is the whole public API in one class, each method with the
 * contract a host reads, plus the test seams' way in (startForTesting, testControls), which need
 * the class's private start. The work is elsewhere — the commands the engine answers with.)
 *
 * Turnwarden's embedded API: the supervisor a host runs on its main thread. This facade checks
 * input (T5), the caller (T1) and tenancy (T2), then calls one operation of the command
 * interface (commands/index.ts); start and stop are the engine's (engine.ts), in one order.
 *
 * A turn (turn/turn.ts): claim (worker from the warm pool, lease with a fresh fencing token,
 * durable user row, clock armed at a new generation) → the worker runs the turn loop and
 * journals rows through the journal gate → the watchdog watches the slot → its end (structural
 * repair if needed, lease released, worker back to the pool, `stream_end` then `idle`).
 */
import { randomUUID } from 'node:crypto';
import type { MonotonicMs } from '@turnwarden/clock';
import {
  attachSeamController,
  type DoubleTexting,
  detachSeamController,
  ErrorCode,
  errors,
  type HarnessLink,
  isTurnwardenError,
  keyWorkstreamId,
  type TurnwardenError,
  workstreamKey,
} from '@turnwarden/protocol';
import { openPostgresStore, openSqliteStore, type Store, type WorkstreamRecord } from '@turnwarden/store';
import { type Level, type Logger, pino } from 'pino';
import type { EventRelay } from './cluster/relay.js';
import type { Decided } from './commands/approvals.js';
import type { Commands } from './commands/index.js';
import type { Announced } from './commands/send-queue.js';
import {
  checkPluginModules,
  type LeaseConfig,
  resolveConfig,
  type SupervisorConfig,
  type SupervisorConfigInput,
} from './config.js';
import { Prelude, TurnEngine } from './engine.js';
import {
  checkCaller,
  checkCloseInput,
  checkCompactInput,
  checkDecisionInput,
  checkDeleteInput,
  checkDoubleTexting,
  checkHistoryInput,
  checkId,
  checkListInput,
  checkRef,
  checkRewindInput,
  checkSendInput,
  invalid,
} from './input.js';
import { platformScheduler } from './liveness/platform-sched.js';
import type { Timers } from './liveness/timers.js';
import type { WatchdogHooks, WatchdogScheduler } from './liveness/watchdog.js';
import { outward, outwardWire } from './names.js';
import type { RuntimeStats } from './stats.js';
import type { Earlier, Listener, StartAt, TurnwardenEvent } from './streams/events.js';
import type { LifecycleListener } from './streams/lifecycle-feed.js';
import { EventIterator, fromCursor, startAt } from './streams/streams.js';
import type {
  ApprovalPolicyFn,
  ApproveInput,
  Caller,
  ClaimedTurn,
  CloseInput,
  CompactInput,
  CreateWorkstreamInput,
  DecisionResult,
  DeleteInput,
  DenyInput,
  HistoryInput,
  HistoryPage,
  HistoryRead,
  ListWorkstreamsInput,
  RewindInput,
  RewindResult,
  SendInput,
  SubscribeInput,
  TurnHandle,
  TurnResult,
  WorkstreamDetails,
  WorkstreamInfo,
  WorkstreamPage,
  WorkstreamRef,
  WorkstreamStatus,
} from './types.js';

export interface TurnwardenOptions extends SupervisorConfigInput {
  /** A store, or where to open the SQLite one (default `:memory:`). */
  readonly store?:
    | Store
    | { readonly path: string }
    /** A PostgreSQL database shared by several hosts (with `hostId`: cluster mode, see docs/cluster.md). */
    | { readonly postgres: string; readonly schema?: string };
  /** A pino logger for the supervisor's logs (messages: packages/supervisor/README.md). Default: `logLevel`. */
  readonly logger?: Logger;
  /**
   * Without `logger`: the level of a JSON logger on stderr, or `silent` (the default, so
   * embedding Turnwarden prints nothing unless asked).
   */
  readonly logLevel?: Level | 'silent';
  /**
   * Cluster mode: the relay that carries every host's events to the listeners on the others
   * (docs/cluster.md). Default: the store's notification channel (PostgreSQL `LISTEN/NOTIFY`),
   * which keeps nothing; a broker's (`@turnwarden/relay-redis`) also keeps each workstream's
   * recent events, so a reconnect is replayed on any host.
   */
  readonly relay?: EventRelay;
  /**
   * Asked about every call no other rule (a tool's `needsApproval`, `approvals.tools`, the send's
   * `requireApproval`) makes wait: true — a person must approve it first (A1). Runs on the
   * supervisor's thread, given the call's tool name and arguments; keep it quick. One that
   * throws is taken as true (fail closed).
   */
  readonly approvalPolicy?: ApprovalPolicyFn;
}

/** Seams for tests, benchmarks and the interleaving harness (`@turnwarden/supervisor/testing`). */
export interface TestSeams {
  readonly hooks?: WatchdogHooks;
  /** Monotonic time source. */
  readonly now?: MonotonicMs;
  /** Attaches the interleaving harness (packages/harness): seams park, faults and mutations apply. */
  readonly harness?: HarnessLink;
  /** Do not run the watchdog's timer: the caller polls with `testControls(tw).pollWatchdog()`. */
  readonly manualWatchdog?: boolean;
  /** Timers for lease renewal and grace (the harness drives them; default Node's). */
  readonly timers?: Timers;
  /**
   * The scheduler statistics the watchdog reads before it aborts a silent turn (starved, wedged
   * or stalled; liveness/sched.ts). Default: the platform's (Linux's schedstat) — but none when
   * `now` is given, since real CPU time over an injected window means nothing. `null`: none, as
   * on a platform without them.
   */
  readonly scheduler?: WatchdogScheduler | null;
}

/** What tests and the harness reach inside a running supervisor. */
export interface TestControls {
  /** One watchdog sampling pass (a supervisor started with `manualWatchdog`). */
  pollWatchdog(): void;
  /** The activity clock's shared buffer. */
  readonly clockBuffer: SharedArrayBuffer;
  /** The clock slot of the workstream's running turn, if one runs. */
  turnSlot(tenantId: string, workstreamId: string): number | undefined;
  /** One run of the journal's maintenance sweep (P4); the workstreams whose writes it retried. */
  sweepJournal(): string[];
  /** The sweep's look at the tombstones of ambiguous deletes (D3). */
  probeTombstones(): Promise<void>;
  /** Every approval wait's timeout fires now, as if its time had come (A4). */
  expireApprovals(): void;
  /** How many approval waits' timeouts this host keeps. */
  approvalTimeouts(): number;
}

const engines = new WeakMap<Turnwarden, TurnEngine>();
let startWith: (options: TurnwardenOptions, seams: TestSeams) => Promise<Turnwarden>;

/** Starts a supervisor with test seams (testing entry only). */
export function startForTesting(options: TurnwardenOptions, seams: TestSeams = {}): Promise<Turnwarden> {
  return startWith(options, seams);
}

/** The controls of a running supervisor (testing entry only). */
export function testControls(tw: Turnwarden): TestControls {
  const engine = engines.get(tw);
  if (!engine) throw new TypeError('not a Turnwarden instance');
  return engine.controls();
}

/** A call's promise, its refusal named by the caller's id (`outward`). */
function named<T>(key: string, id: string, p: Promise<T>): Promise<T> {
  return p.catch((e: unknown) => {
    throw outward(e, key, id);
  });
}

function aborted(): TurnwardenError {
  return errors.turnAborted('the send was aborted by its signal before the turn was claimed');
}

/** The store option's own checks, before anything starts (the store's are at its opening). */
function checkStoreOption(option: TurnwardenOptions['store']): void {
  if (option !== undefined && 'postgres' in option) {
    if (typeof option.postgres !== 'string' || option.postgres.length === 0) {
      throw errors.invalidConfig('store.postgres must be a connection string', { field: 'store.postgres' });
    }
  }
}

/**
 * Host tools and workers started, the model among what their plugins provide — or the start's
 * typed refusal, with the prelude closed. A plugin module refused by the workers' registry names
 * its field (INVALID_CONFIG); a worker that exits is WORKER_EXITED; one never ready is TIMEOUT.
 */
async function startPrelude(prelude: Prelude, config: SupervisorConfig): Promise<void> {
  try {
    await prelude.start(config.hostToolModules);
  } catch (e) {
    if (isTurnwardenError(e, ErrorCode.INVALID_CONFIG)) throw e;
    const failed = isTurnwardenError(e, ErrorCode.TIMEOUT) ? errors.timeout : errors.workerExited;
    throw failed(
      'session workers fail to start (the worker error is logged; check pluginModules)',
      undefined,
      {
        cause: e,
      },
    );
  }
  const models = prelude.modelNames();
  if (!models.includes(config.model)) {
    await prelude.close();
    throw errors.invalidConfig(
      `model ${config.model} is not provided by pluginModules (available: ${models.length > 0 ? models.join(', ') : 'none'})`,
      { field: 'model' },
    );
  }
}

async function openOwnStore(option: TurnwardenOptions['store'], lease: LeaseConfig): Promise<Store> {
  if (option !== undefined && 'postgres' in option) {
    checkStoreOption(option);
    return openPostgresStore({
      connectionString: option.postgres,
      ...(option.schema === undefined ? {} : { schema: option.schema }),
      // A host stalled inside a transaction loses it (and the locks of its lease rows) no later
      // than it misses a renewal: its expired leases can be taken over (S7).
      idleInTransactionTimeoutMs: Math.max(lease.renewMs, 1_000),
    });
  }
  return openSqliteStore({ path: (option as { path?: string } | undefined)?.path ?? ':memory:' });
}

/** The watchdog's scheduler statistics: a test's, none, or the platform's (TestSeams.scheduler). */
function schedulerOf(seams: TestSeams): { scheduler?: WatchdogScheduler } {
  const scheduler =
    seams.scheduler !== undefined ? seams.scheduler : seams.now ? undefined : platformScheduler();
  return scheduler ? { scheduler } : {};
}

/**
 * The watchdog polls on a thread of its own (`watchdog.thread`, the default) unless a seam needs
 * its polls where the test can reach them: polled by hand, injected time, hooks between sample and
 * commit, an injected scheduler, or the interleaving harness.
 */
function watchdogThreadFor(
  config: SupervisorConfig,
  seams: TestSeams,
  harness: HarnessLink | undefined,
): boolean {
  return (
    config.watchdog.thread !== false &&
    harness === undefined &&
    !seams.manualWatchdog &&
    seams.now === undefined &&
    seams.hooks === undefined &&
    seams.scheduler === undefined
  );
}

/** INVALID_CONFIG (field `relay`) for anything that is not an EventRelay. */
function checkRelay(relay: unknown): void {
  if (relay === undefined) return;
  const r = relay as Partial<Record<keyof EventRelay, unknown>>;
  const methods = ['start', 'publish', 'flush', 'follow', 'unfollow', 'read', 'close'] as const;
  if (
    typeof relay !== 'object' ||
    relay === null ||
    typeof r.broadcast !== 'boolean' ||
    methods.some((m) => typeof r[m] !== 'function')
  ) {
    throw errors.invalidConfig(
      'relay must be an EventRelay (broadcast, start, publish, flush, follow, unfollow, read, close)',
      {
        field: 'relay',
      },
    );
  }
}

function isStore(value: unknown): value is Store {
  return typeof (value as Partial<Store> | undefined)?.appendMessages === 'function';
}

export class Turnwarden {
  readonly config: SupervisorConfig;
  /** The operations, each a part's (commands/index.ts). */
  private readonly commands: Commands;
  /** Start and stop: the engine's, in one order. */
  private readonly engine: Pick<TurnEngine, 'start' | 'stop'>;
  private readonly inFlight = new Set<Promise<unknown>>();
  private shutdownPromise: Promise<void> | undefined;

  private constructor(
    config: SupervisorConfig,
    private readonly store: Store,
    ownsStore: boolean,
    private readonly logger: Logger,
    private readonly harness: HarnessLink | undefined,
    seams: TestSeams,
    prelude: Prelude,
    relay: EventRelay | undefined,
  ) {
    this.config = config;
    const engine = new TurnEngine({
      config,
      store,
      ownsStore,
      logger,
      prelude,
      ...(relay === undefined ? {} : { relay }),
      ...(seams.hooks ? { hooks: seams.hooks } : {}),
      ...(seams.timers ? { timers: seams.timers } : {}),
      ...schedulerOf(seams),
      watchdogThread: watchdogThreadFor(config, seams, harness),
    });
    this.commands = engine;
    this.engine = engine;
    engines.set(this, engine);
  }

  static {
    startWith = (options, seams) => Turnwarden.open(options, seams);
  }

  /**
   * Validates the configuration (INVALID_CONFIG naming the field, nothing started), loads the
   * host tools and warms the pool (the model must be one the plugins provide), then opens the
   * store and repairs what an earlier process left mid-turn (S7). The store comes last: a start
   * refused for its configuration creates no database file or schema and leaves nothing running.
   */
  static start(options: TurnwardenOptions): Promise<Turnwarden> {
    return Turnwarden.open(options, {});
  }

  private static async open(options: TurnwardenOptions, seams: TestSeams): Promise<Turnwarden> {
    const { store: storeOption, logger: _l, logLevel, relay, approvalPolicy, ...rest } = options;
    checkRelay(relay);
    if (approvalPolicy !== undefined && typeof approvalPolicy !== 'function') {
      throw errors.invalidConfig('approvalPolicy must be a function', { field: 'approvalPolicy' });
    }
    if (logLevel !== undefined && logLevel !== 'silent' && !(logLevel in pino.levels.values)) {
      throw errors.invalidConfig(`logLevel must be a pino level or silent (got ${String(logLevel)})`, {
        field: 'logLevel',
      });
    }
    const { harness, manualWatchdog } = seams;
    const resolved = resolveConfig(rest);
    // Workers import the modules as resolved here, so what was checked is what they load.
    const config = {
      ...resolved,
      ...(approvalPolicy === undefined ? {} : { approvals: { ...resolved.approvals, hostPolicy: true } }),
      pluginModules: checkPluginModules(resolved.pluginModules),
      hostToolModules: checkPluginModules(resolved.hostToolModules, 'hostToolModules'),
    };
    // A Store instance is used as given (and not closed by shutdown); a `{ path }` or a
    // `{ postgres }` is opened here — last: a start refused before creates nothing.
    const given = isStore(storeOption) ? storeOption : undefined;
    if (given === undefined) checkStoreOption(storeOption);
    const logger =
      options.logger ?? pino({ name: 'turnwarden', level: logLevel ?? 'silent' }, pino.destination(2));
    if (harness) attachSeamController(harness.controller);
    // Workers and host tools before the store: whatever they refuse leaves no database behind.
    const prelude = new Prelude(config, logger, {
      ...(seams.now ? { now: seams.now } : {}),
      ...(harness ? { harness } : {}),
      ...(seams.timers ? { timers: seams.timers } : {}),
      ...schedulerOf(seams),
      ...(approvalPolicy === undefined ? {} : { approvalPolicy }),
    });
    let store: Store;
    try {
      await startPrelude(prelude, config);
      try {
        store = given ?? (await openOwnStore(storeOption, config.lease));
      } catch (e) {
        await prelude.close();
        throw e;
      }
    } catch (e) {
      // Nothing may keep running after a failed start: the pool and the host tools are closed.
      if (harness) detachSeamController(harness.controller);
      throw e;
    }
    const tw = new Turnwarden(config, store, given === undefined, logger, harness, seams, prelude, relay);
    try {
      await tw.engine.start({ watchdogTimer: !manualWatchdog });
    } catch (e) {
      await tw.shutdown();
      throw e;
    }
    return tw;
  }

  // ── workstreams ────────────────────────────────────────────────────────────

  /** Creates a workstream (a fresh id unless one is given); each creation mints an incarnation (D1). */
  async createWorkstream(input: CreateWorkstreamInput): Promise<WorkstreamInfo> {
    this.assertOpen();
    checkCaller(input, 'createWorkstream', ['workstreamId', 'doubleTexting']);
    const id = input.workstreamId ?? `ws-${randomUUID()}`;
    checkId(id, 'workstreamId');
    checkDoubleTexting(input.doubleTexting);
    const key = workstreamKey(input.tenantId, id);
    const info = await named(
      key,
      id,
      this.commands.createWorkstream(key, input.tenantId, input.principal, input.doubleTexting),
    );
    return { ...info, workstreamId: id };
  }

  /**
   * Follows a tenant's workstreams (D5): `ws_created` once a creation has committed, `ws_closed`
   * (`closed` or `deleted`) when one ends. A workstream whose creation failed ambiguously is never
   * advertised, nor is its close. Registration is immediate; returns the function that stops it.
   */
  subscribeWorkstreams(input: Caller & { readonly listener: LifecycleListener }): () => void {
    checkCaller(input, 'subscribeWorkstreams', ['listener']);
    if (typeof input.listener !== 'function') throw invalid('listener must be a function', 'listener');
    const { listener } = input;
    // The feed names workstreams by key: the listener receives the tenant's own ids.
    return this.commands.subscribeWorkstreams(input.tenantId, (event) =>
      listener({ ...event, workstreamId: keyWorkstreamId(event.workstreamId) }),
    );
  }

  /** One workstream of the tenant (WORKSTREAM_NOT_FOUND for another tenant's, or one being deleted). */
  async getWorkstream(input: WorkstreamRef): Promise<WorkstreamDetails> {
    checkRef(input, 'getWorkstream');
    return details(await this.owned(input.tenantId, input.workstreamId));
  }

  /**
   * The tenant's workstreams in id order, a page at a time (`limit`, default 100; `cursor` from
   * the previous page). Workstreams being deleted are not listed (D2).
   */
  async listWorkstreams(input: ListWorkstreamsInput): Promise<WorkstreamPage> {
    checkListInput(input);
    const limit = input.limit ?? 100;
    let afterId: string | undefined;
    if (input.cursor !== undefined) {
      afterId =
        typeof input.cursor === 'string' ? Buffer.from(input.cursor, 'base64url').toString('utf8') : '';
      try {
        checkId(afterId, 'cursor');
      } catch {
        throw invalid('cursor must be a nextCursor returned by listWorkstreams', 'cursor');
      }
    }
    // Keys sort as their ids within a tenant (one prefix): the cursor carries the id.
    const { rows, last } = await this.commands.listWorkstreams({
      tenantId: input.tenantId,
      status: input.status,
      afterId: afterId === undefined ? undefined : workstreamKey(input.tenantId, afterId),
      limit,
    });
    const items = rows.map(details);
    const full = items.length === limit && last !== undefined;
    return full
      ? { items, nextCursor: Buffer.from(keyWorkstreamId(last!)).toString('base64url') }
      : { items };
  }

  /**
   * Deletes a workstream — the incarnation named (D1): a workstream created again under the id
   * is another incarnation and is left alone (WORKSTREAM_NOT_FOUND). From the call on it is
   * hidden (not listed, gettable or openable) and takes no turn; sends waiting on it are revoked
   * and a running turn is aborted (`workstream_gone`) and settled; then its rows are deleted and
   * listeners receive `ws_closed` (`deleted`), once. When the store fails ambiguously the call
   * rejects and the workstream stays hidden, its id not re-creatable (D2); calling again
   * finishes the delete, and the maintenance sweep retires the tombstone if it proves the
   * delete happened (D3). Its journal is never written in the background meanwhile (D4).
   */
  async deleteWorkstream(input: DeleteInput): Promise<void> {
    checkDeleteInput(input);
    const key = workstreamKey(input.tenantId, input.workstreamId);
    // C7: announced as the host calls, like a cancel.
    const fence = this.commands.announce(key);
    try {
      await named(key, input.workstreamId, this.deleteOwned(input, key, fence));
    } finally {
      fence.done();
    }
  }

  private async deleteOwned(input: DeleteInput, key: string, fence: Announced): Promise<void> {
    const { tenantId, workstreamId, incarnation } = input;
    // T2: one refusal, word for word, whatever the reason — another tenant's, a pending delete
    // of another incarnation, or no such workstream — so none of them tells the others apart.
    const notFound = () =>
      errors.workstreamNotFound(`workstream ${workstreamId} (incarnation ${incarnation}) not found`);
    const pending = this.commands.tombstone(key);
    if (pending !== undefined && (pending.tenantId !== tenantId || pending.incarnation !== incarnation)) {
      throw notFound();
    }
    const ws = await this.store.getWorkstream(key);
    if (ws === undefined && pending !== undefined) {
      // The retry of an ambiguous delete that had happened: proven, the tombstone retires (D3).
      await this.commands.probeTombstones();
      return;
    }
    if (!ws || ws.tenantId !== tenantId || ws.incarnation !== incarnation) throw notFound();
    this.logger.info(
      { workstreamId: key, tenantId, principal: input.principal, incarnation },
      'workstream delete requested',
    );
    await this.commands.deleteWorkstream(key, tenantId, incarnation, fence);
  }

  /**
   * Follows a workstream's events with a callback. Registration is immediate — nothing emitted
   * after this call is missed — but nothing is delivered until the tenant is known to own the
   * workstream (T2): events that arrive meanwhile are held, then delivered in order. Another
   * tenant's id is refused with WORKSTREAM_NOT_FOUND, having received nothing.
   *
   * Where it starts: live (default); after `lastEventId`, the last event id a client saw —
   * what it missed is replayed from the workstream's ring, or it receives `replay_truncated`
   * (E1); or after a history read, with its `handoff` token — it continues exactly where the
   * read ended, or receives `history_resync` (E2). A closed workstream's listener receives
   * `ws_closed` at once and is removed (D6). Resolves with the function that stops it.
   */
  subscribe(input: SubscribeInput & { readonly listener: Listener }): Promise<() => void> {
    let from: StartAt;
    try {
      checkRef(input, 'subscribe', ['listener', 'lastEventId', 'handoff']);
      if (typeof input.listener !== 'function') throw invalid('listener must be a function', 'listener');
      from = startAt({ ...input, workstreamId: workstreamKey(input.tenantId, input.workstreamId) });
    } catch (e) {
      return Promise.reject(e);
    }
    return this.follow(input, input.listener, from);
  }

  /**
   * The same subscription as an async iterator (`for await … of`), which takes an AbortSignal.
   * At most `events.listenerBuffer` events wait unread; a reader further behind receives
   * `stream_overflow` and the iteration ends (E3). It also ends after `ws_closed`, when the
   * signal aborts, or on `break`. Bad input, or another tenant's workstream, rejects the first
   * `next()`.
   */
  events(input: SubscribeInput & { readonly signal?: AbortSignal }): AsyncIterableIterator<TurnwardenEvent> {
    checkRef(input, 'events', ['lastEventId', 'handoff', 'signal']);
    if (input.signal !== undefined && !(input.signal instanceof AbortSignal)) {
      throw invalid('signal must be an AbortSignal', 'signal');
    }
    const from = startAt({ ...input, workstreamId: workstreamKey(input.tenantId, input.workstreamId) });
    const iterator = new EventIterator(this.commands.listenerBuffer, input.signal);
    iterator.attach(this.follow(input, iterator.push, from));
    return iterator;
  }

  private follow(ref: WorkstreamRef, listener: Listener, from: StartAt): Promise<() => void> {
    // Cluster mode: a reconnect this host's ring does not reach is first replayed from the relay.
    const caught = this.commands.catchUp(workstreamKey(ref.tenantId, ref.workstreamId), from);
    if (caught === undefined) return this.register(ref, listener, from);
    return caught.then((earlier) => this.register(ref, listener, from, earlier));
  }

  private register(
    ref: WorkstreamRef,
    listener: Listener,
    from: StartAt,
    earlier?: Earlier,
  ): Promise<() => void> {
    const { tenantId, workstreamId } = ref;
    const key = workstreamKey(tenantId, workstreamId);
    let verified = false;
    let refused = false;
    const held: TurnwardenEvent[] = [];
    const deliver = (event: TurnwardenEvent) => {
      try {
        listener(event);
      } catch (err) {
        this.logger.warn({ err, workstreamId: key, type: event.type }, 'event listener threw');
      }
    };
    let closed = false;
    const off = this.commands.listen(
      key,
      (event) => {
        if (refused) return;
        if (event.type === 'ws_closed') closed = true;
        if (verified) listener(event);
        else held.push(event);
      },
      from,
      earlier,
    );
    return this.owned(tenantId, workstreamId).then(
      (ws) => {
        verified = true;
        for (const event of held.splice(0)) deliver(event);
        // D6: closed before this call, its stream since dropped from memory: closed at once.
        if (ws.status === 'closed' && !closed) {
          const notice = (): TurnwardenEvent => ({
            id: this.commands.position(key),
            workstreamId,
            type: 'ws_closed',
            data: { reason: 'closed' },
          });
          this.commands.closeLate(deliver, notice, off);
        }
        return off;
      },
      (err: unknown) => {
        refused = true;
        held.length = 0;
        off();
        throw err;
      },
    );
  }

  /**
   * The durable history, in order (seq 1, 2, …), and its handoff token: a listener subscribed
   * with it continues exactly after these rows — no event missed, no row delivered twice — or
   * receives `history_resync` (E2).
   *
   * A long history is read a page at a time: `limit` (1–1000) rows a page, and each page but
   * the last answers `nextCursor`, to pass as `cursor` for the next (its `limit` holds unless
   * the call names another). Each page is one read on the supervisor's thread, so a page costs
   * what its rows cost, however long the history; without `limit` or `cursor` the whole history
   * is one read, as it always was. The last page — the one without `nextCursor` — carries the
   * handoff, and it continues exactly after the rows of all the pages: whatever changed the
   * history while they were read reaches the listener, a rewrite as `history_resync` (E2).
   * A malformed cursor, or another workstream's, is INVALID_INPUT (field `cursor`), as is one
   * read before the workstream was deleted and created again (D1).
   */
  history(input: WorkstreamRef): Promise<HistoryRead>;
  /** A page of the history (`limit`, `cursor`): `nextCursor` while there is more, the handoff on the last page. */
  history(input: HistoryInput): Promise<HistoryPage>;
  async history(input: HistoryInput): Promise<HistoryPage> {
    checkHistoryInput(input);
    const { tenantId, workstreamId, limit } = input;
    const key = workstreamKey(tenantId, workstreamId);
    // T5: a cursor is decoded before anything is read.
    const cursor = input.cursor === undefined ? undefined : fromCursor(input.cursor, key);
    const ws = await this.owned(tenantId, workstreamId);
    const pageSize = limit ?? cursor?.limit;
    const read =
      pageSize === undefined
        ? this.commands.history(key)
        : this.commands.historyPage(key, { incarnation: ws.incarnation, limit: pageSize, cursor });
    const page = await named(key, workstreamId, read);
    // Rows as the store keeps them name the workstream by key: the caller reads its own id.
    return { ...page, rows: page.rows.map((row) => ({ ...row, workstreamId })) };
  }

  /** The session machine's state (idle, claimed, streaming, tool-debt, force-abandoning, closed). */
  async status(input: WorkstreamRef): Promise<WorkstreamStatus> {
    checkRef(input, 'status');
    const { tenantId, workstreamId } = input;
    const ws = await this.owned(tenantId, workstreamId);
    // Cluster mode: the sends waiting are the store's, queued on any host.
    const queued = await this.commands.queuedDurably(ws.id);
    return {
      workstreamId,
      tenantId,
      generation: ws.generation,
      ...this.commands.status(ws.id, ws.session),
      ...(queued === undefined ? {} : { queuedSends: queued }),
    };
  }

  /**
   * Closes a workstream (the machine's CLOSE; closed is final). While a turn runs it is refused
   * at once with TURN_IN_PROGRESS, or — with `waitMs` — waits that long for the turn to end, no
   * new turn admitted meanwhile, then closes (C1); on timeout it fails with TIMEOUT and the
   * workstream stays usable (C2). Refused while debt is unrepaired (TOOL_CLEANUP_PENDING).
   * Sends waiting behind the turn are revoked once the close is admitted (SEND_REVOKED, C7).
   * Listeners receive `ws_closed` and are removed.
   */
  async close(input: CloseInput): Promise<void> {
    checkCloseInput(input);
    const { tenantId, workstreamId, waitMs = 0 } = input;
    const key = workstreamKey(tenantId, workstreamId);
    // C7: announced as the host calls; a dispatch under way waits for the ownership check.
    const fence = this.commands.announce(key);
    let closedHere: boolean;
    try {
      await this.owned(tenantId, workstreamId);
      closedHere = await named(key, workstreamId, this.commands.close(key, tenantId, waitMs, fence));
    } finally {
      fence.done();
    }
    // Joined another soft close's CLOSE (C1): that one logs it (and advertised it), once.
    if (closedHere)
      this.logger.info({ workstreamId: key, tenantId, principal: input.principal }, 'workstream closed');
  }

  // ── turns ──────────────────────────────────────────────────────────────────

  /**
   * Claims a turn and dispatches it to a worker; resolves once the turn has started. Bad input
   * is refused with a typed error and nothing written (T5). While a turn runs, the send waits in
   * the workstream's queue (`limits.maxQueuedSends`; QUEUE_FULL, retryable, when full; with 0,
   * TURN_IN_PROGRESS) and starts when the turns before it have ended; its `signal` withdraws it
   * meanwhile (TURN_ABORTED). Only the running turn's own principal queues: another's message
   * is refused with TURN_IN_PROGRESS (T3). A cancel, a close or a poisoned turn end after this
   * call revokes it (SEND_REVOKED, C7). Unrepaired structural debt refuses it with
   * TOOL_CLEANUP_PENDING (S3); no free worker with CAPACITY_EXHAUSTED (T4, retryable).
   */
  send(input: SendInput): Promise<TurnHandle> {
    return this.tracked(async () => {
      this.assertOpen();
      checkSendInput(input, this.config.limits, this.commands.tools());
      const id = input.workstreamId;
      const key = workstreamKey(input.tenantId, id);
      // C7: the claim is captured now, as the host calls — before anything is awaited.
      const claim = this.commands.capture(key);
      const { signal, maxWaitMs, doubleTexting, ...rest } = input;
      let ws: WorkstreamRecord;
      try {
        ws = await this.owned(input.tenantId, id);
        if (signal?.aborted) throw aborted();
      } catch (e) {
        this.commands.settled(claim);
        throw e;
      }
      const claimed = await named(
        key,
        id,
        this.commands.send(
          claim,
          { ...rest, workstreamId: key },
          signal,
          maxWaitMs,
          doubleTexting ?? ws.doubleTexting ?? 'enqueue',
          ws.session,
        ),
      );
      return this.handle(claimed, id, signal);
    });
  }

  /**
   * Approves the call a workstream's turn waits for (its `approval_requested` token; issue 26):
   * the turn resumes — on any worker — and the call runs, with `arguments` instead of the
   * model's when given. Refused with a typed error, nothing changed: a token that names no wait
   * of this workstream (APPROVAL_STALE: another turn's, one cancelled, timed out or decided), a
   * denial already given (APPROVAL_DECIDED), another tenant's workstream (WORKSTREAM_NOT_FOUND),
   * arguments that are not a JSON object within `limits.maxToolArgBytes` (INVALID_INPUT). The
   * same approval again answers `already_decided`.
   */
  approve(input: ApproveInput): Promise<DecisionResult> {
    return this.decide(input, true);
  }

  /**
   * Denies the call a workstream's turn waits for: the turn resumes, the call's result says it was
   * denied (and `reason`), effect `none` — it never ran — and the model goes on. Refusals as `approve`.
   */
  deny(input: DenyInput): Promise<DecisionResult> {
    return this.decide(input, false);
  }

  private decide(input: ApproveInput | DenyInput, approved: boolean): Promise<DecisionResult> {
    return this.tracked(async () => {
      this.assertOpen();
      checkDecisionInput(input, approved ? 'approve' : 'deny');
      const id = input.workstreamId;
      const key = workstreamKey(input.tenantId, id);
      // C7: a cancel the host makes after this call revokes it, as it would a send.
      const claim = this.commands.capture(key);
      const args = approved ? (input as ApproveInput).arguments : undefined;
      const reason = approved ? undefined : (input as DenyInput).reason;
      const deciding = (async () => {
        await this.owned(input.tenantId, id);
        return named(
          key,
          id,
          this.commands.decide(claim, {
            workstreamId: key,
            tenantId: input.tenantId,
            principal: input.principal,
            token: input.token,
            approved,
            ...(args === undefined ? {} : { arguments: JSON.stringify(args) }),
            ...(reason === undefined ? {} : { reason }),
          }),
        );
      })();
      // Made now, in time: the wait's timeout, should it fire meanwhile, lets it go first.
      this.commands.decisionMade(key, deciding);
      let decided: Decided;
      try {
        decided = await deciding;
      } finally {
        this.commands.settled(claim);
      }
      if ('alreadyDecided' in decided) return { status: 'already_decided' };
      return { status: 'resumed', turn: this.handle(decided.resumed, id, undefined) };
    });
  }

  /**
   * Force cancel. A running turn: the abort commits unconditionally, results are synthesized
   * before the slot is released, and this resolves once the workstream is idle. An idle
   * workstream with unrepaired debt: repaired. An idle clean one: a silent no-op (false).
   */
  async cancel(input: WorkstreamRef): Promise<boolean> {
    checkRef(input, 'cancel');
    const { tenantId, workstreamId } = input;
    const key = workstreamKey(tenantId, workstreamId);
    // C7: sends the host made before this call cannot start after it — not even one whose
    // dispatch is under way while this call's ownership check is still on its way to the store.
    const fence = this.commands.announce(key);
    try {
      await this.owned(tenantId, workstreamId);
      this.logger.info({ workstreamId: key, tenantId, principal: input.principal }, 'cancel requested');
      return await named(key, workstreamId, this.commands.cancel(key, fence));
    } finally {
      fence.done();
    }
  }

  /**
   * History rewrite (L8): replaces rows 1..throughSeq with a system summary. While a turn runs
   * it is fenced by that turn's abort: refused once the abort has committed (a rewrite that has
   * not started is revoked); one already in flight completes before the abort's repair runs
   * (never torn); a declined abort changes nothing. On an idle workstream it runs under a lease.
   */
  async compact(input: CompactInput): Promise<{ removed: number }> {
    checkCompactInput(input, this.config.limits);
    const { tenantId, workstreamId } = input;
    const key = workstreamKey(tenantId, workstreamId);
    await this.owned(tenantId, workstreamId);
    return named(
      key,
      workstreamId,
      this.commands.compact(key, input.throughSeq, {
        commitKey: input.commitKey ?? `compact:${randomUUID()}`,
        message: { role: 'system', content: input.summary },
      }),
    );
  }

  /**
   * Drops the last `turns` turns of an idle workstream (each begins with a user message; rows
   * before the first, such as a compaction summary, stay). Refused while a turn runs
   * (TURN_IN_PROGRESS) or debt is unrepaired (TOOL_CLEANUP_PENDING); more turns than the
   * history holds is INVALID_INPUT; with `ifLastSeq`, a history that moved on since is
   * COMMIT_CONFLICT. Nothing is written when refused. The rewrite cannot be abandoned once its
   * write has begun: a `cancel()` meanwhile returns at once without waiting for it, and revokes
   * it (FENCED) if it has not begun (C6).
   */
  async rewind(input: RewindInput): Promise<RewindResult> {
    checkRewindInput(input);
    const { tenantId, workstreamId } = input;
    const key = workstreamKey(tenantId, workstreamId);
    // Captured as the host calls: a cancel after this call revokes the rewind if it has not begun.
    const claim = this.commands.capture(key);
    try {
      await this.owned(tenantId, workstreamId);
    } catch (e) {
      this.commands.settled(claim);
      throw e;
    }
    return named(key, workstreamId, this.commands.rewind(claim, input.turns, input.ifLastSeq));
  }

  stats(): RuntimeStats {
    return this.commands.stats();
  }

  /** Aborts running turns (reason `shutdown`), waits for them to settle, stops the pool and store. */
  shutdown(): Promise<void> {
    // Every caller waits for the same, complete shutdown.
    this.shutdownPromise ??= this.doShutdown();
    return this.shutdownPromise;
  }

  /** `await using tw = await Turnwarden.start(…)` shuts it down at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  // ── internals ──────────────────────────────────────────────────────────────

  private async doShutdown(): Promise<void> {
    await this.engine.stop(() => Promise.allSettled([...this.inFlight]));
    if (this.harness) detachSeamController(this.harness.controller);
  }

  /** The host's handle on a claimed turn: `cancel()`, and the send's signal wired to it. */
  private handle(claimed: ClaimedTurn, workstreamId: string, signal: AbortSignal | undefined): TurnHandle {
    const { workstreamId: key, generation } = claimed;
    // The result names the workstream as the caller did (`outward`).
    const done = claimed.done.then(
      (result): TurnResult => ({
        ...result,
        workstreamId,
        ...(result.error === undefined ? {} : { error: outwardWire(result.error, key, workstreamId) }),
      }),
    );
    const cancel = (): Promise<TurnResult> => {
      // A turn on another host (a send queued durably) is cancelled there.
      if (claimed.cancel !== undefined) claimed.cancel();
      else this.commands.cancelTurn(key, claimed.done);
      return done;
    };
    if (signal) {
      const onAbort = () => void cancel();
      signal.addEventListener('abort', onAbort, { once: true });
      void done.then(() => signal.removeEventListener('abort', onAbort));
      if (signal.aborted) onAbort(); // aborted while the claim was being admitted
    }
    return { workstreamId, generation, done, cancel };
  }

  /** Runs an API call, counted among the calls shutdown waits for. */
  private tracked<T>(call: () => Promise<T>): Promise<T> {
    const p = call();
    this.inFlight.add(p);
    const done = () => this.inFlight.delete(p);
    p.then(done, done);
    return p;
  }

  private assertOpen(): void {
    if (this.commands.closing) throw errors.shuttingDown('turnwarden is shutting down');
  }

  /** T2: another tenant's workstream is simply not found. */
  /**
   * The workstream, if this tenant owns it: another tenant's is not found (T2), and so is one
   * being deleted (D2: hidden), except to the delete's own retry.
   */
  private async owned(tenantId: string, workstreamId: string, { deleting = false } = {}) {
    // The ids were checked with the call's input (checkRef, checkSendInput, checkCompactInput).
    const key = workstreamKey(tenantId, workstreamId);
    const ws = await this.store.getWorkstream(key);
    if (!ws || ws.tenantId !== tenantId || (!deleting && this.commands.tombstone(key) !== undefined)) {
      throw errors.workstreamNotFound(`workstream ${workstreamId} not found`);
    }
    return ws;
  }
}

function details(ws: {
  readonly id: string;
  readonly tenantId: string;
  readonly incarnation: string;
  readonly status: 'open' | 'closed';
  readonly generation: number;
  readonly createdAt: number;
  readonly closedAt?: number;
  readonly doubleTexting?: DoubleTexting;
}): WorkstreamDetails {
  return {
    workstreamId: keyWorkstreamId(ws.id),
    tenantId: ws.tenantId,
    incarnation: ws.incarnation,
    status: ws.status,
    generation: ws.generation,
    createdAt: ws.createdAt,
    ...(ws.closedAt === undefined ? {} : { closedAt: ws.closedAt }),
    ...(ws.doubleTexting === undefined ? {} : { doubleTexting: ws.doubleTexting }),
  };
}
