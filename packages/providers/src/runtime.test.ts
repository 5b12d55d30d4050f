/**
 * The OpenAI-compatible provider inside the runtime: the shared model threads (or, with
 * `models.placement: 'session'`, each session worker) load it from
 * `@turnwarden/providers/from-env`, the turn streams from the loopback server, its tool calls
 * run, and the watchdog sees through a stream that hangs or only keeps itself alive (L1). The
 * history stays structurally complete through every ending (S1).
 */
import { openToolCalls } from '@turnwarden/protocol';
import { Turnwarden, type TurnwardenEvent } from '@turnwarden/supervisor';
import { pino } from 'pino';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Chunk, LoopbackServer, textReply } from './loopback/index.js';

const FROM_ENV = new URL('../dist/from-env.js', import.meta.url).href;
const SCRIPTED_TOOLS = '@turnwarden/session/scripted';
const caller = { tenantId: 'acme', principal: 'user-1' };

let server: LoopbackServer | undefined;
let tw: Turnwarden | undefined;
afterEach(async () => {
  await tw?.shutdown();
  await server?.close();
  tw = undefined;
  server = undefined;
});

/**
 * The watchdog's timeout: generous unless the test is about the watchdog, so a loaded machine's
 * slow worker does not end a turn whose subject is something else. The watchdog's own tests use
 * WATCHDOG_MS, long enough for the request to be on its way before a stall can be declared.
 */
const WATCHDOG_MS = 1_500;

let placement: 'shared' | 'session' = 'shared';

async function start(extra: Record<string, unknown> = {}, logs?: string[], timeoutMs = 10_000) {
  server = await LoopbackServer.start();
  // Workers inherit the environment as it is when they spawn.
  process.env.TURNWARDEN_MODELS = JSON.stringify([
    { name: 'loop', provider: 'openai-compatible', baseURL: server.url, model: 'm', maxRetries: 0, ...extra },
  ]);
  tw = await Turnwarden.start({
    model: 'loop',
    pluginModules: [FROM_ENV, SCRIPTED_TOOLS],
    watchdog: { timeoutMs, pollMs: 25, graceMs: 300 },
    lease: { ttlMs: 3_000, renewMs: 100 },
    // A send after a cancel may wait for the cancelled turn's worker to be replaced: on a loaded
    // machine (CI's Node 22 pass beside other suites) no worker was free for the default 10 s.
    pool: { maxWorkers: 2, warmWorkers: 1, acquireTimeoutMs: 60_000 },
    models: { placement },
    logger:
      logs === undefined
        ? pino({ level: 'silent' })
        : pino({ level: 'trace' }, { write: (line: string) => void logs.push(line) }),
  });
  const { workstreamId } = await tw.createWorkstream(caller);
  const events: TurnwardenEvent[] = [];
  await tw.subscribe({ ...caller, workstreamId, listener: (e) => events.push(e) });
  return { tw, server, workstreamId, events };
}

const toolCall = (index: number, part: { id?: string; name?: string; args?: string }): Chunk => ({
  toolCall: { index, ...part },
});

/**
 * Both placements of the provider: on the shared model threads (the default: the session's
 * worker sleeps while a shared thread streams), and in the session's own worker.
 */
