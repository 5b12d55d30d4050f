/**
 * T4, the admission queue's bookkeeping on its own: the wait statistics (an empty ring, unsorted
 * waits, the ring's bound), what a refusal says, a waiter leaving the middle of its tenant's
 * queue or leaving twice (deadline, then its own failure), the rotation skipping a tenant at its
 * limit, and the signal's listener gone once the wait ends. Time and timers are injected.
 */
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { Timers } from '../liveness/timers.js';
import { Admission, type AdmissionLimits, type Permit } from './admission.js';

function setup(limits: Partial<AdmissionLimits> = {}, options: { defaultClock?: boolean } = {}) {
  let t = 0;
  const pending: { ms: number; fn: () => void }[] = [];
  const timers: Timers = {
    every: () => () => {},
    after(ms, fn) {
      const timer = { ms, fn };
      pending.push(timer);
      return () => {
        const at = pending.indexOf(timer);
        if (at >= 0) pending.splice(at, 1);
      };
    },
  };
  const waited: [string, number][] = [];
  const all = {
    maxActive: 1,
    maxActivePerTenant: 1,
    maxWaiting: 5_000,
    maxWaitingPerTenant: 5_000,
    ...limits,
  };
  const admission = options.defaultClock
    ? new Admission(all, timers)
    : new Admission(
        all,
        timers,
        () => t,
        (tenant, ms) => void waited.push([tenant, ms]),
      );
  return {
    admission,
    waited,
    at: (ms: number) => {
      t = ms;
    },
    expireFirst: () => pending.shift()?.fn(),
  };
}
const settle = () => new Promise<void>((r) => setImmediate(r));

async function outcome<T>(
  p: Promise<T>,
): Promise<{ ok: T } | { err: { code?: string; message?: string } } | 'waiting'> {
  const waiting = Symbol();
  const r = await Promise.race([
    p.then(
      (ok) => ({ ok }),
      (err) => ({ err }),
    ),
    settle().then(() => waiting),
  ]);
  return r === waiting ? 'waiting' : (r as { ok: T } | { err: { code?: string } });
}

