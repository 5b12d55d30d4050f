/**
 * server — Turnwarden over HTTP against the same work through the embedded API (issue 12), on
 * loopback, in one run:
 *
 * - turns per second and the latency of a send (`POST …/messages` with `wait`: the whole turn)
 *   from a bounded load generator: C concurrent clients, each on its own workstream, for D
 *   seconds; against the same clients calling `tw.send(…).done` in-process;
 * - events per second of one turn streaming many tokens, read over SSE through a real socket,
 *   against a `subscribe()` listener on the embedded runtime.
 */
import { fileURLToPath } from 'node:url';
import { checkServerConfig, startServer } from '@turnwarden/server';
import { Turnwarden } from '@turnwarden/supervisor';
import { SCRIPTED } from '../scripted.js';
import { sseFrames } from '../sse.js';
import type { BenchContext } from './common.js';
import { row, type SectionResult } from './report.js';
import { median, quantile } from './stats.js';

const CLIENTS = 8;
const TOKEN = 'bench-token-0123456789abcdef';
const caller = { tenantId: 'bench', principal: 'bench-user' };
const RUNTIME = {
  pool: { maxWorkers: 4, warmWorkers: 4 },
  watchdog: { timeoutMs: 30_000, pollMs: 500 },
};
const TURN = JSON.stringify({ script: [{ text: 'ok' }] });

interface Load {
  readonly turns: number;
  readonly seconds: number;
  readonly latencies: number[];
}

async function load(ms: number, oneTurn: (client: number) => Promise<void>): Promise<Load> {
  const latencies: number[] = [];
  const t0 = performance.now();
  const end = t0 + ms;
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, client) => {
      while (performance.now() < end) {
        const s = performance.now();
        await oneTurn(client);
        latencies.push(performance.now() - s);
      }
    }),
  );
  return { turns: latencies.length, seconds: (performance.now() - t0) / 1000, latencies };
}

/** The bench's ticker model streams `n` tokens a macrotask apart: each one a separate event. */
const TICKER = {
  pluginModules: [fileURLToPath(new URL('./ticker-plugin.js', import.meta.url))],
  model: 'ticker',
};

/** Reads an SSE response until an `idle` event; returns the events received. */
async function readUntilIdle(res: Response): Promise<number> {
  let events = 0;
  for await (const frame of sseFrames(res.body as unknown as AsyncIterable<Uint8Array>)) {
    events++;
    if (frame.event === 'idle') return events;
  }
  return events;
}

export async function benchServer(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const ms = ctx.quick ? 1_500 : 5_000;
  const tokens = ctx.quick ? 2_000 : 10_000;

  // ── over HTTP ──
  const server = await startServer(
    checkServerConfig({
      port: 0,
      db: ':memory:',
      logLevel: 'silent',
      tokens: [{ token: TOKEN, ...caller }],
      runtime: RUNTIME,
    }),
  );
  const headers = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
  let http: Load;
  let sse: { events: number; seconds: number };
  try {
    for (let c = 0; c < CLIENTS; c++) {
      await fetch(`${server.url}/v1/workstreams`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ workstreamId: `c${c}` }),
      });
    }
    http = await load(ms, async (c) => {
      const res = await fetch(`${server.url}/v1/workstreams/c${c}/messages`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ content: TURN, wait: true }),
      });
      if (res.status !== 200) throw new Error(`a bench send answered ${res.status}: ${await res.text()}`);
      await res.arrayBuffer();
    });
  } finally {
    await server.shutdown();
  }
  const ticking = await startServer(
    checkServerConfig({
      port: 0,
      db: ':memory:',
      logLevel: 'silent',
      tokens: [{ token: TOKEN, ...caller }],
      runtime: { ...RUNTIME, ...TICKER },
    }),
  );
  try {
    await fetch(`${ticking.url}/v1/workstreams`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ workstreamId: 'sse' }),
    });
    const stream = await fetch(`${ticking.url}/v1/workstreams/sse/events`, {
      headers: { authorization: headers.authorization, accept: 'text/event-stream' },
    });
    const t0 = performance.now();
    const counted = readUntilIdle(stream);
    await fetch(`${ticking.url}/v1/workstreams/sse/messages`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ content: String(tokens) }),
    });
    const events = await counted;
    sse = { events, seconds: (performance.now() - t0) / 1000 };
  } finally {
    await ticking.shutdown();
  }

  // ── embedded ──
  const tw = await Turnwarden.start({ ...SCRIPTED, ...RUNTIME, logger: ctx.logger });
  let embedded: Load;
  let listener: { events: number; seconds: number };
  try {
    for (let c = 0; c < CLIENTS; c++) await tw.createWorkstream({ ...caller, workstreamId: `c${c}` });
    embedded = await load(ms, async (c) => {
      const result = await (await tw.send({ ...caller, workstreamId: `c${c}`, content: TURN })).done;
      if (result.status !== 'completed') throw new Error(`a bench turn ended ${result.status}`);
    });
  } finally {
    await tw.shutdown();
  }
  const ticker = await Turnwarden.start({ ...RUNTIME, ...TICKER, logger: ctx.logger });
  try {
    await ticker.createWorkstream({ ...caller, workstreamId: 'sse' });
    let events = 0;
    let idle: () => void = () => {};
    const done = new Promise<void>((resolve) => {
      idle = resolve;
    });
    const off = await ticker.subscribe({
      ...caller,
      workstreamId: 'sse',
      listener: (e) => {
        events++;
        if (e.type === 'idle') idle();
      },
    });
    const t0 = performance.now();
    await ticker.send({ ...caller, workstreamId: 'sse', content: String(tokens) });
    await done;
    listener = { events, seconds: (performance.now() - t0) / 1000 };
    off();
  } finally {
    await ticker.shutdown();
  }

  const tps = (l: Load) => l.turns / l.seconds;
  return {
    name: 'server',
    title: `Turnwarden over HTTP (loopback) against the embedded API, ${CLIENTS} clients`,
    ours: `the server on 127.0.0.1: ${CLIENTS} concurrent clients, each POSTing a one-step turn with wait (the whole turn), for ${ms / 1000} s; one turn of ${tokens.toLocaleString('en-US')} tokens, a macrotask apart (the bench's ticker model), read over SSE`,
    baseline:
      'the same clients calling tw.send(…).done in-process; the same turn followed by a subscribe() listener',
    rows: [
      row('turns per second', 'turns/s', tps(http), { baseline: tps(embedded) }),
      row('send → turn done, p50', 'ms', median(http.latencies), { baseline: median(embedded.latencies) }),
      row('send → turn done, p99', 'ms', quantile(http.latencies, 0.99), {
        baseline: quantile(embedded.latencies, 0.99),
      }),
      row('events per second to one client', 'events/s', sse.events / sse.seconds, {
        baseline: listener.events / listener.seconds,
      }),
    ],
    notes: [
      `turns: ${http.turns} over HTTP, ${embedded.turns} embedded; events: ${sse.events} over SSE, ${listener.events} to the listener `,
      'the load generator is bounded (a fixed number of clients, each one request at a time) and runs in the same process as the server: both sides share this 2-core machine',
    ],
  };
}
