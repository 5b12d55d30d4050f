/**
 * The OpenAI-compatible chat stream read without the AI SDK's stream pipeline.
 *
 * The AI SDK's chat model turns the response body into stream parts through five web-streams
 * stages per chunk (decode, SSE parse, JSON and a zod validation, its transform, the reader), on
 * top of `fetch`'s own body stream: a promise hop per stage per token, on a model thread that
 * carries every session's stream (`turnwarden bench --only provider`: 2.3–3.3× a bare fetch). So
 * the request still goes through the SDK's request code — the same body (its own builder),
 * headers, refusals and their errors (`APICallError`, which the retries read) — over `node:http`
 * (node-fetch.ts), and the successful response's body is read here as the socket hands it over:
 * SSE events split by hand, each chunk parsed, checked (`openai-chunks.ts`, the SDK schema's
 * verdicts) and turned into the stream parts `drive.ts` reads, in one stage.
 *
 * What the parts mean is the SDK chat model's: text deltas (a `refusal` is text too), reasoning
 * and tool-call argument deltas (progress), each tool call once complete — assembled by index,
 * its id the server's or, when missing or already used in the message, a fresh one — then the
 * finish with the server's reason (`stop`, `tool_calls`, …, unified as the SDK maps them); an
 * error chunk or a chunk that fails the check is an `error` part, as is a stream that ends with
 * no finish reason ("Response stream ended without a finish reason."). A tool call that never
 * got a name is an error, as in the SDK. A chat model given a `fetch` of its own, or one that does
 * not expose what this reads (another SDK version), keeps the SDK's pipeline (`leanStreaming`
 * returns false).
 */

import type { Readable } from 'node:stream';
import { mapOpenAICompatibleFinishReason } from '@ai-sdk/openai-compatible/internal';
import {
  type APICallError,
  InvalidResponseDataError,
  JSONParseError,
  type LanguageModelV3,
  type LanguageModelV3CallOptions,
  type LanguageModelV3FinishReason,
  type LanguageModelV3StreamPart,
  type LanguageModelV3StreamResult,
  TypeValidationError,
} from '@ai-sdk/provider';
import { combineHeaders, generateId, postJsonToApi, type ResponseHandler } from '@ai-sdk/provider-utils';
import { nodeFetch, RAW_BODY, type RawResponse } from './node-fetch.js';
import { checkChunk } from './openai-chunks.js';

