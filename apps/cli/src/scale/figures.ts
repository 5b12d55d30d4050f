/**
 * The scale figures from the children's raw readings: each figure ours beside the baseline
 * measured in the same run (the in-process turns, an empty Worker, a timer in another process),
 * with the issue's targets marked met or missed. Pure arithmetic, no I/O.
 */
import { type Row, row, target } from '../bench/report.js';
import { quantile } from '../bench/stats.js';
import type { Mark } from './measure.js';
import type { EmptyWorkerReport, RunReport } from './types.js';
import { idealTokensPerSecond, idealTurnMs, type Workload } from './workload.js';

/** The issue's acceptance (issue 24). */
export const TARGETS = {
  falseAborts: 0,
  /** Aggregate tokens/s at least this fraction of the in-process baseline's. */
  tokensRatio: 0.8,
  p50OverIdeal: 1.2,
  p99OverIdeal: 1.5,
  pollLatenessP99Ms: 50,
  /** rss per active session at most this many times an empty Worker's. */
  rssOverEmptyWorker: 1.15,
} as const;

const MB = 1024 * 1024;

/** The watchdog's LatencyHistogram (0.1 ms buckets) stops here: a quantile there means "at least". */
const STATS_HISTOGRAM_TOP_MS = 2_000;

/** Tokens per second over a window of `ms`. */
export function tokensPerSecond(tokens: number, ms: number): number {
  return ms > 0 ? (tokens * 1000) / ms : Number.NaN;
}

/** (rss during − rss before) ÷ sessions, in bytes. */
export function perSession(rssDuring: number, rssBefore: number, sessions: number): number {
  return sessions > 0 ? (rssDuring - rssBefore) / sessions : Number.NaN;
}

/** CPU µs per token delivered. */
export function cpuPerToken(cpuUs: number, tokens: number): number {
  return tokens > 0 ? cpuUs / tokens : Number.NaN;
}

/** The turn time at quantile q (nearest rank) ÷ the ideal turn time. */
export function turnOverIdeal(turnMs: readonly number[], q: number, idealMs: number): number {
  return quantile(turnMs, q) / idealMs;
}

/** A turn's phases, between the moments a listener sees (measure.ts `MARKS`), then to its end. */
const PHASES: readonly { readonly name: string; readonly from: Mark | 'send'; readonly to: Mark | 'end' }[] =
  [
    { name: 'send → turn_started', from: 'send', to: 'started' },
    { name: '→ first token', from: 'started', to: 'firstToken' },
    { name: 'send → first token', from: 'send', to: 'firstToken' },
    { name: '→ tool started', from: 'firstToken', to: 'toolStarted' },
    { name: 'tool', from: 'toolStarted', to: 'toolFinished' },
    { name: '→ next token', from: 'toolFinished', to: 'resumed' },
    { name: '→ last token', from: 'resumed', to: 'lastToken' },
    { name: '→ turn done', from: 'lastToken', to: 'end' },
  ];

/**
 * Each phase's median over the sessions that saw both its ends (each session's own difference),
 * NaN where none did (the baseline has no `turn_started`).
 */
export function turnPhases(r: Pick<RunReport, 'marks' | 'turnMs'>): { name: string; ms: number }[] {
  const at = (m: Mark | 'send' | 'end', i: number) =>
    m === 'send' ? 0 : m === 'end' ? (r.turnMs[i] ?? Number.NaN) : (r.marks[m][i] ?? Number.NaN);
  return PHASES.map(({ name, from, to }) => {
    const d = r.turnMs.map((_, i) => at(to, i) - at(from, i)).filter((x) => !Number.isNaN(x));
    return { name, ms: d.length === 0 ? Number.NaN : quantile(d, 0.5) };
  });
}

/** Time until every session streamed: the last first token (NaN when one never streamed). */
export function allStreamMs(firstTokenMs: readonly number[]): number {
  if (firstTokenMs.length === 0 || firstTokenMs.some((x) => Number.isNaN(x))) return Number.NaN;
  return Math.max(...firstTokenMs);
}

function phasesNote(ours: RunReport, base: RunReport): string {
  const b = new Map(turnPhases(base).map((p) => [p.name, p.ms]));
  const sec = (x: number) => `${(x / 1000).toFixed(2)} s`;
  const parts = turnPhases(ours).map(({ name, ms }) => {
    const other = b.get(name) ?? Number.NaN;
    return `${name} ${sec(ms)}${Number.isNaN(other) ? '' : ` (${sec(other)})`}`;
  });
  return `a turn's phases, medians of each session's own (baseline in parentheses): ${parts.join(', ')}`;
}

export interface TimerWindows {
  /** The other process's timer lateness during our window, and during the baseline's. */
  readonly oursWindow: readonly number[];
  readonly baselineWindow: readonly number[];
  /** During the watchdog's life (end of Turnwarden.start → end of the window): what its stats figure covers. */
  readonly oursLife: readonly number[];
}

