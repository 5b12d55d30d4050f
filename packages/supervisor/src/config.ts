/**
 * (Over 300 lines on purpose: every option's default and its check, each naming its field, in
 * the one place a host reads to learn what it may configure.)
 *
 * Supervisor configuration. Validated once, at construction: a bad value is refused with an
 * INVALID_CONFIG error whose message names the field, and nothing starts.
 */
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import {
  errors,
  HOST_ID_PATTERN,
  HOST_ID_RULE,
  type ModelPlacement,
  type TurnwardenError,
} from '@turnwarden/protocol';

export interface WatchdogConfig {
  /** A turn with no progress for this long is aborted (L1). */
  readonly timeoutMs: number;
  /** Detection granularity: a stall is detected within timeoutMs + pollMs (L1). */
  readonly pollMs: number;
  /** How long an aborted turn gets to unwind before its worker is terminated (L3). */
  readonly graceMs: number;
  /** Optional start-to-close bound per turn, even for a turn that heartbeats forever (L11). */
  readonly turnDeadlineMs?: number;
  /**
   * From dispatch until the worker's first stamp — the turn's entry — the idle bound does not
   * run: a turn is never charged for time its worker had not received it. This bound does.
   */
  readonly dispatchMs: number;
  /**
   * The watchdog polls on a thread of its own (default true), so a supervisor thread busy with a
   * thousand turns' claims, writes and events does not make its polls late (L12); it commits an
   * abort's fence there and hands each stage to the supervisor's thread. `false`: it polls on the
   * supervisor's thread. Always set in a resolved configuration.
   */
  readonly thread?: boolean;
}

export interface LeaseConfig {
  readonly ttlMs: number;
  readonly renewMs: number;
}

export interface PoolConfig {
  /** Most worker threads (= most concurrently active sessions) per host (T4). */
  readonly maxWorkers: number;
  /** Idle workers kept spawned and ready, so activation never pays for a spawn. */
  readonly warmWorkers: number;
  /** Per-worker heap limit (T7); the worker is treated as crashed when it exceeds it. */
  readonly maxOldGenerationSizeMb?: number;
  /**
   * Per-worker limit of V8's young generation (MB). A session worker allocates little per turn
   * (its model calls run elsewhere), so a small young generation keeps each of thousands of
   * workers close to an empty thread's memory; a turn that allocates more just collects more
   * often. Absent: V8's default (up to 16 MB semi-spaces).
   */
  readonly maxYoungGenerationSizeMb?: number;
  /** A worker not ready this long after its spawn (a plugin import that hangs) is terminated. */
  readonly startTimeoutMs: number;
  /**
   * How long a claim waits for a worker without any worker becoming ready or exiting, before
   * CAPACITY_EXHAUSTED. A ramp from a cold pool keeps its claims waiting (in arrival order) for
   * as long as spawns keep completing.
   */
  readonly acquireTimeoutMs: number;
  /** After a peak, warm workers beyond `warmWorkers` idle this long are stopped (ms; 0: never). */
  readonly idleTimeoutMs: number;
  /** Workers starting at once: spawns after an abort storm queue instead of starving the host. */
  readonly maxConcurrentSpawns: number;
  /**
   * How much lower than the supervisor's thread the session workers are scheduled (a nice
   * increment, 0–19; 0 leaves them equal). On Linux a thread's priority is its own, so turns
   * that spin on every core still leave the supervisor's thread — the watchdog — the CPU it
   * needs (L12). Elsewhere the setting is ignored: lowering it would lower the whole process.
   */
  readonly workerNice: number;
}

export interface LimitsConfig {
  readonly maxModelSteps: number;
  readonly maxToolArgBytes: number;
  readonly maxMessageBytes: number;
  /**
   * Sends that may wait behind a workstream's running turn (C7); one more is refused with
   * QUEUE_FULL. 0 turns queueing off: a send during a turn is refused with TURN_IN_PROGRESS.
   */
  readonly maxQueuedSends: number;
  /**
   * Cluster mode: sends of one tenant that may wait behind turns on all its workstreams and all
   * the hosts together (the database's queue); one more is refused with QUEUE_FULL. Unset: only
   * `maxQueuedSends` per workstream bounds them.
   */
  readonly maxQueuedSendsPerTenant?: number;
}

