/**
 * activation — taking a warm session worker for a turn, against spawning a Worker per turn
 * (the same session worker, through the pool with no warm workers) and against a warm
 * piscina 5 pool running a trivial task. Also: when does a kill settle relative to the
 * thread's exit (our pool.terminate vs piscina's abort)?
 */
import { fileURLToPath } from 'node:url';
import { ActivityClock } from '@turnwarden/clock';
import { sessionWorkerUrl } from '@turnwarden/session';
import { refusingHost, WorkerPool } from '@turnwarden/supervisor/testing';
import { Piscina } from 'piscina';
import type { BenchContext } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { median, quantile, sleep } from './stats.js';

const taskFile = fileURLToPath(new URL('./piscina-task.js', import.meta.url));

const host = refusingHost('the activation bench');

function pool(ctx: BenchContext, workers: number, warm: number): WorkerPool {
  return new WorkerPool({
    clock: ActivityClock.create(workers).buffer,
    maxWorkers: workers,
    warmWorkers: warm,
    startTimeoutMs: 30_000,
    acquireTimeoutMs: 10_000,
    idleTimeoutMs: 0,
    maxConcurrentSpawns: 2,
    workerUrl: sessionWorkerUrl,
    pluginModules: [],
    host,
    logger: ctx.logger,
  });
}

/** Ours: acquire a warm worker, one RPC round trip, release. */
async function warmActivation(p: WorkerPool): Promise<number> {
  const t0 = performance.now();
  const h = await p.acquire();
  await h.api.ping();
  p.release(h);
  return performance.now() - t0;
}

/** Baseline: a new session Worker until it serves its API and answers a ping; then terminate it. */
async function spawnActivation(p: WorkerPool): Promise<{ activate: number; settleAfterExit: number }> {
  const t0 = performance.now();
  const h = await p.acquire();
  await h.api.ping();
  const activate = performance.now() - t0;
  let exitAt = Number.NaN;
  h.worker.once('exit', () => {
    exitAt = performance.now();
  });
  await p.terminate(h);
  return { activate, settleAfterExit: performance.now() - exitAt };
}

async function piscinaRun(pp: Piscina, n: number): Promise<number> {
  const t0 = performance.now();
  const r = (await pp.run({ n })) as number;
  if (r !== n) throw new Error(`piscina task answered ${r}, expected ${n}`);
  return performance.now() - t0;
}

/** piscina's abort of a running task: when the run() rejects, relative to the thread's exit. */
async function piscinaAbort(): Promise<{ rejectMinusExit: number; aliveAtReject: boolean }> {
  const pp = new Piscina({ filename: taskFile, minThreads: 1, maxThreads: 1 });
  try {
    await pp.run({ n: 1 });
    let exitAt: number | undefined;
    for (const w of pp.threads) {
      w.once('exit', () => {
        exitAt ??= performance.now();
      });
    }
    const ac = new AbortController();
    const running = pp.run({ spin: true }, { signal: ac.signal });
    await sleep(30);
    ac.abort();
    let rejectAt = Number.NaN;
    let aliveAtReject = false;
    try {
      await running;
    } catch {
      rejectAt = performance.now();
      aliveAtReject = exitAt === undefined;
    }
    for (let i = 0; i < 200 && exitAt === undefined; i++) await sleep(5);
    return { rejectMinusExit: rejectAt - (exitAt ?? Number.NaN), aliveAtReject };
  } finally {
    await pp.destroy();
  }
}

export async function benchActivation(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const rounds = ctx.quick ? 4 : 8;
  const warmPerRound = ctx.quick ? 25 : 100;
  const spawnsPerRound = ctx.quick ? 1 : 3;
  const warmPool = pool(ctx, 2, 2);
  const coldPool = pool(ctx, 1, 0);
  const pp = new Piscina({ filename: taskFile, minThreads: 2, maxThreads: 2 });
  const ours: number[] = [];
  const spawn: number[] = [];
  const settle: number[] = [];
  const pisc: number[] = [];
  try {
    await warmPool.start();
    // Warm-up, not reported: JIT, comlink proxies, piscina's task module import.
    for (let i = 0; i < 20; i++) await warmActivation(warmPool);
    for (let i = 0; i < 20; i++) await piscinaRun(pp, i);
    await spawnActivation(coldPool);
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < warmPerRound; i++) ours.push(await warmActivation(warmPool));
      for (let i = 0; i < spawnsPerRound; i++) {
        const s = await spawnActivation(coldPool);
        spawn.push(s.activate);
        settle.push(s.settleAfterExit);
      }
      for (let i = 0; i < warmPerRound; i++) pisc.push(await piscinaRun(pp, i + 1));
    }
  } finally {
    await Promise.all([warmPool.close(), coldPool.close(), pp.destroy()]);
  }
  const abort = await piscinaAbort();
  const o50 = median(ours);
  const s50 = median(spawn);
  const speedup = s50 / o50;
  return {
    name: 'activation',
    title: 'activating a session worker for a turn',
    ours: 'WorkerPool: acquire a warm session worker + ping() round trip + release',
    baseline:
      'new session Worker per activation (pool with 0 warm workers) until it serves and answers ping()',
    rows: [
      row('ms per activation p50 (vs spawn)', 'ms', o50, {
        baseline: s50,
        target: target('≥ 20× faster (ratio ≤ 1/20)', speedup >= 20),
      }),
      row('ms per activation p90 (vs spawn)', 'ms', quantile(ours, 0.9), { baseline: quantile(spawn, 0.9) }),
      row('ms per activation p50 (vs piscina run)', 'ms', o50, { baseline: median(pisc) }),
      row('ms per activation p90 (vs piscina run)', 'ms', quantile(ours, 0.9), {
        baseline: quantile(pisc, 0.9),
      }),
      row('kill settles − thread exit (vs piscina abort)', 'ms', median(settle), {
        baseline: abort.rejectMinusExit,
      }),
    ],
    notes: [
      `${ours.length} warm activations, ${spawn.length} spawns, ${pisc.length} piscina runs, interleaved in ${rounds} rounds; warm is ${speedup.toFixed(0)}× faster than a spawn`,
      'piscina baseline: warm Piscina (minThreads = maxThreads = 2), one trivial task per run(), same process',
      `kill row: our pool.terminate() resolves only after the thread's 'exit' (≥ 0); piscina's run() rejected on abort ${Math.abs(abort.rejectMinusExit).toFixed(2)} ms ${abort.rejectMinusExit < 0 ? 'before' : 'after'} the thread exited (thread still alive at rejection: ${abort.aliveAtReject ? 'yes' : 'no'})`,
    ],
  };
}
