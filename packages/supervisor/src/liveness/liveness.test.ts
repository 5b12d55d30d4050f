/**
 * Liveness (L1–L3, L5, L9–L12): counterparts of the watchdog suite in shared/seeds/000_….
 * Timing bounds are reported by `turnwarden bench`; these tests assert behaviour and order.
 */
import { openToolCalls } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { within } from '../test-support/bounded.js';
import { FAST_WATCHDOG, nextEvent, script, startRuntime } from '../test-support/runtime.js';
import { testControls } from '../testing.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

describe('liveness watchdog', () => {
  it('L1: a silently stalled turn is detected, logged with the workstream and idle time, and ends interrupted; the next message runs', async () => {
    // The model streams in the session's worker here, so the stalled promise is the worker's own
    // and the worker is retired; on the shared model threads the stall is the thread's and the
    // worker is kept (models/models.test.ts).
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, models: { placement: 'session' } });
    const started = nextEvent(rt.tw, rt.workstreamId, 'turn_started');
    const turn = await rt.send(script({ text: 'working' }, { stall: true }));
    const result = await turn.done;
    const stalledOn = (await started).data.workerId;
    expect(result.status).toBe('interrupted');
    expect(result.abortReason).toBe('watchdog');
    const fired = rt.logged('turn liveness watchdog fired; attempting recovery');
    expect(fired).toHaveLength(1);
    expect(fired[0]).toMatchObject({ level: 50, workstreamId: 'tenant-a/ws-1', lastActivity: 'streamToken' });
    // Never early: the idle time it acted on is at least timeoutMs (L2's side of the bound).
    expect(fired[0]!.idleMs as number).toBeGreaterThanOrEqual(300);
    // A stalled promise is abandoned cooperatively: no terminate needed.
    expect(result.workerTerminated).toBe(false);
    // The lease was released on the interrupted path and the workstream is idle again.
    const status = await rt.tw.status({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
    });
    expect(status.state).toBe('idle');
    const nextStarted = nextEvent(rt.tw, rt.workstreamId, 'turn_started');
    const next = await (await rt.send('are you there?')).done;
    expect(next).toMatchObject({ status: 'completed', finalText: 'echo: are you there?' });
    // The stalled promise may still be pending in that worker: it was retired, not reused.
    expect((await nextStarted).data.workerId).not.toBe(stalledOn);
    expect(rt.tw.stats().pool.retired).toBe(1);
  });

  it('L2: a turn that keeps making progress past timeoutMs is never aborted and its lease keeps renewing', async () => {
    rt = await startRuntime({ watchdog: FAST_WATCHDOG });
    const renewalsBefore = rt.tw.stats().leaseRenewals;
    // 3 × timeoutMs of tool heartbeats, then streamed text.
    const result = await (
      await rt.send(
        script({ tools: [{ name: 'heartbeat', args: { ms: 900, everyMs: 20 } }] }, { text: 'finished' }),
      )
    ).done;
    expect(result).toMatchObject({ status: 'completed', finalText: 'finished', synthesized: 0 });
    expect(rt.types()).not.toContain('watchdog_fired');
    expect(rt.logged('turn liveness watchdog fired; attempting recovery')).toHaveLength(0);
    expect(rt.tw.stats().leaseRenewals - renewalsBefore).toBeGreaterThan(3);
  });

  it('L3: a wedged turn stops renewing at the commit, is terminated after grace, gets unknown results, and the workstream runs on a fresh worker', async () => {
    const store = openSqliteStore({ path: ':memory:' });
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, store });
    const started = nextEvent(rt.tw, rt.workstreamId, 'turn_started');
    const turn = await rt.send(
      script({
        tools: [
          { name: 'echo', args: { text: 'a' } },
          { name: 'wedge', args: {} },
        ],
      }),
    );
    const firstWorker = (await started).data.workerId;
    await within(nextEvent(rt.tw, rt.workstreamId, 'turn_aborted'), 5_000, 'the wedged turn is aborted');
    const renewalsAtCommit = rt.tw.stats().leaseRenewals;
    // graceMs is 250: the worker must be terminated well within this bound.
    const result = await within(turn.done, 5_000, 'the wedged turn is terminated after grace');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog', workerTerminated: true });
    // No renewal after the commit, although grace (250 ms) spans several renew periods (50 ms).
    expect(rt.tw.stats().leaseRenewals).toBe(renewalsAtCommit);
    expect(rt.logged('turn did not unwind within grace; terminating worker')).toHaveLength(1);
    const rows = await rt.history();
    expect(openToolCalls(rows)).toEqual([]);
    const tools = rows.filter((r) => r.message.role === 'tool').map((r) => r.message);
    expect(tools).toEqual([
      expect.objectContaining({ callIndex: 0, effect: 'applied', content: 'a' }),
      expect.objectContaining({ callIndex: 1, effect: 'unknown', synthesized: true }),
    ]);
    const lease = await store.getLease(rt.key);
    expect(lease?.released).toBe(true);
    const restarted = nextEvent(rt.tw, rt.workstreamId, 'turn_started');
    const next = await (await rt.send('hello again')).done;
    expect(next.status).toBe('completed');
    expect((await restarted).data.workerId).not.toBe(firstWorker);
  });

  it('L3: a row the dead turn had in flight after the commit never reaches durable history', async () => {
    // `block` holds the worker thread past timeoutMs (it cannot even receive the abort), then
    // returns; the turn loop then tries to journal the tool result: the supervisor refuses it.
    // The timeout is far above the turn's silences before the tool (a loaded machine once
    // stretched one past 200 ms: the abort came before the tool call was journaled), the block
    // three times the timeout, and the grace far above the block, so the worker returns to be
    // refused rather than being terminated.
    rt = await startRuntime({
      watchdog: { timeoutMs: 1_000, pollMs: 20, graceMs: 10_000 },
      lease: { ttlMs: 15_000, renewMs: 50 },
    });
    const result = await (await rt.send(script({ tools: [{ name: 'block', args: { ms: 3_000 } }] }))).done;
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog', workerTerminated: false });
    expect(rt.tw.stats().journalRefusedFenced).toBe(1);
    const tools = (await rt.history()).filter((r) => r.message.role === 'tool').map((r) => r.message);
    expect(tools).toEqual([expect.objectContaining({ synthesized: true, effect: 'unknown' })]);
  });

  it('L5: the definitive settlement is published only after the commit, and after the observational one', async () => {
    rt = await startRuntime({ watchdog: FAST_WATCHDOG });
    const result = await (await rt.send(script({ stall: true }))).done;
    expect(result.status).toBe('interrupted');
    const msgs = rt.logs.map((l) => l.msg);
    const fired = msgs.indexOf('turn liveness watchdog fired; attempting recovery');
    const aborted = msgs.indexOf('watchdog aborted turn; lease renewal stopped');
    expect(fired).toBeGreaterThanOrEqual(0);
    expect(aborted).toBeGreaterThan(fired);
    const warnings = rt.events
      .filter((e) => e.type === 'warning')
      .map((e) => e.data as { stage: string; message: string });
    expect(warnings.map((w) => w.stage)).toEqual(['observational', 'definitive']);
    expect(warnings[0]!.message).toMatch(/attempting recovery/);
    expect(warnings[1]!.message).toMatch(/^Turn aborted by the liveness watchdog .*You can retry\.$/);
    // Events follow the same split: fired → aborted → stream_end → idle.
    const order = rt
      .types()
      .filter((t) => ['watchdog_fired', 'turn_aborted', 'stream_end', 'idle'].includes(t));
    expect(order).toEqual(['watchdog_fired', 'turn_aborted', 'stream_end', 'idle']);
  });

  it('L9: idle time between turns never counts — a turn is measured from its own entry', async () => {
    // Injected monotonic time, polled by hand: the bounds below are exact.
    const time = { now: 1_000 };
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, now: () => time.now, manualWatchdog: true });
    await (await rt.send('first')).done;
    time.now += 10 * 300; // idle for ten times timeoutMs between the turns
    testControls(rt.tw).pollWatchdog();
    const entered = nextEvent(rt.tw, rt.workstreamId, 'token');
    const turn = await rt.send(script({ text: 'working' }, { stall: true }));
    await entered; // the worker entered the turn and streamed; it now stalls
    testControls(rt.tw).pollWatchdog();
    time.now += 299;
    testControls(rt.tw).pollWatchdog();
    expect(rt.types()).not.toContain('watchdog_fired');
    const status = await rt.tw.status({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
    });
    expect(status.activeTurn?.idleMs).toBe(299);
    time.now += 1;
    testControls(rt.tw).pollWatchdog();
    const result = await within(turn.done, 5_000, 'the stalled turn settles');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
    expect(rt.logged('turn liveness watchdog fired; attempting recovery')).toEqual([
      expect.objectContaining({ idleMs: 300 }),
    ]);
  });

  it('L10: a wall-clock jump forward, on the supervisor and in the worker, does not fire the watchdog', async () => {
    // The default time source, polled by hand, so the poll right after the jump is the one judged.
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, manualWatchdog: true });
    const realNow = Date.now;
    const turn = await rt.send(
      script(
        { tools: [{ name: 'warp_wall_clock', args: { ms: 6 * 3_600_000 } }] },
        { text: 'a' },
        { stall: true },
      ),
    );
    await nextEvent(rt.tw, rt.workstreamId, 'token'); // the worker's wall clock jumped; it now stalls
    testControls(rt.tw).pollWatchdog(); // observes the turn's last stamps
    Date.now = () => realNow() + 6 * 3_600_000;
    try {
      testControls(rt.tw).pollWatchdog();
      testControls(rt.tw).pollWatchdog();
    } finally {
      Date.now = realNow;
    }
    expect(rt.types()).not.toContain('watchdog_fired');
    expect(rt.tw.stats().watchdog.fired).toBe(0);
    await rt.tw.cancel({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId });
    expect((await turn.done).abortReason).toBe('cancel');
  });

  it('L10: a wall-clock jump backward, on the supervisor and in the worker, does not hide a stall', async () => {
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, manualWatchdog: true });
    const realNow = Date.now;
    const turn = await rt.send(
      script(
        { tools: [{ name: 'warp_wall_clock', args: { ms: -6 * 3_600_000 } }] },
        { text: 'a' },
        { stall: true },
      ),
    );
    await nextEvent(rt.tw, rt.workstreamId, 'token');
    testControls(rt.tw).pollWatchdog();
    const armedAt = performance.now();
    Date.now = () => realNow() - 6 * 3_600_000;
    try {
      // Real time must pass (the default source is the real monotonic clock): poll until the
      // stall is detected, bounded well past timeoutMs (300).
      while (rt.tw.stats().watchdog.fired === 0 && performance.now() - armedAt < 5_000) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        testControls(rt.tw).pollWatchdog();
      }
    } finally {
      Date.now = realNow;
    }
    expect(rt.tw.stats().watchdog.fired).toBe(1);
    const result = await within(turn.done, 5_000, 'the stalled turn settles');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
  });

  it('L11: a per-turn deadline aborts a turn that heartbeats forever, and the log names the bound', async () => {
    rt = await startRuntime({ watchdog: { timeoutMs: 300, pollMs: 30, graceMs: 250, turnDeadlineMs: 400 } });
    const turn = await rt.send(script({ heartbeat: 60_000, everyMs: 20 }));
    const result = await within(turn.done, 10_000, 'the deadline ends a turn that heartbeats forever');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'deadline' });
    const fired = rt.logged('turn liveness watchdog fired; attempting recovery');
    expect(fired).toEqual([expect.objectContaining({ bound: 'deadline' })]);
    expect(rt.logged('watchdog aborted turn; lease renewal stopped')).toEqual([
      expect.objectContaining({ bound: 'deadline' }),
    ]);
  });

  it('L12: the watchdog polls only active turns — a thousand idle workstreams add nothing to a poll', async () => {
    rt = await startRuntime({ watchdog: FAST_WATCHDOG });
    for (let i = 0; i < 1_000; i++)
      await rt.tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: `idle-${i}` });
    const turn = await rt.send(script({ heartbeat: 200, everyMs: 20 }, { text: 'done' }));
    await nextEvent(rt.tw, rt.workstreamId, 'state');
    expect(rt.tw.stats().watchdog.watched).toBe(1);
    expect((await turn.done).status).toBe('completed');
    expect(rt.tw.stats().watchdog.watched).toBe(0);
    // Poll lateness against the schedule is asserted on injected time in watchdog.test.ts.
  });

  it('L3: a worker retired after an aborted turn exits and frees its slot for the next turn', async () => {
    // One worker slot: the next turn can only run once the retired worker has exited. The model
    // streams in the worker (session placement): the stalled promise is the worker's to leak.
    rt = await startRuntime({
      watchdog: FAST_WATCHDOG,
      pool: { maxWorkers: 1, warmWorkers: 1 },
      models: { placement: 'session' },
    });
    const started = nextEvent(rt.tw, rt.workstreamId, 'turn_started');
    const stalled = await (await rt.send(script({ text: 'a' }, { stall: true }))).done;
    expect(stalled).toMatchObject({ status: 'interrupted', workerTerminated: false });
    const retiredId = (await started).data.workerId;
    expect(rt.tw.stats().pool.retired).toBe(1);
    const next = await within(
      rt.send('after the retirement').then((t) => t.done),
      10_000,
      'the next turn gets the freed slot',
    );
    expect(next.status).toBe('completed');
    const exits = rt.logged('session worker exited');
    expect(exits).toEqual([expect.objectContaining({ workerId: retiredId, terminated: true })]);
    expect(rt.tw.stats().pool).toMatchObject({ terminated: 0, retired: 1, busy: 0 });
  });
});
