/**
 * The OpenAI-compatible provider against the scripted loopback server: what it streams, what it
 * refuses to call an answer, what it retries, and that an abort reaches the server.
 */
import { ErrorCode } from '@turnwarden/protocol';
import type { ModelEvent, ModelProvider, ModelRequest } from '@turnwarden/session';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { modelProvider } from './config.js';
import { type Chunk, LoopbackServer, textReply } from './loopback/index.js';
import { failure, signals } from './test-support/signals.js';

let server: LoopbackServer;
beforeEach(async () => {
  server = await LoopbackServer.start();
});
afterEach(async () => {
  await server.close();
});

const REQ: ModelRequest = {
  history: [{ role: 'user', content: 'hello' }],
  tools: [
    {
      name: 'echo',
      description: 'echoes',
      parameters: { type: 'object', properties: { text: { type: 'string' } } },
    },
  ],
};

function provider(extra: Record<string, unknown> = {}): ModelProvider {
  return modelProvider({
    name: 'loop',
    provider: 'openai-compatible',
    baseURL: server.url,
    model: 'm',
    baseDelayMs: 5,
    maxDelayMs: 20,
    ...extra,
  });
}

async function collect(p: ModelProvider, s = signals(), req = REQ): Promise<ModelEvent[]> {
  const out: ModelEvent[] = [];
  for await (const e of p.stream(req, s)) out.push(e);
  return out;
}

const call = (index: number, part: { id?: string; name?: string; args?: string }): Chunk => ({
  toolCall: { index, ...part },
});

