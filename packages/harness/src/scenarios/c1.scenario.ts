/**
 * C1 — a soft close at any point of a two-tool turn, the watchdog sampling too. A close without
 * `waitMs` is refused at once while the turn runs and the workstream stays usable; a close that
 * waits latches the workstream, waits for the turn to end — its tool calls answered, or repaired
 * after an abort — and closes a structurally complete history. Either way no tool call is
 * stranded.
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, closeNow, closeWaiting, type Scenario } from '../scenario.js';
import { TWO_TOOL_CALLS } from './scripts.js';

export const c1: Scenario = {
  id: 'C1',
  title: 'a soft close anywhere in a two-tool turn refuses at once or waits and closes a complete history',
  park: [SeamName.workerToolToJournal, SeamName.journalAdmit, SeamName.watchdogSampleToCommit],
  script: TWO_TOOL_CALLS,
  actions: [closeNow, closeWaiting, advance],
  maxSteps: 10,
  invariants: [
    {
      id: 'close-settles',
      guarantee: 'C1',
      check: (r) => {
        const c = r.close;
        if (c === undefined) return undefined;
        if (c.outcome === 'pending') return `the ${c.waiting ? 'waiting' : 'immediate'} close never settled`;
        if (c.waiting) return c.outcome === 'closed' ? undefined : `a waiting close ended ${c.outcome}`;
        // Without waitMs: refused while the turn ran, or closed if the turn had already ended.
        return c.outcome === 'TURN_IN_PROGRESS' || c.outcome === 'closed'
          ? undefined
          : `an immediate close ended ${c.outcome}`;
      },
    },
    {
      id: 'closed-after-the-turn',
      guarantee: 'C1',
      check: (r) => {
        if (r.close?.outcome !== 'closed') return undefined;
        const g = r.result?.generation;
        const closed = r.events.findIndex((e) => e.type === 'ws_closed');
        const idle = r.events.findIndex((e) => e.type === 'idle' && e.generation === g);
        if (closed < 0) return 'the workstream closed without ws_closed';
        if (idle < 0 || idle > closed) return 'ws_closed came before the turn went idle';
        return undefined;
      },
    },
  ],
};
