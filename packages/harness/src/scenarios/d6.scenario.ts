/**
 * D6 — terminal quiesce. The host closes the workstream waiting for its two-tool turn, and
 * listeners register at points the schedule picks — before the close, while it waits, after it
 * — and one more once everything has settled. When the close succeeds, every listener hears
 * `ws_closed` exactly once, as the last thing it hears: one registered before it is closed with
 * the others, one registered after it is closed at once. When the close does not succeed,
 * nobody hears `ws_closed`.
 */
import { SeamName } from '@turnwarden/protocol';
import { closeWaiting, follow, type Scenario } from '../scenario.js';
import { TWO_TOOL_CALLS } from './scripts.js';

export const d6: Scenario = {
  id: 'D6',
  title: 'after a close every listener, however late it registered, hears ws_closed once and then nothing',
  park: [SeamName.workerToolToJournal, SeamName.journalAdmit],
  script: TWO_TOOL_CALLS,
  actions: [closeWaiting, follow],
  maxSteps: 10,
  invariants: [
    {
      id: 'listeners-quiesced',
      guarantee: 'D6',
      check: (r) => {
        const closed = r.close?.outcome === 'closed';
        for (const [i, f] of r.followers.entries()) {
          const who = f.late ? 'the listener registered after the run' : `listener ${i + 1}`;
          if (f.refused !== undefined) return `${who} was refused with ${f.refused}`;
          const closes = f.heard.filter((e) => e.type === 'ws_closed').length;
          if (!closed) {
            if (closes > 0) return `${who} heard ws_closed, but the close did not succeed`;
            continue;
          }
          if (closes !== 1) return `${who} heard ws_closed ${closes} times`;
          if (f.heard.at(-1)?.type !== 'ws_closed')
            return `${who} heard ${f.heard.at(-1)?.type} after ws_closed`;
        }
        return undefined;
      },
    },
  ],
};