/** Retries of journal writes the store reports as transient (P3, P4). */
export interface JournalConfig {
  /** Attempts per batch of rows, the first included, before the write fails (1: never retry). */
  readonly maxAttempts: number;
  /** Backoff before retry n: a random point in [½, 1] × min(retryMaxMs, retryBaseMs × 2^(n-1)). */
  readonly retryBaseMs: number;
  readonly retryMaxMs: number;
  /** Period of the maintenance sweep that retries every batch waiting out its backoff at once. */
  readonly sweepMs: number;
}

/** Event streams: the replay ring (E1) and the bounds on what listeners may hold (E3). */
export interface EventsConfig {
  /** Events kept per workstream for a reconnect to replay; older ones answer `replay_truncated`. */
  readonly replayLimit: number;
  /**
   * Replay rings kept for workstreams nobody listens to; beyond it the least recently active
   * one is dropped (a reconnect to it then answers `replay_truncated`). Bounds memory (E3).
   */
  readonly maxIdleStreams: number;
  /** Events an `events()` iterator may hold unread; one more closes it with `stream_overflow` (E3). */
  readonly listenerBuffer: number;
}

/**
 * Fair admission (T4): how turns share the host's `pool.maxWorkers` workers among tenants, and
 * how sends wait when none is free.
 */
export interface AdmissionConfig {
  /** Turns one tenant may run at once (default and most: `pool.maxWorkers`). */
  readonly maxActivePerTenant: number;
  /** Sends waiting for a worker on the host; one more is refused (CAPACITY_EXHAUSTED). 0: never wait. */
  readonly maxWaiting: number;
  /** Sends of one tenant waiting; one more of that tenant is refused, the others still wait. */
  readonly maxWaitingPerTenant: number;
  /** The longest a send waits for a worker, unless the send gives its own `maxWaitMs`. */
  readonly maxWaitMs: number;
  /**
   * Cluster mode (several hosts on one database): turns one tenant may run at once on all the
   * hosts together (T4 across hosts), counted by the database as the turns' leases are taken. A
   * send over it waits — as for a worker, `maxWaitMs` — until a turn of its tenant ends on any
   * host. Unset: each host bounds a tenant by `maxActivePerTenant` alone.
   */
  readonly maxActivePerTenantInCluster?: number;
}

/**
 * Where model calls run. `shared` (default): on a few shared model threads (`threads`, about
 * one per core) that run every session's calls, stamp each turn's clock slot per event and send
 * tokens to listeners in batches, while the session's worker sleeps until the assistant message
 * is complete — a token wakes one shared thread, not a session's. `session`: in the session's
 * own worker, as before — for hosts that must isolate a provider per session (a wedged provider
 * then stops one worker, which is terminated, instead of a shared thread).
 */
export interface ModelsConfig {
  readonly placement: ModelPlacement;
  /** Shared model threads (with `shared`). */
  readonly threads: number;
  /** Tokens reach the supervisor in batches at most this often, per thread (ms; 0: every loop turn). */
  readonly flushMs: number;
  /**
   * How much lower than the supervisor's thread the model threads are scheduled (a nice
   * increment, 0–19; Linux). Default 0: there are few of them and they carry every session's
   * tokens, so they must not lose the CPU to a host's other work; a provider that spins there is a
   * wedge, which is detected and the thread replaced (unlike session workers, `pool.workerNice`).
   */
  readonly nice: number;
}

import type { IsolationConfig } from './tools/isolation.js';

export type { IsolationConfig };

/** Calls that need a person's approval before they run (issue 26), and how long one waits. */
export interface ApprovalsConfig {
  /**
   * Tool names whose every call waits for `approve` or `deny` (`'all'`: every call), besides the
   * tools that say so themselves (`Tool.needsApproval`). Default: none.
   */
  readonly tools: readonly string[] | 'all';
  /** How long a call waits for its decision; then it is denied (effect `none`). Default 1 hour. */
  readonly timeoutMs: number;
  /** Set by the runtime when the host gave an `approvalPolicy` (not a setting). */
  readonly hostPolicy?: boolean;
}

