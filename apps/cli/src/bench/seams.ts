/**
 * seams — what the interleaving harness's seams cost when no harness is attached. The worker's
 * per-token path is measured with the seam statement (as shipped) against the same loop without
 * it; the watchdog's poll is measured detached against a harness attached that parks nothing
 * (its per-slot loop has no seam: the watchdog consults its seam only when it attempts an abort).
 * The harness's mutation switches are counted in both builds: the host's has none to cost anything.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Activity, ActivityClock, SlotStamp } from '@turnwarden/clock';
import {
  attachSeamController,
  detachSeamController,
  type MainSeamController,
  SeamName,
  seamSync,
} from '@turnwarden/protocol';
import { Watchdog } from '@turnwarden/supervisor/testing';
import type { BenchContext } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { median } from './stats.js';

function tokenWithSeam(stamp: SlotStamp, n: number): number {
  let live = 0;
  for (let i = 0; i < n; i++) {
    seamSync(SeamName.workerStreamEvent, 1, 'text');
    if (stamp.touch(Activity.streamToken)) live++;
  }
  return live;
}

function tokenWithoutSeam(stamp: SlotStamp, n: number): number {
  let live = 0;
  for (let i = 0; i < n; i++) {
    if (stamp.touch(Activity.streamToken)) live++;
  }
  return live;
}

function nsPerOp(fn: () => number, n: number): number {
  const t0 = performance.now();
  fn();
  return ((performance.now() - t0) * 1e6) / n;
}

function pollWatchdog(n: number, ctx: BenchContext) {
  const clock = ActivityClock.create(n);
  const watchdog = new Watchdog(
    clock,
    { timeoutMs: 24 * 60 * 60 * 1000, pollMs: 1000, graceMs: 1000, dispatchMs: 24 * 60 * 60 * 1000 },
    { fired: () => {}, committed: () => {}, declined: () => {} },
    ctx.logger,
  );
  for (let slot = 0; slot < n; slot++) {
    clock.arm(slot, 1);
    watchdog.watch({ slot, workstreamId: `ws-${slot}`, tenantId: 'bench', generation: 1 });
  }
  return watchdog;
}

function usPerPoll(watchdog: Watchdog, polls: number): number {
  const t0 = performance.now();
  for (let i = 0; i < polls; i++) watchdog.poll();
  return ((performance.now() - t0) * 1e3) / polls;
}

/** `mutated(` call sites in the JavaScript of one supervisor build (`dist` or `dist-harness`). */
function switchesIn(build: 'dist' | 'dist-harness'): number {
  const dir = fileURLToPath(new URL(`../${build}/`, import.meta.resolve('@turnwarden/supervisor')));
  let count = 0;
  for (const file of readdirSync(dir)) {
    if (file.endsWith('.js')) count += readFileSync(dir + file, 'utf8').match(/\bmutated\(/g)?.length ?? 0;
  }
  return count;
}

export async function benchSeams(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const rounds = 5;
  const n = ctx.quick ? 2_000_000 : 10_000_000;
  const clock = ActivityClock.create(1);
  clock.arm(0, 1);
  const stamp = new SlotStamp(clock.buffer, 0);
  for (let i = 0; i < 40; i++) {
    tokenWithSeam(stamp, 100_000);
    tokenWithoutSeam(stamp, 100_000);
  }
  const withSeam: number[] = [];
  const without: number[] = [];
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 0) {
      withSeam.push(nsPerOp(() => tokenWithSeam(stamp, n), n));
      without.push(nsPerOp(() => tokenWithoutSeam(stamp, n), n));
    } else {
      without.push(nsPerOp(() => tokenWithoutSeam(stamp, n), n));
      withSeam.push(nsPerOp(() => tokenWithSeam(stamp, n), n));
    }
    await new Promise((resolve) => setImmediate(resolve));
  }

  const turns = 1_000;
  const polls = ctx.quick ? 200 : 1_000;
  const watchdog = pollWatchdog(turns, ctx);
  const passing: MainSeamController = { mutations: new Set(), reach: () => undefined };
  usPerPoll(watchdog, 200);
  const detached: number[] = [];
  const attached: number[] = [];
  for (let r = 0; r < rounds; r++) {
    detached.push(usPerPoll(watchdog, polls));
    attachSeamController(passing);
    try {
      attached.push(usPerPoll(watchdog, polls));
    } finally {
      detachSeamController(passing);
    }
  }

  const a = median(withSeam);
  const b = median(without);
  const pd = median(detached);
  const pa = median(attached);
  const shipped = switchesIn('dist');
  const harnessOnly = switchesIn('dist-harness');
  return {
    name: 'seams',
    title: 'harness seams when detached (zero cost)',
    ours: 'the worker token path with its seam statement (seamSync + touch); poll with the harness detached',
    baseline: 'the same token loop without the seam statement; poll with a passing harness attached',
    rows: [
      row(`token path, ns per token (median of ${rounds} × ${(n / 1e6).toFixed(0)}M)`, 'ns', a, {
        baseline: b,
        target: target('≤ 1.1× (no measurable cost)', a / b <= 1.1),
      }),
      row(`poll, µs per pass over ${turns.toLocaleString('en-US')} turns`, 'µs', pd, {
        baseline: pa,
        target: target('≤ 1.1×', pd / pa <= 1.1),
      }),
      row('mutation switches in the host build (dist/)', '', shipped, {
        baseline: harnessOnly,
        target: target('0 (the variants are harness-only)', shipped === 0 && harnessOnly > 0),
      }),
    ],
    notes: [
      'baseline of the switch count: the harness build (dist-harness/), whose variants of the parts hold them for `turnwarden stress`',
      'a detached seam is one module-variable load and compare; worker seams take primitives, so nothing is allocated',
      `per-round token ratios: ${withSeam.map((x, i) => `${(x / (without[i] ?? Number.NaN)).toFixed(2)}×`).join(' ')}`,
    ],
  };
}
