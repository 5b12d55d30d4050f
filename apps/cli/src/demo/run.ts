/**
 * The demo: starts an embedded supervisor on a fresh SQLite store, drives every workstream's
 * planned turns concurrently, shuts down, then re-reads the durable history and checks it.
 */
import { setMaxListeners } from 'node:events';
import { closeSync, existsSync, mkdirSync, openSync, readSync, rmSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { workstreamKey } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { type FaultyStore, faultyStore } from '@turnwarden/store/testing';
import { Turnwarden } from '@turnwarden/supervisor';
import { type DemoArgs, UsageError } from '../args.js';
import type { Output } from '../output.js';
import { type DemoObserver, driveWorkstream } from './driver.js';
import {
  auditHistory,
  countVerdicts,
  durableSynthesizedOf,
  type HistoryAudit,
  type IntegrityCheck,
  integrityChecks,
  mergeAudits,
  userRowsOf,
} from './integrity.js';
import { LiveView, type ViewMode } from './live-view.js';
import { openDemoLog } from './logging.js';
import { demoModel } from './provider.js';
import { buildSummary, type DemoSummary } from './summary.js';
import type { RecordKind, TurnRecord } from './types.js';
import { planConversation, planWorkload, type WorkloadPlan } from './workload.js';

/** Faults the demo's store injected, every kind. */
const injected = (applied: FaultyStore['applied']) =>
  applied.reject + applied.transient + applied['lose-ack'] + applied.delay;

/**
 * Two tenants share the host: `acme` owns three workstreams in four and floods it; `globex`
 * owns the rest. acme may run at most three workers in four (admission.maxActivePerTenant), and
 * round-robin admission gives globex its turn within one of acme's (T4).
 */
const tenantOf = (index: number) => (index % 4 === 3 ? 'globex' : 'acme');
const principalOf = (tenant: string) => `${tenant}-user`;
/** A send waits this long for a worker at most; the demo's turns are seconds long. */
const DEMO_MAX_WAIT_MS = 120_000;
/** How long an approval turn the driver lets time out waits (approvals.timeoutMs, its shortest). */
const APPROVAL_TIMEOUT_MS = 1_000;
const LEASE_TTL_MS = 5000;
const LEASE_RENEW_MS = 1000;

export interface DemoEnv {
  readonly output: Output;
  /** Aborted to stop early (Ctrl-C): no new turns; running ones are aborted by shutdown. */
  readonly stop?: AbortSignal;
  /** Where relative paths resolve (default `process.cwd()`). */
  readonly cwd?: string;
}

export interface DemoReport {
  readonly summary: DemoSummary;
  readonly checks: readonly IntegrityCheck[];
  readonly records: readonly TurnRecord[];
}

const SQLITE_HEADER = 'SQLite format 3\0';

/** The demo's db is recreated each run; refuse to delete a file that is not a SQLite database. */
function freshDatabase(path: string): void {
  if (path === ':memory:') return;
  mkdirSync(dirname(path), { recursive: true });
  if (existsSync(path) && statSync(path).size > 0) {
    const fd = openSync(path, 'r');
    const head = Buffer.alloc(SQLITE_HEADER.length);
    try {
      readSync(fd, head, 0, head.length, 0);
    } finally {
      closeSync(fd);
    }
    if (head.toString('latin1') !== SQLITE_HEADER) {
      throw new UsageError(`demo: ${path} exists and is not a SQLite database; refusing to replace it`);
    }
  }
  for (const f of [path, `${path}-wal`, `${path}-shm`, `${path}-journal`]) rmSync(f, { force: true });
}

function display(cwd: string, path: string): string {
  if (path === ':memory:') return path;
  const rel = relative(cwd, path);
  return rel.startsWith('..') || rel === '' ? path : `./${rel}`;
}

/**
 * Durable truth, re-read after shutdown through the store the supervisor wrote to: the
 * history audit, and how many workstreams hold a different number of user rows than the
 * messages `send` accepted.
 */
async function auditDurable(
  store: Store,
  plan: WorkloadPlan,
  perWorkstream: readonly (readonly TurnRecord[])[],
): Promise<{ audit: HistoryAudit; historyMismatches: number }> {
  const audits: HistoryAudit[] = [];
  let historyMismatches = 0;
  for (const [i, ws] of plan.workstreams.entries()) {
    const audit = auditHistory(await store.readHistory(workstreamKey(tenantOf(i), ws.id)));
    audits.push(audit);
    const accepted = (perWorkstream[i] ?? []).reduce((n, r) => n + userRowsOf(r), 0);
    if (audit.userMessages !== accepted) historyMismatches++;
  }
  return { audit: mergeAudits(audits), historyMismatches };
}

function viewMode(args: DemoArgs, output: Output): ViewMode {
  if (args.json || args.quiet) return 'quiet';
  return output.isTTY ? 'tty' : 'lines';
}

export async function runDemo(args: DemoArgs, env: DemoEnv): Promise<DemoReport> {
  const started = performance.now();
  const { output } = env;
  const cwd = env.cwd ?? process.cwd();
  const stop = env.stop ?? new AbortController().signal;
  // Every workstream's send in flight listens on `stop`.
  setMaxListeners(args.workstreams + 16, stop);
  const dbPath =
    args.db === undefined
      ? join(cwd, '.turnwarden', 'demo.db')
      : args.db === ':memory:'
        ? ':memory:'
        : resolve(cwd, args.db);
  const logFile = args.logStderr
    ? undefined
    : args.logFile !== undefined
      ? resolve(cwd, args.logFile)
      : join(dbPath === ':memory:' ? join(cwd, '.turnwarden') : dirname(dbPath), 'demo.log');
  freshDatabase(dbPath);
  const log = await openDemoLog(args.logLevel, logFile === undefined ? { output } : { file: logFile });

  const model = await demoModel(args);
  const plan = model.scripted
    ? planWorkload({
        workstreams: args.workstreams,
        turns: args.turns,
        seed: args.seed,
        timeoutMs: args.timeoutMs,
      })
    : planConversation({ workstreams: args.workstreams, turns: args.turns, seed: args.seed });
  const config = {
    pluginModules: model.pluginModules,
    model: model.model,
    watchdog: { timeoutMs: args.timeoutMs, pollMs: args.pollMs, graceMs: args.graceMs },
    // The lease must outlive grace + one renewal so recovery still holds it (config rule).
    lease: { ttlMs: Math.max(LEASE_TTL_MS, args.graceMs + LEASE_RENEW_MS + 1000), renewMs: LEASE_RENEW_MS },
    pool: { maxWorkers: args.maxWorkers, warmWorkers: args.warmWorkers },
    admission: { maxActivePerTenant: Math.max(1, Math.ceil((args.maxWorkers * 3) / 4)) },
    // An approval turn the driver lets time out is denied after this (its shortest allowed).
    approvals: { timeoutMs: APPROVAL_TIMEOUT_MS },
  };
  const mode = viewMode(args, output);
  if (mode !== 'quiet') {
    output.out(
      `turnwarden demo: ${args.workstreams} workstreams × ${args.turns} turns (seed ${args.seed}), ` +
        `watchdog ${args.timeoutMs}/${args.pollMs}/${args.graceMs} ms (timeout/poll/grace), ` +
        `${args.maxWorkers} workers, db ${display(cwd, dbPath)}, log ${logFile === undefined ? 'stderr' : display(cwd, logFile)}\n` +
        `  model: ${model.label}\n`,
    );
  }

  let store: Store;
  try {
    store = openSqliteStore({ path: dbPath });
  } catch (e) {
    await model.close();
    await log.close();
    throw e;
  }
  // The store the runtime writes through fails the planned tool rows (marked per turn) as real
  // stores fail; the audit after shutdown re-reads the file itself.
  const faults = faultyStore(store);
  let plannedFaults = 0;
  for (const ws of plan.workstreams) {
    for (const turn of ws.turns) {
      if (turn.fault === undefined) continue;
      const { marker, fault, times } = turn.fault;
      plannedFaults += times;
      faults.inject({
        match: (e) => e.message.role === 'tool' && e.message.content.includes(marker),
        fault,
        times,
      });
    }
  }
  let journalRetries = 0;
  let forceCancels = 0;
  let tw: Turnwarden | undefined;
  let view: LiveView | undefined;
  let shuttingDown: Promise<void> | undefined;
  const shutdown = () => {
    shuttingDown ??= tw?.shutdown() ?? Promise.resolve();
    return shuttingDown;
  };
  const onStop = () => void shutdown();
  try {
    tw = await Turnwarden.start({ store: faults.store, logger: log.logger, ...config });
    const runtime = tw;
    const liveView = new LiveView(output, mode, plan, () => runtime.stats());
    view = liveView;
    for (const [i, ws] of plan.workstreams.entries()) {
      const caller = { tenantId: tenantOf(i), principal: principalOf(tenantOf(i)) };
      await runtime.createWorkstream({ ...caller, workstreamId: ws.id });
      await runtime.subscribe({
        ...caller,
        workstreamId: ws.id,
        listener: (ev) => {
          if (ev.type === 'persistence' && ev.data.state === 'retrying') journalRetries++;
          liveView.event(ev);
        },
      });
    }
    stop.addEventListener('abort', onStop, { once: true });
    liveView.start();
    const observer: DemoObserver = {
      waiting: (w) => liveView.waiting(w),
      turnStarted: (w, i, k) => liveView.turnStarted(w, i, k),
      turnFinished: (r) => liveView.turnFinished(r),
      forceCancel: () => void forceCancels++,
    };
    const perWorkstream = await Promise.all(
      plan.workstreams.map((ws, i) =>
        driveWorkstream(
          {
            tw: runtime,
            tenantId: tenantOf(i),
            principal: principalOf(tenantOf(i)),
            stop,
            observer,
            maxWaitMs: DEMO_MAX_WAIT_MS,
          },
          ws,
        ),
      ),
    );
    liveView.stop();
    await shutdown();
    const stats = runtime.stats();

    const { audit, historyMismatches } = await auditDurable(store, plan, perWorkstream);
    const records = perWorkstream.flat();
    const verdicts = countVerdicts(records);
    const checks = integrityChecks({
      verdicts,
      audit,
      historyMismatches,
      // Results a rollback removed were counted, and are durable no more (M4).
      synthesizedCounted:
        stats.toolResultsSynthesized -
        records.reduce((n, r) => n + r.synthesized - durableSynthesizedOf(r), 0),
      faultsNotInjected: stop.aborted ? 0 : plannedFaults - injected(faults.applied),
      capacityRefusals: records.filter((r) => r.errorCode === 'CAPACITY_EXHAUSTED').length,
    });
    const planned = { ...plan.counts, 'idle-check': plan.workstreams.length } satisfies Record<
      RecordKind,
      number
    >;
    const summary = buildSummary({
      records,
      storeFaults: {
        planned: plannedFaults,
        reject: faults.applied.reject,
        transient: faults.applied.transient,
        lost_ack: faults.applied['lose-ack'],
        slow: faults.applied.delay,
      },
      journalRetries,
      forceCancels,
      planned,
      sessions: args.workstreams,
      turnsPerSession: args.turns,
      seed: args.seed,
      stats,
      verdicts,
      audit,
      checks,
      stoppedEarly: stop.aborted,
      config: {
        timeout_ms: config.watchdog.timeoutMs,
        poll_ms: config.watchdog.pollMs,
        grace_ms: config.watchdog.graceMs,
        lease_ttl_ms: config.lease.ttlMs,
        lease_renew_ms: config.lease.renewMs,
        max_workers: config.pool.maxWorkers,
        warm_workers: config.pool.warmWorkers,
        max_active_per_tenant: config.admission.maxActivePerTenant,
        model: model.label,
      },
      elapsedMs: performance.now() - started,
      db: display(cwd, dbPath),
      log: logFile === undefined ? 'stderr' : display(cwd, logFile),
    });
    return { summary, checks, records };
  } finally {
    stop.removeEventListener('abort', onStop);
    view?.stop();
    await shutdown().catch(() => undefined);
    await store.close();
    await model.close();
    await log.close();
  }
}
