/**
 * One MCP server: its connection, replaced after it is lost, and the calls made through it.
 *
 * - **Start**: a stdio server is spawned and spoken to with the 2025 `initialize` handshake
 *   (every stdio server takes it; no probe process is spawned). An HTTP server is probed with
 *   `server/discover` and spoken to in the 2026-07-28 protocol when it offers it, else in the
 *   2025 one (the SDK's `auto` negotiation).
 * - **Lost**: a stdio server whose process exits, or any server whose connection fails mid-call,
 *   fails the calls in flight (effect `unknown`: they may have run). The next call restarts it.
 * - **Restart**: a failed restart fails its call with effect `none`, and until the backoff has
 *   passed (doubling per consecutive failure, capped) calls fail at once with effect `none`,
 *   without trying; then the next call tries again. A restart that succeeds resets the backoff.
 * - **Abort**: the call's signal is given to the request, so aborting it sends the server a
 *   cancellation (2025: `notifications/cancelled`; 2026-07-28 over HTTP: the request's stream is
 *   closed). The call rejects at once, answered or not.
 */
import {
  Client,
  type Tool as McpTool,
  type StreamableHTTPClientTransport,
} from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { errors } from '@turnwarden/protocol';
import { raceAbort, type ToolContext, toolError } from '@turnwarden/session';
import { MAX_TIMER_MS, type McpServerConfig, type ResolvedOptions } from './config.js';
import { GuardedHttpTransport } from './http-transport.js';
import { classify, resultText } from './result.js';

const CLIENT_INFO = { name: 'turnwarden', version: '0.1.0' } as const;

/** A started server: its client, and whether its connection has been lost since. */
interface Live {
  readonly client: Client;
  /** The stdio server's process id (undefined over HTTP). */
  readonly pid: () => number | null | undefined;
  lost: boolean;
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function abortError(signal: AbortSignal): unknown {
  const r: unknown = signal.reason;
  if (r instanceof Error) return r;
  return errors.turnAborted('turn aborted');
}

export class McpConnection {
  private live: Live | undefined;
  private starting: Promise<Live> | undefined;
  /** Consecutive failed starts, and when the next may be tried. */
  private failures = 0;
  private retryAt = 0;
  private lastFailure = '';
  private closed = false;
  /** Clients being closed (lost or replaced), awaited by `close()`. */
  private readonly closing = new Set<Promise<void>>();

  constructor(
    readonly config: McpServerConfig,
    private readonly options: ResolvedOptions,
  ) {}

  get name(): string {
    return this.config.name;
  }

  /** Starts the server and lists its tools (all pages). Throws TOOL_ERROR naming the server. */
  async open(): Promise<McpTool[]> {
    let live: Live;
    try {
      live = await this.acquire();
    } catch (e) {
      throw errors.toolError(
        `MCP server ${this.name} could not be started: ${message(e)}`,
        { server: this.name },
        { cause: e },
      );
    }
    try {
      const { tools } = await live.client.listTools(undefined, { timeout: this.options.connectTimeoutMs });
      return tools;
    } catch (e) {
      throw errors.toolError(
        `MCP server ${this.name} did not list its tools: ${message(e)}`,
        { server: this.name },
        { cause: e },
      );
    }
  }

  /** The process ids of this server's live stdio processes (for a last-resort kill at exit). */
  pids(): number[] {
    const pid = this.live?.pid();
    return typeof pid === 'number' ? [pid] : [];
  }

  /** Calls one of the server's tools for a turn. See the module comment for what a failure means. */
  async call(tool: McpTool, args: Record<string, unknown>, ctx: ToolContext): Promise<string> {
    for (let attempt = 0; ; attempt++) {
      const live = await this.connected(ctx.signal);
      let result: Awaited<ReturnType<Client['callTool']>>;
      try {
        result = await raceAbort(
          live.client.callTool(
            { name: tool.name, arguments: args },
            {
              signal: ctx.signal,
              // Progress is the call's liveness, for both bounds on it: each notification stamps
              // the turn (the watchdog, L2) and restarts the call's own timeout, so only a call
              // silent for callTimeoutMs is ended by it. No maxTotalTimeout: a call that keeps
              // reporting progress may run as long as the turn may.
              onprogress: () => ctx.heartbeat(),
              timeout: this.options.callTimeoutMs ?? MAX_TIMER_MS,
              resetTimeoutOnProgress: true,
              toolDefinition: tool,
            },
          ),
          ctx.signal,
          abortError,
        );
      } catch (e) {
        if (ctx.signal.aborted) throw abortError(ctx.signal);
        const failure = classify(e);
        if (failure.lost) this.retire(live);
        // Never sent on a connection found lost: restart it and send once more.
        if (failure.effect === 'none' && failure.lost && attempt === 0) continue;
        const text = `MCP server ${this.name}: ${tool.name} failed: ${message(e)}`;
        if (failure.effect === 'none') throw toolError(text, 'none', e);
        throw new Error(text, { cause: e });
      }
      const text = resultText(result as Record<string, unknown>);
      if (result.isError === true) throw toolError(text === '' ? `${tool.name} failed` : text, 'applied');
      return text;
    }
  }

