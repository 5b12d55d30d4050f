/**
 * One MCP server's connection against a fake SDK client and fake transports (module mocks), on a
 * fake wall clock: what a start is given, what each failure of a call means (S2), the restart
 * backoff, and that every client it made is closed — and awaited — by the end. The fixture
 * servers of mcp.test.ts cover the same paths over real processes and sockets.
 */
import { ProtocolError, SdkError, SdkErrorCode } from '@modelcontextprotocol/client';
import { isTurnwardenError } from '@turnwarden/protocol';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type McpOptions, type McpServerConfig, resolveOptions } from './config.js';
import { McpConnection } from './connection.js';
import { toolContext } from './test-support/bounded.js';

const fake = vi.hoisted(() => {
  type Result = Record<string, unknown>;
  interface Behaviour {
    connect: (client: FakeClient) => Promise<void>;
    listTools: (client: FakeClient) => Promise<{ tools: unknown[] }>;
    callTool: (client: FakeClient) => Promise<Result>;
    close: (client: FakeClient) => Promise<void>;
  }
  const defaults = (): Behaviour => ({
    connect: () => Promise.resolve(),
    listTools: () => Promise.resolve({ tools: [{ name: 'echo', inputSchema: { type: 'object' } }] }),
    callTool: () => Promise.resolve({ content: [{ type: 'text', text: 'done' }] }),
    close: () => Promise.resolve(),
  });
  const state = { behaviour: defaults(), clients: [] as FakeClient[], transports: [] as unknown[][] };

  class FakeClient {
    onclose: (() => void) | undefined;
    onerror: ((e: unknown) => void) | undefined;
    connectOptions: unknown;
    listOptions: unknown;
    calls = 0;
    closes = 0;
    readonly options: unknown;
    constructor(_info: unknown, options: unknown) {
      this.options = options;
      state.clients.push(this);
    }
    connect(_transport: unknown, options: unknown) {
      this.connectOptions = options;
      return state.behaviour.connect(this);
    }
    listTools(_params: unknown, options: unknown) {
      this.listOptions = options;
      return state.behaviour.listTools(this);
    }
    callTool() {
      this.calls++;
      return state.behaviour.callTool(this);
    }
    close() {
      this.closes++;
      return state.behaviour.close(this);
    }
  }
  class FakeStdio {
    readonly pid = 4242;
    constructor(options: unknown) {
      state.transports.push(['stdio', options]);
    }
  }
  class FakeHttp {
    constructor(url: URL, options: unknown, onLost: (reason: string) => void) {
      state.transports.push(['http', url, options, onLost]);
    }
  }
  return { state, defaults, FakeClient, FakeStdio, FakeHttp };
});

vi.mock('@modelcontextprotocol/client', async (importOriginal) => ({
  ...(await importOriginal<object>()),
  Client: fake.FakeClient,
}));
vi.mock('@modelcontextprotocol/client/stdio', () => ({ StdioClientTransport: fake.FakeStdio }));
vi.mock('./http-transport.js', async (importOriginal) => ({
  ...(await importOriginal<object>()),
  GuardedHttpTransport: fake.FakeHttp,
}));

const STDIO: McpServerConfig = { name: 'fx', transport: 'stdio', command: 'fx-server' };
const HTTP: McpServerConfig = { name: 'fx', transport: 'http', url: 'https://mcp.example/mcp' };
const TOOL = { name: 'echo', inputSchema: { type: 'object' as const } };
const T0 = new Date('2030-01-01T00:00:00Z').getTime();

const connection = (config: McpServerConfig = STDIO, options: McpOptions = {}) =>
  new McpConnection(config, resolveOptions({ connectTimeoutMs: 1_234, ...options }));

/** Lets every pending promise chain run (the clock is not involved: only Date is faked). */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** How `p` settled: its value, or the error it rejected with. */
async function outcome<T>(p: Promise<T>): Promise<{ value?: T; error?: Error & { toolEffect?: unknown } }> {
  return p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error: error as Error }),
  );
}

const clients = () => fake.state.clients;
let open: McpConnection[] = [];
const track = (c: McpConnection) => {
  open.push(c);
  return c;
};

beforeEach(() => {
  fake.state.behaviour = fake.defaults();
  fake.state.clients.length = 0;
  fake.state.transports.length = 0;
  vi.useFakeTimers({ toFake: ['Date'], now: T0 });
});
afterEach(async () => {
  fake.state.behaviour = fake.defaults();
  await Promise.all(open.map((c) => c.close()));
  open = [];
  vi.useRealTimers();
});

