/**
 * provider — the per-token cost of a turn through the OpenAI-compatible provider (issue 11):
 * a loopback server in a thread of its own streams the same answer of N small tokens to every
 * request; ours is a whole turn through the runtime — the session worker's provider (the AI
 * SDK's SSE parsing and chunk handling), its token events to the supervisor and a listener, the
 * journal — and, as a second row, the provider driven alone on the main thread; the baseline
 * reads the same stream with a bare `fetch`: a TextDecoder, a split on blank lines and a
 * JSON.parse per chunk.
 */
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { modelProvider } from '@turnwarden/providers';
import { Turnwarden } from '@turnwarden/supervisor';
import type { BenchContext } from './common.js';
import { PRINCIPAL, TENANT } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { median } from './stats.js';

const SERVER = `
const { parentPort, workerData } = require('node:worker_threads');
import(workerData.loopback).then(async ({ LoopbackServer, textReply }) => {
  const reply = textReply('x'.repeat(workerData.tokens * workerData.piece), workerData.piece);
  const server = await LoopbackServer.start({ fallback: () => reply });
  parentPort.postMessage(server.url);
});
`;

interface Server {
  readonly url: string;
  close(): Promise<void>;
}

/** The loopback server in a worker thread, answering every request with the same stream. */
async function startServer(tokens: number, piece: number): Promise<Server> {
  // The loopback module is resolved here, from the CLI's dependencies, and imported there.
  const loopback = import.meta.resolve('@turnwarden/providers/loopback');
  const worker = new Worker(SERVER, { eval: true, workerData: { tokens, piece, loopback } });
  const url = await new Promise<string>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  return {
    url,
    close: async () => {
      await worker.terminate();
    },
  };
}

/** Bare fetch: read the SSE body, parse each data line, concatenate the content. */
async function bare(url: string): Promise<{ ms: number; chars: number }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  const decoder = new TextDecoder();
  let buffered = '';
  let chars = 0;
  for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(bytes, { stream: true });
    let end = buffered.indexOf('\n\n');
    while (end >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      if (event.startsWith('data: ') && event !== 'data: [DONE]') {
        const chunk = JSON.parse(event.slice(6)) as { choices: { delta?: { content?: string } }[] };
        chars += chunk.choices[0]?.delta?.content?.length ?? 0;
      }
      end = buffered.indexOf('\n\n');
    }
  }
  return { ms: performance.now() - t0, chars };
}

/** The provider alone, on this thread. */
async function providerAlone(url: string): Promise<{ ms: number; chars: number }> {
  const p = modelProvider({
    name: 'loop',
    provider: 'openai-compatible',
    baseURL: url,
    model: 'm',
    maxRetries: 0,
  });
  const t0 = performance.now();
  let chars = 0;
  const stop = new AbortController();
  for await (const e of p.stream(
    { history: [{ role: 'user', content: 'hi' }], tools: [] },
    { signal: stop.signal, heartbeat: () => {} },
  )) {
    if (e.type === 'text') chars += e.text.length;
  }
  return { ms: performance.now() - t0, chars };
}

/** A whole turn through the runtime, from send to done; a listener counts the token text. */
async function turn(tw: Turnwarden, workstreamId: string): Promise<{ ms: number; chars: number }> {
  const caller = { tenantId: TENANT, principal: PRINCIPAL };
  await tw.createWorkstream({ ...caller, workstreamId });
  let chars = 0;
  const off = await tw.subscribe({
    ...caller,
    workstreamId,
    listener: (e) => {
      if (e.type === 'token') chars += e.data.text.length;
    },
  });
  const t0 = performance.now();
  const result = await (await tw.send({ ...caller, workstreamId, content: 'hi' })).done;
  const ms = performance.now() - t0;
  off();
  if (result.status !== 'completed') throw new Error(`the bench turn ended ${result.status}`);
  return { ms, chars };
}

export async function benchProvider(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const tokens = ctx.quick ? 2_000 : 10_000;
  const piece = 4;
  const passes = ctx.quick ? 3 : 5;
  const server = await startServer(tokens, piece);
  const previous = process.env.TURNWARDEN_MODELS;
  process.env.TURNWARDEN_MODELS = JSON.stringify([
    { name: 'loop', provider: 'openai-compatible', baseURL: server.url, model: 'm', maxRetries: 0 },
  ]);
  const tw = await Turnwarden.start({
    logger: ctx.logger,
    model: 'loop',
    pluginModules: [fileURLToPath(import.meta.resolve('@turnwarden/providers/from-env'))],
    pool: { maxWorkers: 1, warmWorkers: 1 },
    watchdog: { timeoutMs: 30_000, pollMs: 500 },
  });
  const ours: number[] = [];
  const alone: number[] = [];
  const base: number[] = [];
  const chars = { ours: 0, alone: 0, base: 0 };
  try {
    // One warm pass each (module caches, connection setup), then alternate.
    await turn(tw, 'provider-warm');
    await providerAlone(server.url);
    await bare(server.url);
    for (let i = 0; i < passes; i++) {
      const t = await turn(tw, `provider-${i}`);
      const a = await providerAlone(server.url);
      const b = await bare(server.url);
      ours.push(t.ms);
      alone.push(a.ms);
      base.push(b.ms);
      chars.ours = t.chars;
      chars.alone = a.chars;
      chars.base = b.chars;
    }
  } finally {
    await tw.shutdown();
    await server.close();
    if (previous === undefined) delete process.env.TURNWARDEN_MODELS;
    else process.env.TURNWARDEN_MODELS = previous;
  }
  const perToken = (ms: number) => (ms * 1000) / tokens;
  const o = perToken(median(ours));
  const a = perToken(median(alone));
  const b = perToken(median(base));
  return {
    name: 'provider',
    title: `per-token cost of a turn through the OpenAI-compatible provider (${tokens.toLocaleString('en-US')} tokens)`,
    ours: `a turn through the runtime with @turnwarden/providers (OpenAI-compatible, the AI SDK's provider layer), send → done, tokens to a listener; median of ${passes}`,
    baseline:
      'the same SSE stream read with a bare fetch: TextDecoder, split on blank lines, JSON.parse per chunk',
    rows: [
      row('µs per token, a whole turn', 'µs', o, { baseline: b, target: target('≤ 1.2×', o / b <= 1.2) }),
      row('µs per token, the provider alone (main thread, no turn)', 'µs', a, { baseline: b }),
    ],
    notes: [
      `text received: turn ${chars.ours.toLocaleString('en-US')}, provider alone ${chars.alone.toLocaleString('en-US')}, bare ${chars.base.toLocaleString('en-US')} characters (each ${(tokens * piece).toLocaleString('en-US')} expected)`,
      'the server runs in a worker thread of its own; the turn reads the stream in the session worker, the other two on the main thread',
      "the turn's time includes its fixed costs (the claim, the user row, the assistant row, the worker round trip) spread over the tokens",
    ],
  };
}
