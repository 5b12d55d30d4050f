/**
 * (Over 300 lines on purpose: the permits, the fair queue and its bounds are one structure —
 * a permit freed is handed to the next waiter in the same step, or fairness breaks.)
 *
 * Fair admission (T4). A turn runs on a permit: at most `pool.maxWorkers` permits are out on the
 * host and `admission.maxActivePerTenant` per tenant. A send that finds none free waits in a
 * bounded queue — FIFO within a tenant, round-robin across tenants — until a permit frees up
 * for its tenant, its signal aborts, its deadline passes or a fence revokes it; one that finds
 * the queue full (`admission.maxWaiting` on the host, `admission.maxWaitingPerTenant` for its
 * tenant) is refused at once with CAPACITY_EXHAUSTED, retryable, with a `retryAfterMs` hint
 * (whole milliseconds from 50 to 60,000).
 *
 * Round-robin: tenants with waiters form a rotation; a freed permit goes to the first tenant in
 * it that is under its own limit, whose head waiter is admitted, and that tenant moves to the
 * back. A tenant that starts waiting joins at the back, so with k tenants waiting it is
 * admitted within k permits freed for tenants under their limit, however many sends the others
 * have queued (the fairness bound the tests assert). Nothing waits while a permit it could take
 * is free: every release dispatches, and a send is admitted at once only when none of its own
 * tenant's sends wait before it.
 */
import { type CapacityReason, errors, type TurnwardenError } from '@turnwarden/protocol';
import type { Timers } from '../liveness/timers.js';

export interface AdmissionLimits {
  /** Permits on the host: `pool.maxWorkers`. */
  readonly maxActive: number;
  readonly maxActivePerTenant: number;
  readonly maxWaiting: number;
  readonly maxWaitingPerTenant: number;
}

/** A turn's right to a worker; `release` is idempotent. */
export interface Permit {
  readonly tenantId: string;
  release(): void;
}

export interface WaitOptions {
  readonly signal?: AbortSignal | undefined;
  /** The longest the send waits, from now. */
  readonly maxWaitMs: number;
  /**
   * Ends the wait from outside (a fence revoking the send, C7): call the function given with the
   * error to reject with. Returns what stops listening.
   */
  readonly revocable?: (revoke: (err: unknown) => void) => () => void;
  /**
   * The send was accepted already (queued behind its workstream's turn, within
   * `limits.maxQueuedSends`): it waits without counting against the waiting bounds again.
   */
  readonly accepted?: boolean;
}

export interface AdmissionStats {
  /** Permits out (turns running or being claimed). */
  readonly active: number;
  /** Sends waiting for a permit. */
  readonly waiting: number;
  /** Tenants with sends waiting. */
  readonly waitingTenants: number;
  /** Sends that had to wait and were then admitted. */
  readonly admittedAfterWait: number;
  /** Refused because the queue (or the tenant's share of it) was full. */
  readonly refusedFull: number;
  /** Ended by their deadline. */
  readonly expired: number;
  /** How long the last (up to 1,024) admitted sends that had to wait waited, in ms. */
  readonly waitMs: { readonly p50: number; readonly p99: number; readonly max: number };
}

interface Waiter {
  readonly tenantId: string;
  readonly since: number;
  grant(permit: Permit): void;
  fail(err: unknown): void;
}

/** Time a permit was held, smoothed: the base of the retry hint. */
const HOLD_SMOOTHING = 0.2;
const WAIT_SAMPLES = 1_024;

function quantiles(xs: readonly number[]): AdmissionStats['waitMs'] {
  if (xs.length === 0) return { p50: 0, p99: 0, max: 0 };
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!;
  return { p50: at(0.5), p99: at(0.99), max: s.at(-1)! };
}
const MIN_RETRY_MS = 50;
const MAX_RETRY_MS = 60_000;

/** A retry hint: whole milliseconds, at least MIN_RETRY_MS, at most MAX_RETRY_MS. */
function retryHint(ms: number): number {
  return Math.round(Math.min(MAX_RETRY_MS, Math.max(MIN_RETRY_MS, ms)));
}

