/**
 * Crash recovery at start (S7). A session an earlier process left mid-turn is repaired before
 * it serves a turn — but only by whoever holds its lease (P6). When the dead process's lease
 * has not expired yet, the repair is scheduled for the moment it does, instead of waiting for a
 * host to `cancel` it; a send that arrives first repairs it on its own claim.
 */
import { ErrorCode, isTurnwardenError } from '@turnwarden/protocol';
import { stateOf, waitingApproval } from '@turnwarden/session';
import type { AdminStore, TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { CancelTimer, Timers } from '../liveness/timers.js';

/** Tries after a lease expiry this many times (another holder may take the lease meanwhile). */
const MAX_ATTEMPTS = 3;
/** Margin past the lease's expiry, so the store sees it expired. */
const MARGIN_MS = 50;

export interface RecoveryHost {
  readonly store: Pick<TurnStore, 'getLease'> & Pick<AdminStore, 'listWorkstreams'>;
  readonly timers: Timers;
  readonly logger: Logger;
  /** Repairs a session without a running turn if it holds debt; true when it repaired one. */
  repairIfLeft(workstreamId: string): Promise<boolean>;
  /**
   * Several hosts share the store: a session another host holds is its to finish, or — if that
   * host died — the failover sweep's (cluster.ts) once the lease expires. Nothing is scheduled.
   */
  readonly clustered: boolean;
  /** Sessions found waiting for an approval: their timeouts are kept again. */
  readonly approvals?: { waiting(workstreamId: string, nonce: string, expiresAt: number): void };
}

export class Recovery {
  private readonly pending = new Map<string, CancelTimer>();
  private stopped = false;

  constructor(private readonly host: RecoveryHost) {}

  /** Repairs every session left mid-turn whose lease is free; schedules the others. */
  async atStart(): Promise<number> {
    let repaired = 0;
    for (const ws of await this.host.store.listWorkstreams({ status: 'open' })) {
      if (ws.session === undefined || stateOf(ws.session) === 'idle') continue;
      // Waiting for an approval: kept waiting (its timeout is the approvals' to keep).
      const waiting = waitingApproval(ws.session);
      if (waiting !== undefined) {
        this.host.approvals?.waiting(ws.id, waiting.nonce, waiting.expiresAt);
        this.host.logger.info(
          { workstreamId: ws.id, expiresAt: waiting.expiresAt },
          'session waiting for an approval; still waiting, its timeout kept',
        );
        continue;
      }
      if (await this.attempt(ws.id, 1)) repaired++;
    }
    return repaired;
  }

  /** Shutdown: no scheduled repair runs any more. */
  stop(): void {
    this.stopped = true;
    for (const cancel of this.pending.values()) cancel();
    this.pending.clear();
  }

  private async attempt(workstreamId: string, attempt: number): Promise<boolean> {
    try {
      return await this.host.repairIfLeft(workstreamId);
    } catch (err) {
      const leased = isTurnwardenError(err, ErrorCode.LEASED_ELSEWHERE);
      if (leased && this.host.clustered) {
        this.host.logger.debug({ workstreamId }, 'session mid-turn on another host left to it');
        return false;
      }
      if (!leased || attempt >= MAX_ATTEMPTS || this.stopped) {
        this.host.logger.warn({ err, workstreamId }, 'session left with debt not repaired at start');
        return false;
      }
      const lease = await this.host.store.getLease(workstreamId).catch(() => undefined);
      const retryInMs = Math.max(0, (lease?.expiresAt ?? Date.now()) - Date.now()) + MARGIN_MS;
      this.host.logger.warn(
        { workstreamId, retryInMs },
        'session left mid-turn by an earlier process is still leased; repairing when the lease expires',
      );
      this.schedule(workstreamId, retryInMs, attempt + 1);
      return false;
    }
  }

  private schedule(workstreamId: string, ms: number, attempt: number): void {
    this.pending.get(workstreamId)?.();
    const cancel = this.host.timers.after(ms, () => {
      this.pending.delete(workstreamId);
      if (this.stopped) return;
      void this.attempt(workstreamId, attempt).then((repaired) => {
        if (repaired)
          this.host.logger.warn({ workstreamId }, 'session left mid-turn by an earlier process repaired');
      });
    });
    this.pending.set(workstreamId, cancel);
  }
}
