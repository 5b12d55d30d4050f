import { describe, expect, it } from 'vitest';
import { fit, memoryOutput, stripAnsi } from '../output.js';
import { LiveView, turnLine } from './live-view.js';
import type { TurnRecord } from './types.js';
import { planWorkload } from './workload.js';

const record = (over: Partial<TurnRecord>): TurnRecord => ({
  workstreamId: 'ws-07',
  index: 3,
  total: 4,
  kind: 'heartbeat',
  variant: 'tool',
  expected: 'completed',
  status: 'completed',
  workerTerminated: false,
  synthesized: 0,
  durationMs: 812,
  tenant: 'acme',
  waitMs: 0,
  verdict: 'ok',
  ...over,
});

const visible = (s: string) => [...stripAnsi(s)].length;

describe('live view', () => {
  it('prints one plain line per finished turn', () => {
    expect(turnLine(record({}))).toBe('ws-07 turn 3/4 completed 812 ms (heartbeat/tool)');
    expect(
      turnLine(
        record({
          kind: 'wedge',
          expected: 'terminated',
          status: 'interrupted',
          abortReason: 'watchdog',
          workerTerminated: true,
          synthesized: 1,
        }),
      ),
    ).toBe(
      'ws-07 turn 3/4 interrupted 812 ms (wedge/tool, watchdog abort, worker terminated, 1 result synthesized)',
    );
    expect(
      turnLine(record({ status: 'interrupted', abortReason: 'watchdog', verdict: 'false_abort' })),
    ).toMatch(/<- FALSE ABORT$/);
    expect(turnLine(record({ kind: 'idle-check', index: 5, durationMs: 4 }))).toBe(
      'ws-07 idle check completed 4 ms (plain)',
    );
  });

  it('cuts lines to the terminal width without breaking styles', () => {
    expect(fit('abcdef', 4)).toBe('abc…');
    expect(fit('\x1b[32mabcdef\x1b[0m', 4)).toBe('\x1b[32mabc…\x1b[0m');
    expect(fit('abc', 4)).toBe('abc');
  });

  it('on a terminal, redraws in place and never writes a line wider than the terminal', () => {
    const out = memoryOutput({ isTTY: true, columns: 60, rows: 12 });
    const plan = planWorkload({ workstreams: 24, turns: 4, seed: 1, timeoutMs: 1000 });
    const view = new LiveView(out, 'tty', plan, () => ({
      watchdogFired: 1,
      workersTerminated: 1,
      toolResultsSynthesized: 2,
      admission: { waiting: 3 },
    }));
    view.start();
    view.turnFinished(record({ workstreamId: 'ws-01', index: 1 }));
    view.stop();
    const frames = out.stdout.join('');
    expect(frames).toContain('\x1b[?25h'); // cursor restored
    // 12 rows: 8 grid lines (the last says how many more) + 2 totals lines, redrawn in place.
    expect(frames).toContain('\u001b[10F');
    const lines = frames.split('\n').slice(1); // the legend is printed once, above the redrawn block
    for (const line of lines) expect(visible(line)).toBeLessThan(60);
  });
});