describe('starting a server', () => {
  it('stdio: the command, copies of its args and env, its cwd and stderr; the 2025 handshake; both timeouts', async () => {
    const args = ['--root', '/srv'];
    const env = { TOKEN: 't' };
    const c = track(
      connection({ ...STDIO, args, env, cwd: '/srv' }, { stderr: 'ignore', connectTimeoutMs: 4_321 }),
    );
    expect(await c.open()).toEqual([TOOL]);
    const [kind, options] = fake.state.transports[0] as [string, Record<string, unknown>];
    expect(kind).toBe('stdio');
    expect(options).toEqual({ command: 'fx-server', args, env, cwd: '/srv', stderr: 'ignore' });
    expect(options.args).not.toBe(args);
    expect(options.env).not.toBe(env);
    const client = clients()[0]!;
    expect(client.options).toEqual({ versionNegotiation: { mode: 'legacy' } });
    expect(client.connectOptions).toEqual({ timeout: 4_321 });
    expect(client.listOptions).toEqual({ timeout: 4_321 });
  });

  it('stdio without args, env or cwd: no args, and no env or cwd at all (the SDK’s defaults)', async () => {
    await track(connection()).open();
    const [, options] = fake.state.transports[0] as [string, Record<string, unknown>];
    expect(options).toStrictEqual({ command: 'fx-server', args: [], stderr: 'inherit' });
  });

  it('http: the URL, its headers (a copy) when configured, none otherwise; the negotiated protocol', async () => {
    const headers = { authorization: 'Bearer x' };
    await track(connection({ ...HTTP, headers })).open();
    const [kind, url, options] = fake.state.transports[0] as [
      string,
      URL,
      { requestInit: { headers: object } },
    ];
    expect(kind).toBe('http');
    expect(String(url)).toBe('https://mcp.example/mcp');
    expect(options).toEqual({ requestInit: { headers } });
    expect(options.requestInit.headers).not.toBe(headers);
    expect(clients()[0]!.options).toEqual({ versionNegotiation: { mode: 'auto' } });
    await track(connection(HTTP)).open();
    expect(fake.state.transports[1]![2]).toStrictEqual({});
  });

  it('pids(): the live stdio process, none before the start, over HTTP or after close()', async () => {
    const c = connection();
    expect(c.pids()).toEqual([]);
    await c.open();
    expect(c.pids()).toEqual([4242]);
    await c.close();
    expect(c.pids()).toEqual([]);
    const h = track(connection(HTTP));
    await h.open();
    expect(h.pids()).toEqual([]);
  });

  it('a start that fails: TOOL_ERROR naming the server and the reason; its client is closed', async () => {
    const reason = new Error('spawn fx-server ENOENT');
    fake.state.behaviour.connect = () => Promise.reject(reason);
    const { error } = await outcome(track(connection()).open());
    expect(isTurnwardenError(error, 'TOOL_ERROR')).toBe(true);
    expect(error?.message).toBe('MCP server fx could not be started: spawn fx-server ENOENT');
    expect(error).toMatchObject({ details: { server: 'fx' }, cause: reason });
    expect(clients()[0]!.closes).toBe(1);
  });

  it('a server that does not list its tools: TOOL_ERROR naming the server and the reason', async () => {
    const reason = new Error('listing timed out');
    fake.state.behaviour.listTools = () => Promise.reject(reason);
    const { error } = await outcome(track(connection()).open());
    expect(isTurnwardenError(error, 'TOOL_ERROR')).toBe(true);
    expect(error?.message).toBe('MCP server fx did not list its tools: listing timed out');
    expect(error).toMatchObject({ details: { server: 'fx' }, cause: reason });
  });

  it('calls made while the server starts share its one start', async () => {
    const gate = deferred();
    fake.state.behaviour.connect = () => gate.promise;
    const c = track(connection());
    const calls = [c.call(TOOL, {}, toolContext()), c.call(TOOL, {}, toolContext())];
    await flush();
    gate.resolve();
    expect(await Promise.all(calls)).toEqual(['done', 'done']);
    expect(clients()).toHaveLength(1);
  });
});