export interface SupervisorConfig {
  readonly watchdog: WatchdogConfig;
  readonly lease: LeaseConfig;
  readonly pool: PoolConfig;
  readonly limits: LimitsConfig;
  readonly journal: JournalConfig;
  readonly events: EventsConfig;
  readonly admission: AdmissionConfig;
  /** The shared thread pool of thread-isolated tools (`isolatedTool`). */
  readonly isolation: IsolationConfig;
  /** Where model calls run: shared model threads (default) or each session's worker. */
  readonly models: ModelsConfig;
  readonly approvals: ApprovalsConfig;
  /**
   * The model provider turns use, by name: one of `pluginModules` must export it (there is no
   * default; the offline one is `scripted`, from the `@turnwarden/session/scripted` plugin).
   */
  readonly model: string;
  /** Modules every worker imports for extra tools and model providers. */
  readonly pluginModules: readonly string[];
  /**
   * Modules imported once, on the supervisor's thread, whose `tools` run there (host tools):
   * for tools whose work is in another process or service (MCP servers). See host-tools.ts.
   */
  readonly hostToolModules: readonly string[];
  /**
   * This host's stable id (a pod name, a machine name), unique among the processes sharing a
   * store. A restarted process with the same id takes over the leases its dead predecessor
   * left at once instead of waiting for them to expire (S7). Absent: every process is new.
   */
  readonly hostId?: string;
}

export type SupervisorConfigInput = {
  readonly watchdog?: Partial<WatchdogConfig>;
  readonly lease?: Partial<LeaseConfig>;
  readonly pool?: Partial<PoolConfig>;
  readonly limits?: Partial<LimitsConfig>;
  readonly journal?: Partial<JournalConfig>;
  readonly events?: Partial<EventsConfig>;
  readonly admission?: Partial<AdmissionConfig>;
  readonly isolation?: Partial<IsolationConfig>;
  readonly models?: Partial<ModelsConfig>;
  readonly approvals?: Partial<ApprovalsConfig>;
  /** Required: the name of a model provider one of `pluginModules` exports. */
  readonly model: string;
  readonly pluginModules?: readonly string[];
  readonly hostToolModules?: readonly string[];
  readonly hostId?: string;
};

/**
 * Plugin modules are imported inside every worker; a specifier that does not resolve would make
 * every worker fail to start. Resolved on the main thread first (relative to this package, as
 * `import()` here would), so the error names the field; workers import the resolved URLs.
 */
export function checkPluginModules(specifiers: readonly string[], field = 'pluginModules'): string[] {
  return specifiers.map((specifier, i) => {
    let resolved: string;
    try {
      resolved = import.meta.resolve(specifier);
    } catch (e) {
      throw bad(`${field}[${i}]`, `cannot be resolved: ${(e as Error).message}`, specifier);
    }
    if (resolved.startsWith('file:') && !existsSync(fileURLToPath(resolved))) {
      throw bad(`${field}[${i}]`, 'names a file that does not exist', specifier);
    }
    return resolved;
  });
}

/** Every setting's default (`model` has none). */
export const DEFAULT_CONFIG: Omit<SupervisorConfig, 'model'> = {
  watchdog: { timeoutMs: 30_000, pollMs: 1_000, graceMs: 2_000, dispatchMs: 60_000, thread: true },
  lease: { ttlMs: 30_000, renewMs: 10_000 },
  pool: {
    maxWorkers: 8,
    warmWorkers: 2,
    startTimeoutMs: 30_000,
    acquireTimeoutMs: 10_000,
    idleTimeoutMs: 60_000,
    maxConcurrentSpawns: 2,
    workerNice: 10,
  },
  limits: { maxModelSteps: 32, maxToolArgBytes: 64 * 1024, maxMessageBytes: 256 * 1024, maxQueuedSends: 8 },
  journal: { maxAttempts: 5, retryBaseMs: 50, retryMaxMs: 2_000, sweepMs: 1_000 },
  events: { replayLimit: 1_024, maxIdleStreams: 1_000, listenerBuffer: 1_024 },
  admission: { maxActivePerTenant: 8, maxWaiting: 1_024, maxWaitingPerTenant: 256, maxWaitMs: 30_000 },
  isolation: { maxThreads: 2, idleTimeoutMs: 30_000 },
  models: {
    placement: 'shared',
    threads: Math.max(1, Math.min(4, availableParallelism() - 1)),
    flushMs: 10,
    nice: 0,
  },
  approvals: { tools: [], timeoutMs: 60 * 60 * 1000 },
  pluginModules: [],
  hostToolModules: [],
};

const DAY_MS = 24 * 60 * 60 * 1000;

function bad(field: string, rule: string, value: unknown): TurnwardenError {
  return errors.invalidConfig(`${field} ${rule} (got ${JSON.stringify(value) ?? String(value)})`, { field });
}

