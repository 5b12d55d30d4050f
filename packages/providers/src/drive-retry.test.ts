/**
 * The stream driver's requests and retries against a scripted LanguageModelV3, on fake timers:
 * which refusals are retried, how long each backoff waits (read off the fake clock at each
 * attempt, the jitter pinned), what the request carries, and what an abort leaves behind.
 */
import { getEventListeners } from 'node:events';
import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3StreamPart,
} from '@ai-sdk/provider';
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import type { ModelEvent, ModelRequest, TurnSignals } from '@turnwarden/session';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type DriveOptions, driveModel } from './drive.js';
import { failure, signals } from './test-support/signals.js';

const FINISH: LanguageModelV3StreamPart = {
  type: 'finish',
  finishReason: { unified: 'stop', raw: 'stop' },
  usage: {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  },
};

const ANSWER: readonly LanguageModelV3StreamPart[] = [
  { type: 'stream-start', warnings: [] },
  { type: 'text-delta', id: 't', delta: 'ok' },
  FINISH,
];

interface Attempt {
  /** The fake clock when the request was made. */
  readonly at: number;
  readonly options: LanguageModelV3CallOptions;
}

/** A model that refuses its first requests with `refusals`, one each, then streams `parts`. */
function scripted(refusals: readonly unknown[], parts: readonly LanguageModelV3StreamPart[] = ANSWER) {
  const attempts: Attempt[] = [];
  const model: LanguageModelV3 = {
    specificationVersion: 'v3',
    provider: 'scripted.chat',
    modelId: 's-1',
    supportedUrls: {},
    doGenerate: () => Promise.reject(new Error('not used')),
    doStream: (options) => {
      const n = attempts.push({ at: Date.now(), options });
      if (n <= refusals.length) return Promise.reject(refusals[n - 1]);
      let i = 0;
      return Promise.resolve({
        stream: new ReadableStream<LanguageModelV3StreamPart>(
          {
            pull(controller) {
              const next = parts[i++];
              if (next === undefined) controller.close();
              else controller.enqueue(next);
            },
          },
          { highWaterMark: 0 },
        ),
      });
    },
  };
  /** The waits between attempts, in ms. */
  const waits = () => attempts.slice(1).map((a, i) => a.at - attempts[i]!.at);
  return { model, attempts, waits };
}

const REQ: ModelRequest = { history: [{ role: 'user', content: 'hi' }], tools: [] };

async function drain(
  model: LanguageModelV3,
  options: Omit<DriveOptions, 'name'>,
  ctx: TurnSignals = signals(),
  req: ModelRequest = REQ,
): Promise<ModelEvent[]> {
  const events: ModelEvent[] = [];
  for await (const e of driveModel(model, { name: 'rec', ...options }).stream(req, ctx)) events.push(e);
  return events;
}

/** Runs `p` to its end on the fake clock (every backoff timer fired as it is set). */
async function settle<T>(p: Promise<T>): Promise<T> {
  const outcome = p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  await vi.runAllTimersAsync();
  const o = await outcome;
  if ('error' in o) throw o.error;
  return o.value;
}

const status = (statusCode: number, extra: Record<string, unknown> = {}) => ({ statusCode, ...extra });

beforeEach(() => {
  vi.useFakeTimers({ now: new Date('2030-01-01T00:00:00Z') });
  // The jitter pinned: every backoff waits ¾ of its ceiling.
  vi.spyOn(Math, 'random').mockReturnValue(0.5);
});
afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

describe('which refusals are retried', () => {
  it.each([
    ['429 (without isRetryable)', status(429)],
    ['500', status(500)],
    ['503', status(503)],
    ['a 4xx the provider layer marks retryable', status(409, { isRetryable: true })],
    ['a failure without a status marked retryable (a connection that failed)', { isRetryable: true }],
  ])('%s is retried, then the stream is the answer', async (_what, refusal) => {
    const { model, attempts } = scripted([refusal]);
    expect(await settle(drain(model, { baseDelayMs: 10 }))).toEqual([{ type: 'text', text: 'ok' }]);
    expect(attempts).toHaveLength(2);
  });

  it.each([
    ['a 400', status(400)],
    ['a 404 marked not retryable', status(404, { isRetryable: false })],
    ['an Error without a status', new Error('no key')],
    ['a string', 'the prompt cannot be expressed'],
    ['null', null],
    ['undefined', undefined],
  ])('%s is not retried: MODEL_ERROR at once', async (_what, refusal) => {
    const { model, attempts } = scripted([refusal, refusal, refusal]);
    const e = await failure(settle(drain(model, { baseDelayMs: 10 })));
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
    expect(e.message).toMatch(/^model rec: request refused: /);
    expect(attempts).toHaveLength(1);
  });

  it('a refusal that is no object says what it was: null as JSON, undefined as "without a description"', async () => {
    const nothing = await failure(settle(drain(scripted([null]).model, {})));
    expect(nothing.message).toBe('model rec: request refused: null');
    const none = await failure(settle(drain(scripted([undefined]).model, {})));
    expect(none.message).toBe('model rec: request refused: an error without a description');
    const number = await failure(settle(drain(scripted([42]).model, {})));
    expect(number.message).toBe('model rec: request refused: 42');
  });

  it('giving up after the retries says how many attempts were made', async () => {
    const { model, attempts } = scripted([status(503), status(503)]);
    const e = await failure(settle(drain(model, { maxRetries: 1, baseDelayMs: 10 })));
    expect(e.message).toBe('model rec: refused after 2 attempts: HTTP 503: {"statusCode":503}');
    expect(attempts).toHaveLength(2);
  });

  it('a TurnwardenError the model throws is passed through as it is', async () => {
    const own = new TurnwardenError(ErrorCode.INVALID_CONFIG, 'the model is not configured');
    expect(await failure(settle(drain(scripted([own]).model, {})))).toBe(own);
  });
});

