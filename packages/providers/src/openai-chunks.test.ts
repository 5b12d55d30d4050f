/**
 * The hand check of OpenAI-compatible stream chunks (openai-chunks.ts) gives the AI SDK's zod
 * chunk schema's verdict on every chunk here — valid ones of each shape the chat model reads,
 * and each field broken in turn — and the chat model built from config uses it.
 */
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ErrorCode } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { modelProvider } from './config.js';
import { LoopbackServer } from './loopback/index.js';
import { checkChunk, chunkSchema, useChunkCheck } from './openai-chunks.js';
import { failure, signals } from './test-support/signals.js';

/** The schema the AI SDK's chat model validates chunks with (a field its constructor sets). */
function sdkSchema(): { safeParse(v: unknown): { success: boolean; data?: unknown } } {
  const model = createOpenAICompatible({ name: 'x', baseURL: 'http://127.0.0.1:1/v1' }).chatModel('m');
  return (model as unknown as { chunkSchema: ReturnType<typeof sdkSchema> }).chunkSchema;
}

const base = { id: 'c1', created: 1, model: 'm' };
const text = (delta: unknown, extra: object = {}) => ({ ...base, choices: [{ index: 0, delta, ...extra }] });
const call = (c: object) => text({ tool_calls: [c] });

const VALID: unknown[] = [
  text({ role: 'assistant', content: 'hel' }),
  text({ role: '', content: 'lo' }),
  text({ content: null }),
  text({
    content: [
      { type: 'text', text: 'a' },
      { type: 'thinking', thinking: [] },
    ],
  }),
  text({ reasoning_content: 'think', reasoning: null }),
  text({}, { finish_reason: 'stop' }),
  text(null, { finish_reason: 'tool_calls' }),
  { ...base, choices: [{ finish_reason: null }] },
  { ...base, choices: [] },
  { choices: [] },
  { ...base, choices: [], usage: null },
  {
    ...base,
    choices: [],
    usage: {
      prompt_tokens: 3,
      completion_tokens: 4,
      total_tokens: 7,
      prompt_tokens_details: { cached_tokens: 1 },
      completion_tokens_details: { reasoning_tokens: 1, accepted_prediction_tokens: null },
      extra: 'kept',
    },
  },
  call({ index: 0, id: 'call_1', type: 'function', function: { name: 'echo', arguments: '' } }),
  call({ index: 0, function: { arguments: '{"a"' } }),
  call({ id: 'g1', function: { name: 'f', arguments: null } }),
  call({ index: 1, function: {}, extra_content: { google: { thought_signature: 'sig' } } }),
  call({ index: 1, function: {}, extra_content: { google: null } }),
  text({ content: 'x', refusal: false }),
  text({ content: null, refusal: 'no' }),
  { ...text({ content: 'x' }), system_fingerprint: 'fp', object: 'chat.completion.chunk' },
  { error: { message: 'overloaded' } },
  { error: { message: 'bad', type: 'invalid_request_error', param: 'x', code: 400 } },
  { error: { message: 'bad', type: null, code: 'rate_limit' } },
];

const INVALID: unknown[] = [
  null,
  'text',
  42,
  [],
  {},
  { ...base },
  { ...base, choices: {} },
  { ...base, choices: [null] },
  { ...base, choices: ['x'] },
  { id: 5, choices: [] },
  { created: '1', choices: [] },
  { model: 7, choices: [] },
  text([]),
  text('hello'),
  text({ role: 'user', content: 'x' }),
  text({ content: 5 }),
  text({ content: [{ text: 'no type' }] }),
  text({ content: ['x'] }),
  text({ reasoning_content: 3 }),
  text({ reasoning: {} }),
  text({ tool_calls: {} }),
  text({ tool_calls: [null] }),
  call({ index: 0 }),
  call({ index: 0, function: null }),
  call({ index: 'first', function: {} }),
  call({ id: 9, function: {} }),
  call({ function: { name: 3 } }),
  call({ function: { arguments: {} } }),
  call({ function: {}, extra_content: 'x' }),
  call({ function: {}, extra_content: { google: { thought_signature: 1 } } }),
  text({}, { finish_reason: 1 }),
  { ...base, choices: [], usage: 'x' },
  { ...base, choices: [], usage: { prompt_tokens: '3' } },
  { ...base, choices: [], usage: { total_tokens: true } },
  { ...base, choices: [], usage: { prompt_tokens_details: { cached_tokens: 'x' } } },
  { ...base, choices: [], usage: { completion_tokens_details: { rejected_prediction_tokens: 'x' } } },
  { ...base, choices: [], usage: { completion_tokens_details: [] } },
  { error: {} },
  { error: 'boom' },
  { error: { message: 3 } },
  { error: { message: 'x', type: 4 } },
  { error: { message: 'x', code: true } },
];

