/**
 * spawn — a session worker from `new Worker` until it serves its API (the pool's spawn, the
 * bundled entry, loading the scripted plugin (model and demo tools, one bundled file) as the demo
 * does), against a bare
 * `new Worker` of an empty module until its first message. Interleaved, same process.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ActivityClock } from '@turnwarden/clock';
import { sessionWorkerUrl } from '@turnwarden/session';
import { refusingHost, WorkerPool } from '@turnwarden/supervisor/testing';
import type { BenchContext } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { median, quantile } from './stats.js';

const host = refusingHost('the spawn bench');

async function bare(url: URL): Promise<number> {
  const t0 = performance.now();
  const w = new Worker(url);
  await new Promise((resolve) => w.once('message', resolve));
  const ms = performance.now() - t0;
  await w.terminate();
  return ms;
}

async function ours(pool: WorkerPool): Promise<number> {
  const t0 = performance.now();
  const h = await pool.acquire(); // no warm worker: a spawn, until the worker serves its API
  const ms = performance.now() - t0;
  await pool.terminate(h);
  return ms;
}

export async function benchSpawn(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const n = ctx.quick ? 8 : 30;
  const dir = mkdtempSync(join(tmpdir(), 'turnwarden-spawn-'));
  const empty = join(dir, 'empty.mjs');
  writeFileSync(
    empty,
    "import { parentPort } from 'node:worker_threads';\nparentPort.postMessage('ready');\n",
  );
  const pool = new WorkerPool({
    clock: ActivityClock.create(2).buffer,
    maxWorkers: 2,
    warmWorkers: 0,
    startTimeoutMs: 30_000,
    acquireTimeoutMs: 30_000,
    idleTimeoutMs: 0,
    maxConcurrentSpawns: 2,
    workerUrl: sessionWorkerUrl,
    pluginModules: [import.meta.resolve('@turnwarden/session/scripted')],
    host,
    logger: ctx.logger,
  });
  const a: number[] = [];
  const b: number[] = [];
  try {
    await ours(pool); // warm the module cache of the process, as a running host has it
    await bare(pathToFileURL(empty));
    for (let i = 0; i < n; i++) {
      a.push(await ours(pool));
      b.push(await bare(pathToFileURL(empty)));
    }
  } finally {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const ratio = median(a) / median(b);
  return {
    name: 'spawn',
    title: 'spawning a session worker',
    ours: 'new session Worker (bundled entry) until it serves its API',
    baseline: 'new Worker of an empty module until its first message',
    rows: [
      row('spawn-to-ready p50', 'ms', median(a), {
        baseline: median(b),
        target: target('≤ 2× the empty worker', ratio <= 2),
      }),
      row('spawn-to-ready p90', 'ms', quantile(a, 0.9), { baseline: quantile(b, 0.9) }),
    ],
    notes: [`${n} spawns of each, interleaved.`],
  };
}
