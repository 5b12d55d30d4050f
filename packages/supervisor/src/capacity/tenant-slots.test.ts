/** T4 across hosts: where a send over its tenant's bound on all the hosts waits (tenant-slots.ts). */
import { ErrorCode, errors } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import type { Timers } from '../liveness/timers.js';
import { TenantSlots } from './tenant-slots.js';

/** Timers the test fires by hand. */
function manualTimers() {
  const pending = new Map<number, { ms: number; fn: () => void }>();
  let n = 0;
  const timers: Timers = {
    every: () => () => {},
    after: (ms, fn) => {
      const id = ++n;
      pending.set(id, { ms, fn });
      return () => pending.delete(id);
    },
  };
  const fire = () => {
    const all = [...pending.values()];
    pending.clear();
    for (const t of all) t.fn();
  };
  return { timers, pending, fire };
}

const noPark = () => () => {};
const settled = async (p: Promise<unknown>) =>
  Promise.race([
    p.then(
      () => 'resolved',
      (e: unknown) => e,
    ),
    Promise.resolve().then(() => 'pending'),
  ]);

describe('TenantSlots (T4 across hosts)', () => {
  it('T4: a turn of its own tenant ending wakes a wait; another tenant’s does not', async () => {
    const { timers, pending } = manualTimers();
    const slots = new TenantSlots(timers, 250);
    const a = slots.wait('tenant-a', 10_000, undefined, noPark);
    const b = slots.wait('tenant-b', 10_000, undefined, noPark);
    expect(slots.size).toBe(2);
    slots.freed(['tenant-b']);
    await b;
    expect(await settled(a)).toBe('pending');
    slots.freed(['tenant-a']);
    await a;
    // Its timer and its place are gone with it.
    expect(slots.size).toBe(0);
    expect(pending.size).toBe(0);
  });

  it('T4: a wait lasts at most a lease period, or what remains of the send’s maxWaitMs', async () => {
    const { timers, pending, fire } = manualTimers();
    const slots = new TenantSlots(timers, 250);
    const long = slots.wait('t', 10_000, undefined, noPark);
    const short = slots.wait('t', 40, undefined, noPark);
    expect([...pending.values()].map((t) => t.ms).sort((x, y) => x - y)).toEqual([40, 250]);
    fire();
    await Promise.all([long, short]);
    expect(slots.size).toBe(0);
  });

  it('C7: the send’s signal, a fence and shutdown end a wait with their errors, leaving nothing behind', async () => {
    const { timers, pending } = manualTimers();
    const slots = new TenantSlots(timers, 250);
    const ac = new AbortController();
    const bySignal = slots.wait('t', 10_000, ac.signal, noPark);
    let revoke!: (err: unknown) => void;
    let unparked = 0;
    const byFence = slots.wait('t', 10_000, undefined, (r) => {
      revoke = r;
      return () => void unparked++;
    });
    const byShutdown = slots.wait('u', 10_000, undefined, noPark);
    ac.abort();
    await expect(bySignal).rejects.toMatchObject({ code: ErrorCode.TURN_ABORTED });
    revoke(errors.sendRevoked('fenced', { reason: 'cancel' }));
    await expect(byFence).rejects.toMatchObject({ code: ErrorCode.SEND_REVOKED });
    expect(unparked).toBe(1);
    slots.rejectAll(() => errors.shuttingDown('down'));
    await expect(byShutdown).rejects.toMatchObject({ code: ErrorCode.SHUTTING_DOWN });
    expect(slots.size).toBe(0);
    expect(pending.size).toBe(0);
    // A signal already aborted ends the wait at once.
    const late = new AbortController();
    late.abort();
    await expect(slots.wait('t', 10_000, late.signal, noPark)).rejects.toMatchObject({
      code: ErrorCode.TURN_ABORTED,
    });
    expect(slots.size).toBe(0);
  });
});
