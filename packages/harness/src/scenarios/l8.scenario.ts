/**
 * L8 ⨯ — the history-rewrite fence. A host compacts history while the turn runs; the watchdog
 * may abort the turn around it. An abort waits for a rewrite already in flight and never tears
 * it; an abort that declines leaves a pending rewrite admissible; only a committed abort revokes a
 * rewrite that has not started.
 *
 * Threads: W (the turn's worker, parked before each stream event's stamp), S (the watchdog
 * between sample and commit), R (the rewrite, admitted and parked before its write), and the
 * actions advance (stall + poll) and compact (the host's request).
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, compactHistory, type Scenario } from '../scenario.js';

export const l8: Scenario = {
  id: 'L8',
  title: 'a rewrite in flight is never torn by an abort; only a committed abort revokes one not started',
  park: [SeamName.watchdogSampleToCommit, SeamName.workerStreamEvent, SeamName.rewriteAdmitToWrite],
  prelude: ['hello'],
  script: JSON.stringify({ script: [{ text: 'one two three', chunks: 3 }] }),
  actions: [advance, compactHistory],
  maxSteps: 16,
  invariants: [
    {
      id: 'admitted-rewrite-completes',
      guarantee: 'L8',
      check: (r) => {
        const rw = r.rewrite;
        if (!rw || rw.requestedAfterCommit) return undefined;
        const durable = r.history.some((row) => row.commitKey === 'harness:summary');
        return rw.outcome === 'ok' && durable
          ? undefined
          : `a rewrite requested before any commit ended ${rw.outcome} (summary durable: ${durable})`;
      },
    },
    {
      id: 'rewrite-not-torn',
      guarantee: 'L8',
      check: (r) =>
        r.rewrite && !r.rewrite.requestedAfterCommit && r.summaryAtIdle === false
          ? 'the turn settled while its history rewrite was still in flight'
          : undefined,
    },
    {
      id: 'committed-abort-revokes-rewrite',
      guarantee: 'L8',
      check: (r) => {
        const rw = r.rewrite;
        if (!rw?.requestedAfterCommit) return undefined;
        const durable = r.history.some((row) => row.commitKey === 'harness:summary');
        return rw.outcome === 'FENCED' && !durable
          ? undefined
          : `a rewrite requested after the abort committed ended ${rw.outcome} (summary durable: ${durable})`;
      },
    },
  ],
};
