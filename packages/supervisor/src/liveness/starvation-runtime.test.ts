/**
 * Starvation is not a stall, through the runtime: a real session worker reports its OS thread
 * at boot, the turn hands it to the watchdog, and the watchdog reads the scheduler about that
 * thread (here a fake that answers in real time with the shares the test sets; the timing bounds
 * themselves are starvation.test.ts's, on injected time). Linux only: elsewhere a worker has no
 * thread id to report and the watchdog judges silence alone. The model streams in the session's
 * worker (`models.placement: 'session'`): on the shared model threads a turn's model step is the
 * model thread's (models/models.test.ts asks about both).
 */
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { within } from '../test-support/bounded.js';
import { FAST_WATCHDOG, script, startRuntime } from '../test-support/runtime.js';
import { RealTimeScheduler } from '../test-support/scheduler.js';
import { LogMessage } from './reporting.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const WATCHDOG = { timeoutMs: 600, pollMs: 30, graceMs: 250 } as const;

describe.runIf(process.platform === 'linux')('starvation through the runtime (Linux)', () => {
  it('L1 L2: a stalled turn whose worker thread is starved of CPU is not aborted past its bound — the worker reported its OS thread; once no longer starved, it is aborted as stalled', async () => {
    const scheduler = new RealTimeScheduler();
    // Starved windows are deferred up to a silence of 4 × timeoutMs: room for the test to change
    // the shares after the second deferral on a loaded machine.
    // The model streams in the session's worker (session placement): the stall is the worker's own.
    rt = await startRuntime({
      watchdog: WATCHDOG,
      scheduler: { stats: scheduler },
      models: { placement: 'session' },
    });
    const firstDeferral = rt.waitForLog(LogMessage.starved);
    const turn = await rt.send(script({ text: 'working' }, { stall: true }));
    const first = await within(firstDeferral, 5_000, 'the first starved deferral');
    const second = await within(rt.waitForLog(LogMessage.starved), 5_000, 'the next window, starved again');
    expect(first).toMatchObject({
      level: 40,
      workstreamId: 'tenant-a/ws-1',
      generation: 1,
      deferrals: 1,
      lastActivity: 'streamToken',
    });
    expect(first.idleMs as number).toBeGreaterThanOrEqual(WATCHDOG.timeoutMs);
    expect(first.waitShare as number).toBeCloseTo(0.85, 1);
    expect(second.deferrals).toBe(2);
    expect(rt.types()).not.toContain('watchdog_fired');
    expect(rt.logged(LogMessage.fired)).toEqual([]);
    // The thread asked about is the worker's: one of this process's threads, not the main one.
    const asked = [...new Set(scheduler.asked)];
    expect(asked).toHaveLength(1);
    expect(asked[0]).not.toBe(process.pid);
    expect(existsSync(`/proc/self/task/${asked[0]}`)).toBe(true);
    expect(first.threads).toEqual(asked);

    scheduler.shares = { run: 0, wait: 0 }; // scheduled again, and asleep: a stall
    const result = await within(turn.done, 5_000, 'the stalled turn ends');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
    expect(rt.logged(LogMessage.fired)[0]).toMatchObject({ bound: 'idle', verdict: 'stalled', waitShare: 0 });
    const stats = rt.tw.stats().watchdog;
    expect(stats.starved).toBeGreaterThanOrEqual(2);
    expect(stats).toMatchObject({ stalled: 1, wedged: 0, committed: 1 });
  });

  it('L1 L3: on the platform’s own schedstat, a stalled turn is aborted as stalled, and a wedged one is never taken for stalled', async () => {
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, models: { placement: 'session' } });
    const stalled = await (await rt.send(script({ text: 'working' }, { stall: true }))).done;
    expect(stalled).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
    const wedged = await (await rt.send(script({ tools: [{ name: 'wedge', args: {} }] }))).done;
    expect(wedged).toMatchObject({ status: 'interrupted', abortReason: 'watchdog', workerTerminated: true });
    // A sleeping thread waits for no CPU; a spinning one always wants it: wedged, or — when the
    // host starves it to the bound of 4 × timeoutMs before it burns its CPU budget — starved.
    const [stall, wedge] = rt.logged(LogMessage.fired);
    expect(stall).toMatchObject({ verdict: 'stalled' });
    expect(['wedged', 'starved']).toContain(wedge?.verdict);
    expect(rt.tw.stats().watchdog.stalled).toBe(1);
  });
});