describe.each(['shared', 'session'] as const)('a real provider, models.placement %s', (where) => {
  beforeAll(() => {
    placement = where;
  });

  it('streams text and runs tool calls split across deltas; the history is complete', async () => {
    const { tw, server, workstreamId, events } = await start();
    server.script(
      {
        chunks: [
          { text: 'Let me ' },
          { text: 'check.' },
          toolCall(0, { id: 'c1', name: 'echo', args: '{"text":' }),
          toolCall(0, { args: ' "ping"}' }),
          { finish: 'tool_calls' },
          { done: true },
        ],
      },
      textReply('It said ping.'),
    );
    const result = await (await tw.send({ ...caller, workstreamId, content: 'echo ping' })).done;
    expect(result).toMatchObject({ status: 'completed', finalText: 'It said ping.' });
    const { rows } = await tw.history({ ...caller, workstreamId });
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(rows[1]?.message).toMatchObject({
      content: 'Let me check.',
      toolCalls: [{ id: 'c1', name: 'echo', arguments: '{"text": "ping"}' }],
    });
    expect(rows[2]?.message).toMatchObject({ toolCallId: 'c1', content: 'ping', effect: 'applied' });
    // The second request carried the tool's result back to the model.
    const second = (await server.exchange(1)).body.messages!;
    expect(second.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1', content: 'ping' });
    expect(
      events
        .filter((e) => e.type === 'token')
        .map((e) => (e.data as { text: string }).text)
        .join(''),
    ).toContain('Let me check.');
  });

  it('L1: a stream that hangs after its first chunks is aborted by the watchdog; the server sees the request cancelled', async () => {
    const { tw, server, workstreamId } = await start({}, undefined, WATCHDOG_MS);
    server.script({ chunks: [{ text: 'I will ' }, { text: 'answer' }, { hang: true }] });
    const result = await (await tw.send({ ...caller, workstreamId, content: 'hi' })).done;
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
    // The request had reached the server before the abort (by assertion: waiting for it would
    // hang if the watchdog had ended the turn first).
    const exchange = server.exchanges[0];
    if (exchange === undefined) expect.fail('the request never reached the server');
    await exchange.closed;
    expect(exchange.closedByClient).toBe(true);
    // The half-streamed message never became history.
    const { rows } = await tw.history({ ...caller, workstreamId });
    expect(rows.map((r) => r.message.role)).toEqual(['user']);
  });

  it('L1: a stream of keep-alive comments alone is a stall: aborted by the watchdog (the hermes-agent shape)', async () => {
    const { tw, server, workstreamId } = await start({}, undefined, WATCHDOG_MS);
    const keepAlives: Chunk[] = [];
    for (let i = 0; i < 200; i++) keepAlives.push({ keepAlive: true }, { delayMs: 20 });
    server.script({ chunks: [...keepAlives, { text: 'too late' }, { finish: 'stop' }, { done: true }] });
    const result = await (await tw.send({ ...caller, workstreamId, content: 'hi' })).done;
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
    // The request had reached the server before the abort (by assertion: waiting for it would
    // hang if the watchdog had ended the turn first).
    const exchange = server.exchanges[0];
    if (exchange === undefined) expect.fail('the request never reached the server');
    await exchange.closed;
    expect(exchange.closedByClient).toBe(true);
  });

  it('a force cancel mid-stream reaches the server; a cancel mid-tool synthesizes its result; no dangling call', async () => {
    const { tw, server, workstreamId } = await start();
    server.script({ chunks: [{ text: 'streaming…' }, { hang: true }] });
    const turn = await tw.send({ ...caller, workstreamId, content: 'hi' });
    const exchange = await server.exchange(0);
    expect(await tw.cancel({ ...caller, workstreamId })).toBe(true);
    expect((await turn.done).status).toBe('interrupted');
    await exchange.closed;
    expect(exchange.closedByClient).toBe(true);
    // Mid-tool: the model calls the scripted plugin's `sleep` tool, then the host cancels.
    server.script({
      chunks: [
        toolCall(0, { id: 's1', name: 'sleep', args: '{"ms": 60000}' }),
        { finish: 'tool_calls' },
        { done: true },
      ],
    });
    const toolStarted = new Promise<void>((resolve) => {
      void tw.subscribe({
        ...caller,
        workstreamId,
        listener: (e) => {
          if (e.type === 'tool_started') resolve();
        },
      });
    });
    const second = await tw.send({ ...caller, workstreamId, content: 'sleep' });
    await toolStarted;
    await tw.cancel({ ...caller, workstreamId });
    expect((await second.done).status).toBe('interrupted');
    const { rows } = await tw.history({ ...caller, workstreamId });
    expect(openToolCalls(rows)).toEqual([]);
    expect(rows.at(-1)?.message).toMatchObject({
      role: 'tool',
      toolCallId: 's1',
      effect: 'unknown',
      synthesized: true,
    });
  });

  it('a stream that ends without a finish reason fails the turn; nothing of it is history', async () => {
    const { tw, server, workstreamId } = await start();
    server.script({ chunks: [{ text: 'half an' }, { done: true }] });
    const result = await (await tw.send({ ...caller, workstreamId, content: 'hi' })).done;
    expect(result.status).toBe('failed');
    expect(result.error).toMatchObject({ code: 'MODEL_ERROR' });
    expect((await tw.history({ ...caller, workstreamId })).rows.map((r) => r.message.role)).toEqual(['user']);
  });

  it('an error chunk mid-stream fails the turn with the provider’s message and type, across the worker; nothing of it is history', async () => {
    const { tw, server, workstreamId } = await start();
    server.script({
      chunks: [{ text: 'Sure' }, { error: { error: { message: 'Model overloaded', type: 'server_error' } } }],
    });
    const result = await (await tw.send({ ...caller, workstreamId, content: 'hi' })).done;
    expect(result.status).toBe('failed');
    expect(result.error).toMatchObject({
      code: 'MODEL_ERROR',
      message: 'model loop: the stream reported an error: server_error: Model overloaded',
      details: {
        model: 'loop',
        provider: 'openai-compatible',
        type: 'server_error',
        message: 'Model overloaded',
      },
    });
    expect((await tw.history({ ...caller, workstreamId })).rows.map((r) => r.message.role)).toEqual(['user']);
  });

  it('the key named by apiKeyEnv reaches the server and nothing else: not the logs, not the turn’s error', async () => {
    const secret = 'sk-test-9f8e7d6c5b4a';
    process.env.TW_TEST_PROVIDER_KEY = secret;
    const logs: string[] = [];
    try {
      const { tw, server, workstreamId } = await start({ apiKeyEnv: 'TW_TEST_PROVIDER_KEY' }, logs);
      server.script({ status: 401, body: { error: { message: 'bad key' } } });
      const result = await (await tw.send({ ...caller, workstreamId, content: 'hi' })).done;
      expect(result.status).toBe('failed');
      expect(result.error).toMatchObject({ code: 'MODEL_ERROR', message: expect.stringMatching(/401/) });
      expect((await server.exchange(0)).headers.authorization).toBe(`Bearer ${secret}`);
      await tw.shutdown();
      expect(logs.length).toBeGreaterThan(5);
      expect(logs.filter((l) => l.includes(secret))).toEqual([]);
      expect(JSON.stringify(result)).not.toContain(secret);
    } finally {
      delete process.env.TW_TEST_PROVIDER_KEY;
    }
  });
});
