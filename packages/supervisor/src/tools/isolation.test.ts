/**
 * Thread-isolated tools: the work runs in the supervisor's shared pool, not in the session
 * worker. A wedged one is reclaimed by terminating its pool thread only — the session worker
 * unwinds, is not terminated, and serves the next turn (L3 without the escalation); its
 * heartbeat stamps the turn's clock (L2); the history stays complete (S1, S2).
 */
import { openToolCalls } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { nextEvent, script, startRuntime } from '../test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const PLUGINS = [
  new URL('../test-support/plugin.mjs', import.meta.url).href,
  new URL('../test-support/isolated-plugin.mjs', import.meta.url).href,
];

async function start(options: Parameters<typeof startRuntime>[0] = {}) {
  return startRuntime({ pluginModules: PLUGINS, pool: { maxWorkers: 1, warmWorkers: 1 }, ...options });
}

/**
 * For the tests whose subject is what happens after an abort, not how soon it comes: the session
 * worker gets a grace it never needs (it only waits on the task's RPC and unwinds as soon as it
 * hears of the abort, in milliseconds on an idle machine), so a busy machine that delays its
 * thread by a few hundred ms cannot turn "the worker unwound" into "the worker was terminated".
 * A grace that is never used costs the test nothing; a worker that did not unwind still fails
 * the test by assertion (workerTerminated), 10 s later. The lease outlives grace + renewal, as
 * the configuration requires.
 */
const PATIENT_GRACE = {
  watchdog: { timeoutMs: 1_000, pollMs: 30, graceMs: 10_000 },
  lease: { ttlMs: 15_000, renewMs: 50 },
};

const call = (name: string, args: Record<string, unknown> = {}) =>
  script({ tools: [{ name, args }] }, { text: 'done' });

describe('thread-isolated tools', () => {
  it('runs the task in a pool thread and returns its result; a task that throws is a tool error', async () => {
    rt = await start();
    const ok = await (await rt.send(call('iso_where'))).done;
    expect(ok.status).toBe('completed');
    const rows = await rt.history();
    const result = rows.find((r) => r.message.role === 'tool')?.message as {
      content: string;
      effect: string;
    };
    const where = JSON.parse(result.content) as { isMainThread: boolean; threadId: number };
    expect(where.isMainThread).toBe(false);
    expect(result.effect).toBe('applied');
    const failed = await (await rt.send(call('iso_fail'))).done;
    expect(failed.status).toBe('completed');
    expect((await rt.history()).at(-2)?.message).toMatchObject({
      role: 'tool',
      isError: true,
      content: expect.stringMatching(/the isolated task failed/),
    });
    expect(rt.tw.stats().isolation).toMatchObject({ started: 2, failed: 1, cancelled: 0, running: 0 });
  });

  it('L2: a task that heartbeats from its pool thread keeps the turn alive past the watchdog timeout', async () => {
    // The pool's thread is started by a first task, so the silence before the beating task's
    // first heartbeat is a call over a warm thread, not a thread's start on a busy machine; the
    // task then beats for three timeouts, which it outlives only by its pool thread's stamps.
    rt = await start({ watchdog: { timeoutMs: 1_000, pollMs: 30, graceMs: 250 } });
    expect((await (await rt.send(call('iso_where'))).done).status).toBe('completed');
    expect(rt.tw.stats().isolation).toMatchObject({ started: 1, threads: 1 });
    const result = await (await rt.send(call('iso_beat', { ms: 3_000 }))).done;
    expect(result.status).toBe('completed');
    expect(rt.tw.stats().watchdogFired).toBe(0);
  });

  it('L3: a wedged isolated tool is reclaimed by terminating its pool thread; the session worker is kept and serves the next turn', async () => {
    rt = await start(PATIENT_GRACE);
    const started: number[] = [];
    await rt.tw.subscribe({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
      listener: (e) => {
        if (e.type === 'turn_started') started.push(e.data.workerId);
      },
    });
    const wedged = await (await rt.send(call('iso_spin'))).done;
    expect(wedged).toMatchObject({ status: 'interrupted', abortReason: 'watchdog', workerTerminated: false });
    const stats = rt.tw.stats();
    expect(stats.isolation).toMatchObject({ started: 1, cancelled: 1, running: 0, threads: 0 });
    expect(stats.pool).toMatchObject({ terminated: 0, retired: 0 });
    const rows = await rt.history();
    expect(openToolCalls(rows)).toEqual([]);
    expect(rows.at(-1)?.message).toMatchObject({ role: 'tool', effect: 'unknown', synthesized: true });
    // The same session worker takes the next turn.
    const next = await (await rt.send(script({ text: 'still here' }))).done;
    expect(next.status).toBe('completed');
    expect(started).toHaveLength(2);
    expect(started[1]).toBe(started[0]);
  });

  it('a force cancel during an isolated tool terminates its pool thread, not the session worker', async () => {
    rt = await start(PATIENT_GRACE);
    const toolStarted = nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const turn = await rt.send(call('iso_beat', { ms: 60_000 }));
    await toolStarted;
    expect(
      await rt.tw.cancel({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId }),
    ).toBe(true);
    const result = await turn.done;
    expect(result).toMatchObject({ status: 'interrupted', workerTerminated: false });
    expect(rt.tw.stats().isolation).toMatchObject({ cancelled: 1, running: 0 });
    expect(rt.tw.stats().pool).toMatchObject({ terminated: 0, retired: 0 });
  });
});
