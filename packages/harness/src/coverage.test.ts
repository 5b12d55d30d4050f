import { describe, expect, it } from 'vitest';
import { modelCoverage, modelPaths, planFor } from './coverage.js';

describe('model-based coverage of the session machine', () => {
  it('generates a path for every transition of the machine', () => {
    const { paths, transitions } = modelPaths();
    expect(transitions).toHaveLength(14);
    expect(transitions).toContain('tool-debt --DEBT_PAID--> claimed');
    expect(transitions).toContain('tool-debt --FAIL--> force-abandoning');
    const onPaths = new Set(paths.flatMap((p) => p.steps.map((s) => `${s.from} --${s.event}--> ${s.to}`)));
    expect([...onPaths].sort()).toEqual(transitions);
  });

  it('plans real stimuli: a failing journal write for FAIL in tool-debt, a cancel at the right state', () => {
    const plan = planFor({
      steps: [
        { event: 'CLAIM', from: 'idle', to: 'claimed' },
        { event: 'STREAM_START', from: 'claimed', to: 'streaming' },
        { event: 'ASSISTANT_TOOLS', from: 'streaming', to: 'tool-debt' },
        { event: 'TOOL_RESULT', from: 'tool-debt', to: 'tool-debt' },
        { event: 'FAIL', from: 'tool-debt', to: 'force-abandoning' },
      ],
    });
    expect(plan.turns).toHaveLength(1);
    expect(plan.turns[0]!.journalFaultAt).toBe(1);
    const aborted = planFor({
      steps: [
        { event: 'CLAIM', from: 'idle', to: 'claimed' },
        { event: 'STREAM_START', from: 'claimed', to: 'streaming' },
        { event: 'ABORT', from: 'streaming', to: 'force-abandoning' },
      ],
    });
    expect(aborted.turns[0]!.cancelAt).toEqual({ state: 'streaming', nth: 1 });
  });

  it('drives every path through a real supervisor and worker: all transitions covered', async () => {
    const report = await modelCoverage();
    expect(report.deviations).toEqual([]);
    expect(report.missing).toEqual([]);
    expect(report.covered).toBe(report.transitions);
  }, 60_000);
});
