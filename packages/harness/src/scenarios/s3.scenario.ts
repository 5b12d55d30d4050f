/**
 * S3 — while structural debt is unresolved no new turn is claimed. The journal refuses the
 * turn's tool results (the admission seam throws: a store that rejects them), so the turn ends
 * with calls unanswered and the session in force-abandoning until the supervisor's repair; the
 * host sends its next message at any point meanwhile. That send queues behind the turn; it
 * starts only once the turn has ended with a complete history — a poisoned end revokes it (C7)
 * — and no turn ever starts over a history with open calls.
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, type Scenario, sendNext } from '../scenario.js';
import { TWO_TOOL_CALLS, turnOverOpenCalls } from './scripts.js';

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
        if (next?.outcome === 'accepted') {
          // It waited for the scheduled turn: its turn started after that turn's idle.
          const g = r.result?.generation;
          const idleAt = r.events.findIndex((e) => e.type === 'idle' && e.generation === g);
          const startedAt = r.events.findIndex(
            (e) => e.type === 'turn_started' && e.generation === next.generation,
          );
          if (idleAt < 0 || startedAt < idleAt) {
            return 'the next send started its turn before the running turn ended';
          }
        }
        if (
          next !== undefined &&
          next.outcome !== 'pending' &&
          next.outcome !== 'accepted' &&
          next.outcome !== 'SEND_REVOKED' &&
          next.outcome !== 'TOOL_CLEANUP_PENDING'
        ) {
          return `the send was refused with ${next.outcome}`;
        }
        // In the durable history, every user row follows a complete prefix.
        return turnOverOpenCalls(r.history);
      },
    },
  ],
};
