/**
 * S6 — a failure after a row was admitted still completes that row's durability. The journal
 * loses the acknowledgement of every write: the rows are durable, the worker sees an error and
 * its turn fails; recovery must find the rows that landed and synthesize only what is missing.
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, type Scenario } from '../scenario.js';

export const s6: Scenario = {
  id: 'S6',
  title: 'a lost journal acknowledgement still leaves the admitted row durable and the history complete',
  park: [SeamName.journalAdmit, SeamName.watchdogSampleToCommit],
  script: JSON.stringify({
    script: [{ tools: [{ name: 'echo', args: { text: 'kept' } }] }, { text: 'done' }],
  }),
  actions: [advance],
  fault: (parked) => (parked.seam === SeamName.journalAdmit ? { kind: 'lose-ack' } : undefined),
  maxSteps: 10,
  invariants: [
    {
      id: 'admitted-row-durable',
      guarantee: 'S6',
      check: (r) => {
        // The turn's first journal request is its assistant row. Released before any abort
        // committed, it was admitted: only its acknowledgement was lost, so the row is durable.
        const admitted = r.journalReleases.some((j) => !j.afterCommit);
        const durable = r.history.some((row) => row.commitKey.endsWith(':a1'));
        return admitted && !durable
          ? 'an admitted row whose acknowledgement was lost is not durable'
          : undefined;
      },
    },
  ],
};
