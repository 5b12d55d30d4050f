/**
 * The event hub on its own (events.ts), no runtime: which replay rings it keeps in memory and
 * for how long (E3 — the idle ones, least recently active first, beyond `maxIdleStreams`),
 * `ws_closed` told exactly once to a listener that registers after it however it reconnects
 * (D6, E1, E2), a handoff listener's filter up to a `history_resync` (E2), and a listener that
 * throws harming no other.
 */
import { describe, expect, it } from 'vitest';
import { EventHub, type StartAt, type TurnwardenEvent } from './events.js';

function hub(limits: { maxIdleStreams?: number; replayLimit?: number } = {}) {
  const warnings: { fields: Record<string, unknown>; msg: string }[] = [];
  const logger = {
    warn: (fields: Record<string, unknown>, msg: string) => void warnings.push({ fields, msg }),
  };
  return { h: new EventHub(logger as never, limits), warnings };
}
const message = (seq: number) =>
  ({ seq, commitKey: `k${seq}`, message: { role: 'user', content: `m${seq}` } }) as never;

function listen(h: EventHub, workstreamId: string, from?: StartAt) {
  const got: TurnwardenEvent[] = [];
  const off = h.subscribe(workstreamId, (e) => void got.push(e), from);
  return { got, off, types: () => got.map((e) => e.type) };
}

/** Whether the hub still holds the workstream's ring: a reconnect after its first event replays. */
function kept(h: EventHub, workstreamId: string, firstId: number): boolean {
  const l = listen(h, workstreamId, { kind: 'after', id: firstId - 1 });
  l.off();
  return l.types()[0] !== 'replay_truncated';
}

describe('EventHub: the rings it keeps (E3)', () => {
  it('a stream whose last listener leaves becomes idle and is dropped, least recently active first, beyond maxIdleStreams', () => {
    const { h } = hub({ maxIdleStreams: 1 });
    const w = listen(h, 'w');
    const wFirst = h.emit('w', 'idle', undefined, {} as never).id;
    h.emit('x', 'idle', undefined, {} as never);
    h.emit('y', 'idle', undefined, {} as never); // x is dropped: y is the one idle stream kept
    expect(h.stats().streams).toBe(2);
    expect(h.listenerCount('w')).toBe(1);
    expect(h.listenerCount('x')).toBe(0);
    w.off();
    // w is idle now, the most recently active: y goes.
    expect(h.stats()).toMatchObject({ streams: 1, listeners: 0 });
    expect(kept(h, 'w', wFirst)).toBe(true);
    w.off(); // twice: nothing changes
    expect(h.stats().streams).toBe(1);
  });

  it('a stream with two listeners stays listened to until both leave', () => {
    const { h } = hub({ maxIdleStreams: 0 });
    const a = listen(h, 'w');
    const b = listen(h, 'w');
    h.emit('w', 'idle', undefined, {} as never);
    a.off();
    expect(h.stats()).toMatchObject({ streams: 1, listeners: 1 });
    b.off();
    expect(h.stats()).toMatchObject({ streams: 0, listeners: 0 });
  });

  it('position() of a workstream never seen keeps its stream (a handoff from there replays what follows) and is bounded like the others', () => {
    const { h } = hub({ maxIdleStreams: 2 });
    const position = h.position('w');
    const event = h.emit('w', 'idle', undefined, {} as never);
    const l = listen(h, 'w', { kind: 'handoff', position, lastSeq: 0 });
    expect(l.got).toEqual([event]);
    l.off();
    for (const id of ['a', 'b', 'c', 'd']) h.position(id);
    expect(h.stats().streams).toBe(2);
  });

  it('position() makes no stream more recently active; emitting does', () => {
    const { h } = hub({ maxIdleStreams: 2 });
    const aFirst = h.emit('a', 'idle', undefined, {} as never).id;
    const bFirst = h.emit('b', 'idle', undefined, {} as never).id;
    h.position('a');
    h.emit('c', 'idle', undefined, {} as never); // the least recently active (a) goes, not b
    // (kept() probes by subscribing: b first, which is kept; a probe of a dropped one makes a stream.)
    expect(kept(h, 'b', bFirst)).toBe(true);
    expect(kept(h, 'a', aFirst)).toBe(false);
  });

  it("D4: a workstream created again under a closed one's id gets a fresh stream that ranks as recently active as its events, not where the closed one was", () => {
    const { h } = hub({ maxIdleStreams: 2 });
    h.emit('w', 'idle', undefined, {} as never);
    h.closeWorkstream('w', { reason: 'deleted' });
    h.emit('a', 'idle', undefined, {} as never); // idle order: w (closed), a
    h.reopen('w');
    const wFirst = h.emit('w', 'idle', undefined, {} as never).id; // the fresh w is now the most recent
    h.emit('b', 'idle', undefined, {} as never); // one over the bound: a goes, the least recently active
    expect(kept(h, 'w', wFirst)).toBe(true);
    expect(h.stats().streams).toBe(2);
  });

  it('D6: a closed stream counts as the most recently active idle one, listened to before or not, and is bounded', () => {
    const { h } = hub({ maxIdleStreams: 2 });
    h.emit('a', 'idle', undefined, {} as never);
    h.emit('b', 'idle', undefined, {} as never);
    h.closeWorkstream('a', { reason: 'closed' });
    h.emit('c', 'idle', undefined, {} as never); // b goes: a was closed after it was last active
    expect(listen(h, 'a').types()).toEqual(['ws_closed']);
    // A listened stream, closed: its listeners are gone, it is idle, and it goes in its turn.
    const listened = listen(h, 'l');
    h.closeWorkstream('l', { reason: 'deleted' });
    expect(listened.types()).toEqual(['ws_closed']);
    expect(h.stats()).toMatchObject({ streams: 2, listeners: 0 });
    h.emit('d', 'idle', undefined, {} as never);
    h.emit('e', 'idle', undefined, {} as never);
    expect(listen(h, 'l').types()).toEqual([]);
  });

  it('reopen() replaces a closed stream by a fresh one, and leaves an open one as it is', () => {
    const { h } = hub();
    const first = h.emit('w', 'idle', undefined, {} as never);
    h.reopen('w');
    expect(listen(h, 'w', { kind: 'after', id: first.id - 1 }).got).toEqual([first]);
    h.closeWorkstream('w', { reason: 'deleted' });
    h.reopen('w');
    expect(listen(h, 'w').types()).toEqual([]);
    expect(h.listenerCount('w')).toBe(1);
    expect(h.listenerCount('never')).toBe(0);
  });
});

