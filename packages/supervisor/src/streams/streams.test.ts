/**
 * Event streams: replay after a reconnect (E1), the history-to-stream handoff (E2), bounded
 * listeners and memory (E3), terminal quiesce on every registration path (D6).
 */
import { ErrorCode } from '@turnwarden/protocol';
import { openSqliteStore, type SqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { refusal, within } from '../test-support/bounded.js';
import { interceptStore } from '../test-support/intercept.js';
import { nextEvent, script, startRuntime } from '../test-support/runtime.js';
import type { TurnwardenEvent } from './events.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const ref = (r: Rt) => ({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: r.workstreamId });
const withTool = script({ tools: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'done' });

/** Subscribes (replay delivered synchronously, then live) and collects into an array. */
async function collect(r: Rt, from: { lastEventId?: number; handoff?: string } = {}) {
  const got: TurnwardenEvent[] = [];
  const off = await r.tw.subscribe({ ...ref(r), ...from, listener: (e) => got.push(e) });
  return { got, off };
}

/**
 * `inner`, whose next `method` call — once `arm()`ed — runs at once but answers only when
 * `release()` is called: the store did the work, its answer is on its way.
 */
function answerLater(inner: SqliteStore, method: 'appendMany' | 'readHistory') {
  let armed = false;
  let release!: () => void;
  let held!: () => void;
  const atHold = new Promise<void>((resolve) => {
    held = resolve;
  });
  const store = interceptStore(inner, {
    [method]: (original: (...a: unknown[]) => unknown, ...args: unknown[]) => {
      const answer = original(...args);
      if (!armed) return answer;
      armed = false;
      held();
      return new Promise((resolve) => {
        release = () => resolve(answer);
      });
    },
  });
  return {
    store,
    atHold,
    arm: () => {
      armed = true;
    },
    release: () => release(),
  };
}

describe('event streams', () => {
  it('E1: a reconnect with the last id it saw receives exactly what it missed, in order; past the ring, replay_truncated', async () => {
    rt = await startRuntime({ events: { replayLimit: 12 } });
    await (await rt.send(withTool)).done;
    const all = [...rt.events]; // the live listener's view, every event of the turn
    const ids = all.map((e) => e.id);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(ids.length);
    expect(all.length).toBeGreaterThan(12);

    // A client that saw up to the 5th-last event reconnects: the last four, exactly.
    const seen = all.at(-5)!.id;
    const back = await collect(rt, { lastEventId: seen });
    expect(back.got).toEqual(all.slice(-4));
    // Then it follows live.
    await (await rt.send('again')).done;
    expect(back.got.slice(4)).toEqual(rt.events.slice(all.length));

    // One that saw only the first event: the ring (12) no longer reaches back; it is told so.
    const late = await collect(rt, { lastEventId: all[0]!.id });
    expect(late.got[0]).toMatchObject({
      type: 'replay_truncated',
      data: { after: all[0]!.id, firstAvailable: expect.any(Number) },
    });
    expect(late.got).toHaveLength(1);
    const first = late.got[0]!;
    if (first.type !== 'replay_truncated') throw new Error('unreachable');
    expect(first.data.firstAvailable).toBeGreaterThan(all[0]!.id + 1);
    back.off();
    late.off();

    expect(
      (await refusal(rt.tw.subscribe({ ...ref(rt), lastEventId: -1, listener: () => {} }))).details,
    ).toEqual({ field: 'lastEventId' });
  });

  it('E2: a listener registered with a history read’s token continues exactly after its rows: nothing missed, no row twice', async () => {
    rt = await startRuntime();
    await (await rt.send('first')).done;
    const turn = await rt.send(
      script(
        { text: 'calling' },
        { tools: [{ name: 'sleep', args: { ms: 30 } }] },
        { text: 'after the tool' },
      ),
    );
    // Mid-turn: some of its rows are durable, others are not yet.
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const read = await rt.tw.history(ref(rt));
    const follow = await collect(rt, { handoff: read.handoff });
    await turn.done;
    const final = await rt.history();
    const announced = follow.got.flatMap((e) => (e.type === 'message' ? [e.data.seq] : []));
    // The read's rows, then the rows announced to the listener: exactly the final history.
    expect([...read.rows.map((r) => r.seq), ...announced]).toEqual(final.map((r) => r.seq));
    expect(read.rows.length).toBeGreaterThan(0);
    expect(announced.length).toBeGreaterThan(0);
    expect(follow.got.at(-1)?.type).toBe('idle');
    follow.off();

    // A read taken after the turn: nothing left to announce, and the listener just goes on.
    const quiet = await rt.tw.history(ref(rt));
    const next = await collect(rt, { handoff: quiet.handoff });
    expect(next.got).toEqual([]);
    await (await rt.send('third')).done;
    expect(next.got.flatMap((e) => (e.type === 'message' ? [e.data.seq] : []))).toEqual([
      final.length + 1,
      final.length + 2,
    ]);
    next.off();
  });

  it('E2: a row durable but not yet announced when the history is read is delivered once, not twice', async () => {
    const slow = answerLater(openSqliteStore({ path: ':memory:' }), 'appendMany');
    rt = await startRuntime({ store: slow.store });
    await (await rt.send('first')).done;
    slow.arm();
    const sending = rt.send('second'); // its user row: durable, not yet acknowledged
    await slow.atHold;
    const read = await rt.tw.history(ref(rt));
    expect(read.rows.map((r) => r.message.content)).toEqual(['first', 'echo: first', 'second']);
    const follow = await collect(rt, { handoff: read.handoff });
    slow.release();
    await (await sending).done;
    const announced = follow.got.flatMap((e) => (e.type === 'message' ? [e.data.seq] : []));
    expect([...read.rows.map((r) => r.seq), ...announced]).toEqual([1, 2, 3, 4]);
    follow.off();
  });

  it('E2: a row announced while the history read is on its way is not lost: the position is taken before the read', async () => {
    const slow = answerLater(openSqliteStore({ path: ':memory:' }), 'readHistory');
    rt = await startRuntime({ store: slow.store });
    await (await rt.send('first')).done;
    slow.arm();
    const reading = rt.tw.history(ref(rt));
    await slow.atHold;
    const turn = await rt.send('second'); // its user row is durable and announced meanwhile
    slow.release();
    const read = await reading;
    expect(read.rows.map((r) => r.seq)).toEqual([1, 2]);
    const follow = await collect(rt, { handoff: read.handoff });
    await turn.done;
    const announced = follow.got.flatMap((e) => (e.type === 'message' ? [e.data.seq] : []));
    expect([...read.rows.map((r) => r.seq), ...announced]).toEqual([1, 2, 3, 4]);
    follow.off();
  });

  it('E2: a token older than a rewrite, or than the ring, gets history_resync; a foreign or forged token is refused', async () => {
    rt = await startRuntime({ events: { replayLimit: 8 } });
    await (await rt.send('hello')).done;
    const before = await rt.tw.history(ref(rt));
    await rt.tw.compact({ ...ref(rt), throughSeq: 2, summary: 'The user said hello.' });
    const stale = await collect(rt, { handoff: before.handoff });
    expect(stale.got.map((e) => e.type)).toEqual(['history_resync']);
    expect(stale.got[0]).toMatchObject({ data: { reason: 'rewritten' } });
    stale.off();

    const old = await rt.tw.history(ref(rt));
    await (await rt.send(withTool)).done; // more events than the ring keeps
    const truncated = await collect(rt, { handoff: old.handoff });
    expect(truncated.got).toEqual([
      expect.objectContaining({ type: 'history_resync', data: { reason: 'replay_truncated' } }),
    ]);
    truncated.off();

    await rt.tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-2' });
    const other = await rt.tw.history({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-2' });
    for (const handoff of [other.handoff, 'not-a-token', Buffer.from('{"w":"ws-1"}').toString('base64url')]) {
      const e = await refusal(rt.tw.subscribe({ ...ref(rt), handoff, listener: () => {} }));
      expect(e.code).toBe(ErrorCode.INVALID_INPUT);
      expect(e.details).toEqual({ field: 'handoff' });
    }
  });

  it('E3: an iterator that falls behind is closed with stream_overflow; replay rings of idle workstreams are bounded', async () => {
    rt = await startRuntime({ events: { listenerBuffer: 4, maxIdleStreams: 2 } });
    const slow = rt.tw.events(ref(rt));
    // The first next() waits for the ownership check; nothing is read after it.
    const firstRead = slow.next();
    await (await rt.send(withTool)).done;
    const read: TurnwardenEvent[] = [(await firstRead).value as TurnwardenEvent];
    await within(
      (async () => {
        for await (const e of slow) read.push(e);
      })(),
      5_000,
      'the iteration ends after the overflow',
    );
    // The first event went straight to the waiting reader; 4 more were buffered; then overflow.
    expect(read).toHaveLength(6);
    expect(read.slice(0, 5)).toEqual(rt.events.slice(0, 5));
    expect(read.at(-1)).toMatchObject({ type: 'stream_overflow', data: { limit: 4 } });
    // The overflowed listener is gone: only the test's own listener remains.
    expect(rt.tw.stats().events.listeners).toBe(1);

    // Five more workstreams, each with a turn, nobody listening: at most 2 rings stay.
    for (let i = 0; i < 5; i++) {
      const workstreamId = `idle-${i}`;
      await rt.tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId });
      await (await rt.tw.send({ tenantId: 'tenant-a', principal: 'user-a', workstreamId, content: 'hi' }))
        .done;
    }
    const { streams, listeners } = rt.tw.stats().events;
    expect(listeners).toBe(1);
    expect(streams).toBeLessThanOrEqual(1 + 2); // ws-1 (listened to) and two idle ones
  });

  it('E3: an iterator ends when its signal aborts or the reader breaks, and leaves no listener behind', async () => {
    rt = await startRuntime();
    const controller = new AbortController();
    const iterator = rt.tw.events({ ...ref(rt), signal: controller.signal });
    const pending = iterator.next();
    await within(
      (async () => {
        while (rt!.tw.stats().events.listeners < 2) await new Promise((r) => setImmediate(r));
      })(),
      5_000,
      'the iterator subscribes',
    );
    controller.abort();
    expect(await pending).toEqual({ value: undefined, done: true });
    expect(rt.tw.stats().events.listeners).toBe(1);

    const broken = rt.tw.events(ref(rt));
    const turn = await rt.send('hello');
    for await (const e of broken) if (e.type === 'turn_started') break;
    await turn.done;
    expect(rt.tw.stats().events.listeners).toBe(1);

    // Another tenant's workstream: the first read rejects, having received nothing.
    const foreign = rt.tw.events({
      tenantId: 'tenant-b',
      principal: 'user-b',
      workstreamId: rt.workstreamId,
    });
    expect((await refusal(foreign.next())).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect(rt.tw.stats().events.listeners).toBe(1);
  });

  it('D6: after a close every registration path is closed at once — callback, iterator, reconnect — even once the stream left memory', async () => {
    rt = await startRuntime({ events: { maxIdleStreams: 1 } });
    await (await rt.send('hello')).done;
    const before = await collect(rt);
    await rt.tw.close(ref(rt));
    expect(before.got.map((e) => e.type)).toEqual(['state', 'ws_closed']);
    // The test's own listener and `before` were removed by the close.
    expect(rt.tw.stats().events.listeners).toBe(0);
    const closedAt = before.got.at(-1)!.id;

    const paths = async () => {
      const callback = await collect(rt!);
      expect(callback.got).toEqual([
        expect.objectContaining({ type: 'ws_closed', data: { reason: 'closed' } }),
      ]);
      const reconnect = await collect(rt!, { lastEventId: closedAt - 1 });
      expect(reconnect.got.filter((e) => e.type === 'ws_closed')).toHaveLength(1);
      const read: TurnwardenEvent[] = [];
      for await (const e of rt!.tw.events(ref(rt!))) read.push(e);
      expect(read.map((e) => e.type)).toEqual(['ws_closed']);
      expect(rt!.tw.stats().events.listeners).toBe(0);
    };
    // Its stream still in memory (the close is remembered there) …
    await paths();
    // … and dropped from memory by another workstream's activity (the store says closed).
    await rt.tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-2' });
    await (
      await rt.tw.send({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-2', content: 'hi' })
    ).done;
    await paths();
  });
});
