/**
 * `history()` a page at a time: pages that tile the history, the handoff on the last page only,
 * exact across pages (E2) — rows made durable between pages are delivered once, a rewrite
 * between pages is told as `history_resync` — the input checks (T5) and tenancy (T2).
 */
import { ErrorCode, type HistoryRow } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import type { TurnwardenEvent } from '../streams/events.js';
import { cursorToken, fromCursor, incarnationDigest } from '../streams/streams.js';
import { refusal } from '../test-support/bounded.js';
import { interceptStore } from '../test-support/intercept.js';
import { startRuntime } from '../test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const caller = { tenantId: 'tenant-a', principal: 'user-a' } as const;
const ref = { ...caller, workstreamId: 'ws-1' } as const;
const seqs = (rows: readonly HistoryRow[]) => rows.map((r) => r.seq);
const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

async function turns(r: Rt, ...messages: string[]) {
  for (const m of messages) await (await r.send(m)).done;
}

/** Subscribes with a handoff; the seqs of the rows announced to it, and every event. */
async function follow(r: Rt, handoff: string) {
  const got: TurnwardenEvent[] = [];
  const off = await r.tw.subscribe({ ...ref, handoff, listener: (e) => got.push(e) });
  const announced = () => got.flatMap((e) => (e.type === 'message' ? [e.data.seq] : []));
  return { got, off, announced };
}

/** A store that records the history reads and ownership checks of ws-1. */
function countingStore() {
  const reads: string[] = [];
  const counted =
    (name: string) =>
    (original: (...a: unknown[]) => unknown, ...args: unknown[]) => {
      if (args[0] === 'tenant-a/ws-1') reads.push(name);
      return original(...args);
    };
  const store: Store = interceptStore(openSqliteStore({ path: ':memory:' }), {
    getWorkstream: counted('getWorkstream'),
    readHistory: counted('readHistory'),
    readHistoryPage: counted('readHistoryPage'),
  });
  return { store, reads };
}