export class Admission {
  private active = 0;
  private readonly activeBy = new Map<string, number>();
  /** Waiters per tenant, FIFO; a tenant's key order in the map is the rotation. */
  private readonly queues = new Map<string, Waiter[]>();
  private waitingCount = 0;
  private closed = false;
  private holdMs = 1_000;
  private admittedAfterWait = 0;
  private refusedFull = 0;
  private expired = 0;
  /** The waits of the last admitted sends that waited (a ring). */
  private readonly waits: number[] = [];
  private waitsAt = 0;

  constructor(
    private readonly limits: AdmissionLimits,
    private readonly timers: Timers,
    private readonly now: () => number = () => performance.now(),
    /** Told when a send waited, and for how long, once it is admitted. */
    private readonly onWaited?: (tenantId: string, waitedMs: number) => void,
  ) {}

  /** A permit now, if the tenant may take one without overtaking its own waiting sends. */
  tryAcquire(tenantId: string): Permit | undefined {
    if (this.queues.has(tenantId) || !this.free(tenantId)) return undefined;
    return this.grant(tenantId);
  }

  /**
   * Waits for a permit in the tenant's queue. Rejects with CAPACITY_EXHAUSTED when the queue is
   * full (at once) or the wait runs out; TURN_ABORTED when the signal aborts; with what the
   * fence gives when revoked.
   */
  acquire(tenantId: string, options: WaitOptions): Promise<Permit> {
    const now = this.tryAcquire(tenantId);
    if (now) return Promise.resolve(now);
    if (this.closed) return Promise.reject(errors.shuttingDown('turnwarden is shutting down'));
    const queue = this.queues.get(tenantId);
    const full =
      this.waitingCount >= this.limits.maxWaiting || (queue?.length ?? 0) >= this.limits.maxWaitingPerTenant;
    if (full && options.accepted !== true) {
      this.refusedFull++;
      const tenantFull = (queue?.length ?? 0) >= this.limits.maxWaitingPerTenant;
      return Promise.reject(
        this.exhausted(
          tenantId,
          tenantFull ? 'tenant_queue_full' : 'queue_full',
          tenantFull
            ? `${queue?.length ?? 0} sends of tenant ${tenantId} already wait for a session worker (admission.maxWaitingPerTenant); retry later`
            : `${this.waitingCount} sends already wait for a session worker (admission.maxWaiting); retry later`,
        ),
      );
    }
    if (options.signal?.aborted) return Promise.reject(withdrawn());
    return new Promise<Permit>((resolve, reject) => {
      let done = false;
      const finish = () => {
        done = true;
        cancelTimer();
        stopRevoke();
        options.signal?.removeEventListener('abort', onAbort);
      };
      const waiter: Waiter = {
        tenantId,
        since: this.now(),
        grant: (permit) => {
          finish();
          this.admittedAfterWait++;
          const waited = this.now() - waiter.since;
          this.waits[this.waitsAt] = waited;
          this.waitsAt = (this.waitsAt + 1) % WAIT_SAMPLES;
          this.onWaited?.(tenantId, waited);
          resolve(permit);
        },
        fail: (err) => {
          if (done) return;
          finish();
          this.remove(waiter);
          reject(err);
        },
      };
      const onAbort = () => waiter.fail(withdrawn());
      const cancelTimer = this.timers.after(options.maxWaitMs, () => {
        if (done) return;
        this.expired++;
        // Its hint counts the sends waiting besides it, as a new send's would: it leaves first.
        this.remove(waiter);
        waiter.fail(
          this.exhausted(
            tenantId,
            'wait_timeout',
            `no session worker became free for tenant ${tenantId} within ${options.maxWaitMs} ms; retry later`,
          ),
        );
      });
      const stopRevoke = options.revocable?.((err) => waiter.fail(err)) ?? (() => {});
      options.signal?.addEventListener('abort', onAbort, { once: true });
      const q = this.queues.get(tenantId) ?? [];
      q.push(waiter);
      this.queues.set(tenantId, q);
      this.waitingCount++;
    });
  }

