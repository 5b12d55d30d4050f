/**
 * The send queue on its own (send-queue.ts): one ticket order for claims, fences and the calls
 * announced before their ownership check (C7); the bounded FIFO per workstream (T4) with its
 * refusals; and nothing kept once the claims, fences, calls and sends that needed it are gone.
 * No runtime, no time: every promise is observed after the microtask queue drains.
 */
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { ClaimInput } from '../turn/claim.js';
import type { ClaimedTurn } from '../types.js';
import { SendQueue } from './send-queue.js';

const input = (content: string): ClaimInput => ({
  tenantId: 't',
  workstreamId: 'w',
  content,
  principal: 'p',
});
const drain = () => new Promise<void>((r) => setImmediate(r));
const EMPTY = { fences: 0, outstanding: 0, queues: 0, parked: 0, announced: 0 };

/** The state of a promise after the microtasks ran: 'pending', or what it settled to. */
function observe<T>(p: Promise<T>): {
  state: 'pending' | 'resolved' | 'rejected';
  value?: T;
  error?: unknown;
} {
  const o: { state: 'pending' | 'resolved' | 'rejected'; value?: T; error?: unknown } = { state: 'pending' };
  p.then(
    (value) => Object.assign(o, { state: 'resolved', value }),
    (error) => Object.assign(o, { state: 'rejected', error }),
  );
  return o;
}