describe('how long a backoff waits', () => {
  it('exponential from baseDelayMs, capped at maxDelayMs, at a random point in [½, 1] of the ceiling', async () => {
    const { model, waits } = scripted([status(500), status(500), status(500)]);
    await settle(drain(model, { baseDelayMs: 1_000, maxDelayMs: 3_000 }));
    // Ceilings 1000, 2000, min(3000, 4000); ¾ of each (Math.random() is 0.5).
    expect(waits()).toEqual([750, 1_500, 2_250]);
  });

  it('the defaults: three retries from 500 ms, capped at 8 s', async () => {
    const { model, waits } = scripted([status(500), status(500), status(500), status(500)]);
    const e = await failure(settle(drain(model, {})));
    expect(e.message).toMatch(/^model rec: refused after 4 attempts: /);
    expect(waits()).toEqual([375, 750, 1_500]);
    const capped = scripted([status(500), status(500), status(500)]);
    await settle(drain(capped.model, { baseDelayMs: 6_000 }));
    expect(capped.waits()).toEqual([4_500, 6_000, 6_000]);
  });

  it.each([
    ['retry-after-ms', { 'retry-after-ms': '1500' }, 1_500],
    ['retry-after-ms 0: at once', { 'retry-after-ms': '0' }, 0],
    ['retry-after in seconds', { 'retry-after': '2' }, 2_000],
    [
      'a negative retry-after-ms is ignored for retry-after',
      { 'retry-after-ms': '-5', 'retry-after': '2' },
      2_000,
    ],
    [
      'an infinite retry-after-ms is ignored for retry-after',
      { 'retry-after-ms': 'Infinity', 'retry-after': '3' },
      3_000,
    ],
    ['retry-after as an HTTP date', { 'retry-after': new Date('2030-01-01T00:00:04Z').toUTCString() }, 4_000],
    [
      'an HTTP date already past: at once',
      { 'retry-after': new Date('2029-12-31T00:00:00Z').toUTCString() },
      0,
    ],
    ['a server’s hint is honoured up to a minute', { 'retry-after': '120' }, 60_000],
    ['a negative retry-after is no hint: the backoff', { 'retry-after': '-1e3' }, 7_500],
    ['an infinite retry-after is no hint: the backoff', { 'retry-after': 'Infinity' }, 7_500],
    ['an unreadable retry-after is no hint: the backoff', { 'retry-after': 'soon' }, 7_500],
    ['other headers are no hint: the backoff', { 'x-request-id': 'r1' }, 7_500],
  ])('%s', async (_what, responseHeaders, wait) => {
    const { model, waits } = scripted([status(429, { responseHeaders })]);
    await settle(drain(model, { baseDelayMs: 10_000, maxDelayMs: 10_000 }));
    expect(waits()).toEqual([wait]);
  });

  it('a refusal without headers waits the backoff', async () => {
    const { model, waits } = scripted([status(502)]);
    await settle(drain(model, { baseDelayMs: 10_000, maxDelayMs: 10_000 }));
    expect(waits()).toEqual([7_500]);
  });
});

