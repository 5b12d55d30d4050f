/**
 * Model-based coverage: every transition of the production session machine, taken by real code
 * paths in a real supervisor and worker (coverage.ts).
 */
import { describe, expect, it } from 'vitest';
import { expectedPath, JOURNEYS, modelCoverage, modelEdges } from './coverage.js';

describe('model-based coverage of the session machine', () => {
  it('finds every transition of the machine: idle, claimed, streaming, tool-debt, force-abandoning, closed', () => {
    const edges = modelEdges();
    expect(edges).toEqual([
      'claimed --ABORT--> force-abandoning.pending',
      'claimed --FAIL--> idle',
      'claimed --STREAM--> streaming',
      'force-abandoning.pending --REPAIR--> force-abandoning.repairing',
      'force-abandoning.repairing --xstate.done.actor.repair--> idle',
      'force-abandoning.repairing --xstate.error.actor.repair--> force-abandoning.pending',
      'idle --CLAIM--> claimed',
      'idle --CLOSE--> closed',
      'streaming --ABORT--> force-abandoning.pending',
      'streaming --xstate.done.actor.stream--> idle',
      'streaming --xstate.done.actor.stream--> tool-debt.running',
      'streaming --xstate.error.actor.stream--> force-abandoning.pending',
      'tool-debt.awaiting-approval --ABORT--> force-abandoning.pending',
      'tool-debt.awaiting-approval --DECIDE--> tool-debt.running',
      'tool-debt.running --ABORT--> force-abandoning.pending',
      'tool-debt.running --xstate.done.actor.tool--> claimed',
      'tool-debt.running --xstate.done.actor.tool--> tool-debt.awaiting-approval',
      'tool-debt.running --xstate.done.actor.tool--> tool-debt.running',
      'tool-debt.running --xstate.error.actor.tool--> force-abandoning.pending',
    ]);
  });

  it('S3: the model refuses a claim everywhere but idle, and a journey the model cannot take is rejected', () => {
    expect(() =>
      expectedPath([
        { type: 'CLAIM', generation: 1 },
        { type: 'CLAIM', generation: 2 },
      ]),
    ).toThrow(/does not take CLAIM in claimed/);
    expect(() => expectedPath([{ type: 'CLOSE' }, { type: 'CLAIM', generation: 1 }])).toThrow(
      /does not take CLAIM in closed/,
    );
    for (const j of JOURNEYS) expect(() => expectedPath(j.events), j.name).not.toThrow();
  });

  it('drives every journey through a real supervisor and worker: all transitions covered, including closed via close() and force-abandoning → idle after a terminate and after a crash', async () => {
    const report = await modelCoverage();
    expect(report.deviations).toEqual([]);
    expect(report.missing).toEqual([]);
    expect(report.covered).toBe(report.transitions);
  }, 60_000);
});
