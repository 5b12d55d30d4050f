/**
 * memory — bytes per idle workstream (heap and rss, SQLite's in-memory pages included in
 * rss) and rss per active turn. Measured in a child process forked with --expose-gc, so every
 * reading follows full collections and nothing else of the bench is in the heap.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { BenchContext } from './common.js';
import type { MemoryChildConfig, MemoryChildMessage, MemoryReport } from './memory-child.js';
import { row, type SectionResult, target } from './report.js';

const childFile = fileURLToPath(new URL('./memory-child.js', import.meta.url));
const IDLE_TARGET = 16 * 1024;

function runChild(cfg: MemoryChildConfig, timeoutMs: number): Promise<MemoryReport> {
  return new Promise((resolve, reject) => {
    const child = fork(childFile, [JSON.stringify(cfg)], {
      execArgv: [...process.execArgv.filter((a) => a !== '--expose-gc'), '--expose-gc'],
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      if (stderr.length < 4000) stderr += chunk.toString('utf8');
    });
    let message: MemoryChildMessage | undefined;
    child.on('message', (m) => {
      message = m as MemoryChildMessage;
    });
    const timer = setTimeout(() => {
      child.kill();
      reject(new Error(`memory child did not finish within ${timeoutMs} ms`));
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (message?.ok) resolve(message.report);
      else if (message) reject(new Error(message.error));
      else
        reject(
          new Error(`memory child exited (${signal ?? code}) without a report: ${stderr.trim().slice(-600)}`),
        );
    });
  });
}

const KB = 1024;
const MB = 1024 * 1024;

export async function benchMemory(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const cfg: MemoryChildConfig = { count: ctx.quick ? 3_000 : 10_000, active: 4, waiting: 1_000 };
  const r = await runChild(cfg, ctx.quick ? 45_000 : 90_000);
  const heapKb = r.idleHeapPerWorkstream / KB;
  const w = r.waiting;
  const rssKb = r.idleRssPerWorkstream / KB;
  return {
    name: 'memory',
    title: 'memory per workstream',
    ours: `${r.count.toLocaleString('en-US')} idle workstreams created through the runtime (:memory: store); ${r.active} active heartbeat turns`,
    baseline: 'one parked session worker thread (what an idle workstream would cost if it kept its thread)',
    rows: [
      row('heap per idle workstream', 'KB', heapKb, {
        target: target(`≤ ${IDLE_TARGET / KB} KB`, r.idleHeapPerWorkstream <= IDLE_TARGET),
      }),
      row('rss per idle workstream (incl. SQLite)', 'KB', rssKb, {
        baseline: r.idleThreadRss / KB,
        target: target(`≤ ${IDLE_TARGET / KB} KB`, r.idleRssPerWorkstream <= IDLE_TARGET),
      }),
      row('rss per active turn, worker spawned for it', 'MB', r.activeRssPerTurnWithSpawn / MB, {
        baseline: r.idleThreadRss / MB,
      }),
      row('rss per active turn, on a pre-warmed worker', 'MB', r.activeRssPerTurnWarm / MB),
      row('main-thread heap per active turn, spawned worker', 'KB', r.activeHeapPerTurnWithSpawn / KB),
      row('main-thread heap per active turn, pre-warmed worker', 'KB', r.activeHeapPerTurnWarm / KB),
      row('ms per createWorkstream (batches of 100)', 'ms', r.createMsPerWorkstream),
      row(
        `rss per session waiting for approval (${w.count.toLocaleString('en-US')})`,
        'KB',
        w.rssPerSession / KB,
        {
          baseline: r.idleThreadRss / KB,
          target: target('no thread held: < a parked worker thread', w.rssPerSession < r.idleThreadRss),
        },
      ),
      row('heap per session waiting for approval', 'KB', w.heapPerSession / KB),
      row('worker threads held by the waiting sessions (stats: busy)', '', w.busyWorkers, {
        target: target('0', w.busyWorkers === 0 && w.activeTurns === 0),
      }),
      row('workers ever spawned for them (pool.maxWorkers 2)', '', w.workersSpawned, {
        target: target(`≤ ${w.maxWorkers}`, w.workersSpawned <= w.maxWorkers),
      }),
      row('ms per turn to its wait', 'ms', w.msPerTurn),
    ],
    notes: [
      r.gcExposed
        ? 'readings follow three gc() passes in a child process started with --expose-gc'
        : 'gc() was NOT exposed in the child: readings include garbage',
      'rss is process-wide: it includes SQLite pages and the worker threads; freed memory is not always returned to the OS, so small rss deltas are noisy',
      `spawned row: each turn spawned its worker (no warm pool); warm row: a second runtime whose start warmed ${r.active} workers, each reused by one turn — both rows fail if stats().pool shows another spawn count or a retirement`,
      'idle workstream: nothing of it lives on the supervisor heap (the watchdog watches active turns only); its cost is its store rows',
      `waiting for approval (A1): ${w.awaiting.toLocaleString('en-US')} turns ended awaiting_approval on a runtime with pool.maxWorkers 2 — each turn's call needs approval (approvals.tools); stats() then: ${w.activeTurns} active turns, ${w.busyWorkers} busy workers; baseline: a parked worker thread`,
    ],
  };
}
