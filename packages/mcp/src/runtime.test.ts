/**
 * MCP tools inside the runtime: session workers load `@turnwarden/mcp/from-env`, each starts its
 * own stdio fixture server, the scripted model calls its tools. The watchdog sees through a tool
 * that hangs (L1) and the abort reaches the server as a cancellation; a tool that reports
 * progress outlives the watchdog's timeout; effects are as declared (S2); the history stays
 * complete (S1); the servers end with the workers.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openToolCalls } from '@turnwarden/protocol';
import { Turnwarden } from '@turnwarden/supervisor';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { LOG_ENV } from './fixture/index.js';
import { running, stopPolls, until, within } from './test-support/bounded.js';

const FROM_ENV = new URL('../dist/from-env.js', import.meta.url).href;
const FIXTURE = new URL('../dist/fixture/server.js', import.meta.url).pathname;
const SCRIPTED = '@turnwarden/session/scripted';
const caller = { tenantId: 'acme', principal: 'user-1' };

let tw: Turnwarden | undefined;
let dir: string | undefined;
const saved = process.env.TURNWARDEN_MCP_SERVERS;

afterEach(async () => {
  stopPolls();
  await tw?.shutdown();
  tw = undefined;
  if (saved === undefined) delete process.env.TURNWARDEN_MCP_SERVERS;
  else process.env.TURNWARDEN_MCP_SERVERS = saved;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

const script = (...steps: unknown[]) => JSON.stringify({ script: steps });

/**
 * The watchdogs here. A test whose subject is not the watchdog gets a patient one: an MCP call's
 * first answer crosses a process boundary and, on a machine whose other core is busy, can take
 * longer than a 400 ms watchdog allows (CI saw a false abort on a server's restart). A hang is
 * detected by a 1.5 s one, and progress must outlive a 1 s one for three times as long.
 */
const PATIENT_MS = 10_000;
const HANG_MS = 1_500;
const PROGRESS_WATCHDOG_MS = 1_000;

/** Where the MCP tools run: in each session worker (pluginModules) or on the supervisor's thread (hostToolModules). */
async function start(mode: 'worker' | 'host' = 'worker', timeoutMs = PATIENT_MS) {
  dir = mkdtempSync(join(tmpdir(), 'tw-mcp-rt-'));
  const log = join(dir, 'events.log');
  // Workers inherit the environment as it is when they spawn.
  process.env.TURNWARDEN_MCP_SERVERS = JSON.stringify([
    { name: 'fx', transport: 'stdio', command: process.execPath, args: [FIXTURE], env: { [LOG_ENV]: log } },
  ]);
  tw = await within(
    Turnwarden.start({
      model: 'scripted',
      pluginModules: mode === 'worker' ? [FROM_ENV, SCRIPTED] : [SCRIPTED],
      hostToolModules: mode === 'host' ? [FROM_ENV] : [],
      watchdog: { timeoutMs, pollMs: 25, graceMs: 300 },
      lease: { ttlMs: 3_000, renewMs: 100 },
      pool: { maxWorkers: 1, warmWorkers: 1 },
      logger: pino({ level: 'silent' }),
    }),
    20_000,
    'the runtime starts',
  );
  const { workstreamId } = await tw.createWorkstream(caller);
  const events = () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean) : []);
  const send = async (content: string) => (await tw!.send({ ...caller, workstreamId, content })).done;
  const history = async () => (await tw!.history({ ...caller, workstreamId })).rows;
  return { tw, workstreamId, events, send, history };
}