function int(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw bad(field, `must be an integer in ${min}..${max}`, value);
  }
  return value;
}

function section(field: string, value: unknown, keys: readonly string[]): Record<string, unknown> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw bad(field, 'must be an object', value);
  for (const key of Object.keys(value)) {
    if (!keys.includes(key))
      throw bad(`${field}.${key}`, 'is not a known setting', (value as Record<string, unknown>)[key]);
  }
  return value as Record<string, unknown>;
}

export function resolveConfig(input: unknown): SupervisorConfig {
  const top = section('config', input, [
    'watchdog',
    'lease',
    'pool',
    'limits',
    'journal',
    'events',
    'admission',
    'isolation',
    'models',
    'approvals',
    'model',
    'pluginModules',
    'hostToolModules',
    'hostId',
  ]);
  const d = DEFAULT_CONFIG;

  const w = section('watchdog', top.watchdog, [
    'timeoutMs',
    'pollMs',
    'graceMs',
    'turnDeadlineMs',
    'dispatchMs',
    'thread',
  ]);
  const timeoutMs = int('watchdog.timeoutMs', w.timeoutMs ?? d.watchdog.timeoutMs, 10, DAY_MS);
  const pollMs = int('watchdog.pollMs', w.pollMs ?? d.watchdog.pollMs, 2, 60_000);
  if (pollMs > timeoutMs)
    throw bad('watchdog.pollMs', `must not exceed watchdog.timeoutMs (${timeoutMs})`, pollMs);
  const graceMs = int('watchdog.graceMs', w.graceMs ?? d.watchdog.graceMs, 0, 10 * 60_000);
  const deadline =
    w.turnDeadlineMs === undefined
      ? undefined
      : int('watchdog.turnDeadlineMs', w.turnDeadlineMs, 10, 7 * DAY_MS);
  const dispatchMs = int(
    'watchdog.dispatchMs',
    w.dispatchMs ?? Math.max(d.watchdog.dispatchMs, 2 * timeoutMs),
    10,
    DAY_MS,
  );

  const thread = w.thread ?? d.watchdog.thread;
  if (typeof thread !== 'boolean') throw bad('watchdog.thread', 'must be a boolean', thread);

  const l = section('lease', top.lease, ['ttlMs', 'renewMs']);
  const ttlMs = int('lease.ttlMs', l.ttlMs ?? d.lease.ttlMs, 100, DAY_MS);
  const renewMs = int(
    'lease.renewMs',
    l.renewMs ?? Math.min(d.lease.renewMs, Math.floor(ttlMs / 3)),
    10,
    DAY_MS,
  );
  if (renewMs >= ttlMs) throw bad('lease.renewMs', `must be less than lease.ttlMs (${ttlMs})`, renewMs);
  if (ttlMs <= graceMs + renewMs) {
    throw bad(
      'lease.ttlMs',
      `must exceed watchdog.graceMs + lease.renewMs (${graceMs + renewMs}) so recovery still holds the lease`,
      ttlMs,
    );
  }

  const p = section('pool', top.pool, [
    'maxWorkers',
    'warmWorkers',
    'maxOldGenerationSizeMb',
    'maxYoungGenerationSizeMb',
    'startTimeoutMs',
    'acquireTimeoutMs',
    'idleTimeoutMs',
    'maxConcurrentSpawns',
    'workerNice',
  ]);
  const startTimeoutMs = int('pool.startTimeoutMs', p.startTimeoutMs ?? d.pool.startTimeoutMs, 100, DAY_MS);
  const acquireTimeoutMs = int(
    'pool.acquireTimeoutMs',
    p.acquireTimeoutMs ?? d.pool.acquireTimeoutMs,
    0,
    DAY_MS,
  );
  const poolIdleTimeoutMs = int('pool.idleTimeoutMs', p.idleTimeoutMs ?? d.pool.idleTimeoutMs, 0, DAY_MS);
  const maxConcurrentSpawns = int(
    'pool.maxConcurrentSpawns',
    p.maxConcurrentSpawns ?? d.pool.maxConcurrentSpawns,
    1,
    256,
  );
  const workerNice = int('pool.workerNice', p.workerNice ?? d.pool.workerNice, 0, 19);
  const maxWorkers = int('pool.maxWorkers', p.maxWorkers ?? d.pool.maxWorkers, 1, 4096);
  const warmWorkers = int(
    'pool.warmWorkers',
    p.warmWorkers ?? Math.min(d.pool.warmWorkers, maxWorkers),
    0,
    maxWorkers,
  );
  const heap =
    p.maxOldGenerationSizeMb === undefined
      ? undefined
      : int('pool.maxOldGenerationSizeMb', p.maxOldGenerationSizeMb, 16, 64 * 1024);
  const young =
    p.maxYoungGenerationSizeMb === undefined
      ? undefined
      : int('pool.maxYoungGenerationSizeMb', p.maxYoungGenerationSizeMb, 1, 1024);

  const lim = section('limits', top.limits, [
    'maxModelSteps',
    'maxToolArgBytes',
    'maxMessageBytes',
    'maxQueuedSends',
    'maxQueuedSendsPerTenant',
  ]);
  const limits: LimitsConfig = {
    maxModelSteps: int('limits.maxModelSteps', lim.maxModelSteps ?? d.limits.maxModelSteps, 1, 10_000),
    maxToolArgBytes: int(
      'limits.maxToolArgBytes',
      lim.maxToolArgBytes ?? d.limits.maxToolArgBytes,
      16,
      64 << 20,
    ),
    maxMessageBytes: int(
      'limits.maxMessageBytes',
      lim.maxMessageBytes ?? d.limits.maxMessageBytes,
      16,
      64 << 20,
    ),
    maxQueuedSends: int('limits.maxQueuedSends', lim.maxQueuedSends ?? d.limits.maxQueuedSends, 0, 1_000),
    ...(lim.maxQueuedSendsPerTenant === undefined
      ? {}
      : {
          maxQueuedSendsPerTenant: int(
            'limits.maxQueuedSendsPerTenant',
            lim.maxQueuedSendsPerTenant,
            1,
            1_000_000,
          ),
        }),
  };

  const model = top.model;
  if (model === undefined) {
    throw bad(
      'model',
      'is required: the name of a model provider one of pluginModules exports (offline: pluginModules ["@turnwarden/session/scripted"], model "scripted")',
      model,
    );
  }
  if (typeof model !== 'string' || model.length === 0)
    throw bad('model', 'must be a non-empty string', model);
  const plugins = top.pluginModules ?? d.pluginModules;
  if (!Array.isArray(plugins) || plugins.some((m) => typeof m !== 'string' || m.length === 0)) {
    throw bad('pluginModules', 'must be an array of module specifiers', plugins);
  }
  const hostTools = top.hostToolModules ?? d.hostToolModules;
  if (!Array.isArray(hostTools) || hostTools.some((m) => typeof m !== 'string' || m.length === 0)) {
    throw bad('hostToolModules', 'must be an array of module specifiers', hostTools);
  }

  const j = section('journal', top.journal, ['maxAttempts', 'retryBaseMs', 'retryMaxMs', 'sweepMs']);
  const retryBaseMs = int('journal.retryBaseMs', j.retryBaseMs ?? d.journal.retryBaseMs, 1, DAY_MS);
  const journal: JournalConfig = {
    maxAttempts: int('journal.maxAttempts', j.maxAttempts ?? d.journal.maxAttempts, 1, 100),
    retryBaseMs,
    retryMaxMs: int(
      'journal.retryMaxMs',
      j.retryMaxMs ?? Math.max(retryBaseMs, d.journal.retryMaxMs),
      retryBaseMs,
      DAY_MS,
    ),
    sweepMs: int('journal.sweepMs', j.sweepMs ?? d.journal.sweepMs, 10, DAY_MS),
  };

  const ev = section('events', top.events, ['replayLimit', 'maxIdleStreams', 'listenerBuffer']);
  const events: EventsConfig = {
    replayLimit: int('events.replayLimit', ev.replayLimit ?? d.events.replayLimit, 1, 1_000_000),
    maxIdleStreams: int('events.maxIdleStreams', ev.maxIdleStreams ?? d.events.maxIdleStreams, 0, 10_000_000),
    listenerBuffer: int('events.listenerBuffer', ev.listenerBuffer ?? d.events.listenerBuffer, 1, 1_000_000),
  };

  const ad = section('admission', top.admission, [
    'maxActivePerTenant',
    'maxWaiting',
    'maxWaitingPerTenant',
    'maxWaitMs',
    'maxActivePerTenantInCluster',
  ]);
  const maxWaiting = int('admission.maxWaiting', ad.maxWaiting ?? d.admission.maxWaiting, 0, 1_000_000);
  const admission: AdmissionConfig = {
    maxActivePerTenant: int(
      'admission.maxActivePerTenant',
      ad.maxActivePerTenant ?? maxWorkers,
      1,
      maxWorkers,
    ),
    maxWaiting,
    maxWaitingPerTenant: int(
      'admission.maxWaitingPerTenant',
      ad.maxWaitingPerTenant ?? Math.min(d.admission.maxWaitingPerTenant, maxWaiting),
      0,
      maxWaiting,
    ),
    maxWaitMs: int('admission.maxWaitMs', ad.maxWaitMs ?? d.admission.maxWaitMs, 0, DAY_MS),
    ...(ad.maxActivePerTenantInCluster === undefined
      ? {}
      : {
          maxActivePerTenantInCluster: int(
            'admission.maxActivePerTenantInCluster',
            ad.maxActivePerTenantInCluster,
            1,
            1_000_000,
          ),
        }),
  };

  const iso = section('isolation', top.isolation, ['maxThreads', 'idleTimeoutMs', 'maxOldGenerationSizeMb']);
  const isolation: IsolationConfig = {
    maxThreads: int('isolation.maxThreads', iso.maxThreads ?? d.isolation.maxThreads, 1, 256),
    idleTimeoutMs: int('isolation.idleTimeoutMs', iso.idleTimeoutMs ?? d.isolation.idleTimeoutMs, 0, DAY_MS),
    ...(iso.maxOldGenerationSizeMb === undefined
      ? {}
      : {
          maxOldGenerationSizeMb: int(
            'isolation.maxOldGenerationSizeMb',
            iso.maxOldGenerationSizeMb,
            16,
            64 * 1024,
          ),
        }),
  };

  const mo = section('models', top.models, ['placement', 'threads', 'flushMs', 'nice']);
  const placement = mo.placement ?? d.models.placement;
  if (placement !== 'shared' && placement !== 'session') {
    throw bad('models.placement', "must be 'shared' or 'session'", placement);
  }
  const models: ModelsConfig = {
    placement,
    threads: int('models.threads', mo.threads ?? d.models.threads, 1, 64),
    flushMs: int('models.flushMs', mo.flushMs ?? d.models.flushMs, 0, 1_000),
    nice: int('models.nice', mo.nice ?? d.models.nice, 0, 19),
  };

  const ap = section('approvals', top.approvals, ['tools', 'timeoutMs']);
  const approvalTools = ap.tools ?? d.approvals.tools;
  if (
    approvalTools !== 'all' &&
    !(
      Array.isArray(approvalTools) &&
      approvalTools.every((t) => typeof t === 'string' && t.length > 0 && t.length <= 128)
    )
  ) {
    throw bad('approvals.tools', "must be 'all' or an array of tool names", approvalTools);
  }
  const approvals: ApprovalsConfig = {
    tools: approvalTools === 'all' ? 'all' : [...(approvalTools as string[])],
    timeoutMs: int('approvals.timeoutMs', ap.timeoutMs ?? d.approvals.timeoutMs, 1_000, 7 * DAY_MS),
  };

  const hostId = top.hostId;
  if (hostId !== undefined && (typeof hostId !== 'string' || !HOST_ID_PATTERN.test(hostId))) {
    throw bad('hostId', HOST_ID_RULE, hostId);
  }

  return {
    ...(hostId === undefined ? {} : { hostId }),
    watchdog: {
      timeoutMs,
      pollMs,
      graceMs,
      dispatchMs,
      thread,
      ...(deadline === undefined ? {} : { turnDeadlineMs: deadline }),
    },
    lease: { ttlMs, renewMs },
    pool: {
      maxWorkers,
      warmWorkers,
      startTimeoutMs,
      acquireTimeoutMs,
      idleTimeoutMs: poolIdleTimeoutMs,
      maxConcurrentSpawns,
      workerNice,
      ...(heap === undefined ? {} : { maxOldGenerationSizeMb: heap }),
      ...(young === undefined ? {} : { maxYoungGenerationSizeMb: young }),
    },
    limits,
    journal,
    events,
    admission,
    isolation,
    models,
    approvals,
    model,
    pluginModules: [...(plugins as string[])],
    hostToolModules: [...(hostTools as string[])],
  };
}