describe('SendQueue', () => {
  it('C7: tickets come from one counter: claims and fences in the order they were taken', () => {
    const q = new SendQueue(4, () => 0);
    const a = q.capture('w');
    const fence = q.ticket();
    const b = q.capture('x');
    expect([a.ticket, fence, b.ticket]).toEqual([1, 2, 3]);
    expect(q.announce('w').ticket).toBe(4);
  });

  it('C7: a dispatch waits for every call announced after its claim, until each is done — not for one announced before it', async () => {
    const q = new SendQueue(4, () => 0);
    const before = q.announce('w');
    const claim = q.capture('w');
    // Announced before the claim was captured: nothing to wait for (and no await).
    expect(q.announcedAfter(claim)).toBeUndefined();
    const first = q.announce('w');
    const second = q.announce('w');
    q.announce('other'); // another workstream's call: not this claim's business
    const waited = observe(q.announcedAfter(claim)!);
    first.done();
    await drain();
    expect(waited.state).toBe('pending');
    // One of two done: the other is still on its way.
    expect(q.announcedAfter(claim)).toBeInstanceOf(Promise);
    second.done();
    second.done(); // idempotent
    await drain();
    expect(waited.state).toBe('resolved');
    // Every call announced after it is done: no wait at all any more.
    expect(q.announcedAfter(claim)).toBeUndefined();
    before.done();
    expect(q.held().announced).toBe(1); // only 'other' is still on its way
  });

  it('C7: a fence revokes the claims captured before it, not those after; a repeated or older fence does not change its reason', () => {
    const q = new SendQueue(4, () => 0);
    const early = q.capture('w');
    q.fence('w', q.ticket(), 'cancel');
    const late = q.capture('w');
    expect(q.fencedSince(early)).toBe('cancel');
    expect(q.fencedSince(late)).toBeUndefined();
    expect(() => q.check(late)).not.toThrow();
    expect(() => q.check(early)).toThrow(
      expect.objectContaining({
        code: 'SEND_REVOKED',
        details: { reason: 'cancel' },
        message:
          'the send to w did not start: the workstream was cancelled after it was sent; nothing was written',
      }),
    );
    // The same fence again (its ticket repeated), or an older one arriving late: the latest stays.
    const closeTicket = q.ticket();
    q.fence('w', closeTicket, 'close');
    q.fence('w', closeTicket, 'poison');
    q.fence('w', closeTicket - 1, 'gone');
    expect(q.fencedSince(early)).toBe('close');
    expect(q.fencedSince(late)).toBe('close');
    // Another workstream is not fenced.
    expect(q.fencedSince(q.capture('x'))).toBeUndefined();
  });

  it('a fence is kept only while a claim captured before it is outstanding', () => {
    const q = new SendQueue(4, () => 0);
    // No claim outstanding: nothing to revoke later, nothing kept.
    q.fence('w', q.ticket(), 'cancel');
    expect(q.held()).toEqual(EMPTY);
    const a = q.capture('w');
    const b = q.capture('w');
    q.fence('w', q.ticket(), 'close');
    q.settled(a);
    // b was captured before the fence and is still outstanding: the fence stays.
    expect(q.fencedSince(b)).toBe('close');
    expect(q.held()).toMatchObject({ fences: 1, outstanding: 1 });
    q.settled(b);
    expect(q.held()).toEqual(EMPTY);
  });

  it('T4: a full queue refuses with QUEUE_FULL naming the limit and the retry hint; sends leave in FIFO order', async () => {
    const q = new SendQueue(2, () => 1_234);
    const first = observe(q.enqueue(q.capture('w'), input('one'), undefined));
    observe(q.enqueue(q.capture('w'), input('two'), undefined));
    expect(() => q.enqueue(q.capture('w'), input('three'), undefined)).toThrow(
      expect.objectContaining({
        code: 'QUEUE_FULL',
        retryable: true,
        details: { limit: 2, retryAfterMs: 1_234 },
        message: '2 sends already wait on w (limits.maxQueuedSends); retry when its turn ends',
      }),
    );
    // Another workstream has a queue of its own.
    observe(q.enqueue(q.capture('x'), input('x1'), undefined));
    expect([q.depth('w'), q.depth('x'), q.depth('none'), q.total]).toEqual([2, 1, 0, 3]);
    expect(q.peek('w')?.input.content).toBe('one');
    const next = q.shift('w')!;
    expect(next.input.content).toBe('one');
    next.resolve({ turnId: 'turn-1' } as unknown as ClaimedTurn);
    await drain();
    expect(first).toMatchObject({ state: 'resolved', value: { turnId: 'turn-1' } });
    expect(q.shift('w')?.input.content).toBe('two');
    expect(q.shift('w')).toBeUndefined();
    expect(q.shift('none')).toBeUndefined();
    expect(q.peek('w')).toBeUndefined();
    expect([q.depth('w'), q.total]).toEqual([0, 1]);
    expect(q.held().queues).toBe(1); // only x's
  });

  it('a queued send withdrawn by its signal leaves the queue (wherever it stands) with TURN_ABORTED; a shifted one no longer hears its signal', async () => {
    const q = new SendQueue(4, () => 0);
    const signals = [new AbortController(), new AbortController(), new AbortController()];
    const sends = signals.map((c, i) => observe(q.enqueue(q.capture('w'), input(`s${i}`), c.signal)));
    signals[1]!.abort();
    await drain();
    expect(sends[1]).toMatchObject({ state: 'rejected', error: { code: 'TURN_ABORTED' } });
    expect((sends[1]!.error as Error).message).toBe(
      'the send was withdrawn by its signal while it waited for the turn before it',
    );
    expect(q.depth('w')).toBe(2);
    expect(getEventListeners(signals[1]!.signal, 'abort')).toHaveLength(0);
    // Taken off the queue for its turn: its signal is no longer heard.
    expect(q.shift('w')?.input.content).toBe('s0');
    expect(getEventListeners(signals[0]!.signal, 'abort')).toHaveLength(0);
    signals[0]!.abort();
    signals[2]!.abort();
    await drain();
    expect(sends[0]!.state).toBe('pending');
    expect(sends[2]!.state).toBe('rejected');
    expect(q.depth('w')).toBe(0);
    expect(q.held().queues).toBe(0);
  });

  it('C7: a fence revokes the queued and the parked sends captured before it with SEND_REVOKED, and counts them; later ones stay', async () => {
    const q = new SendQueue(4, () => 0);
    const signal = new AbortController().signal;
    const queuedEarly = observe(q.enqueue(q.capture('w'), input('early'), signal));
    const parkedRevokes: unknown[] = [];
    const stopParkedEarly = q.park(q.capture('w'), (e) => parkedRevokes.push(e));
    const fenceTicket = q.ticket();
    const queuedLate = observe(q.enqueue(q.capture('w'), input('late'), undefined));
    q.park(q.capture('w'), (e) => parkedRevokes.push(['late', e]));
    expect(q.fence('w', fenceTicket, 'close')).toBe(2);
    await drain();
    expect(queuedEarly).toMatchObject({
      state: 'rejected',
      error: { code: 'SEND_REVOKED', details: { reason: 'close' } },
    });
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
    expect(parkedRevokes).toEqual([
      expect.objectContaining({ code: 'SEND_REVOKED', details: { reason: 'close' } }),
    ]);
    expect(queuedLate.state).toBe('pending');
    expect(q.depth('w')).toBe(1);
    stopParkedEarly();
    // A fence with nothing before it revokes nothing.
    expect(q.fence('w', 0, 'cancel')).toBe(0);
    expect(q.fence('none', q.ticket(), 'cancel')).toBe(0);
  });

  it('a parked send stops being revocable once its wait ends; the others of its workstream stay revocable', () => {
    const q = new SendQueue(4, () => 0);
    const revoked: string[] = [];
    const stopA = q.park(q.capture('w'), () => revoked.push('a'));
    const stopB = q.park(q.capture('w'), () => revoked.push('b'));
    stopA();
    q.fence('w', q.ticket(), 'gone');
    expect(revoked).toEqual(['b']);
    stopB();
    expect(q.held().parked).toBe(0);
  });

  it('rejectAll refuses every waiting send of every workstream and keeps none (shutdown)', async () => {
    const q = new SendQueue(4, () => 0);
    const signal = new AbortController().signal;
    const sends = [
      observe(q.enqueue(q.capture('w'), input('a'), signal)),
      observe(q.enqueue(q.capture('x'), input('b'), undefined)),
    ];
    const err = new Error('shutting down');
    q.rejectAll(() => err);
    await drain();
    expect(sends.map((s) => [s.state, s.error])).toEqual([
      ['rejected', err],
      ['rejected', err],
    ]);
    expect([q.total, q.depth('w'), q.held().queues]).toEqual([0, 0, 0]);
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
  });
});
