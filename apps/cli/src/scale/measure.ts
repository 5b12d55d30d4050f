/**
 * The readings both scale children take the same way: rss after full collections, rss sampled
 * through the window, per-session token arrival, and the window's CPU time and main-thread
 * utilisation. Everything here runs inside the measuring child.
 */
import type { EventLoopUtilization } from 'node:perf_hooks';
import { epochNow } from '../bench/child.js';
import { median } from '../bench/stats.js';
import type { RunReport } from './types.js';
import { TOKEN_TEXT } from './workload.js';

const gc = (globalThis as { gc?: () => void }).gc;

export const gcExposed = gc !== undefined;

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Process rss after three full collections (when gc is exposed). */
export async function settledRss(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    gc?.();
    await sleep(30);
  }
  return process.memoryUsage.rss();
}

/**
 * Waits until the process is quiet: its CPU time (every thread) over the last `spanMs` below
 * `cores` cores, or `boundMs` passed. A pool just warmed is not yet at rest: each new isolate's
 * heap is collected in the background for seconds after its warm-up (V8's memory reducer, on
 * the process's shared platform threads: about 0.4 of a core for 1,000 fresh workers), which a
 * window started at once would count against the turns. Returns the ms waited and the last rate.
 */
export async function quiet(
  boundMs = 60_000,
  cores = 0.1,
  spanMs = 1_000,
): Promise<{ waitedMs: number; cores: number; quiet: boolean }> {
  const start = performance.now();
  for (;;) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await sleep(spanMs);
    const c = process.cpuUsage(c0);
    const rate = (c.user + c.system) / 1_000 / (performance.now() - t0);
    const waitedMs = performance.now() - start;
    if (rate < cores) return { waitedMs, cores: rate, quiet: true };
    if (waitedMs >= boundMs) return { waitedMs, cores: rate, quiet: false };
  }
}

/** Samples process rss every `everyMs` (performance.now() times) until stopped. */
export class RssSampler {
  private readonly at: number[] = [];
  private readonly rss: number[] = [];
  private readonly timer: NodeJS.Timeout;