describe('MCP tools in a session worker', () => {
  it('S2: a turn calls fx.echo, its result effect applied; an error result (isError) is effect applied', async () => {
    const { send, history } = await start();
    const done = await within(
      send(
        script(
          {
            tools: [
              { name: 'fx.echo', args: { text: 'ping' } },
              { name: 'fx.fail', args: {} },
            ],
          },
          { text: 'ok' },
        ),
      ),
      15_000,
      'the turn ends',
    );
    expect(done.status).toBe('completed');
    const rows = await history();
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool', 'tool', 'assistant']);
    expect(rows[2]?.message).toMatchObject({
      name: 'fx.echo',
      content: 'ping',
      isError: false,
      effect: 'applied',
    });
    expect(rows[3]?.message).toMatchObject({
      name: 'fx.fail',
      content: 'tool error: the fixture failed on purpose',
      isError: true,
      effect: 'applied',
    });
  });

  it('L1: a tool that hangs is aborted by the watchdog and the server sees the cancellation', async () => {
    const { send, history, events } = await start('worker', HANG_MS);
    const done = await within(
      send(script({ tools: [{ name: 'fx.hang', args: {} }] })),
      15_000,
      'the turn ends',
    );
    expect(done).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
    await until(() => events().includes('cancelled hang'), 5_000, 'the server records the cancellation');
    expect(openToolCalls(await history())).toEqual([]);
  });

  it('L2: MCP progress notifications are progress: a 3 s tool outlives a 1 s watchdog', async () => {
    const { send, history } = await start('worker', PROGRESS_WATCHDOG_MS);
    const done = await within(
      send(
        script({ tools: [{ name: 'fx.sleep', args: { ms: 3 * PROGRESS_WATCHDOG_MS } }] }, { text: 'rested' }),
      ),
      15_000,
      'the turn ends',
    );
    expect(done.status).toBe('completed');
    const rows = await history();
    expect(rows[2]?.message).toMatchObject({
      content: `slept ${3 * PROGRESS_WATCHDOG_MS} ms`,
      effect: 'applied',
    });
  });

  it('S2: a server that dies mid-call is effect unknown; the next call restarts it; shutdown ends the servers', async () => {
    // The restart spawns a process and redoes the handshake without stamping progress: on a
    // loaded machine that outlasts a 400 ms watchdog (CI saw it on Node 22). The subject here is
    // the effect and the restart, not the watchdog: the patient one.
    const { send, history, events } = await start();
    const done = await within(
      send(
        script(
          {
            tools: [
              { name: 'fx.crash', args: {} },
              { name: 'fx.echo', args: { text: 'back' } },
            ],
          },
          { text: 'ok' },
        ),
      ),
      15_000,
      'the turn ends',
    );
    expect(done.status).toBe('completed');
    const rows = await history();
    expect(rows[2]?.message).toMatchObject({ name: 'fx.crash', isError: true, effect: 'unknown' });
    expect(rows[3]?.message).toMatchObject({ name: 'fx.echo', content: 'back', effect: 'applied' });
    const pids = events()
      .filter((l) => l.startsWith('pid '))
      .map((l) => Number(l.slice(4)));
    expect(pids.length).toBeGreaterThanOrEqual(2);
    await tw!.shutdown();
    // The servers exit when the workers' end closes their stdin. A worker thread that ended
    // cannot reap its children: they stay zombies until the host exits (see README).
    await until(() => pids.every((pid) => !running(pid)), 10_000, 'every server process ends');
  });
});

describe('MCP tools as host tools (hostToolModules: on the supervisor’s thread)', () => {
  it('S2 L1: the same tools, one server for every session; a hang is aborted, the server sees the cancellation, the session worker is kept', async () => {
    const { tw, send, history, events } = await start('host', HANG_MS);
    const first = await within(
      send(
        script(
          {
            tools: [
              { name: 'fx.echo', args: { text: 'ping' } },
              { name: 'fx.fail', args: {} },
            ],
          },
          { text: 'ok' },
        ),
      ),
      15_000,
      'the turn ends',
    );
    expect(first.status).toBe('completed');
    const rows = await history();
    expect(rows[2]?.message).toMatchObject({ name: 'fx.echo', content: 'ping', effect: 'applied' });
    expect(rows[3]?.message).toMatchObject({ name: 'fx.fail', isError: true, effect: 'applied' });
    const hung = await within(
      send(script({ tools: [{ name: 'fx.hang', args: {} }] })),
      15_000,
      'the turn ends',
    );
    expect(hung).toMatchObject({ status: 'interrupted', abortReason: 'watchdog', workerTerminated: false });
    await until(() => events().includes('cancelled hang'), 5_000, 'the server records the cancellation');
    expect(openToolCalls(await history())).toEqual([]);
    // The worker was only waiting on the host: kept, not retired; the server is the same one.
    expect(tw.stats().pool).toMatchObject({ retired: 0, terminated: 0 });
    const again = await within(
      send(script({ tools: [{ name: 'fx.echo', args: { text: 'again' } }] }, { text: 'ok' })),
      15_000,
      'the turn ends',
    );
    expect(again.status).toBe('completed');
    const pids = events().filter((l) => l.startsWith('pid '));
    expect(pids).toHaveLength(1);
    // Spawned by the host's own thread: reaped when it ends at shutdown, never a zombie.
    const pid = Number(pids[0]!.slice(4));
    await tw.shutdown();
    await until(() => !existsSync(`/proc/${pid}`), 10_000, 'the server process is gone (reaped)');
  });

  it('L2: progress notifications stamp the turn from the supervisor’s thread: a 3 s tool outlives a 1 s watchdog', async () => {
    const { send } = await start('host', PROGRESS_WATCHDOG_MS);
    const done = await within(
      send(
        script({ tools: [{ name: 'fx.sleep', args: { ms: 3 * PROGRESS_WATCHDOG_MS } }] }, { text: 'rested' }),
      ),
      15_000,
      'the turn ends',
    );
    expect(done.status).toBe('completed');
  });
});