  /** Refuses every waiting send and every later one (shutdown). */
  rejectAll(err: () => unknown): void {
    this.closed = true;
    for (const q of [...this.queues.values()]) for (const w of [...q]) w.fail(err());
  }

  stats(): AdmissionStats {
    return {
      active: this.active,
      waiting: this.waitingCount,
      waitingTenants: this.queues.size,
      admittedAfterWait: this.admittedAfterWait,
      refusedFull: this.refusedFull,
      expired: this.expired,
      waitMs: quantiles(this.waits),
    };
  }

  /**
   * The retry hint of a refusal that lifts when one turn ends (a workstream's full send queue,
   * QUEUE_FULL): the smoothed time a turn holds its permit.
   */
  oneTurnRetryAfterMs(): number {
    return retryHint(this.holdMs);
  }

  /** Tenants with a turn admitted now: one entry each, none for a tenant whose turns all ended (leak checks). */
  heldTenants(): number {
    return this.activeBy.size;
  }

  /** Permits the tenant holds. */
  activeFor(tenantId: string): number {
    return this.activeBy.get(tenantId) ?? 0;
  }

  /** Sends of the tenant waiting. */
  waitingFor(tenantId: string): number {
    return this.queues.get(tenantId)?.length ?? 0;
  }

  private free(tenantId: string): boolean {
    return this.active < this.limits.maxActive && this.activeFor(tenantId) < this.limits.maxActivePerTenant;
  }

  private grant(tenantId: string): Permit {
    this.active++;
    this.activeBy.set(tenantId, this.activeFor(tenantId) + 1);
    const since = this.now();
    let released = false;
    return {
      tenantId,
      release: () => {
        if (released) return;
        released = true;
        this.active--;
        const n = this.activeFor(tenantId) - 1;
        if (n > 0) this.activeBy.set(tenantId, n);
        else this.activeBy.delete(tenantId);
        this.holdMs += HOLD_SMOOTHING * (this.now() - since - this.holdMs);
        this.dispatch();
      },
    };
  }

  /** Hands free permits to waiters: round-robin over tenants under their limit. */
  private dispatch(): void {
    while (this.active < this.limits.maxActive) {
      let next: string | undefined;
      for (const tenantId of this.queues.keys()) {
        if (this.activeFor(tenantId) < this.limits.maxActivePerTenant) {
          next = tenantId;
          break;
        }
      }
      if (next === undefined) return;
      const queue = this.queues.get(next)!;
      const waiter = queue.shift()!;
      this.waitingCount--;
      // The tenant goes to the back of the rotation (or leaves it).
      this.queues.delete(next);
      if (queue.length > 0) this.queues.set(next, queue);
      waiter.grant(this.grant(next));
    }
  }

  private remove(waiter: Waiter): void {
    const queue = this.queues.get(waiter.tenantId);
    const at = queue?.indexOf(waiter) ?? -1;
    if (queue === undefined || at < 0) return;
    queue.splice(at, 1);
    this.waitingCount--;
    if (queue.length === 0) this.queues.delete(waiter.tenantId);
  }

  /**
   * CAPACITY_EXHAUSTED with a retry hint: the smoothed time a turn holds its permit, times the
   * sends ahead per permit that could serve this tenant.
   */
  private exhausted(tenantId: string, reason: CapacityReason, message: string): TurnwardenError {
    const perHost = (this.waitingCount + 1) / this.limits.maxActive;
    const perTenant = (this.waitingFor(tenantId) + 1) / this.limits.maxActivePerTenant;
    const retryAfterMs = retryHint(this.holdMs * Math.max(perHost, perTenant));
    return errors.capacityExhausted(message, { reason, retryAfterMs, tenantId });
  }
}

function withdrawn(): TurnwardenError {
  return errors.turnAborted(
    'the send was withdrawn by its signal while it waited for a session worker; nothing was written',
  );
}
