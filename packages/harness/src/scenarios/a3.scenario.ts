/**
 * A3 A4 — a decision racing a force cancel (issue 26). The prelude's turn ends waiting for the
 * approval of a `heartbeat` call (the harness runtime's `approvals.tools`); the run approves it,
 * and the resumed turn is scheduled: its dispatch held at its seam, its tool results held before
 * their journal requests. The host's force cancel lands anywhere: before the resumed turn's
 * dispatch goes (the approved call never starts: its result says effect `none`), while the call
 * runs (`unknown`, unless its own result was journaled first), or after the turn ended (a no-op).
 * Either way every call has one result and a cancelled resumed turn ends interrupted.
 */
import { SeamName } from '@turnwarden/protocol';
import { forceCancel, type Scenario } from '../scenario.js';
import { WAITS_FOR_APPROVAL } from './scripts.js';

export const a3: Scenario = {
  id: 'A3',
  title:
    'a decision racing a force cancel: the approved call runs once or never, and every call has one result',
  park: [SeamName.claimCaptureToDispatch, SeamName.workerToolToJournal],
  prelude: [WAITS_FOR_APPROVAL],
  resume: 'approve',
  script: '',
  actions: [forceCancel],
  maxSteps: 6,
  invariants: [
    {
      id: 'approved-call-once-or-never',
      guarantee: 'A3',
      check: (r) => {
        const g = r.result?.generation;
        if (g === undefined) return 'the resumed turn never ended';
        const started = r.events.filter(
          (e) => e.type === 'tool_started' && e.generation === g && e.data.callIndex === 0,
        ).length;
        const results = r.history.filter((row) => row.message.role === 'tool' && row.message.callIndex === 0);
        if (started > 1) return `the approved call started ${started} times`;
        if (results.length !== 1) return `the approved call has ${results.length} results`;
        const result = results[0]!.message;
        if (result.role !== 'tool') return undefined;
        if (started === 0 && result.effect !== 'none')
          return `the approved call never started, but its result says effect ${result.effect}`;
        if (started === 1 && result.effect === 'none')
          return 'the approved call started, but its result says effect none';
        return undefined;
      },
    },
    {
      id: 'resumed-turn-ends-as-it-must',
      guarantee: 'A3',
      check: (r) => {
        const result = r.result;
        if (result === undefined) return 'the resumed turn never ended';
        // Not cancelled (or cancelled once it had ended): the decision resumed it to its answer.
        if (result.status === 'completed') return undefined;
        if (r.cancel === undefined) return `the resumed turn ended ${result.status}, not completed`;
        return result.status === 'interrupted' && result.abortReason === 'cancel'
          ? undefined
          : `the cancelled resumed turn ended ${result.status} (${result.abortReason ?? 'no reason'})`;
      },
    },
  ],
};