describe('T4: admission bookkeeping', () => {
  it('a tenant whose turns all ended leaves no entry behind, however many tenants came and went', () => {
    const { admission } = setup({ maxActive: 100, maxActivePerTenant: 2 });
    const permits: Permit[] = [];
    for (let i = 0; i < 50; i++) {
      for (let j = 0; j < 2; j++) permits.push(admission.tryAcquire(`tenant-${i}`)!);
    }
    expect(admission.heldTenants()).toBe(50);
    expect(admission.activeFor('tenant-7')).toBe(2);
    permits[14]!.release();
    expect(admission.activeFor('tenant-7')).toBe(1);
    expect(admission.heldTenants()).toBe(50);
    for (const p of permits) p.release();
    expect(admission.heldTenants()).toBe(0);
    expect(admission.stats().active).toBe(0);
  });

  it('stats: no wait yet is all zeros; waits are ranked whatever order they came in', async () => {
    const { admission, at, waited } = setup();
    expect(admission.stats().waitMs).toEqual({ p50: 0, p99: 0, max: 0 });
    let held = admission.tryAcquire('h')!;
    // Three waiters, admitted after 300, 100 and 200 ms of waiting.
    at(0);
    const a = admission.acquire('a', { maxWaitMs: 60_000 });
    at(200);
    const b = admission.acquire('b', { maxWaitMs: 60_000 });
    at(100);
    const c = admission.acquire('c', { maxWaitMs: 60_000 });
    at(300);
    held.release();
    held = await a;
    held.release();
    held = await b;
    held.release();
    await c;
    expect(waited).toEqual([
      ['a', 300],
      ['b', 100],
      ['c', 200],
    ]);
    expect(admission.stats().waitMs).toEqual({ p50: 200, p99: 300, max: 300 });
  });

  it('stats keep the last 1,024 waits: an old long wait leaves the ranking', async () => {
    const { admission, at } = setup();
    let held = admission.tryAcquire('h')!;
    let now = 0;
    const waitFor = async (ms: number) => {
      at(now);
      const next = admission.acquire('a', { maxWaitMs: 3_600_000 });
      now += ms;
      at(now);
      held.release();
      held = await next;
    };
    await waitFor(50_000);
    for (let i = 0; i < 1_023; i++) await waitFor(10);
    expect(admission.stats().waitMs.max).toBe(50_000);
    await waitFor(10);
    expect(admission.stats()).toMatchObject({
      admittedAfterWait: 1_025,
      waitMs: { p50: 10, p99: 10, max: 10 },
    });
  });

  it('without a clock of its own it measures waits on the monotonic clock', async () => {
    const { admission } = setup({}, { defaultClock: true });
    const held = admission.tryAcquire('h')!;
    const next = admission.acquire('a', { maxWaitMs: 60_000 });
    held.release();
    await next;
    const { max } = admission.stats().waitMs;
    expect(Number.isFinite(max) && max >= 0).toBe(true);
  });

  it('what each refusal says', async () => {
    const { admission, expireFirst } = setup({ maxWaiting: 3, maxWaitingPerTenant: 2 });
    admission.tryAcquire('h');
    void admission.acquire('a', { maxWaitMs: 1_000 }).catch(() => {});
    void admission.acquire('a', { maxWaitMs: 1_000 }).catch(() => {});
    expect(await outcome(admission.acquire('a', { maxWaitMs: 1_000 }))).toEqual({
      err: expect.objectContaining({
        code: 'CAPACITY_EXHAUSTED',
        message:
          '2 sends of tenant a already wait for a session worker (admission.maxWaitingPerTenant); retry later',
      }),
    });
    const b = admission.acquire('b', { maxWaitMs: 1_000 });
    expect(await outcome(admission.acquire('c', { maxWaitMs: 1_000 }))).toEqual({
      err: expect.objectContaining({
        message: '3 sends already wait for a session worker (admission.maxWaiting); retry later',
      }),
    });
    expireFirst();
    expireFirst();
    expireFirst();
    expect(await outcome(b)).toEqual({
      err: expect.objectContaining({
        message: 'no session worker became free for tenant b within 1000 ms; retry later',
      }),
    });
    const aborted = new AbortController();
    const withdrawn = admission.acquire('d', { maxWaitMs: 1_000, signal: aborted.signal });
    aborted.abort();
    expect(await outcome(withdrawn)).toEqual({
      err: expect.objectContaining({
        code: 'TURN_ABORTED',
        message:
          'the send was withdrawn by its signal while it waited for a session worker; nothing was written',
      }),
    });
    admission.rejectAll(() => new Error('x'));
    expect(await outcome(admission.acquire('e', { maxWaitMs: 1_000 }))).toEqual({
      err: expect.objectContaining({ code: 'SHUTTING_DOWN', message: 'turnwarden is shutting down' }),
    });
  });

  it('a waiter leaving from the middle of its queue leaves the others in order; one whose deadline ran out leaves once', async () => {
    const { admission, expireFirst } = setup();
    let held: Permit = admission.tryAcquire('h')!;
    const signals = [new AbortController(), new AbortController(), new AbortController()];
    const waits = signals.map((c) => admission.acquire('a', { maxWaitMs: 1_000, signal: c.signal }));
    signals[1]!.abort();
    expect(await outcome(waits[1]!)).toMatchObject({ err: { code: 'TURN_ABORTED' } });
    expect(admission.stats()).toMatchObject({ waiting: 2, waitingTenants: 1 });
    // The first one's deadline runs out: it leaves, and only it.
    expireFirst();
    expect(await outcome(waits[0]!)).toMatchObject({ err: { code: 'CAPACITY_EXHAUSTED' } });
    expect(admission.stats()).toMatchObject({ waiting: 1, waitingTenants: 1, expired: 1 });
    held.release();
    held = (await outcome(waits[2]!)) as never;
    expect(held).toMatchObject({ ok: { tenantId: 'a' } });
    expect(admission.stats()).toMatchObject({ waiting: 0, waitingTenants: 0 });
    // Granted or not, no wait leaves its listener on the signal.
    for (const c of signals) expect(getEventListeners(c.signal, 'abort')).toHaveLength(0);
  });

  it('the rotation skips a tenant at its own limit, and a tenant whose queue emptied leaves it', async () => {
    const { admission } = setup({ maxActive: 3, maxActivePerTenant: 1 });
    const aHeld = admission.tryAcquire('a')!;
    const bHeld = admission.tryAcquire('b')!;
    admission.tryAcquire('c');
    const aWaits = admission.acquire('a', { maxWaitMs: 1_000 });
    const bWaits = admission.acquire('b', { maxWaitMs: 1_000 });
    // b frees a permit: a waits first, but holds its one permit already — b's waiter goes.
    bHeld.release();
    expect(await outcome(bWaits)).toMatchObject({ ok: { tenantId: 'b' } });
    expect(await outcome(aWaits)).toBe('waiting');
    expect(admission.stats()).toMatchObject({ active: 3, waiting: 1, waitingTenants: 1 });
    expect([admission.activeFor('a'), admission.activeFor('b'), admission.waitingFor('a')]).toEqual([
      1, 1, 1,
    ]);
    aHeld.release();
    expect(await outcome(aWaits)).toMatchObject({ ok: { tenantId: 'a' } });
    expect(admission.stats()).toMatchObject({ waiting: 0, waitingTenants: 0 });
  });
});
