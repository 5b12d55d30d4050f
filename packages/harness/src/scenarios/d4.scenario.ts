/**
 * D4 — a predecessor never touches its successor. The host deletes the workstream at any point
 * of a two-tool turn — rows held before admission, tool results in hand — creates it again
 * under the same id and runs a turn there, whose generations start over. Nothing of the
 * predecessor may reach the successor: no row in its history, no event to its listener, and the
 * predecessor's turn handle (cancelled after the run) must leave the successor's turns alone.
 */
import { SeamName } from '@turnwarden/protocol';
import { deleteAndRecreate, type Scenario } from '../scenario.js';
import { TWO_TOOL_CALLS } from './scripts.js';

export const d4: Scenario = {
  id: 'D4',
  title: "a deleted workstream's turn never writes into, nor emits for, a successor under its id",
  park: [SeamName.workerToolToJournal, SeamName.journalAdmit],
  script: TWO_TOOL_CALLS,
  actions: [deleteAndRecreate],
  maxSteps: 10,
  invariants: [
    {
      id: 'successor-untouched',
      guarantee: 'D4',
      check: (r) => {
        const d = r.deletion;
        if (d === undefined) return undefined;
        if (d.outcome !== 'ok') return `the delete, re-creation and successor turn ended ${d.outcome}`;
        if (d.successor?.status !== 'completed') return `the successor's turn ended ${d.successor?.status}`;
        const rows = r.history.map((row) => `${row.message.role}:${row.message.content}`);
        if (rows.join('|') !== 'user:successor|assistant:echo: successor')
          return `the successor's history is ${rows.join(' | ')}`;
        const foreign = d.heard.filter(
          (e) => e.type === 'tool_started' || e.type === 'tool_finished' || e.type === 'ws_closed',
        );
        return foreign.length === 0
          ? undefined
          : `the successor's listener heard ${foreign.map((e) => e.type).join(', ')}`;
      },
    },
  ],
};
