/**
 * The OpenAI-compatible stream read in one stage (openai-stream.ts): the bytes a server may send —
 * events split anywhere, CRLF, comments, multi-line data, a character split across reads — and the
 * chunks it may send — reasoning, content parts, refusals, calls without a name, broken JSON — give
 * what the AI SDK's chat model gives. A raw HTTP server writes exactly the bytes each test names.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { constants, createGzip, gzipSync } from 'node:zlib';
import { createOpenAICompatible, OpenAICompatibleChatLanguageModel } from '@ai-sdk/openai-compatible';
import { ErrorCode } from '@turnwarden/protocol';
import type { ModelEvent } from '@turnwarden/session';
import { afterEach, describe, expect, it } from 'vitest';
import { modelProvider } from './config.js';
import { leanStreaming } from './openai-stream.js';
import { failure, signals } from './test-support/signals.js';

let server: Server | undefined;
afterEach(async () => {
  server?.close();
  server = undefined;
});

/** A server that answers every request with these pieces of body, each written on its own. */
async function serve(pieces: readonly (string | Uint8Array)[]): Promise<string> {
  server = createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const p of pieces) {
        res.write(p);
        await new Promise((r) => setTimeout(r, 2));
      }
      res.end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

const chunk = (delta: object, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'c', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

/** The provider under test, on `url`, without retries. */
const rawProvider = (url: string) =>
  modelProvider({ name: 'raw', provider: 'openai-compatible', baseURL: url, model: 'm', maxRetries: 0 });

async function run(url: string): Promise<{ events: ModelEvent[]; beats: number }> {
  const p = rawProvider(url);
  const s = signals();
  const events: ModelEvent[] = [];
  for await (const e of p.stream({ history: [{ role: 'user', content: 'hi' }], tools: [] }, s))
    events.push(e);
  return { events, beats: s.beats() };
}

const texts = (events: readonly ModelEvent[]) =>
  events.map((e) => (e.type === 'text' ? e.text : `[${e.type}]`)).join('|');

describe('the OpenAI-compatible stream read in one stage', () => {
  it('events split anywhere across reads, CRLF line ends, comments, other fields and multi-line data read as sent', async () => {
    const first = chunk({ role: 'assistant', content: 'héllo' });
    const bytes = Buffer.from(first, 'utf8');
    const e = bytes.indexOf(0xc3); // the é, split between two reads
    const url = await serve([
      ': keep-alive\n\n',
      bytes.subarray(0, e + 1),
      bytes.subarray(e + 1, e + 10),
      bytes.subarray(e + 10),
      'event: message\r\nid: 7\r\n',
      `data: {"choices":[{"delta":\r\ndata: {"content":" world"}}]}\r\n\r\n`,
      chunk({}, 'stop'),
      'data: [DONE]\n\n',
    ]);
    const { events } = await run(url);
    expect(texts(events)).toBe('héllo| world');
  });

  it('reasoning, thinking parts and argument deltas are progress; content parts and a refusal are text; calls come whole at the end, in index order', async () => {
    const url = await serve([
      chunk({ reasoning_content: 'let me think' }),
      chunk({
        content: [
          { type: 'thinking', thinking: [] },
          { type: 'text', text: 'part' },
        ],
      }),
      chunk({ refusal: ' (declined)' }),
      chunk({ tool_calls: [{ index: 1, id: 'b', function: { name: 'echo', arguments: '{"x":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{}' } }] }),
      chunk({ tool_calls: [{ index: 0, id: 'a', function: { name: 'look' } }] }),
      chunk({ tool_calls: [{ index: 1, function: { arguments: '2}' } }] }),
      chunk({}, 'tool_calls'),
    ]);
    const { events, beats } = await run(url);
    expect(events).toEqual([
      { type: 'text', text: 'part' },
      { type: 'text', text: ' (declined)' },
      { type: 'tool_call', call: { id: 'a', name: 'look', arguments: '{}' } },
      { type: 'tool_call', call: { id: 'b', name: 'echo', arguments: '{"x":2}' } },
    ]);
    // reasoning, the thinking part and three argument deltas
    expect(beats).toBe(5);
  });

  it('a call that never got a name, a chunk that is not JSON, and an error chunk are MODEL_ERROR carrying what came', async () => {
    const nameless = await failure(
      run(
        await serve([
          chunk({ tool_calls: [{ index: 0, id: 'x', function: { arguments: '{}' } }] }),
          chunk({}, 'stop'),
        ]),
      ),
    );
    expect(nameless.code).toBe(ErrorCode.MODEL_ERROR);
    expect(nameless.message).toContain("Expected 'function.name' to be a string");
    server?.close();
    const broken = await failure(
      run(await serve([chunk({ content: 'a' }), 'data: {"choices": [\n\n', chunk({}, 'stop')])),
    );
    expect(broken.message).toContain('{"choices": [');
    server?.close();
    const said = await failure(
      run(
        await serve([
          chunk({ content: 'a' }),
          `data: ${JSON.stringify({ error: { message: 'model overloaded' } })}\n\n`,
        ]),
      ),
    );
    expect(said.message).toContain('model overloaded');
  });

  it('a body that ends with no finish reason is no answer, whatever streamed', async () => {
    const e = await failure(run(await serve([chunk({ content: 'half' }), 'data: [DONE]\n\n'])));
    expect(e.message).toMatch(/ended without a finish reason/);
  });

  it('over node:http: the request has its length, not chunked; a gzip-compressed stream is read decompressed; a refused connection is retried as fetch’s would be, then MODEL_ERROR', async () => {
    const body = gzipSync(Buffer.from(chunk({ content: 'zipped' }) + chunk({}, 'stop')));
    let received: { length: string | undefined; chunked: boolean; bytes: number } | undefined;
    server = createServer((req, res) => {
      let bytes = 0;
      req.on('data', (b: Buffer) => {
        bytes += b.length;
      });
      req.on('end', () => {
        received = {
          length: req.headers['content-length'],
          chunked: /chunked/.test(String(req.headers['transfer-encoding'] ?? '')),
          bytes,
        };
        res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' });
        res.end(body);
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    expect(texts((await run(url)).events)).toBe('zipped');
    expect(received?.chunked).toBe(false);
    expect(Number(received?.length)).toBe(received?.bytes);
    expect(received?.bytes).toBeGreaterThan(0);
    server.close();
    await once(server, 'close');
    const p = modelProvider({
      name: 'raw',
      provider: 'openai-compatible',
      baseURL: url,
      model: 'm',
      maxRetries: 2,
      baseDelayMs: 1,
      maxDelayMs: 2,
    });
    const s = signals();
    const e = await failure(
      (async () => {
        for await (const _ of p.stream({ history: [{ role: 'user', content: 'hi' }], tools: [] }, s));
      })(),
    );
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
    expect(e.message).toContain('refused after 3 attempts');
    expect(e.message).toMatch(/Cannot connect to API: .*ECONNREFUSED/);
    // Each retry was work: stamped before and after its wait.
    expect(s.beats()).toBe(4);
  });

  it('the chat model a configuration builds reads its streams here; a model that is not the SDK chat model, or has a fetch of its own, is left alone', () => {
    const own = createOpenAICompatible({ name: 'x', baseURL: 'http://127.0.0.1:1/v1', fetch }).chatModel('m');
    const sdkOwn = own.doStream;
    expect(leanStreaming(own)).toBe(false);
    expect(own.doStream).toBe(sdkOwn);
    const chat = createOpenAICompatible({ name: 'x', baseURL: 'http://127.0.0.1:1/v1' }).chatModel('m');
    expect(chat).toBeInstanceOf(OpenAICompatibleChatLanguageModel);
    const sdk = chat.doStream;
    expect(leanStreaming(chat)).toBe(true);
    expect(chat.doStream).not.toBe(sdk);
    const other = { specificationVersion: 'v3', doStream: sdk } as unknown as Parameters<
      typeof leanStreaming
    >[0];
    expect(leanStreaming(other)).toBe(false);
    expect(other.doStream).toBe(sdk);
  });
});

describe('connections', () => {
  it('a compressed stream the reader stops mid-way closes its connection (the decompressor alone was destroyed: the response stayed open, its socket neither reused nor closed)', async () => {
    let closed: Promise<unknown> | undefined;
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        closed = once(res, 'close');
        res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' });
        const zip = createGzip({ flush: constants.Z_SYNC_FLUSH });
        zip.pipe(res);
        zip.write(chunk({ content: 'first' }));
        // …and nothing more: the stream stays open until the client goes.
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    const p = rawProvider(url);
    const seen: string[] = [];
    for await (const e of p.stream({ history: [{ role: 'user', content: 'hi' }], tools: [] }, signals())) {
      if (e.type === 'text') {
        seen.push(e.text);
        break;
      }
    }
    expect(seen).toEqual(['first']);
    const gone = await Promise.race([
      (closed ?? Promise.reject(new Error('no request'))).then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), 2_000).unref()),
    ]);
    expect(gone).toBe(true);
  });

  it('keeps every idle connection between steps, as fetch does: 300 streams at once, then 300 more, open 300 connections', async () => {
    const N = 300; // more than Node's global agent keeps idle (256)
    let connections = 0;
    let waiting: (() => void)[] = [];
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        // Every stream of a round is open at once: each answers once all have asked.
        waiting.push(() => {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.end(`${chunk({ content: 'ok' })}${chunk({}, 'stop')}data: [DONE]\n\n`);
        });
        if (waiting.length === N) {
          for (const answer of waiting) answer();
          waiting = [];
        }
      });
    });
    server.on('connection', () => {
      connections++;
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    const round = async () => {
      const runs = await Promise.all(Array.from({ length: N }, () => run(url)));
      expect(runs.every((r) => texts(r.events) === 'ok')).toBe(true);
    };
    await round();
    expect(connections).toBe(N);
    await round();
    expect(connections).toBe(N);
  });
});
