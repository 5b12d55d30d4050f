/**
 * A turn's lease renewal: the lease is refreshed every `lease.renewMs` until the turn's abort
 * commits or its end begins. Renewal is never progress — it does not touch the clock (L2) — and
 * it stops the moment an abort commits (L3). A refresh the store refuses is a lost lease: the
 * turn is aborted (`lease_lost`, P6); one that fails (the store is down) is retried at the next
 * period.
 */
import type { Lease, TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { SupervisorConfig } from '../config.js';
import { LogMessage } from '../liveness/reporting.js';
import type { CancelTimer, Timers } from '../liveness/timers.js';
import type { RuntimeCounters } from '../stats.js';

export interface RenewalHost {
  readonly config: Pick<SupervisorConfig, 'lease'>;
  readonly store: Pick<TurnStore, 'refreshLease'>;
  readonly counters: RuntimeCounters;
  readonly holder: string;
  readonly timers: Timers;
}

/** What renewal reads of its turn, and the one thing it can do to it. */
export interface RenewedTurn {
  readonly workstreamId: string;
  readonly lease: Lease;
  readonly log: Logger;
  /** An abort has committed. */
  readonly aborted: unknown;
  /** The turn's end has begun. */
  readonly ending: boolean;
  abort(reason: 'lease_lost'): boolean;
}

export class LeaseRenewal {
  private cancel: CancelTimer | undefined;

  constructor(
    protected readonly host: RenewalHost,
    protected readonly turn: RenewedTurn,
  ) {}

  /** Starts renewing every renewMs until `stop`. */
  start(): void {
    this.cancel = this.host.timers.every(this.host.config.lease.renewMs, () => this.renew());
  }

  stop(): void {
    this.cancel?.();
    this.cancel = undefined;
  }

  /** L3: the abort committed — renewal stops before anything else of the definitive stage. */
  aborted(): void {
    this.stop();
  }

  get running(): boolean {
    return this.cancel !== undefined;
  }

  /** One refresh of the lease. */
  renew(): void {
    const { turn, host } = this;
    if (!this.renewing()) return;
    host.store
      .refreshLease(turn.workstreamId, host.holder, turn.lease.token, host.config.lease.ttlMs)
      .then((ok) => {
        if (!this.renewing()) return;
        if (ok) {
          host.counters.leaseRenewals++;
          return;
        }
        host.counters.leaseLosses++;
        turn.log.error({ token: turn.lease.token }, LogMessage.leaseLost);
        turn.abort('lease_lost');
      })
      .catch((err: unknown) => turn.log.warn({ err }, 'lease renewal failed; will retry'));
  }

  /** L3: the lease is renewed until the abort commits or the turn's end begins, and not after. */
  protected renewing(): boolean {
    return !this.turn.aborted && !this.turn.ending;
  }
}
