/**
 * A Turnwarden model provider over any AI SDK provider-level model (`LanguageModelV3`), driven
 * through `doStream`: Turnwarden keeps its own loop, journal and watchdog; the AI SDK's provider
 * packages bring the wire formats (request bodies, SSE parsing, tool-call delta assembly).
 *
 * What counts as progress (L1, L2): content — text and reasoning deltas — and tool-call input
 * deltas; nothing else. A keep-alive comment is invisible here, as are response metadata and
 * stream bookkeeping, so a stream that only keeps its connection alive stamps nothing and the
 * watchdog ends it. Each text delta is a `text` event (a stamp of its own); other progress calls
 * `heartbeat()`.
 *
 * What counts as an answer: a stream that reached a finish reason the server stated. An `error`
 * part, a stream that ended without a finish reason (the OpenAI-compatible layer reports it as an
 * error part; the Anthropic layer finishes with a placeholder reason whose `raw` is absent) or a
 * transport that failed mid-stream is a MODEL_ERROR, never a truncated answer. The turn's abort signal reaches
 * the HTTP request (`abortSignal`): the server sees the connection close.
 *
 * Retries: a request refused before its stream began — 429, 5xx, a connection that failed —
 * is retried up to `maxRetries` times with jittered exponential backoff (honouring a
 * `retry-after` header), each wait ended at once by the abort. Each retry stamps the clock (it
 * is work, and it is logged by the watchdog as model activity), so a long series of retries is
 * still bounded by the watchdog: the waits themselves are not progress. A stream that failed
 * after it began is not retried: the turn may have streamed part of the answer.
 */
import type { LanguageModelV3, LanguageModelV3StreamPart } from '@ai-sdk/provider';
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import type { ModelEvent, ModelProvider, ModelRequest, TurnSignals } from '@turnwarden/session';
import { toPrompt, toTools } from './prompt.js';

export interface RetryOptions {
  /** Retries after the first attempt (default 3; 0: never retry). */
  readonly maxRetries?: number;
  /** Backoff before retry n: a random point in [½, 1] × min(maxDelayMs, baseDelayMs × 2ⁿ⁻¹). */
  readonly baseDelayMs?: number;
  readonly maxDelayMs?: number;
}

export interface DriveOptions extends RetryOptions {
  /** The name turns select the model by (`config.model`). */
  readonly name: string;
  /** Most output tokens per model call (default: the provider's). */
  readonly maxOutputTokens?: number;
  readonly temperature?: number;
}

const DEFAULT_RETRY = { maxRetries: 3, baseDelayMs: 500, maxDelayMs: 8_000 } as const;
/** A server's retry-after is honoured up to this; longer, the retry is not worth the turn. */
const MAX_RETRY_AFTER_MS = 60_000;

/** What the AI SDK's APICallError carries (checked by shape: no runtime import of `ai`). */
interface CallError {
  readonly statusCode?: number;
  readonly isRetryable?: boolean;
  readonly responseHeaders?: Record<string, string>;
  readonly message?: string;
}

function asCallError(e: unknown): CallError | undefined {
  return typeof e === 'object' && e !== null ? (e as CallError) : undefined;
}

/**
 * 429 and 5xx answers, and calls the provider layer marks retryable (a connection that failed:
 * it wraps those as API call errors with `isRetryable`). Anything else — a missing key, a prompt
 * the provider cannot express, a 4xx — fails the same way every time: not retried.
 */
function retryable(e: unknown): boolean {
  const c = asCallError(e);
  if (c?.statusCode !== undefined)
    return c.statusCode === 429 || c.statusCode >= 500 || c.isRetryable === true;
  return c?.isRetryable === true;
}

