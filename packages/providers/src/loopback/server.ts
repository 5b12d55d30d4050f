/**
 * A scripted model server on 127.0.0.1, for tests, benchmarks and the demo: it speaks
 * OpenAI-compatible chat completions (`POST /v1/chat/completions`) and Anthropic messages
 * (`POST /v1/messages`), each rendering the same scripts. Each request takes the next scripted
 * reply (or the fallback): an error status (429 with `retry-after`, 500), or a Server-Sent Events
 * stream of chunks — text deltas, tool-call deltas split however the test likes, a finish reason,
 * `[DONE]`, a mid-stream error event (its payload as the test writes it), keep-alive comments,
 * delays (on a schedule, below), a hang (nothing more is sent; the connection stays open until the client closes it) or
 * a destroyed socket. Every exchange is recorded: the request
 * body, and whether the client closed the connection before the reply ended (an abort that
 * reached the server).
 *
 * **Pacing.** A run of chunks is sent on a schedule from its start: a `delayMs` moves the due
 * time of the chunks after it, and a server that was late (its process starved of CPU) catches
 * up rather than carrying its lateness into every later gap — as a remote provider's pacing does
 * not depend on the client's machine, and as the scripted model paces a text step's tokens. A
 * `pauseMs` is a silence of at least that long, never shortened by lateness before it, and the
 * schedule starts again at its end (the player renders sleeps, beats and each text step's start
 * so). A server on the same few cores as the client under test would otherwise slow each stream
 * by the sum of its own timer lateness over every gap, and measure its own starvation as the
 * client's latency.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type Chunk =
  | { readonly text: string }
  | { readonly reasoning: string }
  | {
      readonly toolCall: {
        readonly index: number;
        readonly id?: string;
        readonly name?: string;
        readonly args?: string;
      };
    }
  | { readonly finish: string }
  /**
   * An error event mid-stream, its payload as written: OpenAI-compatible servers send it as a
   * chunk (`data: {"error":{"message":…,"type":…}}`), Anthropic as `event: error`
   * (`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`).
   */
  | { readonly error: unknown }
  | { readonly done: true }
  | { readonly keepAlive: true }
  /** A pause in a paced run of chunks: the next chunk is due `delayMs` after the previous one's due time. */
  | { readonly delayMs: number }
  /** Silence of at least `pauseMs` (a sleep, a beat); the chunks after it are paced from its end. */
  | { readonly pauseMs: number }
  | { readonly hang: true }
  | { readonly destroy: true };

export type Reply =
  | {
      readonly status: number;
      readonly body?: unknown;
      readonly headers?: Readonly<Record<string, string>>;
    }
  | { readonly chunks: readonly Chunk[] };

/** A chat-completions request body, as far as the tests look at it. */
export interface RequestBody {
  readonly model?: string;
  readonly messages?: readonly Record<string, unknown>[];
  readonly tools?: readonly Record<string, unknown>[];
  readonly stream?: boolean;
  readonly [key: string]: unknown;
}

export interface Exchange {
  readonly index: number;
  readonly body: RequestBody;
  readonly headers: IncomingMessage['headers'];
  /** The client closed the connection before the reply ended (an abort reached the server). */
  closedByClient: boolean;
  /** Settles when the connection has closed, either way. */
  readonly closed: Promise<void>;
}

export interface LoopbackOptions {
  /** Answers a request when no scripted reply is queued (default: HTTP 500 "no reply scripted"). */
  readonly fallback?: (body: RequestBody) => Reply;
  /** The pacing's clock (tests): `performance.now()` and a timer by default. */
  readonly timers?: PacingTimers;
}