describe('EventHub: ws_closed told once to a late listener (D6)', () => {
  it('live: the notice at once, and the listener is not kept', () => {
    const { h } = hub();
    h.closeWorkstream('w', { reason: 'closed' });
    const l = listen(h, 'w');
    expect(l.types()).toEqual(['ws_closed']);
    expect(h.listenerCount('w')).toBe(0);
  });

  it('E1: a reconnect from before the close gets the notice in the replay, once; from the notice itself, once more', () => {
    const { h } = hub();
    const before = h.emit('w', 'idle', undefined, {} as never);
    const closed = h.closeWorkstream('w', { reason: 'closed' });
    void closed;
    expect(listen(h, 'w', { kind: 'after', id: before.id - 1 }).types()).toEqual(['idle', 'ws_closed']);
    const notice = listen(h, 'w', { kind: 'after', id: before.id }).got[0]!;
    expect(listen(h, 'w', { kind: 'after', id: notice.id }).types()).toEqual(['ws_closed']);
  });

  it('E1: a reconnect the ring no longer reaches: replay_truncated, then the notice', () => {
    const { h } = hub({ replayLimit: 1 });
    const first = h.emit('w', 'idle', undefined, {} as never);
    h.emit('w', 'idle', undefined, {} as never);
    h.closeWorkstream('w', { reason: 'closed' });
    expect(listen(h, 'w', { kind: 'after', id: first.id - 1 }).types()).toEqual([
      'replay_truncated',
      'ws_closed',
    ]);
  });

  it('E2: a handoff from before the close gets the notice once', () => {
    const { h } = hub();
    const position = h.position('w');
    h.closeWorkstream('w', { reason: 'closed' });
    expect(listen(h, 'w', { kind: 'handoff', position, lastSeq: 0 }).types()).toEqual(['ws_closed']);
  });
});

describe('EventHub: listeners', () => {
  it('E2: a handoff listener is not told of the rows its read returned — until a history_resync', () => {
    const { h } = hub();
    const position = h.position('w');
    const l = listen(h, 'w', { kind: 'handoff', position, lastSeq: 2 });
    for (const seq of [2, 3]) h.emit('w', 'message', undefined, message(seq));
    h.emit('w', 'history_resync', undefined, { reason: 'rewritten' });
    h.emit('w', 'message', undefined, message(1));
    expect(l.got.map((e) => [e.type, (e.data as { seq?: number }).seq])).toEqual([
      ['message', 3],
      ['history_resync', undefined],
      ['message', 1],
    ]);
    // A live listener hears every row.
    const live = listen(h, 'w');
    h.emit('w', 'message', undefined, message(1));
    expect(live.types()).toEqual(['message']);
  });

  it('a listener that throws is logged and harms no other listener', () => {
    const { h, warnings } = hub();
    listen(h, 'w');
    h.subscribe('w', () => {
      throw new Error('listener bug');
    });
    const other = listen(h, 'w');
    const event = h.emit('w', 'idle', undefined, {} as never);
    expect(other.got).toEqual([event]);
    expect(warnings).toEqual([
      {
        fields: expect.objectContaining({ workstreamId: 'w', type: 'idle', err: expect.any(Error) }),
        msg: 'event listener threw',
      },
    ]);
  });
});
