import { describe, expect, it } from 'vitest';
import { memoryOutput } from '../output.js';
import { runStress } from './index.js';

describe('turnwarden stress', () => {
  it('L4: explores a seed budget, reports schedules and interleavings, exits 0 without violations', async () => {
    const out = memoryOutput();
    const code = await runStress(['--seeds', '2', '--scenario', 'L4', '--json'], out);
    expect(code).toBe(0);
    const report = JSON.parse(out.stdout.join('')) as {
      schedules: number;
      distinct_interleavings: number;
      ok: boolean;
      violations: unknown[];
    };
    expect(report).toMatchObject({ schedules: 4, ok: true, violations: [] });
    expect(report.distinct_interleavings).toBeGreaterThan(0);
  }, 60_000);

  it('L3: a mutation is reported with a replay command that reproduces it', async () => {
    const out = memoryOutput();
    const code = await runStress(
      ['--seeds', '3', '--scenario', 'L3', '--mutation', 'skip-repair', '--json'],
      out,
    );
    expect(code).toBe(1);
    const report = JSON.parse(out.stdout.join('')) as {
      violations: { invariant: string; replay: string; trace: string }[];
    };
    const v = report.violations[0]!;
    expect(v.invariant).toBe('history-complete');
    expect(v.replay).toBe(`turnwarden stress --replay ${v.trace}`);
    const again = memoryOutput();
    expect(await runStress(['--replay', v.trace], again)).toBe(1);
    expect(again.stdout.join('')).toMatch(/history-complete/);
  }, 60_000);

  it('refuses bad flags with exit code 2 and a clear message', async () => {
    const out = memoryOutput();
    expect(await runStress(['--scheduler', 'fifo'], out)).toBe(2);
    expect(out.stderr.join('')).toMatch(/--scheduler must be random, pct or both/);
    expect(await runStress(['--mutation', 'nope'], out)).toBe(2);
    expect(await runStress(['--replay', 'not-a-trace'], out)).toBe(2);
  });
});
