/**
 * poll — the cost of one `Watchdog.poll()` over N watched turns, against a raw loop doing
 * `Atomics.load` over the same slots. Two shapes: nothing changed since the last poll (every
 * turn silent) and every slot stamped since the last poll (every turn streaming).
 */
import { Activity, ActivityClock, SlotStamp } from '@turnwarden/clock';
import { Watchdog } from '@turnwarden/supervisor/testing';
import type { BenchContext } from './common.js';
import { type Row, row, type SectionResult, target } from './report.js';
import { median } from './stats.js';

/** Words per slot line and the header line (clock/src/layout.ts). */
const WORDS_PER_LINE = 16;

/** Target chosen for this bench: 10,000 watched turns poll in ≤ 1 ms (≤ 100 ns per turn). */
const NS_PER_SLOT_TARGET = 100;

interface Fixture {
  readonly n: number;
  readonly watchdog: Watchdog;
  readonly words: Int32Array;
  readonly stamps: readonly SlotStamp[];
}

function fixture(n: number, ctx: BenchContext): Fixture {
  const clock = ActivityClock.create(n);
  const day = 24 * 60 * 60 * 1000;
  const watchdog = new Watchdog(
    clock,
    { timeoutMs: day, pollMs: 1000, graceMs: 1000, dispatchMs: day },
    { fired: () => {}, committed: () => {}, declined: () => {} },
    ctx.logger,
  );
  const stamps: SlotStamp[] = [];
  for (let slot = 0; slot < n; slot++) {
    clock.arm(slot, 1);
    watchdog.watch({ slot, workstreamId: `ws-${slot}`, tenantId: 'bench', generation: 1 });
    stamps.push(new SlotStamp(clock.buffer, slot));
  }
  return { n, watchdog, words: new Int32Array(clock.buffer), stamps };
}

/** Keeps the raw loads observable (never read). */
let _sink = 0;

function rawPass(words: Int32Array, n: number): void {
  let acc = 0;
  for (let s = 0; s < n; s++) acc = (acc + Atomics.load(words, WORDS_PER_LINE + s * WORDS_PER_LINE)) | 0;
  _sink ^= acc;
}

function stampAll(stamps: readonly SlotStamp[]): void {
  for (const s of stamps) s.touch(Activity.streamToken);
}

/** µs per call of `fn`, timed per call; `before` runs untimed ahead of each call. */
function timeEach(times: number, fn: () => void, before?: () => void): number[] {
  const out: number[] = [];
  for (let i = 0; i < times; i++) {
    before?.();
    const t0 = performance.now();
    fn();
    out.push((performance.now() - t0) * 1000);
  }
  return out;
}

export async function benchPoll(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const rows: Row[] = [];
  const notes: string[] = [];
  const rounds = 5;
  for (const n of [1_000, 10_000]) {
    const f = fixture(n, ctx);
    const perRound = Math.max(10, Math.round((ctx.quick ? 60_000 : 300_000) / n));
    const ours = { quiet: [] as number[], stamped: [] as number[] };
    const base = { quiet: [] as number[], stamped: [] as number[] };
    const poll = () => f.watchdog.poll();
    const raw = () => rawPass(f.words, n);
    const stamp = () => stampAll(f.stamps);
    // Warm-up, not reported.
    timeEach(perRound, poll, stamp);
    timeEach(perRound, raw, stamp);
    for (let r = 0; r < rounds; r++) {
      ours.quiet.push(...timeEach(perRound, poll));
      base.quiet.push(...timeEach(perRound, raw));
      base.stamped.push(...timeEach(perRound, raw, stamp));
      ours.stamped.push(...timeEach(perRound, poll, stamp));
      await new Promise((resolve) => setImmediate(resolve));
    }
    const oq = median(ours.quiet);
    const os = median(ours.stamped);
    const worstNs = (Math.max(oq, os) * 1000) / n;
    rows.push(
      row(`µs per poll, ${n.toLocaleString('en-US')} turns, none stamped`, 'µs', oq, {
        baseline: median(base.quiet),
      }),
      row(`µs per poll, ${n.toLocaleString('en-US')} turns, all stamped`, 'µs', os, {
        baseline: median(base.stamped),
      }),
      row(`ns per turn, ${n.toLocaleString('en-US')} turns (worse shape)`, 'ns', worstNs, {
        baseline: (Math.max(median(base.quiet), median(base.stamped)) * 1000) / n,
        target: target(`≤ ${NS_PER_SLOT_TARGET} ns`, worstNs <= NS_PER_SLOT_TARGET),
      }),
    );
    notes.push(
      `${n.toLocaleString('en-US')} turns: ${rounds} rounds × ${perRound} polls per shape, median per poll`,
    );
  }
  notes.push(
    `target (ours, not from the spec): ≤ ${NS_PER_SLOT_TARGET} ns per watched turn, i.e. a 10,000-turn poll within 1 ms`,
    'idle workstreams are never watched (only active turns are), so they cost a poll nothing',
  );
  return {
    name: 'poll',
    title: 'watchdog sampling pass',
    ours: 'Watchdog.poll(): advance NOW, sample every watched slot, compare with the last version (no-op delegate)',
    baseline: 'raw loop of Atomics.load over the same slots of the same SharedArrayBuffer',
    rows,
    notes,
  };
}
