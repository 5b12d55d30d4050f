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
 * transport that failed mid-stream is a MODEL_ERROR, never a truncated answer. Its message and
 * details carry what the provider said — the HTTP status where known, the API error's type and
 * message — read from whatever shape the provider layer hands over (`diagnose`), the key
 * redacted. The turn's abort signal reaches the HTTP request (`abortSignal`): the server sees the
 * connection close.
 *
 * Retries: a request refused before its stream began — 429, 5xx, a connection that failed —
 * is retried up to `maxRetries` times with jittered exponential backoff (honouring a
 * `retry-after` header), each wait ended at once by the abort. Each retry stamps the clock (it
 * is work, and it is logged by the watchdog as model activity), so a long series of retries is
 * still bounded by the watchdog: the waits themselves are not progress. A stream that failed
 * after it began is not retried: the turn may have streamed part of the answer.
 */
import type { LanguageModelV3, LanguageModelV3StreamPart } from '@ai-sdk/provider';
import { errors, TurnwardenError } from '@turnwarden/protocol';
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
  /** How errors name the provider (default: the model's own, such as `anthropic.messages`). */
  readonly provider?: string;
  /** Strings no error may show (the API key): replaced wherever a provider's words quote them. */
  readonly secrets?: readonly string[];
}

const DEFAULT_RETRY = { maxRetries: 3, baseDelayMs: 500, maxDelayMs: 8_000 } as const;
/** A server's retry-after is honoured up to this; longer, the retry is not worth the turn. */
const MAX_RETRY_AFTER_MS = 60_000;

/** What the AI SDK's APICallError carries (checked by shape: no runtime import of `ai`). */
interface CallError {
  readonly statusCode?: number;
  readonly isRetryable?: boolean;
  readonly responseHeaders?: Record<string, string>;
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
  return errors.turnAborted('the model call was aborted', undefined, { cause: signal.reason });
}

/** What a failure says about itself, as far as it can be read. */
interface Diagnosis {
  /** The provider's (or the transport's) own words. */
  readonly message: string;
  /** The provider's error type (`server_error`, `overloaded_error`), when it named one. */
  readonly type?: string;
  /** The HTTP status, where known (an API call error's). */
  readonly status?: number;
  /** The provider's error code (`rate_limit_exceeded`, `ECONNRESET`), when it sent one. */
  readonly code?: string | number;
}

/** A provider's words are kept up to this many characters (an HTML error page is not a message). */
const MAX_MESSAGE = 500;
const MAX_DEPTH = 4;

function record(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}

function text(v: unknown): string | undefined {
  return typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined;
}

function int(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isSafeInteger(v) ? v : undefined;
}

/**
 * An HTTP status that says something failed. The provider layer wraps a transport error that
 * broke a stream in an API call error with the stream's own status (200): that is not the
 * failure's status.
 */
function failedStatus(v: unknown): number | undefined {
  const n = int(v);
  return n !== undefined && n >= 400 && n <= 599 ? n : undefined;
}

function codeOf(v: unknown): string | number | undefined {
  return text(v) ?? int(v);
}

function json(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v); // cyclic
  }
}

