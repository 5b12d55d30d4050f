/**
 * A subscription read as an async iterator (EventIterator, streams.ts) on its own: the bounded
 * buffer and its `stream_overflow` (E3), `ws_closed` ending it, the AbortSignal, `return()`, and
 * the subscription it is attached to — unsubscribed exactly once however it ends, its refusal
 * reaching the reader. Driven by hand: no hub, no time.
 */
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { TurnwardenEvent } from './events.js';
import { EventIterator } from './streams.js';

const ev = (id: number, type = 'token'): TurnwardenEvent =>
  ({ id, workstreamId: 'w', type, data: {} }) as unknown as TurnwardenEvent;
const drain = () => new Promise<void>((r) => setImmediate(r));

function attached(it: EventIterator): { unsubscribed: number } {
  const counter = { unsubscribed: 0 };
  it.attach(
    Promise.resolve(() => {
      counter.unsubscribed++;
    }),
  );
  return counter;
}

async function readAll(it: EventIterator): Promise<TurnwardenEvent[]> {
  const out: TurnwardenEvent[] = [];
  for (;;) {
    const r = await it.next();
    if (r.done) return out;
    out.push(r.value);
  }
}

describe('EventIterator', () => {
  it('delivers what was pushed, in order, to a reader ahead of or behind the events', async () => {
    const it = new EventIterator(10, undefined);
    attached(it);
    it.push(ev(1));
    it.push(ev(2));
    expect((await it.next()).value).toMatchObject({ id: 1 });
    expect((await it.next()).value).toMatchObject({ id: 2 });
    const waiting = it.next();
    it.push(ev(3));
    expect(await waiting).toEqual({ value: ev(3), done: false });
  });

  it('E3: a reader more than `limit` behind gets what was buffered, then stream_overflow, then the end; nothing after', async () => {
    const it = new EventIterator(2, undefined);
    const sub = attached(it);
    for (const id of [1, 2, 3, 4]) it.push(ev(id));
    expect(await readAll(it)).toEqual([
      ev(1),
      ev(2),
      { id: 3, workstreamId: 'w', type: 'stream_overflow', data: { limit: 2 } },
    ]);
    expect(sub.unsubscribed).toBe(1);
  });

  it('D6: ws_closed is delivered and ends the iteration, to a waiting reader and to a buffered one', async () => {
    const waitingReader = new EventIterator(5, undefined);
    const a = attached(waitingReader);
    await drain();
    const next = waitingReader.next();
    waitingReader.push(ev(1, 'ws_closed'));
    expect((await next).value).toMatchObject({ type: 'ws_closed' });
    expect(await waitingReader.next()).toEqual({ value: undefined, done: true });
    expect(a.unsubscribed).toBe(1);

    const behind = new EventIterator(5, undefined);
    attached(behind);
    behind.push(ev(1));
    behind.push(ev(2, 'ws_closed'));
    behind.push(ev(3));
    expect((await readAll(behind)).map((e) => e.id)).toEqual([1, 2]);
  });

  it('an AbortSignal ends it: a waiting reader gets done, the buffer is dropped, the listener removed, the subscription ended once', async () => {
    const controller = new AbortController();
    const it = new EventIterator(5, controller.signal);
    const sub = attached(it);
    await drain();
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    const waiting = it.next();
    controller.abort();
    expect(await waiting).toEqual({ value: undefined, done: true });
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    it.push(ev(1));
    expect(await it.next()).toEqual({ value: undefined, done: true });
    it.end();
    expect(sub.unsubscribed).toBe(1);

    const buffered = new AbortController();
    const other = new EventIterator(5, buffered.signal);
    attached(other);
    other.push(ev(1));
    buffered.abort();
    expect(await other.next()).toEqual({ value: undefined, done: true });
  });

  it('ended another way (return(), a closed workstream) while its signal lives: its abort listener is removed', async () => {
    for (const finish of [
      (it: EventIterator) => it.return(),
      (it: EventIterator) => it.push(ev(1, 'ws_closed')),
    ]) {
      const controller = new AbortController();
      const it = new EventIterator(5, controller.signal);
      attached(it);
      await drain();
      expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
      await finish(it);
      await readAll(it);
      expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    }
  });

  it('a signal already aborted: ended from the start, no listener added, the subscription ended as it arrives', async () => {
    const controller = new AbortController();
    controller.abort();
    const it = new EventIterator(5, controller.signal);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    const sub = attached(it);
    it.push(ev(1));
    expect(await it.next()).toEqual({ value: undefined, done: true });
    expect(sub.unsubscribed).toBe(1);
  });

  it('return() ends it and its subscription; a subscription that arrives after the end is ended at once', async () => {
    const it = new EventIterator(5, undefined);
    const sub = attached(it);
    await drain();
    it.push(ev(1));
    expect(await it.return()).toEqual({ value: undefined, done: true });
    expect(sub.unsubscribed).toBe(1);
    expect(await it.next()).toEqual({ value: undefined, done: true });

    const early = new EventIterator(5, undefined);
    let resolveSub!: (u: () => void) => void;
    let unsubscribed = 0;
    early.attach(
      new Promise((r) => {
        resolveSub = r;
      }),
    );
    await early.return();
    resolveSub(() => void unsubscribed++);
    await drain();
    expect(unsubscribed).toBe(1);
  });

  it("a refused subscription (T2) reaches the reader's first next() and ends it; unread, it is no unhandled rejection", async () => {
    const refused = Object.assign(new Error('not found'), { code: 'WORKSTREAM_NOT_FOUND' });
    const it = new EventIterator(5, undefined);
    it.attach(Promise.reject(refused));
    // Delivered before the refusal was known: never read (T2).
    it.push(ev(1));
    await expect(it.next()).rejects.toBe(refused);
    expect(await it.next()).toEqual({ value: undefined, done: true });

    const unread = new EventIterator(5, undefined);
    unread.attach(Promise.reject(refused));
    await drain(); // the setup's unhandled-rejection check fails the test if it escaped
  });

  it('the first next() waits for the subscription, so events it delivered before resolving are read after it', async () => {
    const it = new EventIterator(5, undefined);
    let resolveSub!: (u: () => void) => void;
    it.attach(
      new Promise((r) => {
        resolveSub = r;
      }),
    );
    it.push(ev(1));
    let read: IteratorResult<TurnwardenEvent> | undefined;
    const next = it.next().then((r) => {
      read = r;
    });
    await drain();
    expect(read).toBeUndefined();
    resolveSub(() => {});
    await next;
    expect(read).toEqual({ value: ev(1), done: false });
    expect(it[Symbol.asyncIterator]()).toBe(it);
  });
});