describe('history a page at a time', () => {
  it('pages tile the history; the cursor carries the limit; the page that reaches the end is the last, with the handoff', async () => {
    rt = await startRuntime();
    await turns(rt, 'one', 'two', 'three'); // seqs 1..6
    const whole = await rt.tw.history(ref);
    expect(seqs(whole.rows)).toEqual([1, 2, 3, 4, 5, 6]);

    const p1 = await rt.tw.history({ ...ref, limit: 4 });
    expect(seqs(p1.rows)).toEqual([1, 2, 3, 4]);
    expect(p1.handoff).toBeUndefined();
    expect(p1.nextCursor).toEqual(expect.any(String));
    // The next page keeps the limit of the page that made the cursor.
    const p2 = await rt.tw.history({ ...ref, cursor: p1.nextCursor! });
    expect(seqs(p2.rows)).toEqual([5, 6]);
    expect(p2.nextCursor).toBeUndefined();
    expect(p2.handoff).toEqual(expect.any(String));
    expect([...p1.rows, ...p2.rows]).toEqual(whole.rows);

    // A page may name its own limit; one that ends exactly at the history's end is the last:
    // no empty page after it.
    const q1 = await rt.tw.history({ ...ref, limit: 2 });
    const q2 = await rt.tw.history({ ...ref, cursor: q1.nextCursor!, limit: 4 });
    expect([seqs(q1.rows), seqs(q2.rows)]).toEqual([
      [1, 2],
      [3, 4, 5, 6],
    ]);
    expect(q2.nextCursor).toBeUndefined();
    expect(q2.handoff).toEqual(expect.any(String));
    // Page by page, one row each: every row once, in order.
    const ones: HistoryRow[] = [];
    let cursor: string | undefined;
    for (let i = 0; i < 10; i++) {
      const page = await rt.tw.history({ ...ref, limit: 1, ...(cursor === undefined ? {} : { cursor }) });
      ones.push(...page.rows);
      if (page.nextCursor === undefined) break;
      cursor = page.nextCursor;
    }
    expect(ones).toEqual(whole.rows);
    // The bound itself: the whole history in one page, which is the last.
    const big = await rt.tw.history({ ...ref, limit: 1_000 });
    expect([big.rows, big.nextCursor]).toEqual([whole.rows, undefined]);

    // An empty history: one empty page, the last.
    await rt.tw.createWorkstream({ ...caller, workstreamId: 'empty' });
    const empty = await rt.tw.history({ ...caller, workstreamId: 'empty', limit: 5 });
    expect([empty.rows, empty.nextCursor, typeof empty.handoff]).toEqual([[], undefined, 'string']);
  });

  it('E2: pages read while turns add rows, then the last page’s handoff: every row exactly once, none twice', async () => {
    rt = await startRuntime();
    await turns(rt, 'one', 'two'); // seqs 1..4
    const p1 = await rt.tw.history({ ...ref, limit: 3 });
    expect(seqs(p1.rows)).toEqual([1, 2, 3]);
    await turns(rt, 'three'); // seqs 5, 6: durable and announced between the pages
    const p2 = await rt.tw.history({ ...ref, cursor: p1.nextCursor! });
    expect(seqs(p2.rows)).toEqual([4, 5, 6]);
    expect(p2.nextCursor).toBeUndefined();
    const listener = await follow(rt, p2.handoff!);
    await turns(rt, 'four'); // seqs 7, 8: after the read
    // The pages' rows, then the rows announced to the listener: exactly the history.
    const final = await rt.tw.history(ref);
    expect([...seqs(p1.rows), ...seqs(p2.rows), ...listener.announced()]).toEqual(seqs(final.rows));
    expect(listener.announced()).toEqual([7, 8]);
    expect(listener.got.some((e) => e.type === 'history_resync')).toBe(false);
    listener.off();
  });

  it('E2: a rewrite between two pages reaches the last page’s listener as history_resync: the handoff holds the first page’s position', async () => {
    rt = await startRuntime();
    await turns(rt, 'one', 'two'); // seqs 1..4
    const p1 = await rt.tw.history({ ...ref, limit: 2 });
    expect(p1.rows.map((r) => r.message.content)).toEqual(['one', 'echo: one']);
    // Rows 1, 2 become the summary; 3, 4 are renumbered 2, 3. The next page, after seq 2,
    // reads what is now seq 3: these pages are not one history, and the listener must know.
    await rt.tw.compact({ ...ref, throughSeq: 2, summary: 'The user said one.' });
    const p2 = await rt.tw.history({ ...ref, cursor: p1.nextCursor! });
    expect(p2.rows.map((r) => [r.seq, r.message.content])).toEqual([[3, 'echo: two']]);
    expect(p2.nextCursor).toBeUndefined();
    const listener = await follow(rt, p2.handoff!);
    expect(listener.got).toEqual([
      expect.objectContaining({ type: 'history_resync', data: { reason: 'rewritten' } }),
    ]);
    listener.off();
  });

  it('T5: an unknown field, a limit out of bounds, a malformed or foreign cursor: INVALID_INPUT naming the field, nothing read', async () => {
    const counting = countingStore();
    rt = await startRuntime({ store: counting.store });
    await turns(rt, 'one', 'two');
    await rt.tw.createWorkstream({ ...caller, workstreamId: 'ws-2' });
    const real = (await rt.tw.history({ ...ref, limit: 1 })).nextCursor!;
    const foreign = (await rt.tw.history({ ...caller, workstreamId: 'ws-2', limit: 1 })).nextCursor;
    expect(foreign).toBeUndefined(); // ws-2 is empty: its only page is the last
    const ofWs2 = cursorToken('tenant-a/ws-2', { position: 0, afterSeq: 1, limit: 1, incarnation: 'x' });
    const fields = { w: 'tenant-a/ws-1', p: 0, s: 1, n: 2, i: 'x' };
    const bad: [object, string][] = [
      [{ offset: 1 }, 'offset'],
      [{ limit: 0 }, 'limit'],
      [{ limit: 1_001 }, 'limit'],
      [{ limit: 2.5 }, 'limit'],
      [{ limit: '5' }, 'limit'],
      [{ limit: 0, cursor: real }, 'limit'],
      [{ cursor: 'not a cursor' }, 'cursor'],
      [{ cursor: '' }, 'cursor'],
      [{ cursor: 'x'.repeat(513) }, 'cursor'],
      [{ cursor: 42 }, 'cursor'],
      [{ cursor: b64([1, 2]) }, 'cursor'],
      [{ cursor: b64({ w: 'ws-1' }) }, 'cursor'],
      [{ cursor: b64({ ...fields, n: 1_001 }) }, 'cursor'],
      [{ cursor: b64({ ...fields, n: 0 }) }, 'cursor'],
      [{ cursor: b64({ ...fields, s: -1 }) }, 'cursor'],
      [{ cursor: b64({ ...fields, p: 1.5 }) }, 'cursor'],
      [{ cursor: b64({ ...fields, i: '' }) }, 'cursor'],
      [{ cursor: ofWs2 }, 'cursor'],
    ];
    counting.reads.length = 0;
    for (const [extra, field] of bad) {
      const e = await refusal(rt.tw.history({ ...ref, ...extra } as never));
      expect([extra, e.code, e.details]).toEqual([extra, ErrorCode.INVALID_INPUT, { field }]);
    }
    expect(counting.reads).toEqual([]);
    // The well-formed ones are read: the check is not refusing everything.
    expect(fromCursor(b64(fields), 'tenant-a/ws-1')).toEqual({
      position: 0,
      afterSeq: 1,
      limit: 2,
      incarnation: 'x',
    });
    expect(seqs((await rt.tw.history({ ...ref, cursor: real })).rows)).toEqual([2]);
    expect(counting.reads).toEqual(['getWorkstream', 'readHistoryPage']);
  });

  it('D1: a cursor read before the workstream was deleted and created again does not read the new one', async () => {
    rt = await startRuntime();
    await turns(rt, 'one');
    const { incarnation } = await rt.tw.getWorkstream(ref);
    const p1 = await rt.tw.history({ ...ref, limit: 1 });
    await rt.tw.deleteWorkstream({ ...ref, incarnation });
    const again = await rt.tw.createWorkstream(ref);
    await turns(rt, 'new');
    const e = await refusal(rt.tw.history({ ...ref, cursor: p1.nextCursor! }));
    expect([e.code, e.details]).toEqual([ErrorCode.INVALID_INPUT, { field: 'cursor' }]);
    // A cursor of the new incarnation reads on.
    const n1 = await rt.tw.history({ ...ref, limit: 1 });
    expect(fromCursor(n1.nextCursor!, 'tenant-a/ws-1').incarnation).toBe(
      incarnationDigest(again.incarnation),
    );
    const n2 = await rt.tw.history({ ...ref, cursor: n1.nextCursor! });
    expect(n2.rows.map((r) => r.message.content)).toEqual(['echo: new']);
  });

  it('T2: another tenant’s cursor on the caller’s own workstream is refused, and shows none of its rows', async () => {
    rt = await startRuntime();
    await turns(rt, 'secret', 'more');
    const theirs = (await rt.tw.history({ ...ref, limit: 1 })).nextCursor!;
    const other = { tenantId: 'tenant-b', principal: 'user-b', workstreamId: 'ws-b' } as const;
    await rt.tw.createWorkstream(other);
    const e = await refusal(rt.tw.history({ ...other, cursor: theirs }));
    expect([e.code, e.details]).toEqual([ErrorCode.INVALID_INPUT, { field: 'cursor' }]);
    expect(e.message).toBe('cursor was returned by the history of another workstream');
    // The owner's id names another workstream in the other tenant's hands — its own ws-1 (T2):
    // the cursor is refused the same way, whether that workstream exists or not.
    for (const exists of [false, true]) {
      if (exists) await rt.tw.createWorkstream({ ...other, workstreamId: 'ws-1' });
      const same = await refusal(rt.tw.history({ ...other, workstreamId: 'ws-1', cursor: theirs }));
      expect([exists, same.code, same.message]).toEqual([
        exists,
        ErrorCode.INVALID_INPUT,
        'cursor was returned by the history of another workstream',
      ]);
    }
  });
});
