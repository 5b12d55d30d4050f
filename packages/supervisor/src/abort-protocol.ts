/**
 * The abort protocol (L1–L7, L11): the watchdog's delegate for its two reporting stages, the
 * definitive stage after a commit (renewal stops, logs, events, the generation-bound abort
 * message, the grace timer), escalation to terminate (L3), and lease renewal — which is never
 * progress and stops the moment an abort commits.
 */
import type { ActivityClock } from '@turnwarden/clock';
import { type AbortReason, SeamName, seam } from '@turnwarden/protocol';
import type { TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { ActiveTurn } from './active-turn.js';
import type { SupervisorConfig } from './config.js';
import type { EventHub } from './events.js';
import type { WorkerPool } from './pool.js';
import { definitiveWarning, LogMessage, observationalWarning } from './reporting.js';
import type { RuntimeCounters } from './stats.js';
import type { Timers } from './timers.js';
import type { StallInfo, WatchdogDelegate, WatchedTurn } from './watchdog.js';

/** What the protocol needs of the engine. */
export interface AbortHost {
  readonly config: SupervisorConfig;
  readonly clock: ActivityClock;
  readonly events: EventHub;
  readonly counters: RuntimeCounters;
  readonly pool: Pick<WorkerPool, 'terminate'>;
  readonly store: Pick<TurnStore, 'refreshLease'>;
  readonly logger: Logger;
  readonly holder: string;
  readonly timers: Timers;
  turnOnSlot(slot: number): ActiveTurn | undefined;
  /** The abort committed: the session's machine leaves the turn (ABORT → force-abandoning). */
  abandoning(turn: ActiveTurn, reason: AbortReason): void;
}

export class AbortProtocol implements WatchdogDelegate {
  constructor(protected readonly host: AbortHost) {}

  /** Starts renewing the turn's lease every renewMs until the abort commits or the turn ends. */
  startRenewal(turn: ActiveTurn): void {
    turn.stopRenewal = this.host.timers.every(this.host.config.lease.renewMs, () => this.renew(turn));
  }

  fired(w: WatchedTurn, info: StallInfo): void {
    this.host.counters.watchdogFired++;
    const turn = this.host.turnOnSlot(w.slot);
    const log = turn?.log ?? this.host.logger;
    // L5, observational stage: may still decline.
    log.error(
      {
        workstreamId: info.workstreamId,
        idleMs: info.idleMs,
        lastActivity: info.lastActivity,
        bound: info.bound,
      },
      LogMessage.fired,
    );
    // What a host can act on; the clock slot and the sampled version stay inside.
    this.host.events.emit(info.workstreamId, 'watchdog_fired', info.generation, {
      bound: info.bound,
      idleMs: info.idleMs,
      lastActivity: info.lastActivity,
    });
    this.host.events.emit(info.workstreamId, 'warning', info.generation, {
      stage: 'observational',
      message: observationalWarning(info, this.host.config.watchdog.turnDeadlineMs),
    });
  }

  declined(w: WatchedTurn, info: StallInfo, why: string, err: unknown): void {
    this.host.counters.abortsDeclined++;
    const log = this.host.turnOnSlot(w.slot)?.log ?? this.host.logger;
    if (why === 'failed') {
      log.warn({ err, workstreamId: info.workstreamId }, LogMessage.declinedFailed);
    } else {
      log.info({ workstreamId: info.workstreamId, why }, LogMessage.declined);
    }
    this.host.events.emit(info.workstreamId, 'watchdog_declined', info.generation, { why });
  }

  committed(w: WatchedTurn, info: StallInfo): void {
    const turn = this.host.turnOnSlot(w.slot);
    if (!turn || turn.watched !== w) return;
    this.commit(turn, info.bound === 'idle' ? 'watchdog' : info.bound, info);
  }

  /**
   * The definitive stage, after the fence is set (by the watchdog's CAS, or `fence` for
   * cancel/shutdown/lease loss). Order matters: lease renewal stops first (L3), then the
   * definitive log and events (L5), then the abort message, then the grace timer.
   */
  commit(turn: ActiveTurn, reason: AbortReason, info?: StallInfo): void {
    if (turn.abort) return;
    turn.abort = { reason, at: this.host.clock.nowMs() };
    this.host.counters.abortsCommitted++;
    this.stopRenewal(turn);
    const step = (fn: () => void) => {
      try {
        fn();
      } catch (err) {
        turn.log.error({ err }, 'abort step failed after commit');
      }
    };
    step(() => {
      if (reason === 'watchdog' || reason === 'deadline' || reason === 'dispatch') {
        turn.log.error(
          { idleMs: info?.idleMs, lastActivity: info?.lastActivity, bound: info?.bound },
          LogMessage.aborted,
        );
      } else {
        turn.log.warn({ reason }, LogMessage.abortedOther);
      }
    });
    step(() => this.host.events.emit(turn.workstreamId, 'turn_aborted', turn.generation, { reason }));
    step(() => this.host.abandoning(turn, reason));
    if (reason === 'watchdog' || reason === 'deadline' || reason === 'dispatch') {
      step(() =>
        this.host.events.emit(turn.workstreamId, 'warning', turn.generation, {
          stage: 'definitive',
          message: definitiveWarning(reason, info?.idleMs ?? 0),
        }),
      );
    }
    const post = () =>
      step(() => turn.worker.control.postMessage({ t: 'abort', generation: turn.generation, reason }));
    const held = seam(SeamName.watchdogCommitToPublish, {
      workstreamId: turn.workstreamId,
      generation: turn.generation,
    });
    if (held === undefined) post();
    else
      held.then(post, (err: unknown) =>
        turn.log.error({ err }, 'abort message seam failed; the fence stands'),
      );
    turn.cancelGrace = this.host.timers.after(this.host.config.watchdog.graceMs, () => this.escalate(turn));
  }

  /** L3: the turn did not unwind within graceMs — terminate its worker. */
  escalate(turn: ActiveTurn): void {
    if (turn.finished) return;
    turn.workerTerminated = true;
    this.host.counters.workersTerminated++;
    turn.log.warn(
      { graceMs: this.host.config.watchdog.graceMs, workerId: turn.worker.id },
      LogMessage.graceExpired,
    );
    void this.host.pool.terminate(turn.worker);
  }

  /** Lease renewal is never progress: it does not touch the clock. */
  renew(turn: ActiveTurn): void {
    if (!this.renewing(turn)) return;
    this.host.store
      .refreshLease(turn.workstreamId, this.host.holder, turn.lease.token, this.host.config.lease.ttlMs)
      .then((ok) => {
        if (!this.renewing(turn)) return;
        if (ok) {
          this.host.counters.leaseRenewals++;
          return;
        }
        this.host.counters.leaseLosses++;
        turn.log.error({ token: turn.lease.token }, LogMessage.leaseLost);
        this.abort(turn, 'lease_lost');
      })
      .catch((err: unknown) => turn.log.warn({ err }, 'lease renewal failed; will retry'));
  }

  /** L3: the lease is renewed until the abort commits or the turn ends, and not after. */
  protected renewing(turn: ActiveTurn): boolean {
    return turn.abort === undefined && !turn.finished;
  }

  stopRenewal(turn: ActiveTurn): void {
    turn.stopRenewal?.();
    turn.stopRenewal = undefined;
  }

  /** An unconditional abort commit (cancel, shutdown, lease loss). */
  abort(turn: ActiveTurn, reason: AbortReason): void {
    if (!turn.abort && this.host.clock.fence(turn.worker.slot)) this.commit(turn, reason);
  }
}
