import { describe, expect, it } from 'vitest';
import { DEMO_DEFAULTS, parseDemoArgs } from '../args.js';
import { memoryOutput } from '../output.js';
import { runDemo } from './run.js';
import type { TurnRecord } from './types.js';

/**
 * The demo's watchdog here. Its subject is what each kind of turn ends as, not how soon a stall
 * is seen: every silence of a turn that must complete is at most a fifth of it, and the busiest
 * moments (a replacement worker starting after a wedge, a stream over loopback HTTP) must not
 * outlast it on a machine whose other core is busy (500 ms did: false aborts in 2 of 2 loaded
 * runs over HTTP). A stall still ends at timeout + poll, a wedge after grace.
 */
const TIMEOUT_MS = 1_500;
/**
 * Over HTTP the loopback model server runs on the supervisor's own thread: when a busy machine
 * starves that thread, the model's stream itself stops, and the watchdog (on the same thread)
 * sees the silence as soon as it runs again. 1.5 s still false-aborted 2 of 2 loaded full runs;
 * the subject is how each turn ends over a real provider, so it gets 3 s.
 */
const HTTP_TIMEOUT_MS = 3_000;

/** What the failure's message says of each turn that did not end as its kind must. */
const SHOWN = [
  'workstreamId',
  'index',
  'kind',
  'variant',
  'status',
  'abortReason',
  'durationMs',
  'waitMs',
  'errorCode',
  'errorMessage',
] as const satisfies readonly (keyof TurnRecord)[];

/** The turns that did not end as their kind must, for the failure's message. */
const notOk = (records: readonly TurnRecord[]) =>
  JSON.stringify(
    records
      .filter((r) => r.verdict !== 'ok')
      .map((r) => Object.fromEntries(SHOWN.map((key) => [key, r[key]]))),
  );

describe('demo end to end (real workers, in-memory store)', () => {
  it('L1 L2 L3: every stall is interrupted, every heartbeat completes, every wedge is terminated; no dangling calls', async () => {
    const args = parseDemoArgs([
      '--workstreams=4',
      '--turns=3',
      '--seed=3',
      '--db=:memory:',
      `--timeout-ms=${TIMEOUT_MS}`,
      '--poll-ms=50',
      '--grace-ms=150',
      '--max-workers=4',
      '--warm-workers=2',
      '--log-stderr',
      '--log-level=silent',
    ]);
    const output = memoryOutput();
    const { summary, records } = await runDemo(args, { output });

    expect(summary.failed_checks, notOk(records)).toEqual([]);
    expect(summary.ok).toBe(true);
    expect(summary.dangling_tool_calls).toBe(0);
    expect(summary.false_aborts).toBe(0);
    expect(summary.not_recovered).toBe(0);
    expect(summary.sessions).toBe(4);
    expect(records).toHaveLength(4 * 3 + 4);

    // L2: the heartbeating turns ran past the timeout and completed.
    const heartbeats = records.filter((r) => r.kind === 'heartbeat');
    expect(heartbeats.length).toBeGreaterThan(0);
    for (const r of heartbeats) {
      expect(r.status).toBe('completed');
      expect(r.durationMs).toBeGreaterThan(TIMEOUT_MS);
    }
    // L1: stalls interrupted by the watchdog.
    const stalls = records.filter((r) => r.kind === 'stall');
    expect(stalls.length).toBeGreaterThan(0);
    for (const r of stalls) expect(r).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
    // L3: wedges interrupted, worker terminated.
    const wedges = records.filter((r) => r.kind === 'wedge');
    expect(wedges.length).toBeGreaterThan(0);
    for (const r of wedges)
      expect(r).toMatchObject({ status: 'interrupted', abortReason: 'watchdog', workerTerminated: true });
    expect(summary.workers_terminated).toBeGreaterThanOrEqual(wedges.length);
    // Every workstream accepted and completed its idle check afterwards.
    const idle = records.filter((r) => r.kind === 'idle-check');
    expect(idle.map((r) => r.status)).toEqual(['completed', 'completed', 'completed', 'completed']);

    // Non-TTY output: one plain line per finished turn.
    const lines = output.stdout.join('').split('\n');
    expect(lines.filter((l) => /^ws-\d\d (turn \d\/3|idle check) /.test(l))).toHaveLength(16);
    expect(output.stderr.join('')).toBe('');
  }, 60_000);

  it('L1 L3 S1 through a real provider: the same scripts played over HTTP by the loopback server pass every check', async () => {
    const args = parseDemoArgs([
      '--provider=openai-compatible',
      '--workstreams=4',
      '--turns=3',
      '--seed=3',
      '--db=:memory:',
      `--timeout-ms=${HTTP_TIMEOUT_MS}`,
      '--poll-ms=50',
      '--grace-ms=150',
      '--max-workers=4',
      '--warm-workers=2',
      '--log-stderr',
      '--log-level=silent',
      '--json',
    ]);
    const { summary, records } = await runDemo(args, { output: memoryOutput() });
    expect(summary.failed_checks, notOk(records)).toEqual([]);
    expect(summary.config.model).toMatch(/^openai-compatible, loopback server http:\/\/127\.0\.0\.1:\d+\/v1/);
    expect(summary.dangling_tool_calls).toBe(0);
    for (const r of records.filter((r) => r.kind === 'stall')) {
      expect(r).toMatchObject({ status: 'interrupted', abortReason: 'watchdog' });
    }
    expect(records.filter((r) => r.kind === 'idle-check').map((r) => r.status)).toEqual([
      'completed',
      'completed',
      'completed',
      'completed',
    ]);
  }, 60_000);

  it('--json mode prints nothing while running', async () => {
    const output = memoryOutput();
    // What is judged is the output, not timing: a timeout far above any scheduling delay.
    const args = {
      ...parseDemoArgs(['--db=:memory:', '--log-stderr', '--log-level=silent', '--json']),
      workstreams: 2,
      turns: 1,
      timeoutMs: 1_000,
      pollMs: 100,
      graceMs: 150,
    };
    expect(DEMO_DEFAULTS.workstreams).toBe(24);
    const { summary, records } = await runDemo(args, { output });
    expect(output.stdout).toEqual([]);
    expect(output.stderr).toEqual([]);
    expect(summary.sessions).toBe(2);
    expect(records).toHaveLength(2 + 2);
    // A turn that did not end as its kind must is named in the failure (CI saw one once: a normal
    // turn counted an unexpected failure, on a loaded machine; its status was not printed).
    expect(summary.failed_checks, notOk(records)).toEqual([]);
  }, 60_000);
});
