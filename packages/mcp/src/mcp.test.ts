/**
 * MCP servers as Turnwarden tools, against the fixture server over stdio (a child process) and
 * over Streamable HTTP (in-process on 127.0.0.1). What the server saw is read from what the
 * fixture recorded, never guessed from timing; every wait is bounded by an assertion.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isTurnwardenError } from '@turnwarden/protocol';
import type { Tool } from '@turnwarden/session';
import { afterEach, describe, expect, it } from 'vitest';
import { type HttpFixture, LOG_ENV, ONCE_ENV, startHttpFixture } from './fixture/index.js';
import { connectMcpServers, type McpOptions, type McpServerConfig, type McpServers } from './index.js';
import {
  rejection,
  running,
  settled,
  stopPolls,
  toolContext,
  until,
  within,
} from './test-support/bounded.js';

/** The stdio fixture, built (`pnpm build` runs before the tests). */
const FIXTURE = new URL('../dist/fixture/server.js', import.meta.url).pathname;
const OPTIONS: McpOptions = { connectTimeoutMs: 10_000, stderr: 'ignore' };
/**
 * A call timeout for the tests of `callTimeoutMs`: 16 times the fixture's progress interval, so a
 * loaded machine's late notification is not a silence; the calls that must outlive it run 1.5 and
 * 2.5 times as long, so a timeout that progress did not reset ends them.
 */
const CALL_TIMEOUT_MS = 800;

let servers: McpServers | undefined;
let http: HttpFixture | undefined;
let dir: string | undefined;

afterEach(async () => {
  stopPolls();
  await servers?.close();
  await http?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  servers = undefined;
  http = undefined;
  dir = undefined;
});

interface Setup {
  readonly tools: Map<string, Tool>;
  /** What the fixture recorded so far. */
  readonly events: () => string[];
  /** Makes the server unreachable from now on (and unable to restart). */
  readonly takeDown: () => Promise<void>;
}

async function connect(config: McpServerConfig, options: McpOptions = OPTIONS) {
  servers = await within(connectMcpServers([config], options), 15_000, 'the servers start');
  return new Map(servers.tools.map((t) => [t.name, t]));
}

const transports = {
  stdio: async (options: McpOptions = OPTIONS): Promise<Setup> => {
    dir = mkdtempSync(join(tmpdir(), 'tw-mcp-'));
    const log = join(dir, 'events.log');
    const once = join(dir, 'started');
    const tools = await connect(
      {
        name: 'fx',
        transport: 'stdio',
        command: process.execPath,
        args: [FIXTURE],
        env: { [LOG_ENV]: log, [ONCE_ENV]: once },
      },
      options,
    );
    const events = () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean) : []);
    return {
      tools,
      events,
      // The marker is there: a restart exits at once. Then end the running server.
      takeDown: async () => {
        const ctx = toolContext();
        await rejection(tools.get('fx.crash')!.run({}, ctx), 10_000, 'crash');
      },
    };
  },
  http: (options?: McpOptions) => overHttp({}, options),
  'http (2025 sessions)': (options?: McpOptions) => overHttp({ sessions: true }, options),
};

async function overHttp(fixtureOptions: { sessions?: boolean }, options?: McpOptions): Promise<Setup> {
  const fixture = await startHttpFixture(fixtureOptions);
  http = fixture;
  const tools = await connect({ name: 'fx', transport: 'http', url: fixture.url }, options);
  return { tools, events: () => [...fixture.events], takeDown: () => fixture.close() };
}

