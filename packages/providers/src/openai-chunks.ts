/**
 * The OpenAI-compatible stream's chunks, checked by hand. The AI SDK's chat model validates every
 * SSE chunk against a zod schema (and wraps that schema afresh for each chunk): through a shared
 * model thread carrying 500 streams, that was about a third of the thread's CPU per token
 * (profiles of `turnwarden bench --only provider`; issue 24's HTTP scale runs). This check accepts
 * exactly the chunks that schema accepts — @ai-sdk/openai-compatible 2.0.92's `chunkBaseSchema`
 * or its error schema (openai-chunks.test.ts holds the two to the same verdicts) — and hands the
 * chat model the value as that schema would: unknown keys are kept (the model reads only the
 * known ones) and a `refusal` that is not a string reads as absent, as the schema transforms it.
 * An invalid chunk is reported the same way, as the stream's `error` part.
 */

/** The AI SDK's schema protocol (provider-utils `jsonSchema(…, { validate })`): a marked object with `validate`. */
const SCHEMA = Symbol.for('vercel.ai.schema');

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const nullish = (v: unknown) => v === undefined || v === null;
const optString = (v: unknown) => nullish(v) || typeof v === 'string';
const optNumber = (v: unknown) => nullish(v) || typeof v === 'number';
const optObject = (v: unknown, check: (o: Obj) => boolean) => nullish(v) || (isObj(v) && check(v));

const content = (v: unknown) =>
  nullish(v) ||
  typeof v === 'string' ||
  (Array.isArray(v) && v.every((p) => isObj(p) && typeof p.type === 'string'));

const toolCall = (v: unknown) =>
  isObj(v) &&
  optNumber(v.index) &&
  optString(v.id) &&
  isObj(v.function) &&
  optString(v.function.name) &&
  optString(v.function.arguments) &&
  optObject(v.extra_content, (e) => optObject(e.google, (g) => optString(g.thought_signature)));

const delta = (d: Obj) =>
  (nullish(d.role) || d.role === 'assistant' || d.role === '') &&
  content(d.content) &&
  optString(d.reasoning_content) &&
  optString(d.reasoning) &&
  (nullish(d.tool_calls) || (Array.isArray(d.tool_calls) && d.tool_calls.every(toolCall)));

const usage = (u: Obj) =>
  optNumber(u.prompt_tokens) &&
  optNumber(u.completion_tokens) &&
  optNumber(u.total_tokens) &&
  optObject(u.prompt_tokens_details, (p) => optNumber(p.cached_tokens)) &&
  optObject(
    u.completion_tokens_details,
    (c) =>
      optNumber(c.reasoning_tokens) &&
      optNumber(c.accepted_prediction_tokens) &&
      optNumber(c.rejected_prediction_tokens),
  );

const choice = (c: unknown) => isObj(c) && optObject(c.delta, delta) && optString(c.finish_reason);

function baseChunk(v: unknown): v is Obj {
  return (
    isObj(v) &&
    optString(v.id) &&
    optNumber(v.created) &&
    optString(v.model) &&
    Array.isArray(v.choices) &&
    v.choices.every(choice) &&
    optObject(v.usage, usage)
  );
}

function errorChunk(v: unknown): v is Obj {
  if (!isObj(v) || !isObj(v.error)) return false;
  const { message, type, code } = v.error;
  return (
    typeof message === 'string' &&
    optString(type) &&
    (nullish(code) || typeof code === 'string' || typeof code === 'number')
  );
}

/** A delta's non-string `refusal` reads as absent (the schema's transform); everything else as sent. */
function normalized(v: Obj): Obj {
  const choices = v.choices as Obj[];
  if (
    !choices.some(
      (c) => isObj(c.delta) && c.delta.refusal !== undefined && typeof c.delta.refusal !== 'string',
    )
  ) {
    return v;
  }
  return {
    ...v,
    choices: choices.map((c) =>
      isObj(c.delta) && typeof c.delta.refusal !== 'string'
        ? { ...c, delta: { ...c.delta, refusal: undefined } }
        : c,
    ),
  };
}

/** Whether the AI SDK's chunk schema accepts `value`, and the value it would hand on. */
export function checkChunk(
  value: unknown,
): { success: true; value: unknown } | { success: false; error: Error } {
  if (baseChunk(value)) return { success: true, value: normalized(value) };
  if (errorChunk(value)) return { success: true, value };
  return { success: false, error: new TypeError('not an OpenAI-compatible chat completion chunk') };
}

/** The schema object the chat model validates each chunk with. */
export const chunkSchema = {
  [SCHEMA]: true,
  _type: undefined,
  jsonSchema: { type: 'object' },
  validate: checkChunk,
} as const;

/**
 * Puts the hand check in place of the chat model's zod chunk schema (a field of the AI SDK's
 * `OpenAICompatibleChatLanguageModel`, set in its constructor). Returns whether it was there to
 * replace: a model without it (another AI SDK version) keeps its own validation.
 */
export function useChunkCheck(model: object): boolean {
  if (!('chunkSchema' in model)) return false;
  (model as { chunkSchema: unknown }).chunkSchema = chunkSchema;
  return true;
}
