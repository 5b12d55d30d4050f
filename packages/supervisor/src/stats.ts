/** Counters an operator (and the demo's summary) reads. */
export interface RuntimeCounters {
  turnsStarted: number;
  turnsCompleted: number;
  turnsInterrupted: number;
  turnsFailed: number;
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
