/**
 * T7 — a worker that crashes is treated like L3: the workstream recovers on a fresh worker with
 * a complete history. The worker dies at the seam where it holds a tool result it has not
 * journaled; the schedule decides what the watchdog does around it.
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, type Scenario, wait } from '../scenario.js';
import { TWO_TOOL_CALLS } from './scripts.js';

export const t7: Scenario = {
  id: 'T7',
  title: 'a worker that crashes mid-turn is recovered with a complete history',
  park: [SeamName.watchdogSampleToCommit, SeamName.workerToolToJournal],
  script: TWO_TOOL_CALLS,
  actions: [advance, wait],
  fault: (parked) => (parked.seam === SeamName.workerToolToJournal ? { kind: 'crash' } : undefined),
  maxSteps: 10,
  invariants: [
    {
      id: 'crash-recovered',
      guarantee: 'T7',
      check: (r) => {
        const res = r.result;
        if (!res) return 'the turn never finished';
        if (r.attempts.some((a) => a.committed)) return undefined; // the watchdog got there first
        return res.status === 'failed' && res.abortReason === 'crash' && res.workerTerminated
          ? undefined
          : `a crashed turn ended ${res.status} (${res.abortReason ?? 'no reason'})`;
      },
    },
  ],
};