export interface PacingTimers {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const REAL_TIMERS: PacingTimers = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

/** A text answer streamed a few characters at a time, finished, then `[DONE]`. */
export function textReply(text: string, piece = 4): Reply {
  const chunks: Chunk[] = [];
  for (let i = 0; i < text.length; i += piece) chunks.push({ text: text.slice(i, i + piece) });
  return { chunks: [...chunks, { finish: 'stop' }, { done: true }] };
}

type Render = (chunk: Chunk) => string;

/** Chat-completions chunks (`data: {…}` per delta; `[DONE]`; keep-alive comments). */
function openAIFormat(index: number, body: RequestBody): Render {
  const base = {
    id: `chatcmpl-${index}`,
    object: 'chat.completion.chunk',
    created: 0,
    model: body.model ?? 'loopback',
  };
  const data = (choice: Record<string, unknown>) =>
    `data: ${JSON.stringify({ ...base, choices: [{ index: 0, finish_reason: null, ...choice }] })}\n\n`;
  return (chunk) => {
    if ('text' in chunk) return data({ delta: { role: 'assistant', content: chunk.text } });
    if ('reasoning' in chunk)
      return data({ delta: { role: 'assistant', reasoning_content: chunk.reasoning } });
    if ('toolCall' in chunk) {
      const { index: i, id, name, args } = chunk.toolCall;
      const fn = {
        ...(name === undefined ? {} : { name }),
        ...(args === undefined ? {} : { arguments: args }),
      };
      return data({
        delta: {
          role: 'assistant',
          tool_calls: [{ index: i, ...(id === undefined ? {} : { id, type: 'function' }), function: fn }],
        },
      });
    }
    if ('finish' in chunk) return data({ delta: {}, finish_reason: chunk.finish });
    if ('error' in chunk) return `data: ${JSON.stringify(chunk.error)}\n\n`;
    if ('done' in chunk) return 'data: [DONE]\n\n';
    if ('keepAlive' in chunk) return ': keep-alive\n\n';
    return '';
  };
}

const ANTHROPIC_STOP: Readonly<Record<string, string>> = {
  stop: 'end_turn',
  tool_calls: 'tool_use',
  length: 'max_tokens',
};

/**
 * Anthropic messages events: `message_start`, content blocks (text, tool_use with
 * `input_json_delta`s), `message_delta` with the stop reason, `message_stop`; a keep-alive is a
 * `ping` event. Blocks are sequential: a tool call's deltas must not interleave with another's.
 */
function anthropicFormat(index: number, body: RequestBody): Render {
  let block = -1;
  let open: 'text' | number | undefined;
  let started = false;
  const event = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  const start = () => {
    if (started) return '';
    started = true;
    return event('message_start', {
      message: {
        id: `msg_${index}`,
        type: 'message',
        role: 'assistant',
        model: body.model ?? 'loopback',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 1, output_tokens: 0 },
      },
    });
  };
  const close = () => {
    if (open === undefined) return '';
    open = undefined;
    return event('content_block_stop', { index: block });
  };
  return (chunk) => {
    let out = start();
    if ('text' in chunk || 'reasoning' in chunk) {
      const text = 'text' in chunk ? chunk.text : chunk.reasoning;
      if (open !== 'text') {
        out += close();
        block++;
        open = 'text';
        out += event('content_block_start', { index: block, content_block: { type: 'text', text: '' } });
      }
      return out + event('content_block_delta', { index: block, delta: { type: 'text_delta', text } });
    }
    if ('toolCall' in chunk) {
      const { index: i, id, name, args } = chunk.toolCall;
      if (open !== i) {
        out += close();
        block++;
        open = i;
        out += event('content_block_start', {
          index: block,
          content_block: { type: 'tool_use', id: id ?? `toolu_${i}`, name: name ?? '', input: {} },
        });
      }
      if (args === undefined || args === '') return out;
      return (
        out +
        event('content_block_delta', {
          index: block,
          delta: { type: 'input_json_delta', partial_json: args },
        })
      );
    }
    if ('finish' in chunk) {
      return (
        out +
        close() +
        event('message_delta', {
          delta: { stop_reason: ANTHROPIC_STOP[chunk.finish] ?? chunk.finish, stop_sequence: null },
          usage: { output_tokens: 1 },
        })
      );
    }
    if ('done' in chunk) return out + event('message_stop', {});
    if ('error' in chunk) return `${out}event: error\ndata: ${JSON.stringify(chunk.error)}\n\n`;
    if ('keepAlive' in chunk) return out + event('ping', {});
    return out;
  };
}

