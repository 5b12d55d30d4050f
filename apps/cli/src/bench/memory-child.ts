/**
 * The memory section's measuring process, forked by memory.ts with --expose-gc so that every
 * reading follows full collections. Reports one `MemoryReport` over IPC and exits.
 */
import { ActivityClock } from '@turnwarden/clock';
import { sessionWorkerUrl } from '@turnwarden/session';
import { type PoolStats, Turnwarden } from '@turnwarden/supervisor';
import { refusingHost, WorkerPool } from '@turnwarden/supervisor/testing';
import { SCRIPTED } from '../scripted.js';
import { PRINCIPAL, script, silentLogger, TENANT } from './common.js';
import { sleep } from './stats.js';

export interface MemoryChildConfig {
  readonly count: number;
  readonly active: number;
  /** Sessions whose turn ends waiting for an approval (issue 26). */
  readonly waiting: number;
}

export interface MemoryReport {
  readonly gcExposed: boolean;
  readonly count: number;
  readonly active: number;
  readonly createMsPerWorkstream: number;
  readonly idleHeapPerWorkstream: number;
  readonly idleRssPerWorkstream: number;
  readonly activeRssPerTurnWithSpawn: number;
  readonly activeHeapPerTurnWithSpawn: number;
  readonly activeRssPerTurnWarm: number;
  readonly activeHeapPerTurnWarm: number;
  readonly idleThreadRss: number;
  readonly waiting: {
    readonly count: number;
    readonly rssPerSession: number;
    readonly heapPerSession: number;
    /** What stats() said once every turn had ended waiting. */
    readonly activeTurns: number;
    readonly busyWorkers: number;
    readonly workersSpawned: number;
    readonly maxWorkers: number;
    readonly awaiting: number;
    readonly msPerTurn: number;
  };
}

export type MemoryChildMessage =
  | { readonly ok: true; readonly report: MemoryReport }
  | { readonly ok: false; readonly error: string };

const gc = (globalThis as { gc?: () => void }).gc;

interface Reading {
  readonly heap: number;
  readonly rss: number;
}

async function reading(): Promise<Reading> {
  for (let i = 0; i < 3; i++) {
    gc?.();
    await sleep(30);
  }
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
}

const host = refusingHost('the memory bench');

async function startTurns(tw: Turnwarden, ids: readonly string[]): Promise<void> {
  const content = script([{ tools: [{ name: 'heartbeat', args: { ms: 600_000, everyMs: 50 } }] }]);
  const started = ids.map(
    (id) =>
      new Promise<void>((resolve, reject) => {
        const subscribed = tw.subscribe({
          tenantId: TENANT,
          principal: PRINCIPAL,
          workstreamId: id,
          listener: (e) => {
            if (e.type !== 'tool_started') return;
            void subscribed.then((off) => off());
            resolve();
          },
        });
        subscribed.catch(reject);
      }),
  );
  for (const id of ids) await tw.send({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: id, content });
  await Promise.all(started);
  await sleep(200); // a few heartbeats in
}

/**
 * Fails the reading loudly when the pool did not do what the row claims: `spawned` is how many
 * workers the turns must have spawned (the cold row: one each; the warm row: none).
 */
function checkPool(label: string, before: PoolStats, after: PoolStats, spawned: number, busy: number): void {
  const did = after.spawned - before.spawned;
  if (did !== spawned || after.busy !== busy || after.retired !== before.retired) {
    throw new Error(
      `${label}: the turns spawned ${did} workers (expected ${spawned}), ${after.busy} busy (expected ${busy}), ` +
        `${after.retired - before.retired} retired: the row would not measure what it says`,
    );
  }
}

function startRuntime(cfg: MemoryChildConfig, warmWorkers: number): Promise<Turnwarden> {
  return Turnwarden.start({
    ...SCRIPTED,
    store: { path: ':memory:' },
    logger: silentLogger(),
    watchdog: { timeoutMs: 60_000, pollMs: 1_000, graceMs: 1_000 },
    pool: { maxWorkers: cfg.active, warmWorkers },
  });
}

