/**
 * T4, the admission queue on its own: permits bounded per host and per tenant, round-robin
 * across tenants, a bounded queue, and the three ways a wait ends (signal, deadline, fence).
 * Time and timers are injected: nothing here sleeps.
 */
import { ErrorCode, isTurnwardenError, TurnwardenError } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import type { Timers } from '../liveness/timers.js';
import { Admission, type AdmissionLimits, type Permit } from './admission.js';

/** Timers that fire only when the test says so. */
function manualTimers() {
  const pending = new Set<{ fn: () => void; ms: number }>();
  const timers: Timers = {
    every: () => () => {},
    after(ms, fn) {
      const t = { fn, ms };
      pending.add(t);
      return () => pending.delete(t);
    },
  };
  const fireAll = () => {
    for (const t of [...pending]) {
      pending.delete(t);
      t.fn();
    }
  };
  return { timers, fireAll, pending: () => pending.size };
}

function setup(limits: Partial<AdmissionLimits> = {}) {
  const t = manualTimers();
  const now = 0;
  const admission = new Admission(
    { maxActive: 2, maxActivePerTenant: 2, maxWaiting: 100, maxWaitingPerTenant: 100, ...limits },
    t.timers,
    () => now,
  );
  return { admission, ...t };
}

/** Lets promise callbacks run (grants resolve promises). */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The typed error `p` has rejected with by the next turn of the event loop; fails the test otherwise. */
async function rejection(p: Promise<unknown>): Promise<TurnwardenError> {
  const pending = Symbol('pending');
  const e = await Promise.race([
    p.then(
      () => undefined,
      (err: unknown) => err,
    ),
    settle().then(() => pending),
  ]);
  if (e === pending) expect.fail('the wait was expected to end, and it still waits');
  if (!isTurnwardenError(e)) expect.fail(`expected a TurnwardenError, got ${String(e)}`);
  return e;
}

