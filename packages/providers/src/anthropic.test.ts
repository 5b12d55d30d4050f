/**
 * The Anthropic provider against the loopback server's messages endpoint: streamed text, a tool
 * call whose input arrives in pieces, ping events that are not progress, the stop reason as the
 * end of an answer (a stream closed before it is MODEL_ERROR), the provider's own words in its
 * errors, the key read from its environment variable and sent, never shown.
 */
import { ErrorCode, isTurnwardenError, type TurnwardenError } from '@turnwarden/protocol';
import type { ModelEvent, ModelProvider } from '@turnwarden/session';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { modelProvider } from './config.js';
import { LoopbackServer } from './loopback/index.js';
import { failure, signals } from './test-support/signals.js';

let server: LoopbackServer;
beforeEach(async () => {
  server = await LoopbackServer.start();
});
afterEach(async () => {
  await server.close();
});

const KEY = 'sk-ant-test-0123456789';

function provider(env: NodeJS.ProcessEnv = { TEST_ANTHROPIC_KEY: KEY }): ModelProvider {
  return modelProvider(
    {
      name: 'claude',
      provider: 'anthropic',
      baseURL: server.url,
      model: 'claude-test',
      apiKeyEnv: 'TEST_ANTHROPIC_KEY',
      maxRetries: 0,
    },
    'model',
    env,
  );
}

async function collect(p: ModelProvider, s = signals()): Promise<ModelEvent[]> {
  const out: ModelEvent[] = [];
  for await (const e of p.stream({ history: [{ role: 'user', content: 'hi' }], tools: [] }, s)) out.push(e);
  return out;
}

describe('the Anthropic provider', () => {
  it('streams text and a tool call whose input arrives in pieces; pings are not progress; the key is sent', async () => {
    server.script({
      chunks: [
        { keepAlive: true },
        { text: 'Checking ' },
        { text: 'now.' },
        { toolCall: { index: 0, id: 'toolu_1', name: 'echo', args: '' } },
        { toolCall: { index: 0, args: '{"text": ' } },
        { toolCall: { index: 0, args: '"hi"}' } },
        { finish: 'tool_calls' },
        { done: true },
      ],
    });
    const s = signals();
    const events = await collect(provider(), s);
    expect(events).toEqual([
      { type: 'text', text: 'Checking ' },
      { type: 'text', text: 'now.' },
      { type: 'tool_call', call: { id: 'toolu_1', name: 'echo', arguments: '{"text": "hi"}' } },
    ]);
    // Two input deltas stamped; the ping did not.
    expect(s.beats()).toBe(2);
    const { headers, body } = await server.exchange(0);
    expect(headers['x-api-key']).toBe(KEY);
    expect(body).toMatchObject({ model: 'claude-test', stream: true, messages: [{ role: 'user' }] });
  });

  it('a stream that stops without a stop reason is an error, not an answer', async () => {
    server.script({ chunks: [{ text: 'half' }, { done: true }] });
    const e = await failure(collect(provider()));
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
  });

  it('a stream the server closes after some text, with no stop reason and no message_stop, is MODEL_ERROR saying so', async () => {
    server.script({ chunks: [{ text: 'half ' }, { text: 'an answer' }] });
    const e = await failure(collect(provider()));
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
    expect(e.message).toBe('model claude: no answer: the stream ended without a finish reason');
    expect(e.details).toEqual({
      model: 'claude',
      provider: 'anthropic',
      message: 'the stream ended without a finish reason',
    });
    // A stop reason (message_delta) without message_stop is no finish either: the provider layer
    // finishes only at message_stop.
    server.script({ chunks: [{ text: 'half' }, { finish: 'stop' }] });
    expect((await failure(collect(provider()))).message).toMatch(/ended without a finish reason/);
  });

  it('an `event: error` mid-stream is MODEL_ERROR carrying the provider’s message and type', async () => {
    server.script({
      chunks: [
        { text: 'Let me think' },
        { error: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } },
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
    expect(e.message).toBe('model claude: the stream reported an error: overloaded_error: Overloaded');
    expect(e.details).toEqual({
      model: 'claude',
      provider: 'anthropic',
      type: 'overloaded_error',
      message: 'Overloaded',
    });
    const exchange = await server.exchange(0);
    await exchange.closed;
    expect(exchange.closedByClient).toBe(true);
  });

  it('a refused request carries its status, type and message; the key is not in the error', async () => {
    server.script({
      status: 529,
      body: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
    });
    const e = await failure(collect(provider()));
    expect(e.message).toBe('model claude: request refused: HTTP 529: overloaded_error: Overloaded');
    expect(e.details).toEqual({
      model: 'claude',
      provider: 'anthropic',
      status: 529,
      type: 'overloaded_error',
      message: 'Overloaded',
    });
    server.script({
      status: 401,
      body: { type: 'error', error: { type: 'authentication_error', message: `invalid x-api-key ${KEY}` } },
    });
    const refused = await failure(collect(provider()));
    expect(refused.details).toMatchObject({ status: 401, type: 'authentication_error' });
    expect(refused.message).toContain('invalid x-api-key [redacted]');
    expect(JSON.stringify(refused.toWire())).not.toContain(KEY);
  });

  it('a key variable that is not set is refused at configuration, named by the variable, not shown', () => {
    let caught: unknown;
    try {
      provider({});
    } catch (e) {
      caught = e;
    }
    expect(isTurnwardenError(caught, ErrorCode.INVALID_CONFIG)).toBe(true);
    expect((caught as TurnwardenError).details).toEqual({ field: 'model.apiKeyEnv' });
    expect((caught as Error).message).toMatch(/TEST_ANTHROPIC_KEY, which is not set/);
  });
});