describe('S2: what a failed call means', () => {
  it('an answer is its text; an error result is an error with effect applied, named by the tool when it says nothing', async () => {
    const c = track(connection());
    expect(await c.call(TOOL, {}, toolContext())).toBe('done');
    fake.state.behaviour.callTool = () =>
      Promise.resolve({ isError: true, content: [{ type: 'text', text: 'no such file' }] });
    const said = (await outcome(c.call(TOOL, {}, toolContext()))).error;
    expect(said?.message).toBe('no such file');
    expect(said?.toolEffect).toBe('applied');
    fake.state.behaviour.callTool = () => Promise.resolve({ isError: true, content: [] });
    const silent = (await outcome(c.call(TOOL, {}, toolContext()))).error;
    expect(silent?.message).toBe('echo failed');
    expect(silent?.toolEffect).toBe('applied');
  });

  it('a request the server refused (invalid params): effect none, the server’s words, the cause; not sent again', async () => {
    const refusal = new ProtocolError(-32_602, 'bad params');
    fake.state.behaviour.callTool = (client) =>
      client.calls === 1 ? Promise.reject(refusal) : Promise.resolve({ content: [] });
    const c = track(connection());
    const { error } = await outcome(c.call(TOOL, {}, toolContext()));
    expect(error?.message).toBe('MCP server fx: echo failed: bad params');
    expect(error?.toolEffect).toBe('none');
    expect(error?.cause).toBe(refusal);
    expect(clients()).toHaveLength(1);
    expect(clients()[0]!.calls).toBe(1);
  });

  it('a call that may have run: no effect claimed, the cause kept; not sent again, the connection kept', async () => {
    const broke = new Error('tool exploded');
    fake.state.behaviour.callTool = (client) =>
      client.calls === 1 ? Promise.reject(broke) : Promise.resolve({ content: [] });
    const c = track(connection());
    const { error } = await outcome(c.call(TOOL, {}, toolContext()));
    expect(error?.message).toBe('MCP server fx: echo failed: tool exploded');
    expect(error?.toolEffect).toBeUndefined();
    expect(error?.cause).toBe(broke);
    expect(clients()[0]!.calls).toBe(1);
    expect(await c.call(TOOL, {}, toolContext())).toBe('');
    expect(clients()).toHaveLength(1);
  });

  it('a call never sent on a connection found lost is sent once more on a new one; the old client is closed', async () => {
    fake.state.behaviour.callTool = (client) =>
      client === clients()[0]
        ? Promise.reject(new SdkError(SdkErrorCode.NotConnected, 'Not connected'))
        : Promise.resolve({ content: [{ type: 'text', text: 'second try' }] });
    const c = track(connection());
    expect(await c.call(TOOL, {}, toolContext())).toBe('second try');
    expect(clients()).toHaveLength(2);
    expect(clients()[0]!.closes).toBe(1);
  });

  it('…only once: lost again, the call fails with effect none', async () => {
    fake.state.behaviour.callTool = () =>
      Promise.reject(new SdkError(SdkErrorCode.NotConnected, 'Not connected'));
    const c = track(connection());
    const { error } = await outcome(c.call(TOOL, {}, toolContext()));
    expect(error?.toolEffect).toBe('none');
    expect(error?.message).toBe('MCP server fx: echo failed: Not connected');
    expect(clients()).toHaveLength(2);
  });

  it('an abort whose reason is no Error rejects with TURN_ABORTED', async () => {
    fake.state.behaviour.callTool = () => new Promise(() => {});
    const c = track(connection());
    await c.open();
    const ctx = toolContext();
    const call = outcome(c.call(TOOL, {}, ctx));
    await flush();
    ctx.stop.abort('the user cancelled');
    const { error } = await call;
    expect(isTurnwardenError(error, 'TURN_ABORTED')).toBe(true);
    expect(error?.message).toBe('turn aborted');
  });

  it('an abort while the server starts rejects with the abort’s reason, not as an unavailable server', async () => {
    fake.state.behaviour.connect = () => new Promise(() => {});
    const c = connection();
    const ctx = toolContext();
    const call = outcome(c.call(TOOL, {}, ctx));
    await flush();
    const reason = new Error('the watchdog');
    ctx.stop.abort(reason);
    expect((await call).error).toBe(reason);
  });
});