describe('T4: admission', () => {
  it('T4: permits are bounded per host and per tenant; a freed permit goes to a waiter at once', async () => {
    const { admission } = setup({ maxActive: 3, maxActivePerTenant: 2 });
    const a1 = admission.tryAcquire('a');
    const a2 = admission.tryAcquire('a');
    expect(a1).toBeDefined();
    expect(a2).toBeDefined();
    expect(admission.tryAcquire('a')).toBeUndefined(); // the tenant's limit
    const b1 = admission.tryAcquire('b');
    expect(b1).toBeDefined();
    expect(admission.tryAcquire('b')).toBeUndefined(); // the host's limit
    expect(admission.stats().active).toBe(3);
    const waiting = admission.acquire('b', { maxWaitMs: 1_000 });
    expect(admission.stats().waiting).toBe(1);
    a1!.release();
    a1!.release(); // idempotent: one permit back, not two
    const b2 = await waiting;
    expect(b2.tenantId).toBe('b');
    expect(admission.stats()).toMatchObject({ active: 3, waiting: 0, admittedAfterWait: 1 });
    expect(admission.activeFor('a')).toBe(1);
    expect(admission.activeFor('b')).toBe(2);
  });

  it('T4: one tenant cannot starve another: a tenant that starts waiting behind a flood is admitted within one of the flooder’s grants', async () => {
    const { admission } = setup({ maxActive: 2 });
    const granted: string[] = [];
    const held: Permit[] = [admission.tryAcquire('flood')!, admission.tryAcquire('flood')!];
    const wait = (tenant: string) =>
      void admission.acquire(tenant, { maxWaitMs: 60_000 }).then((p) => {
        granted.push(tenant);
        held.push(p);
      });
    for (let i = 0; i < 50; i++) wait('flood');
    await settle();
    const floodBefore = granted.length;
    wait('quiet');
    // Free one permit at a time, as turns end, until the quiet tenant is in.
    while (!granted.includes('quiet')) {
      held.shift()!.release();
      await settle();
    }
    const floodAfter = granted.slice(floodBefore).filter((t) => t === 'flood').length;
    // The bound: with k other tenants waiting, at most k of their grants come first (here k = 1).
    expect(floodAfter).toBeLessThanOrEqual(1);
    // Two quiet sends in a row alternate with the flood, never wait behind all of it.
    wait('quiet');
    wait('quiet');
    const from = granted.length;
    while (granted.filter((t) => t === 'quiet').length < 3) {
      held.shift()!.release();
      await settle();
    }
    expect(granted.slice(from)).toEqual(['flood', 'quiet', 'flood', 'quiet']);
  });

  it('T4: a tenant at its own limit does not hold up another tenant’s waiters', async () => {
    const { admission } = setup({ maxActive: 3, maxActivePerTenant: 1 });
    const a = admission.tryAcquire('a')!;
    const aWaits = admission.acquire('a', { maxWaitMs: 1_000 });
    // The host has room; tenant a has not: b is admitted at once, a keeps waiting.
    expect(admission.tryAcquire('b')).toBeDefined();
    expect(admission.stats()).toMatchObject({ active: 2, waiting: 1 });
    a.release();
    expect((await aWaits).tenantId).toBe('a');
  });

  it('T4: the queue is bounded on the host and per tenant; a refusal is CAPACITY_EXHAUSTED, retryable, with a retry hint, and queues nothing', async () => {
    const { admission } = setup({ maxActive: 1, maxWaiting: 3, maxWaitingPerTenant: 2 });
    admission.tryAcquire('a');
    void admission.acquire('a', { maxWaitMs: 1_000 });
    void admission.acquire('a', { maxWaitMs: 1_000 });
    const tenantFull = await rejection(admission.acquire('a', { maxWaitMs: 1_000 }));
    expect(tenantFull.code).toBe(ErrorCode.CAPACITY_EXHAUSTED);
    expect(tenantFull.retryable).toBe(true);
    expect(tenantFull.details).toMatchObject({ reason: 'tenant_queue_full', tenantId: 'a' });
    expect(tenantFull.details?.retryAfterMs).toBeGreaterThanOrEqual(50);
    // Another tenant still has room in the host's queue…
    void admission.acquire('b', { maxWaitMs: 1_000 });
    // …until it is full.
    const hostFull = await rejection(admission.acquire('c', { maxWaitMs: 1_000 }));
    expect(hostFull.details).toMatchObject({ reason: 'queue_full', tenantId: 'c' });
    expect(admission.stats()).toMatchObject({ waiting: 3, refusedFull: 2 });
  });

  it('T4: with no waiting allowed, a send without a permit is refused at once', async () => {
    const { admission } = setup({ maxActive: 1, maxWaiting: 0, maxWaitingPerTenant: 0 });
    admission.tryAcquire('a');
    const e = await rejection(admission.acquire('b', { maxWaitMs: 1_000 }));
    expect(e.code).toBe(ErrorCode.CAPACITY_EXHAUSTED);
    expect(admission.stats().waiting).toBe(0);
  });

  it('T4: a caller’s deadline, its signal or a fence ends the wait, and the waiter leaves the queue', async () => {
    const { admission, fireAll, pending } = setup({ maxActive: 1 });
    const held = admission.tryAcquire('a')!;
    // Deadline.
    const late = admission.acquire('a', { maxWaitMs: 500 });
    fireAll();
    const expired = await rejection(late);
    expect(expired.code).toBe(ErrorCode.CAPACITY_EXHAUSTED);
    expect(expired.details).toMatchObject({ reason: 'wait_timeout' });
    // Signal.
    const stop = new AbortController();
    const withdrawn = admission.acquire('a', { maxWaitMs: 60_000, signal: stop.signal });
    stop.abort();
    expect((await rejection(withdrawn)).code).toBe(ErrorCode.TURN_ABORTED);
    // An already aborted signal never queues.
    expect((await rejection(admission.acquire('a', { maxWaitMs: 1, signal: stop.signal }))).code).toBe(
      ErrorCode.TURN_ABORTED,
    );
    // Fence.
    let revoke: ((err: unknown) => void) | undefined;
    let stopped = false;
    const revoked = admission.acquire('a', {
      maxWaitMs: 60_000,
      revocable: (r) => {
        revoke = r;
        return () => {
          stopped = true;
        };
      },
    });
    revoke!(new TurnwardenError(ErrorCode.SEND_REVOKED, 'fenced'));
    expect((await rejection(revoked)).code).toBe(ErrorCode.SEND_REVOKED);
    expect(stopped).toBe(true);
    expect(admission.stats()).toMatchObject({ waiting: 0, waitingTenants: 0, expired: 1 });
    expect(pending()).toBe(0); // every wait's timer was cancelled
    // The permit freed now goes to nobody: the next send takes it at once.
    held.release();
    expect(admission.tryAcquire('b')).toBeDefined();
  });

  it('T4: shutdown refuses every waiting send', async () => {
    const { admission } = setup({ maxActive: 1 });
    admission.tryAcquire('a');
    const waits = [
      admission.acquire('a', { maxWaitMs: 1_000 }),
      admission.acquire('b', { maxWaitMs: 1_000 }),
    ];
    admission.rejectAll(() => new TurnwardenError(ErrorCode.SHUTTING_DOWN, 'down'));
    for (const w of waits) expect((await rejection(w)).code).toBe(ErrorCode.SHUTTING_DOWN);
    expect(admission.stats().waiting).toBe(0);
  });

  it('T4: a send already accepted behind its workstream’s turn waits even when the queue is full; after shutdown nothing waits', async () => {
    const { admission } = setup({ maxActive: 1, maxWaiting: 1, maxWaitingPerTenant: 1 });
    const held = admission.tryAcquire('a')!;
    void admission.acquire('b', { maxWaitMs: 1_000 });
    expect((await rejection(admission.acquire('a', { maxWaitMs: 1_000 }))).code).toBe(
      ErrorCode.CAPACITY_EXHAUSTED,
    );
    // The pump's wait for a queued send is not refused: that send was accepted within its own bound.
    const accepted = admission.acquire('a', { maxWaitMs: 1_000, accepted: true });
    expect(admission.stats().waiting).toBe(2);
    held.release();
    held.release();
    admission.rejectAll(() => new TurnwardenError(ErrorCode.SHUTTING_DOWN, 'down'));
    await accepted.catch(() => undefined);
    expect((await rejection(admission.acquire('c', { maxWaitMs: 1_000 }))).code).toBe(
      ErrorCode.SHUTTING_DOWN,
    );
  });
});
