/** The scale figures' arithmetic: ideal times, quantiles over ideal, ratios, per-session division, targets. */
import { describe, expect, it } from 'vitest';
import {
  allStreamMs,
  cpuPerToken,
  perSession,
  scaleFigures,
  TARGETS,
  tokensPerSecond,
  turnOverIdeal,
  turnPhases,
} from './figures.js';
import { tally } from './measure.js';
import type { EmptyWorkerReport, RunReport } from './types.js';
import {
  DEFAULT_WORKLOAD,
  idealTokensPerSecond,
  idealTurnMs,
  messageText,
  TOKEN_TEXT,
  tokensPerTurn,
  turnScript,
} from './workload.js';

const MB = 1024 * 1024;

describe('the workload', () => {
  it("is the issue's turn: 180 tokens at 33 ms, a 3 s tool, 180 more — 14.814 s at best", () => {
    expect(idealTurnMs(DEFAULT_WORKLOAD)).toBe(14_814);
    expect(tokensPerTurn(DEFAULT_WORKLOAD)).toBe(360);
    // The 250-session ideal: 6,075 tokens/s.
    expect(Math.round(idealTokensPerSecond(250, DEFAULT_WORKLOAD))).toBe(6_075);
  });

  it('scripts it for the scripted model: text, the heartbeat tool, text', () => {
    const w = { tokens: 3, delayMs: 7, toolMs: 100, heartbeatMs: 25 };
    expect(JSON.parse(turnScript(w))).toEqual({
      script: [
        { text: TOKEN_TEXT.repeat(3), chunks: 3, delayMs: 7 },
        { tools: [{ name: 'heartbeat', args: { ms: 100, everyMs: 25 } }] },
        { text: TOKEN_TEXT.repeat(3), chunks: 3, delayMs: 7 },
      ],
    });
    expect(messageText(w).length).toBe(3 * TOKEN_TEXT.length);
  });
});

describe('figure arithmetic', () => {
  it('tokens/s, per-session rss and CPU per token', () => {
    expect(tokensPerSecond(9_000, 1_500)).toBe(6_000);
    expect(tokensPerSecond(10, 0)).toBeNaN();
    expect(perSession(300 * MB, 100 * MB, 20)).toBe(10 * MB);
    expect(perSession(1, 0, 0)).toBeNaN();
    expect(cpuPerToken(4_180_000, 10_000)).toBe(418);
    expect(cpuPerToken(5, 0)).toBeNaN();
  });

  it("a turn's phases: medians of each session's own differences; a session without both ends left out", () => {
    const nan = Number.NaN;
    const phases = turnPhases({
      turnMs: [1_000, 1_100, 5_000],
      marks: {
        started: [10, 30, nan],
        firstToken: [100, 300, nan],
        toolStarted: [400, 500, nan],
        toolFinished: [700, 800, nan],
        resumed: [750, 900, nan],
        lastToken: [950, 1_000, nan],
      },
    });
    // Two sessions saw every moment: nearest rank takes the lower of the two.
    expect(Object.fromEntries(phases.map((p) => [p.name, p.ms]))).toEqual({
      'send → turn_started': 10,
      '→ first token': 90,
      'send → first token': 100,
      '→ tool started': 200,
      tool: 300,
      '→ next token': 50,
      '→ last token': 100,
      '→ turn done': 50,
    });
  });

  it('turn quantiles over the ideal (nearest rank)', () => {
    const turns = Array.from({ length: 100 }, (_, i) => 1_000 + i * 10); // 1000 … 1990
    expect(turnOverIdeal(turns, 0.5, 1_000)).toBe(1.49);
    expect(turnOverIdeal(turns, 0.99, 1_000)).toBe(1.98);
    expect(turnOverIdeal([], 0.5, 1_000)).toBeNaN();
  });

  it('all streaming = the last first token; unknown while a session never streamed', () => {
    expect(allStreamMs([5, 40, 12])).toBe(40);
    expect(allStreamMs([5, Number.NaN])).toBeNaN();
    expect(allStreamMs([])).toBeNaN();
  });
});

function report(over: Partial<RunReport>): RunReport {
  return {
    n: 10,
    lifeStart: 0,
    windowStart: 0,
    windowEnd: 2_000,
    windowMs: 2_000,
    firstTokenMs: Array.from({ length: 10 }, (_, i) => i + 1),
    marks: {
      started: [],
      firstToken: Array.from({ length: 10 }, (_, i) => i + 1),
      toolStarted: [],
      toolFinished: [],
      resumed: [],
      lastToken: [],
    },
    turnMs: Array.from({ length: 10 }, () => 1_000),
    statuses: { completed: 10 },
    unfinished: 0,
    watchdogFired: 0,
    falseAborts: 0,
    tokens: 200,
    tokenEvents: 200,
    cpuUs: 20_000,
    elu: 0.5,
    rssBefore: 100 * MB,
    rssSteady: 200 * MB,
    rssMax: 210 * MB,
    rssSamples: 4,
    rssPhase: 'all streaming',
    errors: [],
    ...over,
  };
}