describe('the OpenAI-compatible provider', () => {
  it('streams text as it arrives, and sends the history, the tools and stream: true', async () => {
    server.script(textReply('Hello there, friend.', 5));
    const events = await collect(provider());
    expect(events).toEqual([
      { type: 'text', text: 'Hello' },
      { type: 'text', text: ' ther' },
      { type: 'text', text: 'e, fr' },
      { type: 'text', text: 'iend.' },
    ]);
    const { body } = await server.exchange(0);
    expect(body).toMatchObject({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hello' }] });
    expect(body.tools).toEqual([
      {
        type: 'function',
        function: {
          name: 'echo',
          description: 'echoes',
          parameters: { type: 'object', properties: { text: { type: 'string' } } },
        },
      },
    ]);
  });

  it('assembles tool calls whose arguments are split across deltas, several in one message; a repeated id is made unique', async () => {
    server.script({
      chunks: [
        { text: 'Calling.' },
        call(0, { id: 'dup', name: 'echo', args: '' }),
        call(0, { args: '{"te' }),
        call(1, { id: 'dup', name: 'echo', args: '{"text"' }),
        call(0, { args: 'xt": "a"}' }),
        call(1, { args: ': "b"}' }),
        { finish: 'tool_calls' },
        { done: true },
      ],
    });
    const s = signals();
    const events = await collect(provider(), s);
    expect(events).toEqual([
      { type: 'text', text: 'Calling.' },
      { type: 'tool_call', call: { id: 'dup', name: 'echo', arguments: '{"text": "a"}' } },
      { type: 'tool_call', call: { id: expect.any(String), name: 'echo', arguments: '{"text": "b"}' } },
    ]);
    // The provider layer renames the second 'dup' (a history replayed to the API needs unique
    // ids); both occurrences are kept, each answered by its own result (S1).
    const second = events[2] as Extract<ModelEvent, { type: 'tool_call' }>;
    expect(second.call.id).not.toBe('dup');
    // Argument deltas are progress: each stamped the clock.
    expect(s.beats()).toBeGreaterThanOrEqual(1);
  });

  it('replays a history with repeated call ids under distinct ids, each result with its own call', async () => {
    server.script(textReply('ok'));
    await collect(provider(), signals(), {
      history: [
        { role: 'user', content: 'go' },
        {
          role: 'assistant',
          content: '',
          toolCalls: [
            { id: 'dup', name: 'echo', arguments: '{"text":"a"}' },
            { id: 'dup', name: 'echo', arguments: '{"text":"b"}' },
          ],
        },
        {
          role: 'tool',
          toolCallId: 'dup',
          callIndex: 0,
          name: 'echo',
          content: 'a',
          isError: false,
          effect: 'applied',
        },
        {
          role: 'tool',
          toolCallId: 'dup',
          callIndex: 1,
          name: 'echo',
          content: 'b',
          isError: false,
          effect: 'applied',
        },
      ],
      tools: REQ.tools,
    });
    const messages = (await server.exchange(0)).body.messages!;
    const assistant = messages[1] as { tool_calls: { id: string }[] };
    expect(assistant.tool_calls.map((c) => c.id)).toEqual(['dup', 'dup~2']);
    expect(messages.slice(2).map((m) => [m.role, m.tool_call_id, m.content])).toEqual([
      ['tool', 'dup', 'a'],
      ['tool', 'dup~2', 'b'],
    ]);
  });

  it('a stream that ends without a finish reason is an error, not an answer', async () => {
    server.script({ chunks: [{ text: 'half an ans' }, { done: true }] });
    const e = await failure(collect(provider()));
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
    expect(e.message).toMatch(/finish reason/);
  });

  it('a stream the server closes after some text, with no finish and no [DONE], is MODEL_ERROR saying so, not an answer', async () => {
    server.script({ chunks: [{ text: 'half ' }, { text: 'an answer' }] });
    const events: ModelEvent[] = [];
    const e = await failure(
      (async () => {
        for await (const ev of provider().stream(REQ, signals())) events.push(ev);
      })(),
    );
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
    expect(e.message).toMatch(/ended without a finish reason/);
    expect(e.details).toMatchObject({ model: 'loop', provider: 'openai-compatible' });
    // The text streamed as it came; the end is what made it no answer.
    expect(events).toEqual([
      { type: 'text', text: 'half ' },
      { type: 'text', text: 'an answer' },
    ]);
  });

  it('an error chunk mid-stream is MODEL_ERROR carrying the provider’s message and type', async () => {
    server.script({
      chunks: [
        { text: 'Sure, ' },
        { error: { error: { message: 'The server had an error while processing', type: 'server_error' } } },
        // Whatever a server sends after its error is not read: the provider ends the stream at the
        // error (the connection closes long before this delay is over) and never takes the rest
        // for an answer.
        { delayMs: 5_000 },
        { text: ' never read' },
        { finish: 'stop' },
        { done: true },
      ],
    });
    const e = await failure(collect(provider()));
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
    expect(e.message).toBe(
      'model loop: the stream reported an error: server_error: The server had an error while processing',
    );
    expect(e.details).toEqual({
      model: 'loop',
      provider: 'openai-compatible',
      type: 'server_error',
      message: 'The server had an error while processing',
    });
    // The provider stopped reading: the connection is closed, not left to hang.
    const exchange = await server.exchange(0);
    await exchange.closed;
    expect(exchange.closedByClient).toBe(true);
  });

  it('an error chunk with a code and no type, and one whose shape the provider layer does not know, keep their words', async () => {
    server.script({
      chunks: [
        { error: { error: { message: 'Rate limit reached for tokens', code: 'rate_limit_exceeded' } } },
      ],
    });
    const coded = await failure(collect(provider()));
    expect(coded.message).toContain('Rate limit reached for tokens');
    expect(coded.details).toMatchObject({
      code: 'rate_limit_exceeded',
      message: 'Rate limit reached for tokens',
    });
    // `{"error":"…"}` is no chunk and no error object the layer knows: it reports a validation
    // error, which quotes what came — the server's words are still in the message.
    server.script({ chunks: [{ text: 'a' }, { error: { error: 'upstream model crashed' } }] });
    const odd = await failure(collect(provider()));
    expect(odd.code).toBe(ErrorCode.MODEL_ERROR);
    expect(odd.message).toContain('upstream model crashed');
    expect(odd.message).not.toContain('[object Object]');
  });

  it('a refused request’s status, type and message are in the error; a key the server quotes back is not', async () => {
    server.script({
      status: 503,
      body: { error: { message: 'Service is overloaded', type: 'server_error' } },
    });
    const e = await failure(collect(provider({ maxRetries: 0 })));
    expect(e.message).toBe('model loop: request refused: HTTP 503: server_error: Service is overloaded');
    expect(e.details).toEqual({
      model: 'loop',
      provider: 'openai-compatible',
      status: 503,
      type: 'server_error',
      message: 'Service is overloaded',
    });
    const key = 'sk-loop-secret-424242';
    process.env.TW_TEST_LOOP_KEY = key;
    try {
      server.script({
        status: 401,
        body: { error: { message: `Incorrect API key provided: ${key}.`, type: 'invalid_request_error' } },
      });
      const refused = await failure(collect(provider({ apiKeyEnv: 'TW_TEST_LOOP_KEY' })));
      expect((await server.exchange(1)).headers.authorization).toBe(`Bearer ${key}`);
      expect(refused.message).toBe(
        'model loop: request refused: HTTP 401: invalid_request_error: Incorrect API key provided: [redacted].',
      );
      expect(JSON.stringify(refused.toWire())).not.toContain(key);
      // Only what the provider said: no URL, no headers, no request.
      expect(Object.keys(refused.details ?? {}).sort()).toEqual([
        'message',
        'model',
        'provider',
        'status',
        'type',
      ]);
    } finally {
      delete process.env.TW_TEST_LOOP_KEY;
    }
  });

  it('a socket destroyed mid-stream is an error, not an answer', async () => {
    server.script({ chunks: [{ text: 'half' }, { destroy: true }] });
    const e = await failure(collect(provider()));
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
    // The transport's words; the stream's own 200 (which the provider layer puts on the error
    // it wraps the break in) is not the failure's status.
    expect(e.message).toMatch(/closed the connection mid-stream \(aborted\)/);
    expect(e.message).not.toMatch(/HTTP 200/);
    expect(e.details).not.toHaveProperty('status');
  });

  it('retries 429 and 500 with backoff (honouring retry-after), stamping each retry, then streams', async () => {
    server.script(
      { status: 429, headers: { 'retry-after-ms': '30' } },
      { status: 500 },
      textReply('finally'),
    );
    const s = signals();
    const t0 = performance.now();
    const events = await collect(provider(), s);
    expect(events.map((e) => (e.type === 'text' ? e.text : '')).join('')).toBe('finally');
    expect(server.exchanges).toHaveLength(3);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(30); // the server's retry-after
    expect(s.beats()).toBeGreaterThanOrEqual(4); // before and after each of two waits
  });

  it('gives up after maxRetries with MODEL_ERROR naming the status; a 400 is not retried', async () => {
    server.script({ status: 503 }, { status: 503 });
    const e = await failure(collect(provider({ maxRetries: 1 })));
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
    expect(e.details).toMatchObject({ status: 503 });
    expect(server.exchanges).toHaveLength(2);
    server.script({ status: 400, body: { error: { message: 'bad request' } } });
    const bad = await failure(collect(provider()));
    expect(bad.details).toMatchObject({ status: 400 });
    expect(server.exchanges).toHaveLength(3);
  });

  it('an abort mid-stream rejects at once and the server sees the connection close', async () => {
    server.script({ chunks: [{ text: 'some' }, { hang: true }] });
    const s = signals();
    const it = provider().stream(REQ, s)[Symbol.asyncIterator]();
    expect((await it.next()).value).toEqual({ type: 'text', text: 'some' });
    const pending = it.next();
    s.stop.abort();
    expect((await failure(pending)).code).toBe(ErrorCode.TURN_ABORTED);
    const exchange = await server.exchange(0);
    await exchange.closed;
    expect(exchange.closedByClient).toBe(true);
  });

  it('an abort during a retry backoff ends the wait at once', async () => {
    server.script({ status: 429, headers: { 'retry-after': '30' } });
    const s = signals();
    const p = collect(provider(), s);
    await server.exchange(0);
    setTimeout(() => s.stop.abort(), 20);
    const t0 = performance.now();
    expect((await failure(p)).code).toBe(ErrorCode.TURN_ABORTED);
    expect(performance.now() - t0).toBeLessThan(5_000);
  });

  it('keep-alive comments are not progress: a stream of them stamps nothing', async () => {
    // The comments come first on the connection, so once the text after them has arrived
    // they have all been read — and none stamped the clock or produced an event.
    server.script({
      chunks: [{ keepAlive: true }, { keepAlive: true }, { keepAlive: true }, { text: 'x' }, { hang: true }],
    });
    const s = signals();
    const it = provider().stream(REQ, s)[Symbol.asyncIterator]();
    expect((await it.next()).value).toEqual({ type: 'text', text: 'x' });
    expect(s.beats()).toBe(0);
    const next = it.next();
    s.stop.abort();
    await failure(next);
    const exchange = await server.exchange(0);
    await exchange.closed;
    expect(exchange.closedByClient).toBe(true);
  });
});