async function createActive(tw: Turnwarden, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    ids.push(
      (await tw.createWorkstream({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: `active-${i}` }))
        .workstreamId,
    );
  }
  return ids;
}

async function cancelAll(tw: Turnwarden, ids: readonly string[]): Promise<void> {
  for (const id of ids) await tw.cancel({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: id });
}

async function measure(cfg: MemoryChildConfig): Promise<MemoryReport> {
  let idleHeap: number;
  let idleRss: number;
  let createMs: number;
  let spawnRss: number;
  let spawnHeap: number;
  let warmRss: number;
  let warmHeap: number;
  // No warm pool: every turn spawns its worker (the cold row).
  const tw = await startRuntime(cfg, 0);
  try {
    // Warm-up: statements prepared, code paths compiled, turns' workstreams created.
    const activeIds = await createActive(tw, cfg.active);
    for (let i = 0; i < 200; i++)
      await tw.createWorkstream({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: `warmup-${i}` });

    const m0 = await reading();
    const t0 = performance.now();
    const batch = 100;
    for (let i = 0; i < cfg.count; i += batch) {
      const n = Math.min(batch, cfg.count - i);
      await Promise.all(
        Array.from({ length: n }, (_, j) =>
          tw.createWorkstream({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: `idle-${i + j}` }),
        ),
      );
    }
    createMs = (performance.now() - t0) / cfg.count;
    const m1 = await reading();
    idleHeap = (m1.heap - m0.heap) / cfg.count;
    idleRss = (m1.rss - m0.rss) / cfg.count;

    // Active turns on freshly spawned workers: the thread is part of what they cost.
    const m2 = await reading();
    const p2 = tw.stats().pool;
    await startTurns(tw, activeIds);
    const m3 = await reading();
    checkPool('rss per active turn, worker spawned for it', p2, tw.stats().pool, cfg.active, cfg.active);
    spawnRss = (m3.rss - m2.rss) / cfg.active;
    spawnHeap = (m3.heap - m2.heap) / cfg.active;
    // A cancelled turn's worker is retired, not reused: these workers cannot serve the warm row.
    await cancelAll(tw, activeIds);
  } finally {
    await tw.shutdown();
  }

  // Active turns on workers warmed before the first reading and reused as they are: a runtime
  // whose start left `active` warm workers. (Measuring the turns after a cancel on the runtime
  // above measured the spawns that replaced the workers the cancel retired: 7.75 MB per turn.)
  const warm = await startRuntime(cfg, cfg.active);
  try {
    const activeIds = await createActive(warm, cfg.active);
    const p4 = warm.stats().pool;
    if (p4.warm !== cfg.active)
      throw new Error(`the warm pool holds ${p4.warm} workers, expected ${cfg.active}`);
    const m4 = await reading();
    await startTurns(warm, activeIds);
    const m5 = await reading();
    checkPool('rss per active turn, on a pre-warmed worker', p4, warm.stats().pool, 0, cfg.active);
    warmRss = (m5.rss - m4.rss) / cfg.active;
    warmHeap = (m5.heap - m4.heap) / cfg.active;
    await cancelAll(warm, activeIds);
  } finally {
    await warm.shutdown();
  }

  // The naive design's cost: one parked thread per workstream.
  const m6 = await reading();
  const pool = new WorkerPool({
    clock: ActivityClock.create(cfg.active).buffer,
    maxWorkers: cfg.active,
    warmWorkers: cfg.active,
    startTimeoutMs: 30_000,
    acquireTimeoutMs: 10_000,
    idleTimeoutMs: 0,
    maxConcurrentSpawns: 2,
    workerUrl: sessionWorkerUrl,
    pluginModules: [],
    host,
    logger: silentLogger(),
  });
  let threadRss: number;
  try {
    await pool.start();
    await sleep(200);
    const m7 = await reading();
    threadRss = (m7.rss - m6.rss) / cfg.active;
  } finally {
    await pool.close();
  }
  const waiting = await measureWaiting(cfg);
  return {
    waiting,
    gcExposed: gc !== undefined,
    count: cfg.count,
    active: cfg.active,
    createMsPerWorkstream: createMs,
    idleHeapPerWorkstream: idleHeap,
    idleRssPerWorkstream: idleRss,
    activeRssPerTurnWithSpawn: spawnRss,
    activeHeapPerTurnWithSpawn: spawnHeap,
    activeRssPerTurnWarm: warmRss,
    activeHeapPerTurnWarm: warmHeap,
    idleThreadRss: threadRss,
  };
}

