/**
 * T4 across hosts (cluster mode, `admission.maxActivePerTenantInCluster`): the database counts a
 * tenant's turns on every host as their leases are taken (`AcquireLeaseOptions.tenantLimit`), so
 * no host sits on the hot path. A send refused there (`tenant_active`) waits here until a turn of
 * its tenant ends — on this host, or on another (a `freed` notice over the cluster's channel) —
 * or a lease period passes (a notice may be lost), then claims again; its `maxWaitMs`, its signal,
 * a fence (C7) and shutdown end the wait. Tenants are bounded apart: one at its limit never
 * holds another back.
 */
import { errors } from '@turnwarden/protocol';
import type { Timers } from '../liveness/timers.js';

interface Waiter {
  readonly wake: () => void;
  readonly fail: (err: unknown) => void;
}

export class TenantSlots {
  private readonly waiting = new Map<string, Set<Waiter>>();

  constructor(
    private readonly timers: Timers,
    /** The longest one wait lasts before the claim is tried again (`lease.renewMs`). */
    private readonly periodMs: number,
  ) {}

  /**
   * Resolves once a turn of the tenant may have ended (or `periodMs`, or `remainingMs`, passed);
   * rejects on the signal (TURN_ABORTED) or when `revocable`'s revoke is called.
   */
  wait(
    tenantId: string,
    remainingMs: number,
    signal: AbortSignal | undefined,
    revocable: (revoke: (err: unknown) => void) => () => void,
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const set = this.waiting.get(tenantId) ?? new Set<Waiter>();
      this.waiting.set(tenantId, set);
      const done = () => {
        cancel();
        unpark();
        signal?.removeEventListener('abort', onAbort);
        set.delete(waiter);
        if (set.size === 0 && this.waiting.get(tenantId) === set) this.waiting.delete(tenantId);
      };
      const waiter: Waiter = {
        wake: () => {
          done();
          resolve();
        },
        fail: (err) => {
          done();
          reject(err);
        },
      };
      const onAbort = () =>
        waiter.fail(
          errors.turnAborted('the send was aborted by its signal while it waited for its tenant’s turns'),
        );
      const cancel = this.timers.after(Math.max(1, Math.min(this.periodMs, remainingMs)), waiter.wake);
      const unpark = revocable(waiter.fail);
      set.add(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (signal?.aborted) onAbort();
    });
  }

  /** Turns of these tenants ended: their waiting sends claim again. */
  freed(tenantIds: Iterable<string>): void {
    for (const t of tenantIds) for (const w of [...(this.waiting.get(t) ?? [])]) w.wake();
  }

  /** Shutdown: every wait ends with `err`. */
  rejectAll(err: () => unknown): void {
    for (const set of [...this.waiting.values()]) for (const w of [...set]) w.fail(err());
  }

  /** Sends waiting, per tenant (leak checks, stats). */
  get size(): number {
    let n = 0;
    for (const set of this.waiting.values()) n += set.size;
    return n;
  }
}
