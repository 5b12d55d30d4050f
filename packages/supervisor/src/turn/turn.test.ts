/**
 * One turn (turn.ts) on a stub host, with a real clock and manual timers: its phases, the one
 * abort commit and what it stops (L3), the definitive stage in its order (L5), grace escalation,
 * lease renewal (L2, L3, P6), and the outcome it ends with.
 */
import { Activity, SlotStamp } from '@turnwarden/clock';
import { describe, expect, it } from 'vitest';
import { turnWorld as world } from '../test-support/turn-world.js';

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('turn', () => {
  it('is armed when admitted: its session, its slot, its generation on the clock, renewal running', () => {
    const w = world();
    expect(w.turn.phase).toBe('admitted');
    expect(w.rec.turn).toBe(w.turn);
    expect(w.slots.on(1)).toBe(w.turn);
    expect(w.turn.renewing).toBe(true);
    expect(w.timers.pending).toBe(1);
    expect(w.counters.turnsStarted).toBe(1);
  });

  it('L3 L5: a watchdog commit stops renewal first, then logs, announces, moves the machine, warns, tells the worker, arms grace', () => {
    const w = world();
    expect(w.timers.pending).toBe(1);
    w.clock.fence(1);
    w.protocol.committed(w.watched, w.info());
    expect(w.turn.aborted).toEqual({ reason: 'watchdog', at: 0 });
    expect(w.turn.phase).toBe('aborting');
    expect(w.counters.abortsCommitted).toBe(1);
    expect(w.turn.renewing).toBe(false);
    expect(w.logs.map((l) => [l.msg, l.idleMs, l.bound])).toEqual([
      ['watchdog aborted turn; lease renewal stopped', 1_234, 'idle'],
    ]);
    expect(w.events.map((e) => e.type)).toEqual(['turn_aborted', 'warning']);
    expect(w.events[0]!.data).toEqual({ reason: 'watchdog' });
    expect(w.events[1]!.data).toEqual({
      stage: 'definitive',
      message: 'Turn aborted by the liveness watchdog after 1.2s without progress. You can retry.',
    });
    expect(w.abandoned).toEqual(['watchdog']);
    expect(w.posted).toEqual([{ t: 'abort', generation: 4, reason: 'watchdog' }]);
    // Only the grace timer is pending: renewal stopped.
    expect(w.timers.pending).toBe(1);
    w.timers.run(499);
    expect(w.terminated).toEqual([]);
    w.timers.run(1);
    expect(w.terminated).toEqual([12]);
    expect(w.turn.workerTerminated).toBe(true);
    expect(w.counters.workersTerminated).toBe(1);
    expect(w.logs.at(-1)).toMatchObject({
      msg: 'turn did not unwind within grace; terminating worker',
      graceMs: 500,
      workerId: 12,
    });
  });

  it('D4: an abort of a turn its session record no longer holds announces itself but moves no machine (the record may be its successor’s)', () => {
    const w = world();
    (w.rec as { turn?: unknown }).turn = undefined;
    expect(w.turn.abort('cancel')).toBe(true);
    expect(w.events.map((e) => e.type)).toEqual(['turn_aborted']);
    expect(w.abandoned).toEqual([]);
    expect(w.posted).toEqual([{ t: 'abort', generation: 4, reason: 'cancel' }]);
  });

  it('L11: deadline and dispatch commits say which bound, with their own warnings', () => {
    for (const bound of ['deadline', 'dispatch'] as const) {
      const w = world();
      w.clock.fence(1);
      w.protocol.committed(w.watched, w.info(bound));
      expect(w.turn.aborted?.reason).toBe(bound);
      expect(w.logs[0]).toMatchObject({ msg: 'watchdog aborted turn; lease renewal stopped', bound });
      expect(w.events.find((e) => e.type === 'warning')?.data).toMatchObject({ stage: 'definitive' });
      expect(w.posted).toEqual([{ t: 'abort', generation: 4, reason: bound }]);
    }
  });

  it('a cancel, shutdown or lost lease fences unconditionally, logs its reason and gives no watchdog warning', () => {
    const w = world();
    expect(w.turn.abort('cancel')).toBe(true);
    expect(w.turn.aborted?.reason).toBe('cancel');
    // The fence is set on the clock: the worker's next stamp reports the abort (L6).
    expect(new SlotStamp(w.clock.buffer, 1).touch(Activity.streamToken)).toBe(false);
    expect(w.logs.map((l) => [l.level, l.msg, l.reason])).toEqual([
      [40, 'turn aborted; lease renewal stopped', 'cancel'],
    ]);
    expect(w.events.map((e) => e.type)).toEqual(['turn_aborted']);
    // A second abort of the same turn does nothing.
    expect(w.turn.abort('shutdown')).toBe(false);
    expect(w.counters.abortsCommitted).toBe(1);
    expect(w.posted).toHaveLength(1);
  });

  it('commits once: an abort of a turn that already aborted, by any path, is ignored', () => {
    const w = world();
    w.turn.abort('cancel');
    expect(w.turn.abort('watchdog', { stall: w.info() })).toBe(false);
    expect(w.turn.abort('crash')).toBe(false);
    expect(w.counters.abortsCommitted).toBe(1);
    expect(w.counters.workersCrashed).toBe(0);
    expect(w.turn.aborted?.reason).toBe('cancel');
  });

  it('T7: a dead worker commits through the same abort: fenced, counted, logged, terminated — no abort message, no grace', () => {
    const w = world();
    expect(w.turn.abort('crash', { error: new Error('exited') })).toBe(true);
    expect(w.turn.aborted?.reason).toBe('crash');
    expect(new SlotStamp(w.clock.buffer, 1).touch(Activity.streamToken)).toBe(false);
    expect(w.counters).toMatchObject({ workersCrashed: 1, abortsCommitted: 0 });
    expect(w.logs.map((l) => l.msg)).toEqual(['session worker died mid-turn']);
    expect(w.terminated).toEqual([12]);
    expect(w.posted).toEqual([]);
    expect(w.events).toEqual([]);
    expect(w.timers.pending).toBe(0);
  });

  it('a step that throws after the commit is logged and the rest of the definitive stage still runs', () => {
    const w = world();
    (w.turn.worker as unknown as { control: { postMessage: () => void } }).control.postMessage = () => {
      throw new Error('port closed');
    };
    w.turn.abort('cancel');
    expect(w.msgs()).toContain('abort step failed after commit');
    expect(w.timers.pending).toBe(1); // grace still armed
  });

  it('ends completed: settled, detached, the worker back, the permit freed, stream_end then idle, one outcome', async () => {
    const w = world();
    const result = await w.run().finish();
    expect(result).toMatchObject({ status: 'completed', finalText: 'ok', workerTerminated: false });
    expect(await w.turn.outcome).toEqual({ kind: 'completed', result });
    expect(w.turn.phase).toBe('done');
    expect(w.rec.turn).toBeUndefined();
    expect(w.slots.on(1)).toBeUndefined();
    expect(w.released()).toBe(1);
    expect(w.events.map((e) => e.type)).toEqual(['turn_started', 'stream_end', 'idle']);
    // Its end has begun: nothing aborts it any more.
    expect(w.turn.abort('cancel')).toBe(false);
  });

  it('a turn aborted before its dispatch never reaches its worker and ends aborted, its worker kept', async () => {
    const w = world();
    w.turn.abort('cancel');
    w.run();
    const result = await w.turn.done;
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'cancel' });
    expect((await w.turn.outcome).kind).toBe('aborted');
    expect(w.retired).toEqual([]);
    expect(w.msgs()).toContain('turn aborted before its dispatch: not sent to its worker');
  });

  it('escalation does nothing for a turn that already finished', async () => {
    const w = world();
    await w.run().finish();
    w.turn.escalate();
    expect(w.terminated).toEqual([]);
    expect(w.counters.workersTerminated).toBe(0);
  });

  it('L2: renewal refreshes the lease every renewMs and counts successes; it is never progress', async () => {
    const w = world();
    const before = w.clock.sample(1);
    w.timers.run(600);
    await settle();
    expect(w.refreshes).toEqual([9, 9, 9]);
    expect(w.counters.leaseRenewals).toBe(3);
    expect(w.clock.sample(1)).toBe(before);
    await w.run().finish();
    w.timers.run(600);
    await settle();
    expect(w.refreshes).toHaveLength(3);
  });

  it('L3: once the abort committed, a renewal that still fires does not refresh; one in flight is not counted', async () => {
    const w = world();
    w.turn.abort('cancel');
    w.timers.run(600);
    await settle();
    expect(w.refreshes).toEqual([]);
    let finish!: (ok: boolean) => void;
    const slow = world({ refresh: () => new Promise((r) => (finish = r)) });
    slow.timers.run(200);
    await slow.run().finish();
    finish(true);
    await settle();
    expect(slow.counters.leaseRenewals).toBe(0);
    // A refresh in flight when the abort commits (the turn not finished yet): its answer,
    // granted or refused, is neither a renewal nor a lost lease.
    for (const ok of [true, false]) {
      let answer!: (ok: boolean) => void;
      const late = world({ refresh: () => new Promise((r) => (answer = r)) });
      late.timers.run(200);
      late.turn.abort('cancel');
      answer(ok);
      await settle();
      expect(late.counters).toMatchObject({ leaseRenewals: 0, leaseLosses: 0 });
      expect(late.turn.aborted?.reason).toBe('cancel');
    }
  });

  it('P6: a refused refresh is a lost lease: logged with the token, counted, and the turn aborted', async () => {
    const w = world({ refresh: async () => false });
    w.timers.run(200);
    await settle();
    expect(w.counters.leaseLosses).toBe(1);
    expect(w.counters.leaseRenewals).toBe(0);
    expect(w.logs[0]).toMatchObject({ level: 50, msg: 'turn lease lost; aborting turn', token: 9 });
    expect(w.turn.aborted?.reason).toBe('lease_lost');
  });

  it('a refresh that fails (the store is down) is retried at the next period, not a loss', async () => {
    const w = world({ refresh: async () => Promise.reject(new Error('db busy')) });
    w.timers.run(200);
    await settle();
    expect(w.turn.aborted).toBeUndefined();
    expect(w.logs).toEqual([expect.objectContaining({ level: 40, msg: 'lease renewal failed; will retry' })]);
    w.timers.run(200);
    await settle();
    expect(w.refreshes).toHaveLength(2);
  });

  it('L3: the abort reaches a model call running on a shared thread, and the worker — only asleep on it — is kept; without one an aborted turn’s worker is retired', async () => {
    const w = world();
    const aborts: string[] = [];
    const running = w.run();
    await settle(); // dispatched: the worker is running the turn
    w.turn.modelCallStarted({ result: new Promise(() => {}), abort: (reason) => void aborts.push(reason) });
    expect(w.turn.abort('cancel')).toBe(true);
    expect(aborts).toEqual(['cancel']);
    expect(w.posted).toEqual([{ t: 'abort', generation: 4, reason: 'cancel' }]);
    expect(await running.finish('interrupted')).toMatchObject({ status: 'interrupted' });
    expect(w.retired).toEqual([]);

    const plain = world();
    const other = plain.run();
    await settle();
    plain.turn.abort('cancel');
    await other.finish('interrupted');
    expect(plain.retired).toEqual([12]);
  });

  it('L3: a model call that starts once the abort committed is aborted at once; one that ended is not reached by a later abort', () => {
    const w = world();
    w.run();
    const late: string[] = [];
    w.turn.abort('deadline');
    w.turn.modelCallStarted({ result: new Promise(() => {}), abort: (reason) => void late.push(reason) });
    expect(late).toEqual(['deadline']);

    const v = world();
    v.run();
    const ended: string[] = [];
    const call = {
      result: Promise.resolve({ content: '', calls: [] }),
      abort: (r: string) => void ended.push(r),
    };
    v.turn.modelCallStarted(call);
    v.turn.modelCallEnded(call);
    v.turn.abort('cancel');
    expect(ended).toEqual([]);
  });

  it('the watchdog stops watching a turn as soon as its worker reported it done, before its end has its turn in the mailbox', async () => {
    const w = world();
    // The session's mailbox is busy: the turn's end will wait behind this command.
    let free!: () => void;
    void w.rec.run(() => new Promise<void>((r) => (free = r)));
    const running = w.run();
    await running.answer();
    await settle();
    await settle();
    expect(w.unwatched()).toBe(1);
    expect(w.turn.phase).toBe('running');
    free();
    await w.turn.done;
    expect(w.unwatched()).toBe(1);
  });
});