/** What the SDK's chat model keeps to itself and this reads (its request side). */
interface ChatInternals {
  readonly modelId: string;
  readonly config: {
    readonly url: (o: { path: string; modelId: string }) => string;
    readonly headers: () => Record<string, string | undefined>;
    readonly fetch?: typeof fetch;
    readonly includeUsage?: boolean;
  };
  readonly failedResponseHandler: ResponseHandler<APICallError>;
  getArgs(
    options: LanguageModelV3CallOptions,
  ): Promise<{ args: Record<string, unknown>; warnings: unknown[] }>;
  transformRequestBody(body: Record<string, unknown>, warnings: unknown[]): Record<string, unknown>;
  doStream(options: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult>;
}

function internals(model: object): ChatInternals | undefined {
  const m = model as Partial<ChatInternals>;
  const ok =
    typeof m.modelId === 'string' &&
    typeof m.config?.url === 'function' &&
    typeof m.config?.headers === 'function' &&
    typeof m.failedResponseHandler === 'function' &&
    typeof m.getArgs === 'function' &&
    typeof m.transformRequestBody === 'function';
  return ok ? (m as ChatInternals) : undefined;
}

/**
 * Makes the chat model read its successful streams here (above). Returns false — and changes
 * nothing — when the model is not the SDK chat model this was written against.
 */
export function leanStreaming(model: LanguageModelV3): boolean {
  const chat = internals(model);
  // A model given a fetch of its own keeps the SDK's pipeline, and that fetch.
  if (chat === undefined || chat.config.fetch !== undefined) return false;
  (model as unknown as { doStream: ChatInternals['doStream'] }).doStream = (options) =>
    streamChat(chat, options);
  return true;
}

async function streamChat(
  chat: ChatInternals,
  options: LanguageModelV3CallOptions,
): Promise<LanguageModelV3StreamResult> {
  const { args, warnings } = await chat.getArgs({ ...options });
  const body = chat.transformRequestBody(
    {
      ...args,
      stream: true,
      stream_options: chat.config.includeUsage ? { include_usage: true } : undefined,
    },
    warnings,
  );
  const { value: response, responseHeaders } = await postJsonToApi({
    url: chat.config.url({ path: '/chat/completions', modelId: chat.modelId }),
    headers: combineHeaders(chat.config.headers(), options.headers),
    body,
    failedResponseHandler: chat.failedResponseHandler,
    successfulResponseHandler: async ({ response }): Promise<{ value: Readable | undefined }> => ({
      value: (response as RawResponse)[RAW_BODY],
    }),
    ...(options.abortSignal === undefined ? {} : { abortSignal: options.abortSignal }),
    fetch: nodeFetch,
  });
  if (response === undefined)
    throw new InvalidResponseDataError({ data: undefined, message: 'Response has no body.' });
  return {
    stream: partsOf(response, warnings),
    request: { body },
    ...(responseHeaders === undefined ? {} : { response: { headers: responseHeaders } }),
  };
}

/** One tool call of the message being streamed, by the server's index. */
interface Call {
  id: string | undefined;
  name: string | undefined;
  args: string;
}

/** The stream parts of one response body. */
function partsOf(body: Readable, warnings: unknown[]): ReadableStream<LanguageModelV3StreamPart> {
  const decoder = new TextDecoder();
  let buffer = '';
  /** The current event's data lines. */
  let data: string[] = [];
  const calls = new Map<number, Call>();
  let rawFinish: string | undefined;
  let failed = false;
  let hasRefusal = false;
  let ended = false;

  const event = (text: string, out: LanguageModelV3StreamPart[]) => {
    if (text === '[DONE]') return;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (cause) {
      failed = true;
      out.push({ type: 'error', error: new JSONParseError({ text, cause }) });
      return;
    }
    const checked = checkChunk(value);
    if (!checked.success) {
      failed = true;
      out.push({ type: 'error', error: TypeValidationError.wrap({ value, cause: checked.error }) });
      return;
    }
    const chunk = checked.value as ChunkValue;
    if ('error' in chunk) {
      failed = true;
      out.push({ type: 'error', error: chunk.error });
      return;
    }
    const choice = chunk.choices[0];
    if (choice == null) return;
    if (choice.finish_reason != null) rawFinish = choice.finish_reason;
    const delta = choice.delta;
    if (delta == null) return;
    const reasoning = delta.reasoning_content ?? delta.reasoning;
    if (reasoning) out.push({ type: 'reasoning-delta', id: 'reasoning-0', delta: reasoning });
    const content = delta.content;
    if (typeof content === 'string') {
      if (content !== '') out.push({ type: 'text-delta', id: 'txt-0', delta: content });
    } else if (Array.isArray(content)) {
      for (const part of content) {
        if (part.type === 'text' && typeof part.text === 'string' && part.text !== '') {
          out.push({ type: 'text-delta', id: 'txt-0', delta: part.text });
        } else if (part.type === 'thinking') {
          out.push({ type: 'reasoning-delta', id: 'reasoning-0', delta: '' });
        }
      }
    }
    if (typeof delta.refusal === 'string' && delta.refusal !== '') {
      hasRefusal = true;
      out.push({ type: 'text-delta', id: 'txt-0', delta: delta.refusal });
    }
    for (const d of delta.tool_calls ?? []) {
      const index = d.index ?? calls.size;
      let call = calls.get(index);
      if (call === undefined) {
        call = { id: undefined, name: undefined, args: '' };
        calls.set(index, call);
      }
      if (call.id === undefined && d.id != null && d.id.trim() !== '') call.id = d.id;
      if (call.name === undefined && d.function.name != null && d.function.name.trim() !== '')
        call.name = d.function.name;
      const more = d.function.arguments;
      if (more != null && more !== '') {
        call.args += more;
        out.push({ type: 'tool-input-delta', id: call.id ?? `call-${index}`, delta: more });
      }
    }
  };

  /** The end of the body: the calls, then the finish (or the error that there was none). */
  const end = (out: LanguageModelV3StreamPart[]) => {
    const used = new Set<string>();
    for (const [index, call] of [...calls].sort(([a], [b]) => a - b)) {
      if (call.name === undefined) {
        failed = true;
        out.push({
          type: 'error',
          error: new InvalidResponseDataError({
            data: { index, id: call.id },
            message: "Expected 'function.name' to be a string.",
          }),
        });
        continue;
      }
      const id = call.id === undefined || used.has(call.id) ? generateId() : call.id;
      used.add(id);
      out.push({ type: 'tool-call', toolCallId: id, toolName: call.name, input: call.args });
    }
    let finishReason: LanguageModelV3FinishReason;
    if (failed) finishReason = { unified: 'error', raw: rawFinish };
    else if (rawFinish !== undefined)
      finishReason = { unified: mapOpenAICompatibleFinishReason(rawFinish, { hasRefusal }), raw: rawFinish };
    else {
      finishReason = { unified: 'error', raw: undefined };
      out.push({
        type: 'error',
        error: new InvalidResponseDataError({
          data: undefined,
          message: 'Response stream ended without a finish reason.',
        }),
      });
    }
    out.push({ type: 'finish', finishReason, usage: NO_USAGE });
  };

  /** SSE: `data:` lines make an event, a blank line ends it; comments and other fields are skipped. */
  const lines = (text: string, out: LanguageModelV3StreamPart[]) => {
    buffer += text;
    let at = 0;
    for (;;) {
      const nl = buffer.indexOf('\n', at);
      if (nl < 0) break;
      let line = buffer.slice(at, nl);
      at = nl + 1;
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (data.length > 0) event(data.join('\n'), out);
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5));
      }
    }
    buffer = buffer.slice(at);
  };

  const head: LanguageModelV3StreamPart = { type: 'stream-start', warnings: warnings as never };
  // Chunks as the socket hands them over; paused while the reader is behind.
  return new ReadableStream<LanguageModelV3StreamPart>(
    {
      start(controller) {
        controller.enqueue(head);
        const push = (out: LanguageModelV3StreamPart[]) => {
          for (const part of out) controller.enqueue(part);
        };
        body.on('data', (b: Buffer) => {
          if (ended) return;
          const out: LanguageModelV3StreamPart[] = [];
          lines(decoder.decode(b, { stream: true }), out);
          push(out);
          if ((controller.desiredSize ?? 1) <= 0) body.pause();
        });
        body.on('end', () => {
          if (ended) return;
          const out: LanguageModelV3StreamPart[] = [];
          lines(`${decoder.decode()}\n\n`, out);
          end(out);
          ended = true;
          push(out);
          controller.close();
        });
        const fail = (e: unknown) => {
          if (ended) return;
          ended = true;
          controller.error(e);
        };
        // The connection went away mid-stream (the transport's own words kept: "aborted", ECONNRESET).
        const cut = (e?: Error) =>
          fail(
            Object.assign(
              new Error(`the server closed the connection mid-stream${e ? ` (${e.message})` : ''}`),
              {
                cause: e,
              },
            ),
          );
        body.on('error', (e: Error) => (e.name === 'AbortError' ? fail(e) : cut(e)));
        body.on('close', () => cut());
      },
      pull() {
        if (body.isPaused()) body.resume();
      },
      cancel() {
        ended = true;
        body.destroy();
      },
    },
    { highWaterMark: 64 },
  );
}

const NO_USAGE = {
  inputTokens: { total: undefined, noCache: undefined, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: undefined, text: undefined, reasoning: undefined },
} as const;

/** A chunk as the check hands it on. */
type ChunkValue =
  | { readonly error: unknown }
  | {
      readonly choices: readonly {
        readonly finish_reason?: string | null;
        readonly delta?: {
          readonly content?: string | readonly { readonly type: string; readonly text?: unknown }[] | null;
          readonly refusal?: string;
          readonly reasoning_content?: string | null;
          readonly reasoning?: string | null;
          readonly tool_calls?:
            | readonly {
                readonly index?: number | null;
                readonly id?: string | null;
                readonly function: { readonly name?: string | null; readonly arguments?: string | null };
              }[]
            | null;
        } | null;
      }[];
    };
