/**
 * `rewind(n)`: dropping the last n turns of an idle workstream, a history rewrite that cannot
 * be abandoned once begun — and a force cancel that never waits for it (C6). Counterpart of
 * `test_force_handler_does_not_wait_on_nonabandonable_truncation`.
 */
import { ErrorCode, openToolCalls } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { refusal, within } from './test-support/bounded.js';
import { faultyStore, synthesized } from './test-support/faulty-store.js';
import { gatedStore } from './test-support/gated-store.js';
import { nextEvent, script, startRuntime } from './test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const ref = (r: Rt) => ({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: r.workstreamId });
const contents = async (r: Rt) =>
  (await r.history()).map((row) => `${row.message.role}:${row.message.content}`);

/** Three finished turns: "one", "two" (with a tool call) and "three". */
async function threeTurns(r: Rt): Promise<void> {
  await (await r.send('one')).done;
  await (await r.send(script({ tools: [{ name: 'echo', args: { text: 'x' } }] }))).done;
  await (await r.send('three')).done;
}

/** Settles `p`'s outcome into a variable a test can look at without awaiting it. */
function track<T>(p: Promise<T>): { readonly outcome: T | 'pending' | 'rejected' } {
  const box: { outcome: T | 'pending' | 'rejected' } = { outcome: 'pending' };
  p.then(
    (v) => {
      box.outcome = v;
    },
    () => {
      box.outcome = 'rejected';
    },
  );
  return box;
}

describe('rewind', () => {
  it('drops the last n turns whole; refusals write nothing', async () => {
    rt = await startRuntime();
    await threeTurns(rt);
    const before = await rt.history();
    const secondStart = before.filter((r) => r.message.role === 'user')[1]!.seq;

    // More turns than the history holds, and a history that moved on: refused, nothing dropped.
    const tooMany = await refusal(rt.tw.rewind({ ...ref(rt), turns: 4 }));
    expect(tooMany.code).toBe(ErrorCode.INVALID_INPUT);
    expect(tooMany.details).toMatchObject({ field: 'turns', available: 3 });
    const stale = await refusal(rt.tw.rewind({ ...ref(rt), turns: 1, ifLastSeq: before.length - 1 }));
    expect(stale.code).toBe(ErrorCode.COMMIT_CONFLICT);
    expect(stale.details).toMatchObject({ lastSeq: before.length });
    for (const bad of [0, 1.5, -1, 10_001]) {
      expect((await refusal(rt.tw.rewind({ ...ref(rt), turns: bad }))).code).toBe(ErrorCode.INVALID_INPUT);
    }
    expect(await rt.history()).toEqual(before);

    // Two turns dropped: the tool call goes with its result, the history stays complete (S1).
    expect(await rt.tw.rewind({ ...ref(rt), turns: 2, ifLastSeq: before.length })).toEqual({
      removed: before.length - secondStart + 1,
      lastSeq: secondStart - 1,
    });
    const rows = await rt.history();
    expect(rows).toEqual(before.slice(0, secondStart - 1));
    expect(openToolCalls(rows)).toEqual([]);
    expect(rows.filter((r) => r.message.role === 'user').map((r) => r.message.content)).toEqual(['one']);

    // The workstream goes on after the kept rows.
    await (await rt.send('four')).done;
    expect((await contents(rt)).slice(-2)).toEqual(['user:four', 'assistant:echo: four']);
    expect((await rt.history()).map((r) => r.seq)).toEqual([1, 2, 3, 4]);
  });

  it('is refused while a turn runs (TURN_IN_PROGRESS) and while debt is unrepaired (TOOL_CLEANUP_PENDING)', async () => {
    const faulty = faultyStore();
    rt = await startRuntime({ store: faulty.store });
    await (await rt.send('one')).done;
    const turn = await rt.send(
      script({ tools: [{ name: 'sleep', args: { ms: 60_000, ignoreAbort: true } }] }),
    );
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const running = await refusal(rt.tw.rewind({ ...ref(rt), turns: 1 }));
    expect(running.code).toBe(ErrorCode.TURN_IN_PROGRESS);

    faulty.reject(1, synthesized); // the cancel's repair fails: the session keeps its debt
    await rt.tw.cancel(ref(rt));
    await turn.done;
    const rowsBefore = await rt.history();
    expect(openToolCalls(rowsBefore)).toHaveLength(1);
    const debt = await refusal(rt.tw.rewind({ ...ref(rt), turns: 1 }));
    expect(debt.code).toBe(ErrorCode.TOOL_CLEANUP_PENDING);
    expect(await rt.history()).toEqual(rowsBefore);
  });

  it('C6: a force cancel never waits on a rewind in flight: it returns at once, the rewind completes', async () => {
    const gated = gatedStore(openSqliteStore({ path: ':memory:' }), 'truncateHistory');
    rt = await startRuntime({ store: gated.store });
    await threeTurns(rt);
    const before = await rt.history();
    const rewind = track(rt.tw.rewind({ ...ref(rt), turns: 1 }));
    await gated.atGate; // the rewind's write has begun and cannot finish yet
    let cancelled: boolean | 'pending' | 'rejected' = 'pending';
    try {
      cancelled = await within(rt.tw.cancel(ref(rt)), 5_000, 'the cancel returns while the rewind is held');
      expect(cancelled).toBe(true);
      // The rewind's owner was left running: it has neither finished nor been torn.
      await new Promise((resolve) => setImmediate(resolve));
      expect(rewind.outcome).toBe('pending');
      expect(await rt.history()).toEqual(before);
      expect(
        rt.logged(
          'cancel returns before a history rewrite of the idle workstream; it completes unless it had not begun',
        ),
      ).toHaveLength(1);
    } finally {
      gated.open();
    }
    await within(
      (async () => {
        while (rewind.outcome === 'pending') await new Promise((resolve) => setImmediate(resolve));
      })(),
      10_000,
      'the rewind completes once released',
    );
    const last = before.filter((r) => r.message.role === 'user').at(-1)!;
    expect(rewind.outcome).toEqual({ removed: before.length - last.seq + 1, lastSeq: last.seq - 1 });
    expect(await rt.history()).toEqual(before.slice(0, last.seq - 1));
    // The workstream is usable: a send after the cancel starts a turn.
    await (await rt.send('after')).done;
  });

  it('C6 L8: a cancel before the rewind has begun its write revokes it; nothing is dropped', async () => {
    const gated = gatedStore(openSqliteStore({ path: ':memory:' }), 'readHistory', { armed: false });
    rt = await startRuntime({ store: gated.store });
    await threeTurns(rt);
    const before = await rt.history();
    gated.arm();
    const rewind = rt.tw.rewind({ ...ref(rt), turns: 1 });
    await gated.atGate; // the rewind reads the history it will cut: its write has not begun
    try {
      expect(await within(rt.tw.cancel(ref(rt)), 5_000, 'the cancel returns at once')).toBe(true);
    } finally {
      gated.open();
    }
    const e = await refusal(rewind);
    expect(e.code).toBe(ErrorCode.FENCED);
    expect(e.details).toMatchObject({ reason: 'cancel' });
    expect(gated.calls).not.toContain('truncateHistory');
    expect(await rt.history()).toEqual(before);
  });
});