export class LoopbackServer {
  readonly exchanges: Exchange[] = [];
  private readonly replies: Reply[] = [];
  private readonly waiters: ((e: Exchange) => void)[] = [];
  private readonly open = new Set<ServerResponse>();

  private constructor(
    private readonly server: Server,
    readonly url: string,
    private readonly options: LoopbackOptions,
  ) {}

  static async start(options: LoopbackOptions = {}): Promise<LoopbackServer> {
    let self: LoopbackServer | undefined;
    const server = createServer((req, res) => void self?.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    self = new LoopbackServer(server, `http://127.0.0.1:${port}/v1`, options);
    return self;
  }

  /** Queues replies: each request takes the next one. */
  script(...replies: Reply[]): void {
    this.replies.push(...replies);
  }

  /** Replies not yet taken. */
  get pending(): number {
    return this.replies.length;
  }

  /** The exchange with this index (0: the first request), once its request has arrived. */
  exchange(index: number): Promise<Exchange> {
    const have = this.exchanges[index];
    if (have) return Promise.resolve(have);
    return new Promise((resolve) => {
      const wait = (e: Exchange) => {
        if (e.index === index) resolve(e);
        else this.waiters.push(wait);
      };
      this.waiters.push(wait);
    });
  }

  async close(): Promise<void> {
    for (const res of this.open) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await new Promise<string>((resolve) => {
      let data = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => {
        data += c;
      });
      req.on('end', () => resolve(data));
    });
    const anthropic = req.url?.endsWith('/messages') === true;
    if (req.method !== 'POST' || (!anthropic && !req.url?.endsWith('/chat/completions'))) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `no route ${req.method} ${req.url}` } }));
      return;
    }
    let body: RequestBody = {};
    try {
      body = JSON.parse(raw) as RequestBody;
    } catch {
      // recorded as empty; the reply decides
    }
    let ended = false;
    let closedResolve!: () => void;
    const exchange: Exchange = {
      index: this.exchanges.length,
      body,
      headers: req.headers,
      closedByClient: false,
      closed: new Promise<void>((resolve) => {
        closedResolve = resolve;
      }),
    };
    this.open.add(res);
    res.on('close', () => {
      this.open.delete(res);
      if (!ended) exchange.closedByClient = true;
      closedResolve();
    });
    this.exchanges.push(exchange);
    for (const w of this.waiters.splice(0)) w(exchange);

    const reply = this.replies.shift() ??
      this.options.fallback?.(body) ?? { status: 500, body: { error: { message: 'no reply scripted' } } };
    if ('status' in reply) {
      res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
      ended = true;
      res.end(
        JSON.stringify(
          reply.body ?? { error: { message: `scripted ${reply.status}`, type: 'server_error' } },
        ),
      );
      return;
    }
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
    res.flushHeaders();
    const render = anthropic ? anthropicFormat(exchange.index, body) : openAIFormat(exchange.index, body);
    const timers = this.options.timers ?? REAL_TIMERS;
    let start = timers.now();
    let due = 0; // ms after the start that the next chunk is due
    for (const chunk of reply.chunks) {
      if (res.destroyed) return;
      if ('pauseMs' in chunk) {
        if (chunk.pauseMs > 0) await timers.sleep(chunk.pauseMs);
        start = timers.now();
        due = 0;
      } else if ('delayMs' in chunk) {
        due += chunk.delayMs;
        const wait = start + due - timers.now();
        if (wait > 0) await timers.sleep(wait);
      } else if ('hang' in chunk)
        return; // nothing more; the client's close ends it
      else if ('destroy' in chunk) {
        ended = true; // the server's doing, not the client's
        res.socket?.destroy();
        return;
      } else res.write(render(chunk));
    }
    ended = true;
    res.end();
  }
}