describe('a lost connection and the restart backoff', () => {
  it('http: a connection the transport reports lost is replaced by the next call; the old client is closed', async () => {
    const c = track(connection(HTTP));
    await c.open();
    const onLost = fake.state.transports[0]![3] as (reason: string) => void;
    onLost('the response stream ended');
    expect(await c.call(TOOL, {}, toolContext())).toBe('done');
    expect(clients()).toHaveLength(2);
    expect(clients()[0]!.closes).toBe(1);
    expect(clients()[1]!.calls).toBe(1);
  });

  it('stdio: a server whose process exited (the client closed) is restarted by the next call', async () => {
    const c = track(connection());
    await c.open();
    clients()[0]!.onclose?.();
    expect(await c.call(TOOL, {}, toolContext())).toBe('done');
    expect(clients()).toHaveLength(2);
  });

  it('failed restarts: refused at once until the backoff (doubling, capped) has passed, then tried; a success resets it', async () => {
    let refuse = true;
    fake.state.behaviour.connect = () => (refuse ? Promise.reject(new Error('refused')) : Promise.resolve());
    const c = track(connection(STDIO, { restartBaseDelayMs: 100, restartMaxDelayMs: 250 }));
    await outcome(c.open());
    const attempt = async () => (await outcome(c.call(TOOL, {}, toolContext()))).error?.message;
    const waiting = (failed: number, ms: number) =>
      `MCP server fx is not available: ${failed} restart(s) failed (last: refused); the next is tried in ${ms} ms`;
    expect(await attempt()).toBe(waiting(1, 100));
    vi.setSystemTime(T0 + 99);
    expect(await attempt()).toBe(waiting(1, 1));
    expect(clients()).toHaveLength(1);
    vi.setSystemTime(T0 + 100); // the backoff has passed: tried (and refused again)
    expect(await attempt()).toBe('MCP server fx is not available: refused');
    expect(clients()).toHaveLength(2);
    expect(await attempt()).toBe(waiting(2, 200));
    vi.setSystemTime(T0 + 300);
    expect(await attempt()).toBe('MCP server fx is not available: refused');
    expect(await attempt()).toBe(waiting(3, 250)); // capped
    vi.setSystemTime(T0 + 550);
    refuse = false;
    expect(await c.call(TOOL, {}, toolContext())).toBe('done');
    // Every refused start's client was closed.
    expect(clients().map((x) => x.closes)).toEqual([1, 1, 1, 0]);
    // Reset: the next failed restart waits the base delay again.
    refuse = true;
    clients()[3]!.onclose?.();
    expect(await attempt()).toBe('MCP server fx is not available: refused');
    expect(await attempt()).toBe(waiting(1, 100));
  });

  it('a connection retired by a late failure does not take its successor with it', async () => {
    const first = [deferred<Record<string, unknown>>(), deferred<Record<string, unknown>>()];
    fake.state.behaviour.callTool = (client) =>
      client === clients()[0] ? first[client.calls - 1]!.promise : Promise.resolve({ content: [] });
    const c = connection();
    const a = outcome(c.call(TOOL, {}, toolContext()));
    const b = outcome(c.call(TOOL, {}, toolContext()));
    await flush();
    expect(c.pids()).toEqual([4242]);
    const closed = () => new SdkError(SdkErrorCode.ConnectionClosed, 'Connection closed');
    first[0]!.reject(closed());
    expect((await a).error?.toolEffect).toBeUndefined();
    // Retired: its process is no longer one to kill at exit.
    expect(c.pids()).toEqual([]);
    expect(clients()[0]!.closes).toBeGreaterThanOrEqual(1);
    expect(await c.call(TOOL, {}, toolContext())).toBe(''); // on a new connection
    first[1]!.reject(closed()); // the old connection's second call fails late
    expect((await b).error?.message).toBe('MCP server fx: echo failed: Connection closed');
    expect(await c.call(TOOL, {}, toolContext())).toBe('');
    expect(clients()).toHaveLength(2);
    expect(clients()[1]!.calls).toBe(2);
    await c.close();
    expect(clients()[1]!.closes).toBe(1);
  });
});

describe('close()', () => {
  it('waits for a start under way, then closes its client; the start fails as closed', async () => {
    const gate = deferred();
    fake.state.behaviour.connect = () => gate.promise;
    const c = connection();
    const opening = outcome(c.open());
    await flush();
    let done = false;
    const closing = c.close().then(() => {
      done = true;
    });
    await flush();
    expect(done).toBe(false);
    gate.resolve();
    await closing;
    expect(clients()[0]!.closes).toBe(1);
    expect((await opening).error?.message).toBe('MCP server fx could not be started: it was closed');
  });

  it('resolves only once every client it closes has closed', async () => {
    const c = connection();
    await c.open();
    const gate = deferred();
    fake.state.behaviour.close = () => gate.promise;
    let done = false;
    const closing = c.close().then(() => {
      done = true;
    });
    await flush();
    expect(clients()[0]!.closes).toBe(1);
    expect(done).toBe(false);
    gate.resolve();
    await closing;
    expect(done).toBe(true);
  });

  it('calls after it fail with effect none, without starting anything', async () => {
    const c = connection();
    await c.open();
    await c.close();
    const { error } = await outcome(c.call(TOOL, {}, toolContext()));
    expect(error?.message).toBe('MCP server fx is not available: it was closed');
    expect(error?.toolEffect).toBe('none');
    expect(clients()).toHaveLength(1);
  });
});
