/**
 * events — the event path (E1, E3): events per second from a session worker to N listeners
 * through the supervisor (worker port, RPC ordering, the per-workstream stream and its replay
 * ring) against a raw loop of `postMessage` from a worker thread to N callbacks, both yielding a
 * macrotask per event; the replay of 10,000 events after a reconnect against a plain loop that
 * hands the same events to a listener; and the memory the streams hold for 10,000 workstreams
 * that each had a turn and nobody listens to (bounded by `events.maxIdleStreams`).
 */
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { EventHub, Turnwarden, type TurnwardenEvent } from '@turnwarden/supervisor/testing';
import type { BenchContext } from './common.js';
import { PRINCIPAL, TENANT } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { median } from './stats.js';

const LISTENERS = 4;
const RAW_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
let i = 0;
const next = () => {
  if (i++ >= workerData.n) return parentPort.postMessage({ t: 'end' });
  parentPort.postMessage({ t: 'token', text: 'x' });
  setImmediate(next);
};
setImmediate(next);
`;

/** Raw: a worker posts n messages, a macrotask apart; the main thread hands each to N callbacks. */
function raw(n: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(RAW_WORKER, { eval: true, workerData: { n } });
    const counts = new Array<number>(LISTENERS).fill(0);
    const callbacks = counts.map((_, k) => () => {
      counts[k]!++;
    });
    let t0 = 0;
    worker.on('message', (m: { t: string }) => {
      if (t0 === 0) t0 = performance.now();
      if (m.t === 'end') {
        const s = (performance.now() - t0) / 1000;
        void worker.terminate();
        resolve(counts[0]! / s);
        return;
      }
      for (const cb of callbacks) cb();
    });
    worker.on('error', reject);
  });
}

/** Ours: a turn of the ticker model streams n tokens; N listeners follow the workstream. */
async function ours(
  tw: Turnwarden,
  n: number,
  workstreamId: string,
): Promise<{ perSec: number; tokens: number }> {
  await tw.createWorkstream({ tenantId: TENANT, principal: PRINCIPAL, workstreamId });
  const counts = new Array<number>(LISTENERS).fill(0);
  let t0 = 0;
  let t1 = 0;
  let tokens = 0;
  const offs = await Promise.all(
    counts.map((_, k) =>
      tw.subscribe({
        tenantId: TENANT,
        principal: PRINCIPAL,
        workstreamId,
        listener: (e) => {
          counts[k]!++;
          if (k !== 0) return;
          if (e.type === 'turn_started') t0 = performance.now();
          if (e.type === 'token') tokens++;
          if (e.type === 'idle') t1 = performance.now();
        },
      }),
    ),
  );
  await (await tw.send({ tenantId: TENANT, principal: PRINCIPAL, workstreamId, content: String(n) })).done;
  for (const off of offs) off();
  return { perSec: counts[0]! / ((t1 - t0) / 1000), tokens };
}

/** Replay of `n` events to a reconnecting listener, against a loop handing the same events over. */
function replay(n: number, ctx: BenchContext): { oursMs: number; rawMs: number } {
  const hub = new EventHub(ctx.logger, { replayLimit: n });
  for (let i = 0; i < n; i++) hub.emit('ws', 'token', 1, { text: 'x' });
  const events: TurnwardenEvent[] = [];
  const first = hub.position('ws') - n;
  let got = 0;
  const t0 = performance.now();
  const off = hub.subscribe('ws', () => got++, { kind: 'after', id: first });
  const oursMs = performance.now() - t0;
  off();
  if (got !== n) throw new Error(`replay delivered ${got} of ${n} events`);
  // The same events in an array, handed to a listener one by one.
  hub.subscribe('copy', (e) => events.push(e), { kind: 'after', id: first });
  const listener = (_e: TurnwardenEvent) => got--;
  const t2 = performance.now();
  for (const e of events) listener(e);
  const rawMs = performance.now() - t2;
  return { oursMs, rawMs };
}

/** Heap held by the streams of `count` idle workstreams that each had a turn's worth of events. */
function idleStreams(
  count: number,
  ctx: BenchContext,
): { perWorkstream: number; streams: number; gc: boolean } {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const before = process.memoryUsage().heapUsed;
  const hub = new EventHub(ctx.logger);
  for (let w = 0; w < count; w++) {
    const id = `idle-${w}`;
    hub.emit(id, 'turn_started', 1, { workerId: 1 });
    hub.emit(id, 'state', 1, { state: 'streaming' });
    for (let t = 0; t < 8; t++) hub.emit(id, 'token', 1, { text: 'some words of the answer ' });
    hub.emit(id, 'stream_end', 1, { status: 'completed' });
    hub.emit(id, 'idle', 1, {});
  }
  gc?.();
  const after = process.memoryUsage().heapUsed;
  const streams = hub.stats().streams;
  return { perWorkstream: Math.max(0, after - before) / count, streams, gc: gc !== undefined };
}

/** Ours on a runtime of its own, its session workers at `workerNice`. */
async function oursAt(ctx: BenchContext, n: number, workerNice: number) {
  const tw = await Turnwarden.start({
    logger: ctx.logger,
    pluginModules: [fileURLToPath(new URL('./ticker-plugin.js', import.meta.url))],
    model: 'ticker',
    pool: { maxWorkers: 2, warmWorkers: 1, workerNice },
    watchdog: { timeoutMs: 60_000, pollMs: 1_000 },
  });
  try {
    return await ours(tw, n, 'events-bench');
  } finally {
    await tw.shutdown();
  }
}

export async function benchEvents(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const n = ctx.quick ? 3_000 : 20_000;
  const rawPerSec = await raw(n);
  const o = await oursAt(ctx, n, 10);
  const unniced = await oursAt(ctx, n, 0);
  // Warm (the first pass compiles the replay path); the median of five.
  const passes = Array.from({ length: 6 }, () => replay(10_000, ctx)).slice(1);
  const r = {
    oursMs: median(passes.map((p) => p.oursMs)),
    rawMs: median(passes.map((p) => p.rawMs)),
  };
  const m = idleStreams(10_000, ctx);
  return {
    name: 'events',
    title: `events from a worker to ${LISTENERS} listeners; replay; idle streams`,
    ours: `a session worker streaming ${n.toLocaleString('en-US')} tokens a macrotask apart through the supervisor to ${LISTENERS} subscribe() listeners`,
    baseline: `a worker thread posting ${n.toLocaleString('en-US')} messages a macrotask apart to ${LISTENERS} callbacks (raw postMessage)`,
    rows: [
      row(`events/s delivered to each of ${LISTENERS} listeners`, 'events/s', o.perSec, {
        baseline: rawPerSec,
        target: target('≥ 0.5×', o.perSec / rawPerSec >= 0.5),
      }),
      row('  the same, session workers not niced (pool.workerNice 0)', 'events/s', unniced.perSec, {
        baseline: rawPerSec,
      }),
      row('replay of 10,000 events after a reconnect', 'ms', r.oursMs, { baseline: r.rawMs }),
      row(
        'heap per idle workstream held by event streams (10,000 with a turn each)',
        'KB',
        m.perWorkstream / 1024,
        {
          target: target('≤ 16 KB', m.perWorkstream <= 16 * 1024),
        },
      ),
    ],
    notes: [
      `${o.tokens.toLocaleString('en-US')} of ${n.toLocaleString('en-US')} tokens arrived as token events (the worker coalesces tokens only within one macrotask)`,
      'session workers run at nice +10 by default (pool.workerNice, so turns that spin leave the watchdog its CPU, L12); the raw worker is not niced: under other load the niced worker is the one that waits',
      'replay: the median of 5 warm passes; baseline: the same 10,000 events handed to a listener from an array, no ring, no filter',
      `idle streams: ${m.streams.toLocaleString('en-US')} of 10,000 rings kept (events.maxIdleStreams), the rest dropped; ${m.gc ? 'after gc()' : 'gc() not exposed: the heap delta includes garbage, an upper bound'}`,
    ],
  };
}