describe('the rows of one N', () => {
  const w = { tokens: 10, delayMs: 10, toolMs: 820, heartbeatMs: 250 }; // ideal 1,000 ms
  const empty: EmptyWorkerReport = {
    count: 50,
    rssBefore: 50 * MB,
    rssSteady: 550 * MB,
    perWorker: 10 * MB,
    gcExposed: true,
  };
  const timer = {
    oursWindow: [1, 2, 3],
    baselineWindow: [1, 1, 1],
    oursLife: Array.from({ length: 100 }, (_, i) => i / 10),
  };
  const runtime = {
    warmMs: 100,
    warmAtStart: 10,
    rest: { waitedMs: 1_000, cores: 0.02, quiet: true },
    pollLateness: { p50: 2, p99: 12, max: 30 },
    pollLatenessMaxBeforeWindow: 1,
    polls: 20,
    pollsInWindow: 16,
    lateJumps: [],
    saturation: { atMs: 9_250, waitShare: 0.62, runShare: 0.31 },
    gc: {
      before: { count: 3, totalMs: 12, maxMs: 6 },
      window: { count: 40, totalMs: 300, maxMs: 61 },
      longInWindow: [{ atMs: 7_400, ms: 61, kind: 'major' }],
    },
    watchdogFired: 0,
    spawnedInWindow: 0,
    retiredInWindow: 0,
    admissionWaited: 0,
    admissionRefused: 0,
  };
  const byFigure = (rows: ReturnType<typeof scaleFigures>['rows']) =>
    new Map(rows.map((r) => [r.figure.split(' (')[0], r]));

  it('puts ours beside the baseline, with the ratios and the met targets', () => {
    const ours = report({ runtime, cpuUs: 40_000, elu: 0.8, turnMs: Array(10).fill(1_100) });
    const base = report({ rssSteady: 101 * MB, elu: 0.1 });
    const rows = byFigure(scaleFigures(w, ours, base, empty, timer).rows);
    expect(rows.get('time until all stream')).toMatchObject({ ours: 10, baseline: 10, ratio: 1 });
    expect(rows.get('false aborts')).toMatchObject({ ours: 0, target: { met: true } });
    expect(rows.get('aggregate tokens/s')).toMatchObject({
      ours: 100,
      baseline: 100,
      ratio: 1,
      target: { met: true },
    });
    expect(rows.get('turn p50 ÷ ideal')?.ours).toBeCloseTo(1.1);
    expect(rows.get('turn p50 ÷ ideal')?.target?.met).toBe(true);
    expect(rows.get('turn p99 ÷ ideal')?.baseline).toBe(1);
    // (200 − 100) MB ÷ 10 sessions = 10 MB, beside an empty Worker's 10 MB.
    expect(rows.get('rss per active session')).toMatchObject({
      ours: 10,
      baseline: 10,
      ratio: 1,
      target: { met: true },
    });
    expect(rows.get('rss per session, in-process baseline')?.ours).toBeCloseTo(0.1);
    expect(rows.get('CPU per token')).toMatchObject({ ours: 200, baseline: 100, ratio: 2 });
    expect(rows.get('main-thread utilisation')).toMatchObject({ ours: 0.8, baseline: 0.1 });
    expect(rows.get('watchdog poll lateness p99')).toMatchObject({
      ours: 12,
      baseline: 9.8,
      target: { met: true },
    });
    expect(rows.get('watchdog poll lateness max')).toMatchObject({ ours: 30, baseline: 9.9 });
    expect(rows.get('other-process timer lateness p99, our window')).toMatchObject({ ours: 3, baseline: 1 });
  });

  it('misses each target past its bound', () => {
    const ours = report({
      runtime: { ...runtime, pollLateness: { p50: 5, p99: 51, max: 90 } },
      falseAborts: 1,
      statuses: { completed: 9, interrupted: 1 },
      tokens: 159, // 79.5 tok/s against the baseline's 100: under 0.8×
      turnMs: [...Array(9).fill(1_201), 1_501],
      rssSteady: 216 * MB, // 11.6 MB per session: over 1.15 × 10 MB
    });
    const f = scaleFigures(w, ours, report({}), empty, timer);
    const missed = f.rows.filter((r) => r.target && !r.target.met).map((r) => r.figure.split(' (')[0]);
    expect(missed).toEqual([
      'false aborts',
      'aggregate tokens/s',
      'turn p50 ÷ ideal',
      'turn p99 ÷ ideal',
      'rss per active session',
      'watchdog poll lateness p99',
    ]);
    expect(f.notes.join('\n')).toMatch(/9 completed, 1 interrupted/);
    // How long the supervisor's thread waited for a CPU, at its worst in the window, and when.
    expect(f.notes.find((n) => n.startsWith("the supervisor's thread"))).toBe(
      "the supervisor's thread (stats().watchdog.saturation, the last ~10 s, read every 250 ms): at most 62 % of the time waiting for a CPU (running 31 %), 9.3 s into the window",
    );
    // The main thread's collections, and where in the window the long ones were.
    expect(f.notes.find((n) => n.startsWith("main thread's collections"))).toBe(
      "main thread's collections (its own isolate): before the window 3, 12.0 ms in all, longest 6.0 ms; in the window 40, 300.0 ms in all, longest 61.0 ms; 50 ms or longer at 7.4 s (major, 61.0 ms)",
    );
    expect(TARGETS.tokensRatio).toBe(0.8);
  });

  it('has no poll-lateness figure without the runtime readings (NaN, not a met target)', () => {
    const f = scaleFigures(w, report({}), report({}), empty, timer);
    const row = f.rows.find((r) => r.figure.startsWith('watchdog poll lateness p99'));
    expect(row?.ours).toBeNaN();
    expect(row?.target?.met).toBe(false);
  });
});

describe('error notes', () => {
  it('counts repeated messages, most frequent first, five at most', () => {
    expect(tally(['a', 'b', 'a', 'c', 'a', 'b'])).toEqual(['3 × a', '2 × b', 'c']);
    expect(tally(['1', '2', '3', '4', '5', '6'])).toHaveLength(5);
    expect(tally([])).toEqual([]);
  });
});
