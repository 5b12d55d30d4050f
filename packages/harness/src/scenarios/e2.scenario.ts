/**
 * E2 — a history read and a listener registered with its token see every row exactly once.
 * The host reads the history at a point the schedule picks while the turn journals its rows;
 * the journal parks each batch before it is admitted and again once it is durable but not yet
 * announced, so a read can land before a row is durable, between its durability and its
 * announcement, or after both. Whatever the order, the rows read followed by the rows
 * announced to the listener must be the history, each once.
 */
import { SeamName } from '@turnwarden/protocol';
import { readAndFollow, type Scenario } from '../scenario.js';

export const e2: Scenario = {
  id: 'E2',
  title: 'a history read and the listener registered with its token see every row exactly once',
  park: [SeamName.journalAdmit, SeamName.journalDurableToAnnounce],
  prelude: ['hello'],
  script: JSON.stringify({
    script: [{ tools: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'done' }],
  }),
  actions: [readAndFollow],
  maxSteps: 12,
  invariants: [
    {
      id: 'handoff-exact',
      guarantee: 'E2',
      check: (r) => {
        const h = r.handoff;
        // A resync is the other answer E2 allows: the listener re-reads.
        if (h === undefined || h.outcome !== 'ok' || h.resynced) return undefined;
        const last = r.history.at(-1)?.seq ?? 0;
        const seen = [...h.rows, ...h.announced.filter((s) => s <= last)];
        const want = r.history.map((row) => row.seq);
        return seen.join(',') === want.join(',')
          ? undefined
          : `read ${h.rows.join(',')} then heard ${h.announced.join(',')}; the history is ${want.join(',')}`;
      },
    },
  ],
};
