/**
 * L8: the history-rewrite fence. Counterparts of `test_declined_abort_does_not_cancel_pending_
 * compression_commit` and `test_declined_abort_parks_and_leaves_fence_operational`.
 */
import { SlotStamp } from '@turnwarden/clock';
import { ErrorCode, isTurnwardenError, openToolCalls } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { within } from '../test-support/bounded.js';
import { gate } from '../test-support/gate.js';
import { gatedStore } from '../test-support/gated-store.js';
import { FAST_WATCHDOG, nextEvent, script, startRuntime } from '../test-support/runtime.js';
import { type StallInfo, testControls } from '../testing.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

/** A compaction asked for now is refused FENCED, and nothing of it reached the history. */
async function expectLateCompactRefused(rt: Rt): Promise<void> {
  const refused = await rt.tw
    .compact({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
      throughSeq: 2,
      summary: 'late',
    })
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect(isTurnwardenError(refused, ErrorCode.FENCED)).toBe(true);
  expect((await rt.history()).some((r) => r.message.role === 'system')).toBe(false);
}

describe('history rewrite fence', () => {
  it('L8: a compact called as the turn ends runs on the idle session after it, never under the ended turn’s released lease', async () => {
    // The turn's end is held at its lease release (its settle has begun); the store's compaction
    // waits until that release is done, as a slow store may let it.
    const inner = openSqliteStore({ path: ':memory:' });
    let held: { entered: () => void; gate: Promise<void> } | undefined;
    let released!: () => void;
    const releaseDone = new Promise<void>((resolve) => {
      released = resolve;
    });
    const store: Store = new Proxy(inner, {
      get(target, key, receiver) {
        const value = Reflect.get(target, key, receiver) as unknown;
        if (typeof value !== 'function') return value;
        if (key === 'releaseLease' && held !== undefined) {
          const h = held;
          held = undefined;
          return async (...args: Parameters<Store['releaseLease']>) => {
            h.entered();
            await h.gate;
            const ok = await target.releaseLease(...args);
            released();
            return ok;
          };
        }
        if (key === 'compactHistory') {
          return async (...args: Parameters<Store['compactHistory']>) => {
            await releaseDone;
            return target.compactHistory(...args);
          };
        }
        return (value as (...a: unknown[]) => unknown).bind(target);
      },
    });
    rt = await startRuntime({ store });
    await (await rt.send('hello')).done; // rows 1–2 to compact
    let open!: () => void;
    let entered!: () => void;
    const atRelease = new Promise<void>((resolve) => {
      entered = resolve;
    });
    held = { entered, gate: new Promise<void>((resolve) => (open = resolve)) };
    const turn = await rt.send('again');
    await within(atRelease, 10_000, 'the turn ends and its settle reaches the lease release');
    const rewrite = rt.tw.compact({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
      throughSeq: 2,
      summary: 'The user said hello.',
    });
    open();
    expect((await turn.done).status).toBe('completed');
    const outcome = rewrite.catch((e: unknown) => (isTurnwardenError(e) ? e.code : e));
    expect(await within(outcome, 10_000, 'the compact ends')).toEqual({ removed: 2 });
    const rows = await rt.history();
    expect(rows.map((r) => r.message.role)).toEqual(['system', 'user', 'assistant']);
  });

  it('L8: an abort waits for a rewrite already in flight and never tears it', async () => {
    const gated = gatedStore(openSqliteStore({ path: ':memory:' }));
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, store: gated.store });
    await (await rt.send('hello')).done; // rows 1–2 to compact
    const turn = await rt.send(
      script({ tools: [{ name: 'sleep', args: { ms: 60_000, ignoreAbort: true } }] }),
    );
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const rewrite = rt.tw.compact({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
      throughSeq: 2,
      summary: 'The user said hello.',
    });
    await gated.atGate; // the rewrite is in flight under the turn's lease
    await nextEvent(rt.tw, rt.workstreamId, 'turn_aborted'); // the watchdog commits meanwhile
    await rt.waitForLog('turn end waiting for history rewrite in flight');
    // The abort's repair has not read or written history while the rewrite is in flight.
    const sinceRewrite = gated.calls.slice(gated.calls.lastIndexOf('compactHistory'));
    expect(
      sinceRewrite.filter((c) => c === 'readHistory' || c === 'appendMessages' || c === 'appendMany'),
    ).toEqual([]);
    gated.open();
    expect(await rewrite).toEqual({ removed: 2 });
    const result = await turn.done;
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog', synthesized: 1 });
    const order = gated.calls.slice(gated.calls.lastIndexOf('compactHistory'));
    expect(order.indexOf('compactHistory:done')).toBeLessThan(order.indexOf('readHistory'));
    const rows = await rt.history();
    expect(rows.map((r) => [r.seq, r.message.role])).toEqual([
      [1, 'system'],
      [2, 'user'],
      [3, 'assistant'],
      [4, 'tool'],
    ]);
    expect(openToolCalls(rows)).toEqual([]);
  });

  it('L8: a declined abort leaves a pending rewrite admissible, during and after the attempt', async () => {
    let release!: () => void;
    let seam!: (info: StallInfo) => void;
    const atSeam = new Promise<StallInfo>((resolve) => {
      seam = resolve;
    });
    rt = await startRuntime({
      watchdog: FAST_WATCHDOG,
      hooks: {
        beforeCommit: (info) => {
          seam(info);
          return new Promise<void>((resolve) => {
            release = resolve;
          });
        },
      },
    });
    await (await rt.send('hello')).done;
    await (await rt.send('again')).done;
    const turn = await rt.send(script({ sleep: 600 }, { text: 'still here' }));
    const info = await atSeam; // the abort attempt is parked between sample and commit
    expect(
      await rt.tw.compact({
        tenantId: 'tenant-a',
        principal: 'user-a',
        workstreamId: rt.workstreamId,
        throughSeq: 2,
        summary: 'first exchange',
      }),
    ).toEqual({
      removed: 2,
    });
    new SlotStamp(testControls(rt.tw).clockBuffer, info.slot).touch(5); // the turn resumes: the abort will decline
    release();
    await nextEvent(rt.tw, rt.workstreamId, 'watchdog_declined');
    expect(
      await rt.tw.compact({
        tenantId: 'tenant-a',
        principal: 'user-a',
        workstreamId: rt.workstreamId,
        throughSeq: 3,
        summary: 'two exchanges',
      }),
    ).toEqual({
      removed: 3,
    });
    expect((await turn.done).status).toBe('completed');
    expect(rt.types()).not.toContain('turn_aborted');
    const rows = await rt.history();
    expect(rows.map((r) => r.message.role)).toEqual(['system', 'user', 'assistant']);
    expect(rows[0]!.message.content).toBe('two exchanges');
  });

  it('L8: only a committed abort revokes a rewrite that has not started; the idle workstream admits it again', async () => {
    rt = await startRuntime({ watchdog: FAST_WATCHDOG });
    await (await rt.send('hello')).done;
    const turn = await rt.send(script({ tools: [{ name: 'wedge', args: {} }] }));
    await nextEvent(rt.tw, rt.workstreamId, 'turn_aborted');
    await expectLateCompactRefused(rt);
    await turn.done;
    expect(
      await rt.tw.compact({
        tenantId: 'tenant-a',
        principal: 'user-a',
        workstreamId: rt.workstreamId,
        throughSeq: 2,
        summary: 'hello exchange',
      }),
    ).toEqual({
      removed: 2,
    });
  });

  it('L8: a fence the watchdog’s own thread set, before its report reached the supervisor, revokes a rewrite that has not started', async () => {
    // Nothing polls here (manualWatchdog): the fence below stands for the thread's CAS, whose
    // report — the turn's abort record — has not arrived.
    rt = await startRuntime({ manualWatchdog: true });
    await (await rt.send('hello')).done;
    const controls = testControls(rt.tw);
    const words = new Int32Array(controls.clockBuffer);
    // A tool that stamps nothing until the test opens its gate: the worker cannot meet the fence,
    // unwind and end the turn before the compaction is asked for, however busy the machine.
    const silent = gate();
    const turn = await rt.send(
      script({ tools: [{ name: 'gated', args: { ...silent.args, silent: true } }] }),
    );
    await silent.waiting;
    const slot = controls.turnSlot('tenant-a', rt.workstreamId);
    if (slot === undefined) throw new Error('the turn holds no clock slot while its tool runs');
    Atomics.or(words, 16 + slot * 16, 1 << 31);
    await expectLateCompactRefused(rt);
    // The worker's next stamp — the tool's end — finds the fence and it unwinds.
    silent.open();
    expect((await turn.done).status).not.toBe('completed');
    silent.close();
  });

  it('C6: a force cancel never waits on a history rewrite in flight: it returns once the abort is signalled, and the turn ends after the rewrite', async () => {
    const gated = gatedStore(openSqliteStore({ path: ':memory:' }));
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, store: gated.store });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    await (await rt.send('hello')).done; // rows 1–2 to compact
    const turn = await rt.send(
      script({ tools: [{ name: 'sleep', args: { ms: 60_000, ignoreAbort: true } }] }),
    );
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const rewrite = rt.tw.compact({ ...ref, throughSeq: 2, summary: 'The user said hello.' });
    await gated.atGate; // the rewrite is in flight under the turn's lease and cannot finish yet
    let turnEnded = false;
    void turn.done.then(() => {
      turnEnded = true;
    });
    const ofTurn = () => rt!.events.filter((e) => e.generation === turn.generation).map((e) => e.type);
    try {
      // The cancel settles while the rewrite is still held: it did not wait for it. Once the
      // abort is announced, the call has nothing left to wait for but its own continuation.
      const aborted = nextEvent(rt.tw, rt.workstreamId, 'turn_aborted');
      let outcome: boolean | 'pending' = 'pending';
      void rt.tw.cancel(ref).then((done) => {
        outcome = done;
      });
      await within(aborted, 10_000, 'the cancel commits its abort');
      await new Promise((resolve) => setImmediate(resolve));
      expect(outcome).toBe(true);
      expect(turnEnded).toBe(false);
      expect(ofTurn()).toContain('turn_aborted');
      expect(ofTurn()).not.toContain('stream_end');
    } finally {
      // The owner of the rewrite was left running: it completes, then the turn ends, repaired.
      gated.open();
    }
    expect(await rewrite).toEqual({ removed: 2 });
    expect(await turn.done).toMatchObject({ status: 'interrupted', abortReason: 'cancel', synthesized: 1 });
    expect(openToolCalls(await rt.history())).toEqual([]);
  });
});
