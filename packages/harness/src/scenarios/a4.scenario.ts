/**
 * A4 — a timeout racing a decision (issue 26). The prelude's turn ends waiting for the approval
 * of a `heartbeat` call; the host approves it — the decision is made — and the schedule holds it
 * before its admission (as if it waited for a worker), then lets it through, its resumed turn's
 * dispatch held at its seam and its tool result before its journal request. The wait's timeout
 * fires at any point meanwhile: before the decision is admitted, while the resumed turn is
 * dispatched, while its call runs, after it ended. A decision made in time wins every time: it
 * resumes the turn, the approved call runs once with its own result (nothing synthesized), the
 * turn completes, and the late timeout denies nothing.
 */
import { SeamName } from '@turnwarden/protocol';
import { expireApproval, type Scenario } from '../scenario.js';
import { WAITS_FOR_APPROVAL } from './scripts.js';

export const a4: Scenario = {
  id: 'A4',
  title: 'a timeout racing a decision made in time: the decision wins, the call runs once, nothing is denied',
  park: [SeamName.decisionToAdmit, SeamName.claimCaptureToDispatch, SeamName.workerToolToJournal],
  prelude: [WAITS_FOR_APPROVAL],
  resume: 'approve',
  script: '',
  actions: [expireApproval],
  maxSteps: 6,
  invariants: [
    {
      id: 'decision-in-time-wins',
      guarantee: 'A4',
      check: (r) => {
        if (r.decided !== 'resumed') return `the decision made before the timeout was ${r.decided ?? 'lost'}`;
        if (r.result?.status !== 'completed')
          return `the resumed turn ended ${r.result?.status ?? 'never'}, not completed`;
        return undefined;
      },
    },
    {
      id: 'late-timeout-denies-nothing',
      guarantee: 'A4',
      check: (r) => {
        if (r.logs.some((l) => l.msg === 'approval timed out; the call is denied'))
          return 'the timeout denied a call whose decision was made in time';
        const results = r.history.filter((row) => row.message.role === 'tool' && row.message.callIndex === 0);
        if (results.length !== 1) return `the approved call has ${results.length} results`;
        const m = results[0]!.message;
        if (m.role === 'tool' && m.synthesized === true) return 'the approved call’s result was synthesized';
        return undefined;
      },
    },
  ],
};