/**
 * `waiting` sessions whose turn's call needs approval: each turn runs on one of two workers and
 * ends waiting; the rss and heap they add, and what stats() says of threads once all wait.
 */
async function measureWaiting(cfg: MemoryChildConfig): Promise<MemoryReport['waiting']> {
  const maxWorkers = 2;
  const tw = await Turnwarden.start({
    ...SCRIPTED,
    store: { path: ':memory:' },
    logger: silentLogger(),
    watchdog: { timeoutMs: 60_000, pollMs: 1_000, graceMs: 1_000 },
    pool: { maxWorkers, warmWorkers: maxWorkers },
    approvals: { tools: ['echo'] },
  });
  try {
    const content = script([{ tools: [{ name: 'echo', args: { text: 'needs a yes' } }] }, { text: 'ok' }]);
    const ids: string[] = [];
    for (let i = 0; i < cfg.waiting; i++)
      ids.push(
        (await tw.createWorkstream({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: `waiting-${i}` }))
          .workstreamId,
      );
    // Warm-up: one turn to its wait and back, so code paths are compiled before the reading.
    const warm = await (
      await tw.send({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: ids[0]!, content })
    ).done;
    if (warm.approval === undefined) throw new Error(`the warm-up turn ended ${warm.status}, not waiting`);
    await tw.cancel({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: ids[0]! });
    const before = await reading();
    const t0 = performance.now();
    // Two at a time, as the two workers allow: each turn ends waiting and frees its worker.
    for (let i = 0; i < ids.length; i += maxWorkers) {
      const turns = await Promise.all(
        ids
          .slice(i, i + maxWorkers)
          .map((workstreamId) => tw.send({ tenantId: TENANT, principal: PRINCIPAL, workstreamId, content })),
      );
      for (const t of turns) {
        const r = await t.done;
        if (r.status !== 'awaiting_approval') throw new Error(`a turn ended ${r.status}, not waiting`);
      }
    }
    const msPerTurn = (performance.now() - t0) / ids.length;
    const after = await reading();
    const stats = tw.stats();
    return {
      count: ids.length,
      rssPerSession: (after.rss - before.rss) / ids.length,
      heapPerSession: (after.heap - before.heap) / ids.length,
      activeTurns: stats.activeTurns,
      busyWorkers: stats.pool.busy,
      workersSpawned: stats.pool.spawned,
      maxWorkers,
      awaiting: stats.turnsAwaitingApproval,
      msPerTurn,
    };
  } finally {
    await tw.shutdown();
  }
}

function send(message: MemoryChildMessage): Promise<void> {
  return new Promise((resolve) => {
    if (!process.send) {
      resolve();
      return;
    }
    process.send(message, undefined, {}, () => resolve());
  });
}

const cfg = JSON.parse(process.argv[2] ?? '{"count":10000,"active":4,"waiting":1000}') as MemoryChildConfig;
try {
  await send({ ok: true, report: await measure(cfg) });
} catch (e) {
  await send({ ok: false, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) });
}
process.disconnect?.();