  /** Closes the server (a stdio server's process ends). Calls after this fail with effect `none`. */
  async close(): Promise<void> {
    this.closed = true;
    const starting = this.starting;
    if (starting)
      await starting.then(
        () => {},
        () => {},
      );
    if (this.live) this.retire(this.live);
    this.live = undefined;
    while (this.closing.size > 0) await Promise.all([...this.closing]);
  }

  /** A live connection for a call, started if need be; failures are effect `none`. */
  private async connected(signal: AbortSignal): Promise<Live> {
    try {
      return await raceAbort(this.acquire(), signal, abortError);
    } catch (e) {
      if (signal.aborted) throw abortError(signal);
      throw toolError(`MCP server ${this.name} is not available: ${message(e)}`, 'none', e);
    }
  }

  private acquire(): Promise<Live> {
    if (this.closed) return Promise.reject(new Error('it was closed'));
    if (this.live && !this.live.lost) return Promise.resolve(this.live);
    if (this.starting) return this.starting;
    if (this.live) this.retire(this.live);
    const wait = this.retryAt - Date.now();
    if (wait > 0) {
      return Promise.reject(
        new Error(
          `${this.failures} restart(s) failed (last: ${this.lastFailure}); the next is tried in ${wait} ms`,
        ),
      );
    }
    const starting = this.start().finally(() => {
      this.starting = undefined;
    });
    starting.catch(() => {});
    this.starting = starting;
    return starting;
  }

  private async start(): Promise<Live> {
    const client = new Client(CLIENT_INFO, {
      versionNegotiation: { mode: this.config.transport === 'http' ? 'auto' : 'legacy' },
    });
    // Out-of-band errors (a dropped stream, a message the SDK could not parse) are reported
    // through the calls they fail; nothing else is done with them.
    client.onerror = () => {};
    let live: Live | undefined;
    const markLost = () => {
      if (live) live.lost = true;
    };
    let pid: () => number | null | undefined = () => undefined;
    let transport: StdioClientTransport | StreamableHTTPClientTransport;
    if (this.config.transport === 'stdio') {
      const c = this.config;
      const stdio = new StdioClientTransport({
        command: c.command,
        args: [...(c.args ?? [])],
        ...(c.env === undefined ? {} : { env: { ...c.env } }),
        ...(c.cwd === undefined ? {} : { cwd: c.cwd }),
        stderr: this.options.stderr,
      });
      pid = () => stdio.pid;
      transport = stdio;
    } else {
      transport = new GuardedHttpTransport(
        new URL(this.config.url),
        this.config.headers === undefined ? {} : { requestInit: { headers: { ...this.config.headers } } },
        markLost,
      );
    }
    // A stdio server's process exited, or the client was closed.
    client.onclose = markLost;
    try {
      await client.connect(transport, { timeout: this.options.connectTimeoutMs });
    } catch (e) {
      this.failures++;
      const delay = Math.min(
        this.options.restartMaxDelayMs,
        this.options.restartBaseDelayMs * 2 ** (this.failures - 1),
      );
      this.retryAt = Date.now() + delay;
      this.lastFailure = message(e);
      this.track(client.close().catch(() => {}));
      throw e;
    }
    live = { client, pid, lost: false };
    this.failures = 0;
    this.retryAt = 0;
    if (this.closed) {
      this.retire(live);
      throw new Error('it was closed');
    }
    this.live = live;
    return live;
  }

  /** Marks a connection lost and closes its client (a stdio server's process is ended). */
  private retire(live: Live): void {
    live.lost = true;
    if (this.live === live) this.live = undefined;
    this.track(live.client.close().catch(() => {}));
  }

  private track(p: Promise<void>): void {
    this.closing.add(p);
    p.finally(() => this.closing.delete(p)).catch(() => {});
  }
}
