/**
 * C3 — a force cancel of a running turn, at any point of a two-tool turn: between a tool result
 * and its journal request, with a request held at admission, with the watchdog sampling too.
 * The cancel journals `unknown` results for what did not finish before it releases the turn,
 * and the host sees `stream_end` then `idle` before any successor turn publishes.
 */
import { SeamName } from '@turnwarden/protocol';
import { advance, forceCancel, type Scenario } from '../scenario.js';
import { TWO_TOOL_CALLS } from './scripts.js';

export const c3: Scenario = {
  id: 'C3',
  title:
    'a force cancel anywhere in a two-tool turn leaves every call answered and ends the turn before its successor',
  park: [SeamName.workerToolToJournal, SeamName.journalAdmit, SeamName.watchdogSampleToCommit],
  script: TWO_TOOL_CALLS,
  actions: [forceCancel, advance],
  maxSteps: 10,
  invariants: [
    {
      id: 'cancel-settles',
      guarantee: 'C3',
      check: (r) => {
        const c = r.cancel;
        if (c === undefined) return undefined;
        if (c.outcome === 'pending') return 'the force cancel never settled';
        if (typeof c.outcome === 'string') return `the force cancel failed with ${c.outcome}`;
        return undefined;
      },
    },
    {
      id: 'synthesized-unknown-or-never-started',
      guarantee: 'S2',
      check: (r) => {
        const started = new Set(
          r.events.flatMap((e) =>
            e.type === 'tool_started' && e.generation === r.result?.generation ? [e.data.callIndex] : [],
          ),
        );
        for (const row of r.history) {
          const m = row.message;
          if (m.role !== 'tool' || m.synthesized !== true) continue;
          if (m.effect === 'none' && started.has(m.callIndex)) {
            return `call ${m.callIndex} started, but its synthesized result says effect none`;
          }
          if (m.effect !== 'none' && m.effect !== 'unknown')
            return `a synthesized result has effect ${m.effect}`;
        }
        return undefined;
      },
    },
    {
      id: 'terminal-before-successor',
      guarantee: 'C3',
      check: (r) => {
        const g = r.result?.generation;
        if (g === undefined || r.result?.abortReason !== 'cancel') return undefined;
        const at = (type: string, generation: number) =>
          r.events.findIndex((e) => e.type === type && e.generation === generation);
        const end = at('stream_end', g);
        const idle = at('idle', g);
        const synthesized = at('tool_results_synthesized', g);
        const successor = at('turn_started', g + 1);
        if (end < 0 || idle < 0) return 'the cancelled turn published no stream_end or idle';
        if (synthesized >= 0 && synthesized > end) return 'results were synthesized after stream_end';
        if (idle < end) return 'idle before stream_end';
        if (successor >= 0 && successor < idle)
          return 'the successor turn started before the cancelled one went idle';
        return undefined;
      },
    },
  ],
};