export interface ScaleFigures {
  readonly rows: Row[];
  readonly notes: string[];
}

function maxOf(xs: readonly number[]): number {
  return xs.length === 0 ? Number.NaN : Math.max(...xs);
}

/** The rows of one N: ours beside the baseline, the targets of the issue. */
export function scaleFigures(
  w: Workload,
  ours: RunReport,
  base: RunReport,
  empty: EmptyWorkerReport,
  timer: TimerWindows,
): ScaleFigures {
  const ideal = idealTurnMs(w);
  const oursTps = tokensPerSecond(ours.tokens, ours.windowMs);
  const baseTps = tokensPerSecond(base.tokens, base.windowMs);
  const p50 = turnOverIdeal(ours.turnMs, 0.5, ideal);
  const p99 = turnOverIdeal(ours.turnMs, 0.99, ideal);
  const rss = perSession(ours.rssSteady, ours.rssBefore, ours.n);
  const baseRss = perSession(base.rssSteady, base.rssBefore, base.n);
  const rt = ours.runtime;
  const pollP99 = rt?.pollLateness.p99 ?? Number.NaN;
  const lifeP99 = quantile(timer.oursLife, 0.99);
  const rows: Row[] = [
    row('time until all stream (send → every first token)', 'ms', allStreamMs(ours.firstTokenMs), {
      baseline: allStreamMs(base.firstTokenMs),
    }),
    row('false aborts (not completed, or watchdog_fired)', 'turns', ours.falseAborts, {
      baseline: base.falseAborts,
      target: target('0', ours.falseAborts === TARGETS.falseAborts),
    }),
    row('turns not settled within the bound', 'turns', ours.unfinished, { baseline: base.unfinished }),
    row('aggregate tokens/s', 'tok/s', oursTps, {
      baseline: baseTps,
      target: target(`≥ ${TARGETS.tokensRatio}× baseline`, oursTps >= TARGETS.tokensRatio * baseTps),
    }),
    row('turn p50 ÷ ideal', '×', p50, {
      baseline: turnOverIdeal(base.turnMs, 0.5, ideal),
      target: target(`≤ ${TARGETS.p50OverIdeal}`, p50 <= TARGETS.p50OverIdeal),
    }),
    row('turn p99 ÷ ideal', '×', p99, {
      baseline: turnOverIdeal(base.turnMs, 0.99, ideal),
      target: target(`≤ ${TARGETS.p99OverIdeal}`, p99 <= TARGETS.p99OverIdeal),
    }),
    row('rss per active session (baseline: an empty Worker)', 'MB', rss / MB, {
      baseline: empty.perWorker / MB,
      target: target(
        `≤ ${TARGETS.rssOverEmptyWorker}× empty Worker`,
        rss <= TARGETS.rssOverEmptyWorker * empty.perWorker,
      ),
    }),
    row('rss per session, in-process baseline', 'MB', baseRss / MB),
    row('CPU per token', 'µs', cpuPerToken(ours.cpuUs, ours.tokens), {
      baseline: cpuPerToken(base.cpuUs, base.tokens),
    }),
    row('main-thread utilisation', '', ours.elu, { baseline: base.elu }),
    row('watchdog poll lateness p99 (stats(), its life) vs other-process timer', 'ms', pollP99, {
      baseline: lifeP99,
      target: target(`≤ ${TARGETS.pollLatenessP99Ms} ms`, pollP99 <= TARGETS.pollLatenessP99Ms),
    }),
    row(
      'watchdog poll lateness max (stats(), its life) vs other-process timer',
      'ms',
      rt?.pollLateness.max ?? Number.NaN,
      {
        baseline: maxOf(timer.oursLife),
      },
    ),
    row(
      'other-process timer lateness p99, our window (baseline: its window)',
      'ms',
      quantile(timer.oursWindow, 0.99),
      {
        baseline: quantile(timer.baselineWindow, 0.99),
      },
    ),
  ];
  const notes = [
    `ideal turn ${(ideal / 1000).toFixed(2)} s (2 × ${w.tokens - 1} gaps of ${w.delayMs} ms + a ${w.toolMs / 1000} s tool heartbeating every ${w.heartbeatMs} ms); ideal aggregate ${Math.round(idealTokensPerSecond(ours.n, w)).toLocaleString('en-US')} tok/s`,
    `tokens delivered: ours ${Math.round(ours.tokens).toLocaleString('en-US')} in ${ours.tokenEvents.toLocaleString('en-US')} events over ${(ours.windowMs / 1000).toFixed(1)} s, baseline ${Math.round(base.tokens).toLocaleString('en-US')} in ${(base.windowMs / 1000).toFixed(1)} s (expected ${(ours.n * 2 * w.tokens).toLocaleString('en-US')} each)`,
    phasesNote(ours, base),
    `statuses: ours ${statusText(ours.statuses)}; baseline ${statusText(base.statuses)}; watchdog_fired seen by listeners ${ours.watchdogFired}`,
    `rss: ours ${mb(ours.rssBefore)} before start → ${mb(ours.rssSteady)} (median of ${ours.rssSamples} samples, ${ours.rssPhase}; max ${mb(ours.rssMax)}); baseline ${mb(base.rssBefore)} → ${mb(base.rssSteady)}; empty Worker: ${empty.count} of them, ${mb(empty.rssBefore)} → ${mb(empty.rssSteady)}`,
  ];
  if (rt) {
    notes.push(
      `runtime: pool warm ${rt.warmAtStart}/${ours.n} after ${(rt.warmMs / 1000).toFixed(1)} s, then ${rt.rest.quiet ? 'at rest' : 'still busy'} (${rt.rest.cores.toFixed(2)} core) after ${(rt.rest.waitedMs / 1000).toFixed(1)} s more; in the window ${rt.spawnedInWindow} spawned, ${rt.retiredInWindow} retired, ${rt.admissionWaited} sends waited for a worker, ${rt.admissionRefused} refused; stats().watchdog.fired ${rt.watchdogFired}`,
      `watchdog poll lateness: stats() gives p50 ${ms(rt.pollLateness.p50)} / p99 ${ms(rt.pollLateness.p99)} / max ${ms(rt.pollLateness.max)} over the watchdog's whole life, from the end of Turnwarden.start (which waits for the warm pool) through the workstreams' creation to the window's end (${rt.polls} polls, ${rt.pollsInWindow} in the window) — the public API has no window of its own; max before the window ${ms(rt.pollLatenessMaxBeforeWindow)}`,
      rt.lateJumps.length === 0
        ? 'no poll ran more than 50 ms late in the window (stats().watchdog.pollLateness.max, read every 250 ms)'
        : `polls more than 50 ms late (the stats' max, read every 250 ms, grew to): ${rt.lateJumps
            .slice(0, 8)
            .map((j) => `${ms(j.maxMs)} by ${(j.atMs / 1000).toFixed(1)} s`)
            .join(
              ', ',
            )}${rt.lateJumps.length > 8 ? ' …' : ''} into the window (all streaming at ${(allStreamMs(ours.firstTokenMs) / 1000).toFixed(1)} s, first turn done at ${(Math.min(...ours.turnMs) / 1000).toFixed(1)} s)`,
      rt.saturation === undefined
        ? "the supervisor's thread: the scheduler's statistics are not readable here (stats().watchdog.saturation)"
        : `the supervisor's thread (stats().watchdog.saturation, the last ~10 s, read every 250 ms): at most ${pct(rt.saturation.waitShare)} of the time waiting for a CPU (running ${pct(rt.saturation.runShare)}), ${(rt.saturation.atMs / 1000).toFixed(1)} s into the window`,
      `main thread's collections (its own isolate): before the window ${rt.gc.before.count}, ${ms(rt.gc.before.totalMs)} in all, longest ${ms(rt.gc.before.maxMs)}; in the window ${rt.gc.window.count}, ${ms(rt.gc.window.totalMs)} in all, longest ${ms(rt.gc.window.maxMs)}${
        rt.gc.longInWindow.length === 0
          ? ''
          : `; 50 ms or longer at ${rt.gc.longInWindow
              .slice(0, 8)
              .map((g) => `${(g.atMs / 1000).toFixed(1)} s (${g.kind}, ${ms(g.ms)})`)
              .join(', ')}`
      }`,
      ...(rt.pollLateness.p99 >= STATS_HISTOGRAM_TOP_MS
        ? [
            `the watchdog's p99 reads ${ms(rt.pollLateness.p99)}: its histogram's last bucket (0.1 ms buckets up to 2 s) — the p99 is at least that; max is exact`,
          ]
        : []),
      `other-process timer (setInterval(pollMs/2) in a sibling process): ${timer.oursWindow.length} ticks in our window, ${timer.baselineWindow.length} in the baseline's, ${timer.oursLife.length} over the watchdog's life`,
    );
  }
  for (const e of ours.errors) notes.push(`ours: ${e}`);
  for (const e of base.errors) notes.push(`baseline: ${e}`);
  return { rows, notes };
}

function statusText(s: Readonly<Record<string, number>>): string {
  return Object.entries(s)
    .map(([k, v]) => `${v} ${k}`)
    .join(', ');
}

function mb(bytes: number): string {
  return `${(bytes / MB).toFixed(0)} MB`;
}

function pct(x: number): string {
  return `${Math.round(x * 100)} %`;
}

function ms(v: number): string {
  return `${v.toFixed(1)} ms`;
}
