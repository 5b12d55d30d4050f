/**
 * S3 — while structural debt is unresolved no new turn is claimed. The journal refuses the
 * turn's tool results (the admission seam throws: a store that rejects them), so the turn ends
 * with calls unanswered and the session in force-abandoning until the supervisor's repair; the
 * host sends its next message at any point meanwhile. That send is refused — a turn runs, or
 * cleanup is pending — and no turn ever starts over a history with open calls.
 */
import { openToolCalls, SeamName } from '@turnwarden/protocol';
import { advance, type Scenario, sendNext } from '../scenario.js';
import { TWO_TOOL_CALLS } from './scripts.js';

export const s3: Scenario = {
  id: 'S3',
  title: 'a send while tool results are refused and repaired is refused, and no turn starts over open calls',
  park: [SeamName.journalAdmit, SeamName.workerToolToJournal, SeamName.watchdogSampleToCommit],
  script: TWO_TOOL_CALLS,
  actions: [sendNext, advance],
  // Every tool result's journal request fails (the assistant row, the first request, lands).
  fault: (parked) =>
    parked.seam === SeamName.journalAdmit && parked.ctx.firstRole === 'tool'
      ? { kind: 'throw', message: 'the store refused the tool result' }
      : undefined,
  maxSteps: 10,
  invariants: [
    {
      id: 'no-claim-over-debt',
      guarantee: 'S3',
      check: (r) => {
        const next = r.next;
        if (next !== undefined && next.outcome === 'accepted') {
          return 'a send was accepted while the turn ran or its debt was unrepaired';
        }
        if (
          next !== undefined &&
          next.outcome !== 'pending' &&
          next.outcome !== 'TURN_IN_PROGRESS' &&
          next.outcome !== 'TOOL_CLEANUP_PENDING'
        ) {
          return `the send was refused with ${next.outcome}`;
        }
        // In the durable history, every user row follows a complete prefix.
        for (let i = 0; i < r.history.length; i++) {
          if (r.history[i]!.message.role !== 'user') continue;
          const open = openToolCalls(r.history.slice(0, i));
          if (open.length > 0)
            return `a turn (seq ${r.history[i]!.seq}) started over ${open.length} open call(s)`;
        }
        return undefined;
      },
    },
  ],
};