  constructor(everyMs = 250) {
    this.timer = setInterval(() => {
      this.at.push(performance.now());
      this.rss.push(process.memoryUsage.rss());
    }, everyMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Median of the samples taken in [from, to]; the whole run's median when none was. */
  steady(from: number, to: number): { rss: number; phase: string; max: number; count: number } {
    const inside = this.rss.filter((_, i) => (this.at[i] ?? 0) >= from && (this.at[i] ?? 0) <= to);
    const max = this.rss.length === 0 ? Number.NaN : Math.max(...this.rss);
    if (inside.length > 0) return { rss: median(inside), phase: 'all streaming', max, count: inside.length };
    return { rss: median(this.rss), phase: 'whole window', max, count: this.rss.length };
  }
}

/** The moments of a turn a listener sees, in order (ms since the sends; NaN: not seen). */
const MARKS = ['started', 'firstToken', 'toolStarted', 'toolFinished', 'resumed', 'lastToken'] as const;
export type Mark = (typeof MARKS)[number];

/** One session's turn as its listener saw it (times: ms since the sends). */
export class SessionTrack {
  /**
   * `started`: the runtime said the turn was claimed and dispatched (`turn_started`; the
   * baseline has none); `resumed`: the first token after the tool finished.
   */
  readonly marks: Record<Mark, number> = {
    started: Number.NaN,
    firstToken: Number.NaN,
    toolStarted: Number.NaN,
    toolFinished: Number.NaN,
    resumed: Number.NaN,
    lastToken: Number.NaN,
  };
  chars = 0;
  events = 0;
  fired = false;
  settledMs = Number.NaN;
  status = 'unfinished';

  constructor(private readonly t0: () => number) {}

  get firstToken(): number {
    return this.marks.firstToken;
  }

  /** The first time of `mark` (later ones are ignored). */
  mark(mark: Mark, at = performance.now() - this.t0()): void {
    if (Number.isNaN(this.marks[mark])) this.marks[mark] = at;
  }

  token(text: string): void {
    const at = performance.now() - this.t0();
    this.mark('firstToken', at);
    if (!Number.isNaN(this.marks.toolFinished)) this.mark('resumed', at);
    this.marks.lastToken = at;
    this.chars += text.length;
    this.events++;
  }

  settle(status: string): void {
    if (!Number.isNaN(this.settledMs)) return;
    this.settledMs = performance.now() - this.t0();
    this.status = status;
  }
}

/** The window: its times, its CPU and its main-thread utilisation. */
export class Window {
  readonly t0 = performance.now();
  readonly epoch0 = epochNow();
  private readonly cpu0 = process.cpuUsage();
  private readonly elu0: EventLoopUtilization = performance.eventLoopUtilization();
  private endAt: number | undefined;
  private epoch1 = 0;
  private cpuUs = 0;
  private elu = 0;

  end(): void {
    if (this.endAt !== undefined) return;
    this.endAt = performance.now();
    this.epoch1 = epochNow();
    const cpu = process.cpuUsage(this.cpu0);
    this.cpuUs = cpu.user + cpu.system;
    this.elu = performance.eventLoopUtilization(this.elu0).utilization;
  }

  /** The report's common part (call after `end`). */
  report(
    lifeStart: number,
    n: number,
    sessions: readonly SessionTrack[],
    rssBefore: number,
    sampler: RssSampler,
    errors: readonly string[],
  ): Omit<RunReport, 'watchdogFired' | 'runtime'> {
    const end = this.endAt ?? performance.now();
    const statuses: Record<string, number> = {};
    for (const s of sessions) statuses[s.status] = (statuses[s.status] ?? 0) + 1;
    const firstTokenMs = sessions.map((s) => s.firstToken);
    const streamed = firstTokenMs.filter((x) => !Number.isNaN(x));
    const allStreaming = streamed.length === 0 ? Number.NaN : Math.max(...streamed);
    // Steady state: every session streams and none has completed yet (a turn aborted early
    // does not end it: its worker may be replaced while the others stream).
    const firstDone = Math.min(...sessions.filter((s) => s.status === 'completed').map((s) => s.settledMs));
    const steady = sampler.steady(
      this.t0 + (Number.isNaN(allStreaming) ? Number.POSITIVE_INFINITY : allStreaming),
      this.t0 + (Number.isFinite(firstDone) ? firstDone : end - this.t0),
    );
    const chars = sessions.reduce((a, s) => a + s.chars, 0);
    return {
      n,
      lifeStart,
      windowStart: this.epoch0,
      windowEnd: this.epoch1,
      windowMs: end - this.t0,
      firstTokenMs,
      marks: Object.fromEntries(MARKS.map((m) => [m, sessions.map((s) => s.marks[m])])) as Record<
        Mark,
        number[]
      >,
      turnMs: sessions.map((s) => (Number.isNaN(s.settledMs) ? end - this.t0 : s.settledMs)),
      statuses,
      unfinished: sessions.filter((s) => s.status === 'unfinished').length,
      falseAborts: sessions.filter((s) => s.status !== 'completed' || s.fired).length,
      tokens: chars / TOKEN_TEXT.length,
      tokenEvents: sessions.reduce((a, s) => a + s.events, 0),
      cpuUs: this.cpuUs,
      elu: this.elu,
      rssBefore,
      rssSteady: steady.rss,
      rssMax: steady.max,
      rssSamples: steady.count,
      rssPhase: steady.phase,
      errors: tally(errors),
    };
  }
}

/** The distinct messages, most frequent first, each with its count (at most 5). */
export function tally(messages: readonly string[]): string[] {
  const counts = new Map<string, number>();
  for (const m of messages) counts.set(m, (counts.get(m) ?? 0) + 1);
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 5)
    .map(([m, n]) => (n === 1 ? m : `${n} × ${m}`));
}

/** Settles with the promise's value, or `undefined` after `ms`. */
export async function bounded<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), Math.max(0, ms));
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export function errorMessage(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}
