/**
 * `turnwarden scale` end to end, as a process (the built CLI, like serve.test.ts): three
 * sessions of a short turn through both providers, beside the in-process baseline. Asserts the
 * report's shape and that every token reached the listeners — never a timing (timing belongs in
 * the bench's output).
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url));

function run(
  args: readonly string[],
  ms: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString('utf8');
    });
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString('utf8');
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`turnwarden scale did not end within ${ms} ms: ${stderr.slice(-500)}`));
    }, ms);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

interface Doc {
  tool: string;
  workload: { tokens: number; idealTurnMs: number };
  emptyWorker: { count: number; perWorker: number } | null;
  sections: {
    name: string;
    title: string;
    rows: { figure: string; unit: string; ours: number | null }[];
    error?: string;
  }[];
  runs: {
    provider: string;
    n: number;
    ours: {
      tokens: number;
      statuses: Record<string, number>;
      firstTokenMs: number[];
      runtime: object;
    } | null;
    baseline: { tokens: number; statuses: Record<string, number> } | null;
  }[];
  summary: { targets: number; errors: string[] };
}

describe('turnwarden scale', () => {
  it('runs N = 3 through both providers beside the baseline and counts every token', async () => {
    const tokens = 4;
    const r = await run(
      [
        'scale',
        '--json',
        '--n',
        '3',
        '--provider',
        'both',
        '--tokens',
        String(tokens),
        '--delay-ms',
        '5',
        '--tool-ms',
        '100',
        '--heartbeat-ms',
        '25',
        '--empty-workers',
        '2',
        '--bound-s',
        '60',
      ],
      110_000,
    );
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout) as Doc;
    expect(doc.tool).toBe('turnwarden scale');
    expect(doc.workload).toMatchObject({ tokens, idealTurnMs: 2 * 3 * 5 + 100 });
    expect(doc.emptyWorker?.count).toBe(2);
    expect(doc.summary.errors).toEqual([]);
    expect(doc.sections.map((s) => [s.name, s.error])).toEqual([
      ['scale', undefined],
      ['scale', undefined],
    ]);
    for (const s of doc.sections) {
      expect(s.rows.map((row) => row.figure.split(' (')[0])).toEqual([
        'time until all stream',
        'false aborts',
        'turns not settled within the bound',
        'aggregate tokens/s',
        'turn p50 ÷ ideal',
        'turn p99 ÷ ideal',
        'rss per active session',
        'rss per session, in-process baseline',
        'CPU per token',
        'main-thread utilisation',
        'watchdog poll lateness p99',
        'watchdog poll lateness max',
        'other-process timer lateness p99, our window',
      ]);
    }
    expect(doc.runs.map((x) => [x.provider, x.n])).toEqual([
      ['scripted', 3],
      ['http', 3],
    ]);
    for (const x of doc.runs) {
      // Every token of every turn reached the listeners, on both sides.
      expect(x.ours?.tokens).toBe(3 * 2 * tokens);
      expect(x.baseline?.tokens).toBe(3 * 2 * tokens);
      expect(x.ours?.statuses).toEqual({ completed: 3 });
      expect(x.baseline?.statuses).toEqual({ completed: 3 });
      expect(x.ours?.firstTokenMs).toHaveLength(3);
      expect(x.ours?.runtime).toBeDefined();
    }
  }, 120_000);

  it('refuses a bad flag with exit code 2 and its usage', async () => {
    const r = await run(['scale', '--provider', 'gpt'], 20_000);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--provider must be scripted, http or both/);
    expect(r.stdout).toBe('');
  });
});
