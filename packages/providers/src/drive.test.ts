/**
 * What a provider's failure becomes, for every shape the provider layer can hand over: recorded
 * stream parts played through a LanguageModelV3 (the same interface the AI SDK's provider
 * packages implement), so the shapes no wire format of ours produces — a string, an object
 * without a message, an envelope, an Error with a cause, a stream that breaks — are each read for
 * the provider's own words, never "[object Object]".
 */
import type { LanguageModelV3, LanguageModelV3StreamPart } from '@ai-sdk/provider';
import { ErrorCode, type TurnwardenError } from '@turnwarden/protocol';
import type { ModelEvent } from '@turnwarden/session';
import { describe, expect, it } from 'vitest';
import { driveModel } from './drive.js';
import { failure, signals } from './test-support/signals.js';

/** A model whose one stream plays `parts`, then ends (or breaks with `broken`). */
function recorded(parts: readonly LanguageModelV3StreamPart[], broken?: unknown): LanguageModelV3 {
  let played = 0;
  return {
    specificationVersion: 'v3',
    provider: 'recorded.chat',
    modelId: 'rec-1',
    supportedUrls: {},
    doGenerate: () => Promise.reject(new Error('not used')),
    doStream: () =>
      Promise.resolve({
        // One part per read (an error in `start` would drop the parts queued before it).
        stream: new ReadableStream<LanguageModelV3StreamPart>(
          {
            pull(controller) {
              const next = parts[played++];
              if (next !== undefined) controller.enqueue(next);
              else if (broken === undefined) controller.close();
              else controller.error(broken);
            },
          },
          { highWaterMark: 0 },
        ),
      }),
  };
}

const HEAD: readonly LanguageModelV3StreamPart[] = [
  { type: 'stream-start', warnings: [] },
  { type: 'text-start', id: 't' },
  { type: 'text-delta', id: 't', delta: 'partial ' },
];

async function fails(model: LanguageModelV3, secrets?: readonly string[]): Promise<TurnwardenError> {
  const events: ModelEvent[] = [];
  const e = await failure(
    (async () => {
      const p = driveModel(model, { name: 'rec', maxRetries: 0, ...(secrets ? { secrets } : {}) });
      for await (const ev of p.stream({ history: [{ role: 'user', content: 'hi' }], tools: [] }, signals()))
        events.push(ev);
    })(),
  );
  expect(e.code).toBe(ErrorCode.MODEL_ERROR);
  expect(e.message).not.toContain('[object Object]');
  // What streamed before the failure streamed; the failure is what made it no answer.
  expect(events).toEqual([{ type: 'text', text: 'partial ' }]);
  return e;
}

const errorPart = (error: unknown): LanguageModelV3StreamPart => ({ type: 'error', error });

describe('a provider failure keeps the provider’s words', () => {
  it('an API error object: message and type, in the message and the details', async () => {
    const said = { message: 'The model crashed', type: 'server_error' };
    const e = await fails(recorded([...HEAD, errorPart(said)]));
    // What the provider said is kept whole as the cause, for the host's logs.
    expect(e.cause).toBe(said);
    expect(e.message).toBe('model rec: the stream reported an error: server_error: The model crashed');
    expect(e.details).toEqual({
      model: 'rec',
      provider: 'recorded.chat',
      type: 'server_error',
      message: 'The model crashed',
    });
  });

  it('a string', async () => {
    const e = await fails(recorded([...HEAD, errorPart('upstream reset the connection')]));
    expect(e.message).toBe('model rec: the stream reported an error: upstream reset the connection');
    expect(e.details).toMatchObject({ message: 'upstream reset the connection' });
  });

  it('a plain object without a message: its type, code and the object itself', async () => {
    const e = await fails(recorded([...HEAD, errorPart({ type: 'server_error', code: 503, retry: false })]));
    expect(e.message).toBe(
      'model rec: the stream reported an error: server_error: {"type":"server_error","code":503,"retry":false}',
    );
    expect(e.details).toMatchObject({ type: 'server_error', code: 503 });
  });

  it('a nested envelope ({ error: { … } }, and the Anthropic { type: error, error: { … } })', async () => {
    const nested = await fails(
      recorded([
        ...HEAD,
        errorPart({ error: { message: 'Rate limited', type: 'rate_limit_error', status: 429 } }),
      ]),
    );
    expect(nested.message).toBe(
      'model rec: the stream reported an error: HTTP 429: rate_limit_error: Rate limited',
    );
    expect(nested.details).toMatchObject({ type: 'rate_limit_error', status: 429, message: 'Rate limited' });
    const envelope = await fails(
      recorded([
        ...HEAD,
        errorPart({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }),
      ]),
    );
    expect(envelope.details).toMatchObject({ type: 'overloaded_error', message: 'Overloaded' });
  });

  it('an Error with a cause: both their words, and the cause’s code', async () => {
    const cause = Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' });
    const e = await fails(recorded([...HEAD, errorPart(new TypeError('terminated', { cause }))]));
    expect(e.message).toBe('model rec: the stream reported an error: terminated (cause: other side closed)');
    expect(e.details).toMatchObject({
      code: 'UND_ERR_SOCKET',
      message: 'terminated (cause: other side closed)',
    });
  });

  it('an API call error: its status, and the type and message of its body', async () => {
    // The shape of the AI SDK's APICallError (checked by shape: the package is not a dependency).
    const call = Object.assign(new Error('Service unavailable'), {
      name: 'AI_APICallError',
      statusCode: 503,
      url: 'https://api.example/v1/chat/completions?key=in-the-url',
      requestBodyValues: { messages: [] },
      responseHeaders: { 'x-request-id': 'r1' },
      responseBody: '{"error":{"message":"Service unavailable","type":"server_error"}}',
      isRetryable: true,
    });
    const e = await fails(recorded([...HEAD, errorPart(call)]));
    expect(e.message).toBe(
      'model rec: the stream reported an error: HTTP 503: server_error: Service unavailable',
    );
    expect(e.details).toEqual({
      model: 'rec',
      provider: 'recorded.chat',
      status: 503,
      type: 'server_error',
      message: 'Service unavailable',
    });
    // Neither the URL nor any header is read into the error.
    expect(JSON.stringify(e.toWire())).not.toMatch(/in-the-url|x-request-id/);
  });

  it('a stream that breaks mid-way: the transport’s words, as "the stream failed"', async () => {
    const e = await fails(recorded(HEAD, new TypeError('terminated', { cause: new Error('ECONNRESET') })));
    expect(e.message).toBe('model rec: the stream failed: terminated (cause: ECONNRESET)');
  });

  it('a secret the provider quotes is redacted everywhere, even past the clip of a long message', async () => {
    const secret = 'sk-rec-0000111122223333';
    const long = `${'x'.repeat(495)}${secret}`;
    const e = await fails(
      recorded([...HEAD, errorPart({ message: `bad key ${secret}`, type: secret, code: secret })]),
      [secret],
    );
    expect(e.message).toBe('model rec: the stream reported an error: [redacted]: bad key [redacted]');
    expect(JSON.stringify(e.toWire())).not.toContain(secret);
    const clipped = await fails(recorded([...HEAD, errorPart(long)]), [secret]);
    expect(JSON.stringify(clipped.toWire())).not.toContain(secret.slice(0, 6));
  });

  it('a stream that ends without a finish part is MODEL_ERROR saying so; one with a finish reason is an answer', async () => {
    const e = await fails(recorded(HEAD));
    expect(e.message).toBe('model rec: no answer: the stream ended without a finish reason');
    const done: ModelEvent[] = [];
    const p = driveModel(
      recorded([
        ...HEAD,
        { type: 'text-end', id: 't' },
        {
          type: 'finish',
          finishReason: { unified: 'stop', raw: 'stop' },
          usage: {
            inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
            outputTokens: { total: 1, text: 1, reasoning: 0 },
          },
        },
      ]),
      { name: 'rec' },
    );
    for await (const ev of p.stream({ history: [{ role: 'user', content: 'hi' }], tools: [] }, signals()))
      done.push(ev);
    expect(done).toEqual([{ type: 'text', text: 'partial ' }]);
  });
});

