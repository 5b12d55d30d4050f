/**
 * One supervisor, reused by many runs. Starting a runtime (a store, warm workers) costs far more
 * than a schedule: runs on a reused runtime differ only in their workstream, their seams and
 * mutations, and the log sink. Before every run `reset` checks that the previous run left
 * nothing behind — no active turn, no watched slot, no parked thread, no pending timer, no busy
 * worker — so state cannot leak from one schedule into the next (the `clean-start` invariant).
 */
import { randomBytes } from 'node:crypto';
import type { Mutation, SeamName } from '@turnwarden/protocol';
import { openPostgresStore, openSqliteStore, type Store } from '@turnwarden/store';
import { delayedStore } from '@turnwarden/store/testing';
import type { Turnwarden } from '@turnwarden/supervisor/harness';
import { startForTesting } from '@turnwarden/supervisor/harness';
import { pino } from 'pino';
import { SeamHarness } from './controller.js';
import { ManualTimers } from './manual-timers.js';
import type { LogLine } from './record.js';

export const RUN_CONFIG = {
  // graceMs and renewMs count on the harness's manual timers: only their ratio matters.
  watchdog: { timeoutMs: 100, pollMs: 10, graceMs: 200 },
  lease: { ttlMs: 900_000, renewMs: 20 },
  pool: { maxWorkers: 3, warmWorkers: 2 },
  model: 'scripted',
  // The harness schedules the session worker's own seams, among them each model event's: the
  // model runs in the session worker here. The shared model threads' crossings (a call's tokens,
  // result and abort against the turn's) are proven by the supervisor's tests of that placement.
  models: { placement: 'session' },
  // The approvals' scenarios: a `heartbeat` call waits for a decision (no other scenario calls it).
  approvals: { tools: ['heartbeat'] },
} as const;

/** The offline scripted model and demo tools: a plugin the harness loads explicitly. */
const SCRIPTED = '@turnwarden/session/scripted';

export const TENANT = 'harness';
export const PRINCIPAL = 'harness-user';

let schemas = 0;

export class HarnessRuntime {
  private sink: LogLine[] = [];
  private runs = 0;

  private constructor(
    readonly tw: Turnwarden,
    readonly store: Store,
    readonly harness: SeamHarness,
    /** The shared monotonic time, moved only by schedules. */
    readonly time: { now: number },
    /** Lease renewal and grace: they fire when a schedule moves them. */
    readonly timers: ManualTimers,
    /** The store delays every write (an asynchronous store). */
    readonly delayedWrites: boolean,
  ) {}

  /**
   * `delayedWrites`: the store delays every write by a random time (seeded), like a remote
   * asynchronous store — the scenarios must hold all the same. `postgres`: a PostgreSQL
   * connection string, for the PostgreSQL store instead of an in-memory SQLite one.
   */
  static async start(
    pluginModules?: readonly string[],
    options: { readonly delayedWrites?: boolean; readonly postgres?: string } = {},
  ): Promise<HarnessRuntime> {
    const harness = new SeamHarness(new Set(), new Set());
    // On PostgreSQL: a schema of its own per runtime, so runtimes never share workstreams.
    const inner =
      options.postgres === undefined
        ? openSqliteStore({ path: ':memory:' })
        : await openPostgresStore({
            connectionString: options.postgres,
            schema: `harness_${++schemas}_${randomBytes(3).toString('hex')}`,
          });
    const store = options.delayedWrites ? delayedStore(inner, { maxDelayMs: 3, seed: 11 }).store : inner;
    let runtime: HarnessRuntime | undefined;
    const logger = pino(
      { level: 'debug' },
      { write: (s: string) => void runtime?.sink.push(JSON.parse(s) as LogLine) },
    );
    const timers = new ManualTimers();
    const time = { now: 0 };
    const tw = await startForTesting(
      { ...RUN_CONFIG, store, logger, pluginModules: [SCRIPTED, ...(pluginModules ?? [])] },
      { harness, manualWatchdog: true, timers, now: () => time.now },
    );
    // The runtime's own periodic timers (the journal's sweep) are not a run's leftovers.
    timers.markLifetime();
    runtime = new HarnessRuntime(tw, store, harness, time, timers, options.delayedWrites === true);
    return runtime;
  }

  /**
   * Prepares the next run: a fresh workstream, the run's seams and mutations, its log sink.
   * Returns a description of what the previous run left behind, or undefined when clean.
   */
  async reset(
    park: ReadonlySet<SeamName>,
    mutations: ReadonlySet<Mutation>,
    logs: LogLine[],
  ): Promise<{ workstreamId: string; leaked: string | undefined }> {
    const left = this.harness.reset(park, mutations);
    const stats = this.tw.stats();
    if (stats.activeTurns > 0) left.push(`${stats.activeTurns} active turn(s)`);
    if (stats.watchdog.watched > 0) left.push(`${stats.watchdog.watched} watched slot(s)`);
    if (stats.pool.busy > 0) left.push(`${stats.pool.busy} busy worker(s)`);
    if (this.timers.size > 0) left.push(`${this.timers.size} pending timer(s)`);
    this.sink = logs;
    const workstreamId = `ws-h${++this.runs}`;
    await this.tw.createWorkstream({ tenantId: TENANT, principal: PRINCIPAL, workstreamId });
    return { workstreamId, leaked: left.length === 0 ? undefined : left.join('; ') };
  }

  async close(): Promise<void> {
    this.harness.reset(new Set(), new Set());
    await this.tw.shutdown();
    await this.store.close();
  }
}