describe.each(Object.entries(transports))('over %s', (_kind, setup) => {
  it('lists the server’s tools as <server>.<tool>, with their input schemas as parameters', async () => {
    const { tools } = await setup();
    expect([...tools.keys()]).toEqual(['fx.echo', 'fx.sleep', 'fx.stall', 'fx.hang', 'fx.crash', 'fx.fail']);
    const echo = tools.get('fx.echo')!;
    expect(echo.description).toBe('Answers with the text it was given.');
    expect(echo.parameters).toMatchObject({
      type: 'object',
      properties: { text: { type: 'string' } },
      required: ['text'],
    });
    expect(tools.get('fx.sleep')!.parameters).toMatchObject({ properties: { ms: { type: 'integer' } } });
  });

  it('echo: a round trip', async () => {
    const { tools } = await setup();
    const ctx = toolContext();
    expect(await within(tools.get('fx.echo')!.run({ text: 'hello' }, ctx), 5_000, 'echo')).toBe('hello');
    expect(await within(tools.get('fx.echo')!.run({ text: 'again' }, ctx), 5_000, 'echo')).toBe('again');
  });

  it('progress: every progress notification calls heartbeat()', async () => {
    const { tools, events } = await setup();
    const ctx = toolContext();
    const result = await within(tools.get('fx.sleep')!.run({ ms: 300 }, ctx), 10_000, 'sleep 300 ms');
    expect(result).toBe('slept 300 ms');
    const sent = events().filter((e) => e === 'progress sleep').length;
    expect(sent).toBeGreaterThanOrEqual(3);
    expect(ctx.beats()).toBe(sent);
  });

  it('callTimeoutMs: a call that keeps reporting progress is not ended by it; every progress calls heartbeat()', async () => {
    const { tools, events } = await setup({ ...OPTIONS, callTimeoutMs: CALL_TIMEOUT_MS });
    const ctx = toolContext();
    const ms = 2.5 * CALL_TIMEOUT_MS;
    const outcome = await settled(tools.get('fx.sleep')!.run({ ms }, ctx), 15_000, 'the long sleep');
    expect(outcome).toEqual({ ok: true, value: `slept ${ms} ms` });
    const sent = events().filter((e) => e === 'progress sleep').length;
    expect(sent).toBeGreaterThanOrEqual(3);
    expect(ctx.beats()).toBe(sent);
  });

  it('callTimeoutMs: a call without progress is ended by it (effect unknown); the server sees the cancellation', async () => {
    const { tools, events } = await setup({ ...OPTIONS, callTimeoutMs: CALL_TIMEOUT_MS });
    const ctx = toolContext();
    const t0 = performance.now();
    const e = await rejection(tools.get('fx.hang')!.run({}, ctx), 15_000, 'the silent call');
    // Not before its time: ended by the timeout, not by anything else (the lower bound holds
    // however loaded the machine is).
    expect(performance.now() - t0).toBeGreaterThanOrEqual(CALL_TIMEOUT_MS - 5);
    expect(e.message).toBe('MCP server fx: hang failed: Request timed out');
    expect((e as { toolEffect?: unknown }).toolEffect).toBeUndefined();
    expect(ctx.beats()).toBe(0);
    await until(() => events().includes('cancelled hang'), 5_000, 'the server records the cancellation');
    // The connection is still good.
    expect(await within(tools.get('fx.echo')!.run({ text: 'on' }, toolContext()), 5_000, 'echo')).toBe('on');
  });

  it('callTimeoutMs: a call that stops reporting progress is ended by it, counted from its last progress', async () => {
    const { tools, events } = await setup({ ...OPTIONS, callTimeoutMs: CALL_TIMEOUT_MS });
    const ctx = toolContext();
    const ms = 1.5 * CALL_TIMEOUT_MS;
    const t0 = performance.now();
    const e = await rejection(tools.get('fx.stall')!.run({ ms }, ctx), 15_000, 'the stalled call');
    // It reported progress for `ms` (longer than the timeout): the timeout ran from its last
    // progress, not from the call's start.
    expect(performance.now() - t0).toBeGreaterThanOrEqual(ms);
    expect(e.message).toBe('MCP server fx: stall failed: Request timed out');
    expect((e as { toolEffect?: unknown }).toolEffect).toBeUndefined();
    await until(() => events().includes('cancelled stall'), 5_000, 'the server records the cancellation');
    const sent = events().filter((l) => l === 'progress stall').length;
    expect(events()).toContain('quiet stall');
    expect(sent).toBeGreaterThanOrEqual(2);
    expect(ctx.beats()).toBe(sent);
  });

  it('abort mid-call: the call rejects at once and the server sees the cancellation (hang)', async () => {
    const { tools, events } = await setup();
    const ctx = toolContext();
    const call = tools.get('fx.hang')!.run({}, ctx);
    await until(() => events().includes('start hang'), 5_000, 'the server starts hang');
    const reason = new Error('turn aborted by the test');
    ctx.stop.abort(reason);
    expect(await rejection(call, 1_000, 'the aborted call rejects')).toBe(reason);
    await until(() => events().includes('cancelled hang'), 5_000, 'the server records the cancellation');
    // The connection is still good.
    expect(
      await within(tools.get('fx.echo')!.run({ text: 'still here' }, toolContext()), 5_000, 'echo'),
    ).toBe('still here');
  });

  it('abort mid-call while the tool reports progress (sleep): cancelled on the server', async () => {
    const { tools, events } = await setup();
    const ctx = toolContext();
    const call = tools.get('fx.sleep')!.run({ ms: 60_000 }, ctx);
    await until(() => ctx.beats() >= 2, 5_000, 'two progress notifications arrive');
    ctx.stop.abort(new Error('watchdog'));
    await rejection(call, 1_000, 'the aborted call rejects');
    await until(() => events().includes('cancelled sleep'), 5_000, 'the server records the cancellation');
  });

  it('an aborted signal rejects before anything is sent', async () => {
    const { tools, events } = await setup();
    const ctx = toolContext();
    ctx.stop.abort(new Error('already aborted'));
    await rejection(tools.get('fx.echo')!.run({ text: 'x' }, ctx), 1_000, 'the call rejects');
    expect(events()).not.toContain('start echo');
  });

  it('an error result (isError) is an error with effect applied', async () => {
    const { tools } = await setup();
    const e = await rejection(tools.get('fx.fail')!.run({}, toolContext()), 5_000, 'fail');
    expect(e.message).toBe('the fixture failed on purpose');
    expect((e as { toolEffect?: unknown }).toolEffect).toBe('applied');
  });

  it('arguments the server refuses (schema) are an error with effect none or applied, never a crash', async () => {
    const { tools } = await setup();
    const e = await rejection(tools.get('fx.echo')!.run({ text: 42 }, toolContext()), 5_000, 'bad echo');
    expect(['none', 'applied']).toContain((e as { toolEffect?: unknown }).toolEffect);
  });

  it('a server that dies mid-call: the call rejects (effect unknown), the next call restarts it', async () => {
    const { tools, events } = await setup();
    const ctx = toolContext();
    const e = await rejection(tools.get('fx.crash')!.run({}, ctx), 10_000, 'the crashing call rejects');
    expect((e as { toolEffect?: unknown }).toolEffect).toBeUndefined();
    expect(e.message).toMatch(/MCP server fx: crash failed/);
    // Over HTTP the response stream was cut after the progress notification: without the
    // transport's guard the call would wait for an answer forever.
    if (_kind !== 'stdio') expect(e.message).toMatch(/lost before it answered/);
    expect(ctx.beats()).toBe(1);
    // The stdio fixture's marker forbids a second process: use a fresh one for this test.
    if (_kind === 'stdio') rmSync(join(dir!, 'started'));
    expect(await within(tools.get('fx.echo')!.run({ text: 'back' }, toolContext()), 10_000, 'echo')).toBe(
      'back',
    );
    if (_kind === 'stdio') {
      const pids = events().filter((l) => l.startsWith('pid '));
      expect(pids).toHaveLength(2);
    }
  });

  it('a server that is down and cannot be restarted: calls fail with effect none', async () => {
    const { tools, takeDown } = await setup();
    await takeDown();
    const first = await rejection(tools.get('fx.echo')!.run({ text: 'x' }, toolContext()), 10_000, 'echo');
    expect((first as { toolEffect?: unknown }).toolEffect).toBe('none');
    expect(first.message).toMatch(/MCP server fx is not available/);
    // Within the backoff: refused at once, without trying.
    const second = await rejection(tools.get('fx.echo')!.run({ text: 'x' }, toolContext()), 1_000, 'echo');
    expect((second as { toolEffect?: unknown }).toolEffect).toBe('none');
    expect(second.message).toMatch(/next is tried in \d+ ms/);
  });

  it('close() ends the server; calls after it fail with effect none', async () => {
    const { tools, events } = await setup();
    await servers!.close();
    if (_kind === 'stdio') {
      const pid = Number(events()[0]?.replace('pid ', ''));
      expect(pid).toBeGreaterThan(0);
      await until(() => !running(pid), 5_000, 'the server process exits');
    }
    const e = await rejection(tools.get('fx.echo')!.run({ text: 'x' }, toolContext()), 1_000, 'echo');
    expect((e as { toolEffect?: unknown }).toolEffect).toBe('none');
  });

  it('concurrent calls share the connection', async () => {
    const { tools } = await setup();
    const results = await within(
      Promise.all([
        tools.get('fx.sleep')!.run({ ms: 120 }, toolContext()),
        tools.get('fx.echo')!.run({ text: 'a' }, toolContext()),
        tools.get('fx.echo')!.run({ text: 'b' }, toolContext()),
      ]),
      10_000,
      'three calls',
    );
    expect(results).toEqual(['slept 120 ms', 'a', 'b']);
  });
});