describe('how a provider’s words are read and bounded', () => {
  const said = async (error: unknown, secrets?: readonly string[]) =>
    (await fails(recorded([...HEAD, errorPart(error)]), secrets)).message.replace(
      'model rec: the stream reported an error: ',
      '',
    );

  it('words that are only whitespace say so; words are trimmed, their whitespace runs made one space', async () => {
    expect(await said('  \n ')).toBe('an empty error');
    expect(await said({ message: '  line one\n\n  line two\t ' })).toBe('line one line two');
    expect(await said(new Error('terminated', { cause: new Error('  other side closed \n') }))).toBe(
      'terminated (cause: other side closed)',
    );
    // An Error without words of its own shows its name.
    expect(await said(Object.assign(new Error(''), { name: ' CustomError ' }))).toBe('CustomError');
  });

  it('a message is kept up to 500 characters; a longer one is clipped, marked …', async () => {
    expect(await said('a'.repeat(500))).toBe('a'.repeat(500));
    expect(await said(`${'b'.repeat(500)}cdef`)).toBe(`${'b'.repeat(500)}…`);
  });

  it('only objects are envelopes: a string, an array or null under `error` leaves the object itself as the words', async () => {
    expect(await said({ error: 'upstream model crashed' })).toBe('{"error":"upstream model crashed"}');
    expect(await said({ error: ['bad', 'things'] })).toBe('{"error":["bad","things"]}');
    expect(await said({ error: null, message: 'kept' })).toBe('kept');
  });

  it('envelopes are opened four levels deep, causes followed four levels deep (a cycle ends)', async () => {
    const wrap = (levels: number) => {
      let o: Record<string, unknown> = { message: 'deep' };
      for (let i = 0; i < levels; i++) o = { error: o };
      return o;
    };
    expect(await said(wrap(4))).toBe('deep');
    expect(await said(wrap(6))).toBe('{"error":{"error":{"message":"deep"}}}');
    let chain: Error | undefined;
    for (let i = 6; i >= 0; i--) chain = new Error(`l${i}`, chain === undefined ? {} : { cause: chain });
    expect(await said(chain)).toBe('l0 (cause: l1 (cause: l2 (cause: l3 (cause: l4))))');
    const cyclic = new Error('loop');
    (cyclic as { cause?: unknown }).cause = cyclic;
    expect(await said(cyclic)).toBe('loop');
  });

  it('a status is an integer from 400 to 599, a code a word or an integer; anything else is left out', async () => {
    const detailsOf = async (error: unknown) => (await fails(recorded([...HEAD, errorPart(error)]))).details;
    expect(await detailsOf({ message: 'm', status: 599 })).toMatchObject({ status: 599 });
    for (const odd of [
      { status: 600 },
      { status: 503.5 },
      { status: '503' },
      { code: 1.5 },
      { code: true },
    ]) {
      expect(Object.keys((await detailsOf({ message: 'm', ...odd })) ?? {}).sort()).toEqual([
        'message',
        'model',
        'provider',
      ]);
    }
  });

  it('a value JSON cannot write is shown as a string; an empty secret redacts nothing', async () => {
    expect(await said(10n)).toBe('10');
    expect(await said('plain words', [''])).toBe('plain words');
  });
});
