/**
 * Invariants checked after every run. Each returns a description of the violation, or undefined.
 * They judge only what a host could observe — durable history, events, logs, lease renewals —
 * plus the clock versions around each commit, never the mechanism's own bookkeeping.
 */
import { openToolCalls } from '@turnwarden/protocol';
import type { RunRecord } from './record.js';

export interface Invariant {
  readonly id: string;
  /** The guarantee it protects. */
  readonly guarantee: string;
  check(record: RunRecord): string | undefined;
}

const OBSERVATIONAL = 'turn liveness watchdog fired; attempting recovery';
const DEFINITIVE = 'watchdog aborted turn; lease renewal stopped';
const ABORTED_OTHER = 'turn aborted; lease renewal stopped';

const historyComplete: Invariant = {
  id: 'history-complete',
  guarantee: 'S1',
  check: (r) => {
    const open = openToolCalls(r.history);
    return open.length === 0
      ? undefined
      : `durable history has ${open.length} tool call(s) without a result (${open.map((o) => o.call.id).join(', ')})`;
  },
};

/**
 * Rows a turn had in flight when its abort committed may still land (admitted before the
 * commit); a row the journal admitted after the commit must never be durable. The journal's
 * admissions and the commit are read from the supervisor's own log, in the order they happened
 * on its thread — which holds for a store that completes writes later, in any order.
 */
const noLateRows: Invariant = {
  id: 'no-late-rows',
  guarantee: 'L3',
  check: (r) => {
    const commitAt = r.logs.findIndex((l) => l.msg === DEFINITIVE || l.msg === ABORTED_OTHER);
    if (commitAt < 0) return undefined;
    const aborted = r.logs[commitAt]!.generation;
    // A workstream deleted and created again (D4) starts its generations over: what follows the
    // deletion is the successor's (the D4 scenario judges that nothing of the predecessor lands).
    const deletedAt = r.logs.findIndex((l) => l.msg === 'workstream deleted');
    const late = new Set(
      r.logs
        .slice(commitAt, deletedAt < 0 ? undefined : deletedAt)
        .filter((l) => l.msg === 'journal admitted' && l.generation === aborted)
        .flatMap((l) => l.commitKeys as string[]),
    );
    const landed = r.history.filter(
      (row) => late.has(row.commitKey) && !(row.message.role === 'tool' && row.message.synthesized === true),
    );
    return landed.length === 0
      ? undefined
      : `turn ${String(aborted)} wrote ${landed.length} row(s) admitted after its abort committed (${landed.map((x) => x.commitKey).join(', ')})`;
  },
};

const noAbortAfterProgress: Invariant = {
  id: 'no-abort-after-progress',
  guarantee: 'L4',
  check: (r) => {
    const bad = r.attempts.find((a) => a.committed && a.atRelease !== a.sampled);
    return bad
      ? `abort committed although the turn stamped after the sample (version ${bad.sampled} → ${bad.atRelease})`
      : undefined;
  },
};

const abortAndLogAgree: Invariant = {
  id: 'abort-and-log-agree',
  guarantee: 'L5',
  check: (r) => {
    const committed = r.attempts.filter((a) => a.committed).length;
    const definitive = r.logs.filter((l) => l.msg === DEFINITIVE).length;
    if (definitive !== committed) {
      return `${definitive} definitive abort log(s) for ${committed} committed watchdog abort(s)`;
    }
    const firstDefinitive = r.logs.findIndex((l) => l.msg === DEFINITIVE);
    const firstObservational = r.logs.findIndex((l) => l.msg === OBSERVATIONAL);
    if (firstDefinitive >= 0 && (firstObservational < 0 || firstObservational > firstDefinitive)) {
      return 'the definitive abort log came before the observational one';
    }
    const aborted = r.events.filter((e) => e.type === 'turn_aborted' && e.data.reason === 'watchdog').length;
    return aborted === committed
      ? undefined
      : `${aborted} turn_aborted event(s) for ${committed} committed abort(s)`;
  },
};

const committedTurnDoesNotComplete: Invariant = {
  id: 'committed-turn-does-not-complete',
  guarantee: 'L6',
  check: (r) =>
    r.attempts.some((a) => a.committed) && r.result?.status === 'completed'
      ? 'a turn whose abort committed completed anyway: a stamp after the commit revived it'
      : undefined,
};

const noRenewalAfterCommit: Invariant = {
  id: 'no-renewal-after-commit',
  guarantee: 'L3',
  check: (r) =>
    r.renewalsAtCommit !== undefined && r.renewalsAtEnd > r.renewalsAtCommit
      ? `the lease renewed ${r.renewalsAtEnd - r.renewalsAtCommit} time(s) after the abort committed`
      : undefined,
};

const faultDeclines: Invariant = {
  id: 'fault-declines',
  guarantee: 'L7',
  check: (r) => {
    const bad = r.attempts.filter((a) => a.fault && a.committed).length;
    return bad === 0 ? undefined : `${bad} abort(s) committed although publishing threw`;
  },
};

const recovers: Invariant = {
  id: 'recovers',
  guarantee: 'L1',
  check: (r) =>
    r.recovered === false ? 'the workstream did not complete a plain turn after the run' : undefined,
};

const staleCancelSparesSuccessor: Invariant = {
  id: 'stale-cancel-spares-successor',
  guarantee: 'C4',
  check: (r) =>
    r.staleCancel && r.recovered === false
      ? "the successor turn did not complete after the ended turn's handle was cancelled"
      : undefined,
};

const notStuck: Invariant = {
  id: 'not-stuck',
  guarantee: 'L3',
  check: (r) => r.stuck,
};

const noEventAfterClose: Invariant = {
  id: 'no-event-after-ws-closed',
  guarantee: 'D6',
  check: (r) => {
    const i = r.events.findIndex((e) => e.type === 'ws_closed');
    return i >= 0 && i < r.events.length - 1
      ? `${r.events.length - 1 - i} event(s) after ws_closed`
      : undefined;
  },
};

const cleanStart: Invariant = {
  id: 'clean-start',
  guarantee: 'harness',
  check: (r) => (r.leaked === undefined ? undefined : `the previous run left ${r.leaked}`),
};

/** Checked after every run of every scenario. */
export const COMMON_INVARIANTS: readonly Invariant[] = [
  cleanStart,
  historyComplete,
  noLateRows,
  noAbortAfterProgress,
  abortAndLogAgree,
  committedTurnDoesNotComplete,
  noRenewalAfterCommit,
  faultDeclines,
  recovers,
  staleCancelSparesSuccessor,
  notStuck,
  noEventAfterClose,
];