describe('an abort around the retries', () => {
  it('during a backoff: TURN_ABORTED at once, carrying the reason; the timer is cleared and the listener gone', async () => {
    const { model, attempts } = scripted([status(429, { responseHeaders: { 'retry-after': '30' } })]);
    const ctx = signals();
    const p = drain(model, {}, ctx);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(vi.getTimerCount()).toBe(1); // the backoff
    const reason = new Error('the watchdog');
    ctx.stop.abort(reason);
    const e = await failure(p);
    expect(e.code).toBe(ErrorCode.TURN_ABORTED);
    expect(e.message).toBe('the model call was aborted');
    expect(e.cause).toBe(reason);
    expect(vi.getTimerCount()).toBe(0);
    expect(getEventListeners(ctx.signal, 'abort')).toHaveLength(0);
    expect(attempts).toHaveLength(1);
  });

  it('a backoff that ran out leaves no abort listener behind', async () => {
    const { model } = scripted([status(500), status(500)]);
    const ctx = signals();
    await settle(drain(model, { baseDelayMs: 10 }, ctx));
    expect(getEventListeners(ctx.signal, 'abort')).toHaveLength(0);
  });

  it('an abort in the heartbeat before a backoff: TURN_ABORTED without waiting and without another request', async () => {
    const { model, attempts } = scripted([status(500)]);
    const stop = new AbortController();
    const ctx: TurnSignals = { signal: stop.signal, heartbeat: () => stop.abort(new Error('stop')) };
    const p = drain(model, { baseDelayMs: 10_000 }, ctx);
    const e = await failure(p);
    expect(e.code).toBe(ErrorCode.TURN_ABORTED);
    expect(vi.getTimerCount()).toBe(0);
    expect(attempts).toHaveLength(1);
  });

  it('a request that fails because it was aborted is TURN_ABORTED, not a refusal', async () => {
    const ctx = signals();
    const reason = new Error('cancelled by the user');
    const model: LanguageModelV3 = {
      ...scripted([]).model,
      doStream: () => {
        ctx.stop.abort(reason);
        return Promise.reject(new DOMException('This operation was aborted', 'AbortError'));
      },
    };
    const e = await failure(drain(model, {}, ctx));
    expect(e.code).toBe(ErrorCode.TURN_ABORTED);
    expect(e.cause).toBe(reason);
  });

  it('a stream that ends quietly after an abort is TURN_ABORTED, even after a finish', async () => {
    const ctx = signals();
    const model: LanguageModelV3 = {
      ...scripted([]).model,
      doStream: () =>
        Promise.resolve({
          stream: new ReadableStream<LanguageModelV3StreamPart>({
            start(controller) {
              controller.enqueue({ type: 'text-delta', id: 't', delta: 'half' });
              controller.enqueue(FINISH);
              ctx.stop.abort(new Error('stop'));
              controller.close();
            },
          }),
        }),
    };
    expect((await failure(drain(model, {}, ctx))).code).toBe(ErrorCode.TURN_ABORTED);
  });
});

describe('the request and the stream', () => {
  const TOOL = { name: 'echo', description: 'echoes', parameters: { type: 'object' } };

  it('tools and toolChoice only when there are tools; maxOutputTokens and temperature only when set; the abort signal', async () => {
    const bare = scripted([]);
    const ctx = signals();
    await drain(bare.model, {}, ctx);
    const sent = bare.attempts[0]!.options;
    expect(Object.keys(sent).sort()).toEqual(['abortSignal', 'prompt']);
    expect(sent.abortSignal).toBe(ctx.signal);
    const full = scripted([]);
    await drain(full.model, { maxOutputTokens: 64, temperature: 0.2 }, signals(), { ...REQ, tools: [TOOL] });
    expect(full.attempts[0]!.options).toMatchObject({
      maxOutputTokens: 64,
      temperature: 0.2,
      toolChoice: { type: 'auto' },
      tools: [{ type: 'function', name: 'echo', description: 'echoes' }],
    });
  });

  it('L2: reasoning and tool-input deltas are progress (a heartbeat each); an empty text delta is no event', async () => {
    const { model } = scripted(
      [],
      [
        { type: 'reasoning-delta', id: 'r', delta: 'thinking' },
        { type: 'reasoning-delta', id: 'r', delta: 'more' },
        { type: 'text-delta', id: 't', delta: '' },
        { type: 'tool-input-delta', id: 'c', delta: '{' },
        { type: 'text-delta', id: 't', delta: 'answer' },
        { type: 'response-metadata', id: 'x' },
        FINISH,
      ],
    );
    const ctx = signals();
    expect(await drain(model, {}, ctx)).toEqual([{ type: 'text', text: 'answer' }]);
    expect(ctx.beats()).toBe(3);
  });

  it('a finish with reason error, and a finish the server never stated, are MODEL_ERRORs saying so', async () => {
    const errored = scripted([], [{ ...FINISH, finishReason: { unified: 'error', raw: 'error' } }] as const);
    const e = await failure(drain(errored.model, {}));
    expect(e.code).toBe(ErrorCode.MODEL_ERROR);
    expect(e.message).toBe('model rec: no answer: the stream finished with an error');
    const unstated = scripted([], [
      { ...FINISH, finishReason: { unified: 'other', raw: undefined } },
    ] as const);
    const u = await failure(drain(unstated.model, {}));
    expect(u.message).toBe('model rec: no answer: the stream ended without a finish reason');
  });
});
