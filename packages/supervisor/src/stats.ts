import type { AdmissionStats } from './capacity/admission.js';
import type { PoolStats } from './capacity/pool.js';
import type { ClusterStats } from './cluster/cluster.js';
import type { JournalStats } from './journal/journal-gate.js';
import type { WatchdogStats } from './liveness/watchdog.js';
import type { ModelThreadStats } from './models/threads.js';
import type { EventStats } from './streams/events.js';
import type { IsolationStats } from './tools/isolation.js';

/** Counters an operator (and the demo's summary) reads. */
export interface RuntimeCounters {
  turnsStarted: number;
  turnsCompleted: number;
  turnsInterrupted: number;
  turnsFailed: number;
  /** Turns that ended waiting for a person's approval of a call (issue 26). */
  turnsAwaitingApproval: number;
  /** Approvals decided: approved, denied, and denied by their timeout. */
  approvalsApproved: number;
  approvalsDenied: number;
  approvalsTimedOut: number;
  watchdogFired: number;
  abortsCommitted: number;
  abortsDeclined: number;
  workersTerminated: number;
  workersCrashed: number;
  toolResultsSynthesized: number;
  leaseRenewals: number;
  leaseLosses: number;
  journalRefusedFenced: number;
}

export function newCounters(): RuntimeCounters {
  return {
    turnsStarted: 0,
    turnsCompleted: 0,
    turnsInterrupted: 0,
    turnsFailed: 0,
    turnsAwaitingApproval: 0,
    approvalsApproved: 0,
    approvalsDenied: 0,
    approvalsTimedOut: 0,
    watchdogFired: 0,
    abortsCommitted: 0,
    abortsDeclined: 0,
    workersTerminated: 0,
    workersCrashed: 0,
    toolResultsSynthesized: 0,
    leaseRenewals: 0,
    leaseLosses: 0,
    journalRefusedFenced: 0,
  };
}

/** What `Turnwarden.stats()` answers: the counters and each part's figures. */
export interface RuntimeStats extends RuntimeCounters {
  readonly activeTurns: number;
  readonly watchdog: WatchdogStats;
  readonly pool: PoolStats;
  /** Fair admission (T4): permits out, sends waiting for a worker, refusals. */
  readonly admission: AdmissionStats;
  /** Thread-isolated tool tasks: started, cancelled (threads terminated), failed, running. */
  readonly isolation: IsolationStats;
  /**
   * The shared model threads (`models.placement: 'shared'`; absent with `session`): threads
   * running, calls running and made, calls failed, threads replaced after a wedge or an exit.
   */
  readonly models?: ModelThreadStats;
  /** The journals (P3): rows not yet durable, journals retrying or in conflict. */
  readonly journal: JournalStats;
  readonly events: EventStats;
  /** Several hosts on one store: calls routed out and in, fallbacks, failovers, rows followed. */
  readonly cluster?: ClusterStats;
}
