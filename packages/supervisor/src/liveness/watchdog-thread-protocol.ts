/**
 * What the supervisor's thread and the watchdog's own thread share (watchdog-thread.ts,
 * watchdog-thread-entry.ts): the messages each way, the counters the thread publishes after every
 * poll, and the OS threads of each slot's turn that the supervisor publishes for the thread to
 * read when a turn has been silent long enough to ask the scheduler.
 */
import type { WatchdogConfig } from '../config.js';
import type { StallInfo, StarvedInfo, WatchdogStats } from './watchdog.js';

export interface WatchdogThreadData {
  readonly clock: SharedArrayBuffer;
  /** The supervisor clock's epoch (`ActivityClock.epoch`): NOW is published on its scale. */
  readonly epochMs: number;
  /** The supervisor's clock read at `hrStart` (process.hrtime.bigint(), as a string). */
  readonly perfStart: number;
  readonly hrStart: string;
  readonly config: WatchdogConfig;
  /** Counters (`STATS_WORDS` float64), written by the thread after every poll. */
  readonly stats: SharedArrayBuffer;
  /** The poll-lateness histogram (`LatencyHistogram.bytes`). */
  readonly latency: SharedArrayBuffer;
  /** Per slot `THREAD_WORDS` int32: a count, then that many OS thread ids. */
  readonly threads: SharedArrayBuffer;
  /** The supervisor's OS thread: the support thread of every turn, and the host's saturation. */
  readonly mainTid: number | undefined;
  /** The platform's scheduler statistics can be read (Linux schedstat). */
  readonly schedstat: boolean;
}

/** What the supervisor posts: its commands in order, several at once (watchdog-thread.ts batches them). */
export type ToWatchdogThread =
  | {
      readonly t: 'watch';
      readonly id: number;
      readonly slot: number;
      readonly workstreamId: string;
      readonly tenantId: string;
      readonly generation: number;
      readonly startedAt: number;
      readonly version: number;
    }
  | { readonly t: 'unwatch'; readonly id: number };

export type FromWatchdogThread =
  | { readonly t: 'ready' }
  /** The thread dropped these watches: it reports nothing more of them. */
  | { readonly t: 'unwatched'; readonly ids: readonly number[] }
  | { readonly t: 'fired' | 'committed'; readonly id: number; readonly info: StallInfo }
  | {
      readonly t: 'declined';
      readonly id: number;
      readonly info: StallInfo;
      readonly why: 'activity' | 'ended' | 'failed';
      readonly err?: string;
    }
  | { readonly t: 'starved'; readonly id: number; readonly info: StarvedInfo }
  | { readonly t: 'log'; readonly msg: string; readonly detail: string };

/** The watchdog's counters (Watchdog.counts()): its stats but the turns watched and the lateness. */
export type WatchdogCounts = Omit<WatchdogStats, 'watched' | 'pollLateness'>;

const FIELDS = ['polls', 'fired', 'committed', 'declined', 'starved', 'wedged', 'stalled'] as const;
/** FIELDS, then saturation (valid, runShare, waitShare, windowMs), then the last poll's time. */
export const STATS_WORDS = FIELDS.length + 5;
const SAT = FIELDS.length;
const POLLED_AT = SAT + 4;

export function publishStats(words: Float64Array, counts: WatchdogCounts, now: number): void {
  for (let i = 0; i < FIELDS.length; i++) words[i] = counts[FIELDS[i]!];
  const s = counts.saturation;
  words[SAT + 1] = s?.runShare ?? 0;
  words[SAT + 2] = s?.waitShare ?? 0;
  words[SAT + 3] = s?.windowMs ?? 0;
  words[SAT] = s === undefined ? 0 : 1;
  words[POLLED_AT] = now;
}

export function readStats(words: Float64Array): WatchdogCounts & { readonly polledAt: number } {
  const counts = Object.fromEntries(FIELDS.map((f, i) => [f, words[i] ?? 0])) as Record<
    (typeof FIELDS)[number],
    number
  >;
  return {
    ...counts,
    saturation:
      words[SAT] === 1
        ? { runShare: words[SAT + 1] ?? 0, waitShare: words[SAT + 2] ?? 0, windowMs: words[SAT + 3] ?? 0 }
        : undefined,
    polledAt: words[POLLED_AT] ?? 0,
  };
}

/** Int32 words per slot in the threads buffer: a count and up to three thread ids. */
export const THREAD_WORDS = 4;

export function writeThreads(words: Int32Array, slot: number, tids: readonly number[]): void {
  const base = slot * THREAD_WORDS;
  const n = Math.min(tids.length, THREAD_WORDS - 1);
  // The count last: a reader never sees more ids than were written (a stale id costs a wrong read, never a verdict of its own).
  Atomics.store(words, base, 0);
  for (let i = 0; i < n; i++) Atomics.store(words, base + 1 + i, tids[i]!);
  Atomics.store(words, base, n);
}

export function readThreads(words: Int32Array, slot: number): number[] {
  const base = slot * THREAD_WORDS;
  const n = Math.min(Atomics.load(words, base), THREAD_WORDS - 1);
  const tids: number[] = [];
  for (let i = 0; i < n; i++) tids.push(Atomics.load(words, base + 1 + i));
  return tids;
}