/** A `retry-after` / `retry-after-ms` header, in ms, if the server sent one. */
function retryAfterMs(e: unknown): number | undefined {
  const h = asCallError(e)?.responseHeaders;
  if (h === undefined) return undefined;
  const ms = Number(h['retry-after-ms']);
  if (Number.isFinite(ms) && ms >= 0) return ms;
  const raw = h['retry-after'];
  if (raw === undefined) return undefined;
  const s = Number(raw);
  if (Number.isFinite(s) && s >= 0) return s * 1000;
  const at = Date.parse(raw);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function backoff(attempt: number, e: unknown, o: Required<RetryOptions>): number {
  const hinted = retryAfterMs(e);
  if (hinted !== undefined) return Math.min(hinted, MAX_RETRY_AFTER_MS);
  const ceiling = Math.min(o.maxDelayMs, o.baseDelayMs * 2 ** (attempt - 1));
  return ceiling * (0.5 + Math.random() / 2);
}

/** Waits `ms`, or rejects at once when the signal aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(aborted(signal));
    const onAbort = () => {
      clearTimeout(timer);
      reject(aborted(signal));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function aborted(signal: AbortSignal): TurnwardenError {
  return new TurnwardenError(ErrorCode.TURN_ABORTED, 'the model call was aborted', { cause: signal.reason });
}

function describe(e: unknown): string {
  const c = asCallError(e);
  const status = c?.statusCode === undefined ? '' : `HTTP ${c.statusCode}: `;
  return `${status}${e instanceof Error ? e.message : String(e)}`;
}

function modelError(name: string, e: unknown, what: string): TurnwardenError {
  if (e instanceof TurnwardenError) return e;
  const status = asCallError(e)?.statusCode;
  return new TurnwardenError(ErrorCode.MODEL_ERROR, `model ${name}: ${what}: ${describe(e)}`, {
    cause: e,
    details: { model: name, ...(status === undefined ? {} : { status }) },
  });
}

/** A ModelProvider streaming `model` (a LanguageModelV3 of any AI SDK provider package). */
export function driveModel(model: LanguageModelV3, options: DriveOptions): ModelProvider {
  const retry: Required<RetryOptions> = {
    maxRetries: options.maxRetries ?? DEFAULT_RETRY.maxRetries,
    baseDelayMs: options.baseDelayMs ?? DEFAULT_RETRY.baseDelayMs,
    maxDelayMs: options.maxDelayMs ?? DEFAULT_RETRY.maxDelayMs,
  };
  const { name } = options;
  return {
    name,
    stream(req: ModelRequest, ctx: TurnSignals): AsyncIterable<ModelEvent> {
      return streamOnce(model, name, req, ctx, retry, options);
    },
  };
}

async function open(
  model: LanguageModelV3,
  name: string,
  req: ModelRequest,
  ctx: TurnSignals,
  retry: Required<RetryOptions>,
  options: DriveOptions,
): Promise<ReadableStream<LanguageModelV3StreamPart>> {
  const prompt = toPrompt(req.history);
  const tools = toTools(req.tools);
  for (let attempt = 1; ; attempt++) {
    try {
      const result = await model.doStream({
        prompt,
        ...(tools.length === 0 ? {} : { tools, toolChoice: { type: 'auto' as const } }),
        ...(options.maxOutputTokens === undefined ? {} : { maxOutputTokens: options.maxOutputTokens }),
        ...(options.temperature === undefined ? {} : { temperature: options.temperature }),
        abortSignal: ctx.signal,
      });
      return result.stream;
    } catch (e) {
      if (ctx.signal.aborted) throw aborted(ctx.signal);
      if (attempt > retry.maxRetries || !retryable(e)) {
        throw modelError(name, e, attempt > 1 ? `refused after ${attempt} attempts` : 'request refused');
      }
      ctx.heartbeat();
      await sleep(backoff(attempt, e, retry), ctx.signal);
      ctx.heartbeat();
    }
  }
}

async function* streamOnce(
  model: LanguageModelV3,
  name: string,
  req: ModelRequest,
  ctx: TurnSignals,
  retry: Required<RetryOptions>,
  options: DriveOptions,
): AsyncGenerator<ModelEvent> {
  const stream = await open(model, name, req, ctx, retry, options);
  const reader = stream.getReader();
  let finished = false;
  try {
    for (;;) {
      const next = await reader.read().catch((e: unknown) => {
        if (ctx.signal.aborted) throw aborted(ctx.signal);
        throw modelError(name, e, 'the stream failed');
      });
      if (next.done) break;
      const part = next.value;
      switch (part.type) {
        case 'text-delta':
          if (part.delta !== '') yield { type: 'text', text: part.delta };
          break;
        case 'reasoning-delta':
        case 'tool-input-delta':
          ctx.heartbeat();
          break;
        case 'tool-call':
          yield {
            type: 'tool_call',
            call: { id: part.toolCallId, name: part.toolName, arguments: part.input },
          };
          break;
        case 'error':
          throw modelError(name, part.error, 'the stream reported an error');
        case 'finish':
          if (part.finishReason.unified === 'error') {
            throw modelError(name, new Error('the stream finished with an error'), 'no answer');
          }
          // A finish the server never stated (the provider layer's placeholder) is no answer.
          if (part.finishReason.raw === undefined) {
            throw modelError(name, new Error('the stream ended without a finish reason'), 'no answer');
          }
          finished = true;
          break;
        default:
          break;
      }
    }
    // An aborted request may end its stream quietly: that is not an answer.
    if (ctx.signal.aborted) throw aborted(ctx.signal);
    if (!finished) throw modelError(name, new Error('the stream ended without a finish reason'), 'no answer');
  } finally {
    reader.cancel().catch(() => {});
  }
}