describe('OpenAI-compatible chunks checked by hand', () => {
  it('accepts and refuses exactly what the AI SDK’s chunk schema does', () => {
    const sdk = sdkSchema();
    for (const chunk of VALID) {
      expect(sdk.safeParse(chunk).success, JSON.stringify(chunk)).toBe(true);
      expect(checkChunk(chunk).success, JSON.stringify(chunk)).toBe(true);
    }
    for (const chunk of INVALID) {
      expect(sdk.safeParse(chunk).success, JSON.stringify(chunk)).toBe(false);
      expect(checkChunk(chunk).success, JSON.stringify(chunk)).toBe(false);
    }
  });

  it('hands on what the schema would for every field the chat model reads: a refusal that is not a string reads as absent', () => {
    const sdk = sdkSchema();
    const reads = (v: unknown) => {
      const c = v as {
        error?: unknown;
        usage?: unknown;
        choices?: { delta?: Record<string, unknown> | null; finish_reason?: unknown }[];
      };
      if (c.error !== undefined) return { error: (c.error as { message: unknown }).message };
      return {
        usage: c.usage ?? null,
        choices: (c.choices ?? []).map((ch) => ({
          finish: ch.finish_reason ?? null,
          delta:
            ch.delta == null
              ? null
              : Object.fromEntries(
                  ['role', 'content', 'refusal', 'reasoning_content', 'reasoning', 'extra_content'].map(
                    (k) => [k, ch.delta![k] ?? null],
                  ),
                ),
          // Of a tool call, what the AI SDK's call tracker reads (it validates no `type`).
          calls: ((ch.delta?.tool_calls ?? []) as Record<string, unknown>[]).map((t) => {
            const f = t.function as Record<string, unknown>;
            const e = t.extra_content as
              | { google?: { thought_signature?: unknown } | null }
              | null
              | undefined;
            return [
              t.index ?? null,
              t.id ?? null,
              f.name ?? null,
              f.arguments ?? null,
              e?.google?.thought_signature ?? null,
            ];
          }),
        })),
      };
    };
    for (const chunk of VALID) {
      const ours = checkChunk(chunk);
      expect(ours.success).toBe(true);
      expect(reads(ours.success ? ours.value : undefined), JSON.stringify(chunk)).toEqual(
        reads(sdk.safeParse(chunk).data),
      );
    }
    // The chunk itself is never changed.
    const refused = text({ content: 'x', refusal: false });
    checkChunk(refused);
    expect((refused.choices[0]!.delta as { refusal: unknown }).refusal).toBe(false);
  });

  it('a provider built from configuration checks its stream’s chunks by hand: its verdict on a chunk the schema refuses is the one reported', async () => {
    const server = await LoopbackServer.start();
    try {
      server.script({ chunks: [{ text: 'a' }, { error: { error: 'upstream model crashed' } }] });
      const p = modelProvider({
        name: 'loop',
        provider: 'openai-compatible',
        baseURL: server.url,
        model: 'm',
      });
      const e = await failure(
        (async () => {
          for await (const _ of p.stream(
            { history: [{ role: 'user', content: 'hi' }], tools: [] },
            signals(),
          ));
        })(),
      );
      expect(e.code).toBe(ErrorCode.MODEL_ERROR);
      expect(e.message).toContain('not an OpenAI-compatible chat completion chunk');
      expect(e.message).toContain('upstream model crashed');
    } finally {
      await server.close();
    }
  });

  it('the chat model a configuration builds checks its chunks by hand', () => {
    const provider = createOpenAICompatible({ name: 'x', baseURL: 'http://127.0.0.1:1/v1' });
    const chat = provider.chatModel('m');
    expect(useChunkCheck(chat)).toBe(true);
    expect((chat as unknown as { chunkSchema: unknown }).chunkSchema).toBe(chunkSchema);
    expect(useChunkCheck({})).toBe(false);
    expect(
      modelProvider({
        name: 'm',
        provider: 'openai-compatible',
        baseURL: 'http://127.0.0.1:1/v1',
        model: 'm',
      }),
    ).toBeDefined();
  });
});