describe('over http (2025 sessions)', () => {
  it('a session the server lost (404): the call was refused, so it is sent again on a new session', async () => {
    const fixture = await startHttpFixture({ sessions: true });
    http = fixture;
    const tools = await connect({ name: 'fx', transport: 'http', url: fixture.url });
    expect(await within(tools.get('fx.echo')!.run({ text: 'one' }, toolContext()), 5_000, 'echo')).toBe(
      'one',
    );
    await fixture.forgetSessions();
    expect(await within(tools.get('fx.echo')!.run({ text: 'two' }, toolContext()), 5_000, 'echo')).toBe(
      'two',
    );
    expect(fixture.events.filter((e) => e === 'start echo')).toHaveLength(2);
  });
});

describe('starting servers', () => {
  it('a stdio server that exits at once: TOOL_ERROR naming the server', async () => {
    const e = await rejection(
      connectMcpServers(
        [{ name: 'gone', transport: 'stdio', command: process.execPath, args: ['-e', 'process.exit(3)'] }],
        OPTIONS,
      ),
      15_000,
      'the start fails',
    );
    expect(isTurnwardenError(e, 'TOOL_ERROR')).toBe(true);
    expect((e as unknown as { details: unknown }).details).toEqual({ server: 'gone' });
  });

  it('a command that does not exist: TOOL_ERROR', async () => {
    const e = await rejection(
      connectMcpServers(
        [{ name: 'nope', transport: 'stdio', command: 'turnwarden-no-such-command' }],
        OPTIONS,
      ),
      15_000,
      'the start fails',
    );
    expect(isTurnwardenError(e, 'TOOL_ERROR')).toBe(true);
  });

  it('an HTTP server that is not there: TOOL_ERROR; the other servers are closed again', async () => {
    const fixture = await startHttpFixture();
    const url = fixture.url;
    await fixture.close();
    http = await startHttpFixture();
    const e = await rejection(
      connectMcpServers(
        [
          { name: 'up', transport: 'http', url: http.url },
          { name: 'down', transport: 'http', url },
        ],
        OPTIONS,
      ),
      15_000,
      'the start fails',
    );
    expect(isTurnwardenError(e, 'TOOL_ERROR')).toBe(true);
    expect((e as unknown as { details: unknown }).details).toEqual({ server: 'down' });
  });

  it('two servers; the separator is an option', async () => {
    http = await startHttpFixture();
    dir = mkdtempSync(join(tmpdir(), 'tw-mcp-'));
    servers = await within(
      connectMcpServers(
        [
          { name: 'web', transport: 'http', url: http.url },
          {
            name: 'local',
            transport: 'stdio',
            command: process.execPath,
            args: [FIXTURE],
            env: { [LOG_ENV]: join(dir, 'events.log') },
          },
        ],
        { ...OPTIONS, separator: '__' },
      ),
      15_000,
      'the servers start',
    );
    const names = servers.tools.map((t) => t.name);
    expect(names).toContain('web__echo');
    expect(names).toContain('local__echo');
    const local = servers.tools.find((t) => t.name === 'local__echo')!;
    expect(await within(local.run({ text: 'hi' }, toolContext()), 5_000, 'echo')).toBe('hi');
  });
});
