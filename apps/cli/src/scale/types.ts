/** What the scale children measure and send back (raw readings; figures.ts turns them into rows). */
import type { Mark } from './measure.js';
import type { Workload } from './workload.js';

export type ScaleProvider = 'scripted' | 'http';

/** One side's run of N turns, ours or the baseline's. */
export interface RunReport {
  readonly n: number;
  /**
   * Epoch ms (performance.timeOrigin + now), for the other-process timer: the window, and (ours)
   * the watchdog's life — from the end of `Turnwarden.start`, when its timer starts.
   */
  readonly lifeStart: number;
  readonly windowStart: number;
  readonly windowEnd: number;
  /** ms from the sends until every turn settled (or the bound). */
  readonly windowMs: number;
  /** Per session, ms from the sends to its first token (NaN: none arrived). */
  readonly firstTokenMs: readonly number[];
  /** Each session's moments since the sends (measure.ts `MARKS`; NaN: not seen). */
  readonly marks: Readonly<Record<Mark, readonly number[]>>;
  /** Per session, ms from the sends until its turn settled (unfinished: the time it was given up). */
  readonly turnMs: readonly number[];
  /** Turn statuses, counted ('unfinished': not settled within the bound; 'refused': the send failed). */
  readonly statuses: Readonly<Record<string, number>>;
  /** Turns that did not settle within the bound. */
  readonly unfinished: number;
  /** `watchdog_fired` events the listeners saw (ours only). */
  readonly watchdogFired: number;
  /** Turns not `completed`, or that saw `watchdog_fired`: each counted once. */
  readonly falseAborts: number;
  /** Tokens delivered to the listeners (characters ÷ the token's length). */
  readonly tokens: number;
  /** Listener calls carrying text (tokens coalesce into fewer events under load). */
  readonly tokenEvents: number;
  /** process.cpuUsage() over the window, µs (user + system, every thread of the process). */
  readonly cpuUs: number;
  /** performance.eventLoopUtilization() of the main thread over the window. */
  readonly elu: number;
  /** Process rss before the runtime (or the sessions) started, after full collections. */
  readonly rssBefore: number;
  /** Median process rss while every session streamed (sampled every 250 ms in the window). */
  readonly rssSteady: number;
  readonly rssMax: number;
  readonly rssSamples: number;
  /** Where `rssSteady` comes from: 'all streaming' or 'whole window' (no sample in between). */
  readonly rssPhase: string;
  /** First error messages (a refused send, a failed turn), for the notes. */
  readonly errors: readonly string[];
  /** Ours only: what `Turnwarden.stats()` said. */
  readonly runtime?: RuntimeReadings;
}

interface RuntimeReadings {
  /** ms from `Turnwarden.start` until the pool showed N warm workers (or the bound). */
  readonly warmMs: number;
  readonly warmAtStart: number;
  /** After the warm pool: the wait until the process's CPU fell below 0.1 core (bounded at 60 s). */
  readonly rest: { readonly waitedMs: number; readonly cores: number; readonly quiet: boolean };
  /** stats().watchdog.pollLateness at the end: covers the runtime's whole life. */
  readonly pollLateness: { readonly p50: number; readonly p99: number; readonly max: number };
  readonly pollLatenessMaxBeforeWindow: number;
  readonly polls: number;
  readonly pollsInWindow: number;
  /**
   * When the watchdog's max poll lateness grew past 50 ms during the window (ms into it, read
   * every 250 ms): where in the window the late polls were.
   */
  readonly lateJumps: readonly { readonly atMs: number; readonly maxMs: number }[];
  /**
   * The supervisor's thread as the scheduler saw it (`stats().watchdog.saturation`: the shares of
   * the last ~10 s it ran and waited for a CPU, Linux), read every 250 ms through the window: the
   * reading with the highest wait share and when (ms into the window); undefined where unknown.
   */
  readonly saturation:
    | { readonly atMs: number; readonly waitShare: number; readonly runShare: number }
    | undefined;
  /**
   * The main thread's garbage-collection pauses (a PerformanceObserver of `gc` entries, the
   * measuring process's own isolate: not the workers'): before the window and in it, their count,
   * total and longest, and those of 50 ms or more in the window (ms into it). A pause holds the
   * watchdog's poll like any other work on the thread.
   */
  readonly gc: {
    readonly before: GcSummary;
    readonly window: GcSummary;
    readonly longInWindow: readonly { readonly atMs: number; readonly ms: number; readonly kind: string }[];
  };
  readonly watchdogFired: number;
  readonly spawnedInWindow: number;
  readonly retiredInWindow: number;
  /** Sends that waited for a worker in the admission queue, and sends it refused or expired. */
  readonly admissionWaited: number;
  readonly admissionRefused: number;
}

export interface OursConfig {
  readonly n: number;
  readonly provider: ScaleProvider;
  /** The loopback server (provider http). */
  readonly url?: string;
  readonly workload: Workload;
  readonly timeoutMs: number;
  readonly pollMs: number;
  readonly boundMs: number;
  readonly warmBoundMs: number;
}

export interface BaselineConfig {
  readonly n: number;
  readonly provider: ScaleProvider;
  readonly url?: string;
  readonly workload: Workload;
  readonly boundMs: number;
}

export interface EmptyWorkerConfig {
  readonly count: number;
}

export interface EmptyWorkerReport {
  readonly count: number;
  readonly rssBefore: number;
  readonly rssSteady: number;
  /** (rssSteady − rssBefore) ÷ count. */
  readonly perWorker: number;
  readonly gcExposed: boolean;
}

export interface GcSummary {
  readonly count: number;
  readonly totalMs: number;
  readonly maxMs: number;
}