function parsed(body: unknown): unknown {
  if (typeof body !== 'string') return undefined;
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

/** The innermost error object of an envelope: `{ error: {…} }`, `{ type: 'error', error: {…} }`. */
function unwrap(o: Record<string, unknown>, depth = 0): Record<string, unknown> {
  const inner = record(o.error);
  return inner === undefined || depth >= MAX_DEPTH ? o : unwrap(inner, depth + 1);
}

/** An API error object (`{ message, type, code }`, at any depth of `{ error: … }`). */
function fromObject(o: Record<string, unknown>): Diagnosis {
  const inner = unwrap(o);
  const type = text(inner.type);
  const status =
    failedStatus(inner.status) ??
    failedStatus(inner.statusCode) ??
    failedStatus(o.status) ??
    failedStatus(o.statusCode);
  const code = codeOf(inner.code);
  return {
    // Without a message, the object itself says most (not "[object Object]").
    message: text(inner.message) ?? json(inner === o ? o : inner),
    ...(type === undefined ? {} : { type }),
    ...(status === undefined ? {} : { status }),
    ...(code === undefined ? {} : { code }),
  };
}

/**
 * Reads any failure the provider layer hands over: the API's error object from an error part
 * (`{ message, type }`, or an envelope of it), an APICallError (status, the parsed body in `data`
 * or the body as sent in `responseBody`), a transport error with its cause, or a string. Reads
 * only the message, type, status and code: never the URL, the request or any headers.
 */
function diagnose(e: unknown, depth = 0): Diagnosis {
  if (typeof e === 'string') return { message: text(e) ?? 'an empty error' };
  if (e instanceof Error) {
    const c = e as Error & { statusCode?: unknown; data?: unknown; responseBody?: unknown; code?: unknown };
    const bodyObject = record(c.data) ?? record(parsed(c.responseBody));
    const body = bodyObject === undefined ? undefined : fromObject(bodyObject);
    const cause = e.cause === undefined || depth >= MAX_DEPTH ? undefined : diagnose(e.cause, depth + 1);
    let message = text(e.message) ?? body?.message ?? e.name;
    if (cause !== undefined && !message.includes(cause.message))
      message = `${message} (cause: ${cause.message})`;
    const type = body?.type ?? cause?.type;
    const status = failedStatus(c.statusCode) ?? body?.status ?? cause?.status;
    const code = codeOf(c.code) ?? body?.code ?? cause?.code;
    return {
      message,
      ...(type === undefined ? {} : { type }),
      ...(status === undefined ? {} : { status }),
      ...(code === undefined ? {} : { code }),
    };
  }
  const o = record(e);
  if (o !== undefined) return fromObject(o);
  return { message: e === undefined ? 'an error without a description' : json(e) };
}

/** Replaces every secret (the API key) in `s`: an error may quote what the request carried. */
function redacted(s: string, secrets: readonly string[]): string {
  let out = s;
  for (const secret of secrets) if (secret !== '') out = out.split(secret).join('[redacted]');
  return out;
}

/** One line (a validation error's JSON spans many), at most MAX_MESSAGE characters. */
function clipped(s: string): string {
  const line = s.replace(/\s+/g, ' ').trim();
  return line.length <= MAX_MESSAGE ? line : `${line.slice(0, MAX_MESSAGE)}…`;
}

const NO_FINISH = 'the stream ended without a finish reason';

/** Who is failing, for every MODEL_ERROR of one provider. */
interface Source {
  readonly name: string;
  readonly provider: string;
  readonly secrets: readonly string[];
}

/**
 * A MODEL_ERROR whose message carries what the provider said — its status, error type and
 * message — and whose details carry the same as fields: { model, provider, message, type?,
 * status?, code? }. The key is never among them (see `redacted`).
 */
function modelError(source: Source, e: unknown, what: string): TurnwardenError {
  if (e instanceof TurnwardenError) return e;
  const d = diagnose(e);
  // Redacted before it is clipped: a clip must not leave part of a key behind.
  const clean = (s: string) => clipped(redacted(s, source.secrets));
  const message = clean(d.message);
  const type = d.type === undefined ? undefined : clean(d.type);
  const code = typeof d.code === 'string' ? clean(d.code) : d.code;
  const status = d.status === undefined ? '' : `HTTP ${d.status}: `;
  const typed = type === undefined || message.startsWith(type) ? '' : `${type}: `;
  return errors.modelError(
    `model ${source.name}: ${what}: ${status}${typed}${message}`,
    {
      model: source.name,
      provider: source.provider,
      message,
      ...(type === undefined ? {} : { type }),
      ...(d.status === undefined ? {} : { status: d.status }),
      ...(code === undefined ? {} : { code }),
    },
    { cause: e },
  );
}

/** A ModelProvider streaming `model` (a LanguageModelV3 of any AI SDK provider package). */
export function driveModel(model: LanguageModelV3, options: DriveOptions): ModelProvider {
  const retry: Required<RetryOptions> = {
    maxRetries: options.maxRetries ?? DEFAULT_RETRY.maxRetries,
    baseDelayMs: options.baseDelayMs ?? DEFAULT_RETRY.baseDelayMs,
    maxDelayMs: options.maxDelayMs ?? DEFAULT_RETRY.maxDelayMs,
  };
  const { name } = options;
  const source: Source = {
    name,
    provider: options.provider ?? model.provider,
    secrets: options.secrets ?? [],
  };
  return {
    name,
    stream(req: ModelRequest, ctx: TurnSignals): AsyncIterable<ModelEvent> {
      return streamOnce(model, source, req, ctx, retry, options);
    },
  };
}

async function open(
  model: LanguageModelV3,
  source: Source,
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
        throw modelError(source, e, attempt > 1 ? `refused after ${attempt} attempts` : 'request refused');
      }
      ctx.heartbeat();
      await sleep(backoff(attempt, e, retry), ctx.signal);
      ctx.heartbeat();
    }
  }
}

async function* streamOnce(
  model: LanguageModelV3,
  source: Source,
  req: ModelRequest,
  ctx: TurnSignals,
  retry: Required<RetryOptions>,
  options: DriveOptions,
): AsyncGenerator<ModelEvent> {
  const stream = await open(model, source, req, ctx, retry, options);
  const reader = stream.getReader();
  let finished = false;
  try {
    for (;;) {
      const next = await reader.read().catch((e: unknown) => {
        if (ctx.signal.aborted) throw aborted(ctx.signal);
        throw modelError(source, e, 'the stream failed');
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
          throw modelError(source, part.error, 'the stream reported an error');
        case 'finish':
          if (part.finishReason.unified === 'error') {
            throw modelError(source, 'the stream finished with an error', 'no answer');
          }
          // A finish the server never stated (the provider layer's placeholder) is no answer.
          if (part.finishReason.raw === undefined) {
            throw modelError(source, NO_FINISH, 'no answer');
          }
          finished = true;
          break;
        default:
          break;
      }
    }
    // An aborted request may end its stream quietly: that is not an answer.
    if (ctx.signal.aborted) throw aborted(ctx.signal);
    // The server closed the stream before its finish (no finish part: no `message_stop`, or no
    // finish chunk): whatever streamed is half an answer at most.
    if (!finished) throw modelError(source, NO_FINISH, 'no answer');
  } finally {
    reader.cancel().catch(() => {});
  }
}
