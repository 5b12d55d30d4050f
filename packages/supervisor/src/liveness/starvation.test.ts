/**
 * Starvation is not a stall (issue 24, item 4): the watchdog, on injected time and injected
 * scheduler statistics, tells a turn starved of CPU (runnable, not scheduled: not aborted, logged,
 * counted, judged again each window) from a wedged one (on a CPU: aborted) and a stalled one
 * (asleep: aborted), and reads the scheduler only for a turn silent for half its idle bound.
 *
 * Time: a manual monotonic clock, polled by hand every poll period (pollMs / 2), as the timer
 * would; each step also moves the fake scheduler's figures of the threads by the shares the test
 * says they spent on a CPU and waiting for one. Nothing sleeps.
 */
import { readFileSync } from 'node:fs';
import { Activity, ActivityClock, SlotStamp } from '@turnwarden/clock';
import { osThreadId } from '@turnwarden/session';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { WatchdogConfig } from '../config.js';
import { platformScheduler } from './platform-sched.js';
import type { SchedulerStats, ThreadSched } from './sched.js';
import { classify, procSchedStats } from './sched.js';
import {
  type StallInfo,
  type StarvedInfo,
  Watchdog,
  type WatchdogDelegate,
  type WatchdogScheduler,
} from './watchdog.js';

const WORKER = 4242;
const MAIN = 4000;

/** Shares of wall time a thread spends on a CPU and waiting on a run queue; the rest it sleeps. */
interface Shares {
  readonly run: number;
  readonly wait: number;
}
const ASLEEP: Shares = { run: 0, wait: 0 };
/** Waiting for a CPU most of the window; running only what a healthy thread does between stamps. */
const STARVED: Shares = { run: 0.005, wait: 0.85 };
const SPINNING: Shares = { run: 1, wait: 0 };

/** The scheduler as the test says: cumulative figures per thread, and every read recorded. */
class FakeScheduler implements SchedulerStats {
  readonly figures = new Map<number, { runNs: number; waitNs: number }>();
  /** [tid, at] of every read. */
  readonly reads: [number, number][] = [];
  throws = false;

  constructor(private readonly now: () => number) {
    this.figures.set(WORKER, { runNs: 1e9, waitNs: 1e8 });
    this.figures.set(MAIN, { runNs: 5e9, waitNs: 0 });
  }

  sample(tid: number): ThreadSched | undefined {
    this.reads.push([tid, this.now()]);
    if (this.throws) throw new Error('schedstat went away');
    const f = this.figures.get(tid);
    return f === undefined ? undefined : { ...f };
  }

  spend(tid: number, ms: number, s: Shares): void {
    const f = this.figures.get(tid);
    if (f === undefined) return;
    f.runNs += s.run * ms * 1e6;
    f.waitNs += s.wait * ms * 1e6;
  }

  readsOf(tid: number): number[] {
    return this.reads.filter(([t]) => t === tid).map(([, at]) => at);
  }
}

type Seen = { stage: 'fired' | 'committed' | 'declined'; at: number; info: StallInfo };

function setup(
  config: WatchdogConfig,
  options: {
    threads?: () => readonly number[];
    /** `support`: the supervisor's thread is every turn's support thread (the watchdog on its own thread). */
    scheduler?: 'none' | 'no-self' | 'with-self' | 'support';
    /** A delegate without the optional `starved` handler. */
    noStarvedHandler?: boolean;
  } = {},
) {
  let t = 1_000;
  const clock = ActivityClock.create(1, () => t);
  const sched = new FakeScheduler(() => t);
  const seen: Seen[] = [];
  const starved: { at: number; info: StarvedInfo }[] = [];
  const delegate: WatchdogDelegate = {
    fired: (_w, info) => void seen.push({ stage: 'fired', at: t, info }),
    committed: (_w, info) => void seen.push({ stage: 'committed', at: t, info }),
    declined: (_w, info) => void seen.push({ stage: 'declined', at: t, info }),
    ...(options.noStarvedHandler ? {} : { starved: (_w, info) => void starved.push({ at: t, info }) }),
  };
  const mode = options.scheduler ?? 'no-self';
  const scheduler: WatchdogScheduler | undefined =
    mode === 'none'
      ? undefined
      : mode === 'with-self'
        ? { stats: sched, self: MAIN }
        : mode === 'support'
          ? { stats: sched, self: MAIN, support: [MAIN] }
          : { stats: sched };
  /** What the watchdog logged at warn and above. */
  const logs: { level: number; msg: string }[] = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void logs.push(JSON.parse(line)) });
  const watchdog = new Watchdog(clock, config, delegate, logger, {}, scheduler);
  const stamp = new SlotStamp(clock.buffer, 0);
  const step = config.pollMs / 2;
  let worker: Shares = ASLEEP;
  let main: Shares = { run: 0.3, wait: 0 };
  return {
    watchdog,
    sched,
    seen,
    starved,
    logs,
    stamp,
    now: () => t,
    /** From now on the worker's thread spends its time so (and the main thread, if given). */
    worker(s: Shares) {
      worker = s;
    },
    main(s: Shares) {
      main = s;
    },
    /** Time passes in poll periods; each period the threads spend their shares, then a poll. */
    run(ms: number) {
      for (let done = 0; done < ms; done += step) {
        t += step;
        sched.spend(WORKER, step, worker);
        sched.spend(MAIN, step, main);
        watchdog.poll();
      }
    },
    /** The supervisor's thread was blocked `ms`: the threads went on, no poll ran. */
    block(ms: number) {
      t += ms;
      sched.spend(WORKER, ms, worker);
      sched.spend(MAIN, ms, main);
    },
    /** Arms and watches the turn; its worker enters it (stamped and seen) at once. */
    enter() {
      clock.arm(0, 1);
      watchdog.watch({
        slot: 0,
        workstreamId: 'ws',
        tenantId: 't',
        generation: 1,
        threads: options.threads ?? (() => [WORKER]),
      });
      stamp.touch(Activity.turnEntry);
      watchdog.poll();
      return t;
    },
    committed: () => seen.find((s) => s.stage === 'committed'),
  };
}

const config = { timeoutMs: 1_000, pollMs: 100, graceMs: 500, dispatchMs: 60_000 };

describe('starvation is not a stall (injected scheduler statistics, injected time)', () => {
  it('L1 L2: a turn starved of CPU past its idle bound is not aborted — logged with its shares, counted, judged again each window; once it is no longer starved and stays silent, it is aborted', () => {
    const h = setup(config);
    const lastProgress = h.enter();
    h.worker(STARVED);
    h.run(3 * config.timeoutMs);
    // Three idle bounds of silence, and nothing fired: every window said starved.
    expect(h.seen).toEqual([]);
    expect(h.starved.length).toBeGreaterThanOrEqual(4);
    const first = h.starved[0]!;
    expect(first.at - lastProgress).toBeGreaterThanOrEqual(config.timeoutMs);
    expect(first.at - lastProgress).toBeLessThanOrEqual(config.timeoutMs + config.pollMs);
    expect(first.info).toMatchObject({ workstreamId: 'ws', generation: 1, deferrals: 1, threads: [WORKER] });
    expect(first.info.reading).toMatchObject({ verdict: 'starved', waitShare: 0.85, runShare: 0.01 });
    // Each later window is half the idle bound: judged again, not waved through.
    const gaps = h.starved.slice(1).map((s, i) => s.at - h.starved[i]!.at);
    for (const gap of gaps) expect(gap).toBe(config.timeoutMs / 2);
    expect(h.starved.map((s) => s.info.deferrals)).toEqual(h.starved.map((_, i) => i + 1));
    // Each report says how long the turn has been silent at that moment.
    expect(h.starved.map((s) => s.info.idleMs)).toEqual(h.starved.map((s) => s.at - lastProgress));
    expect(h.watchdog.readsScheduler).toBe(true);
    expect(h.watchdog.stats()).toMatchObject({ starved: h.starved.length, fired: 0, wedged: 0, stalled: 0 });

    // The host lets it run again, and it stays silent (asleep): aborted within the next window.
    const freedAt = h.now();
    h.worker(ASLEEP);
    h.run(config.timeoutMs);
    const committed = h.committed();
    expect(committed?.info.bound).toBe('idle');
    expect(committed!.info.sched).toMatchObject({ verdict: 'stalled', waitShare: 0, runShare: 0 });
    expect(committed!.at - freedAt).toBeLessThanOrEqual(config.timeoutMs / 2 + config.pollMs);
    expect(h.watchdog.stats()).toMatchObject({ fired: 1, committed: 1, stalled: 1 });
  });

  it('L1 L2: a turn silent because the supervisor’s thread — its support thread — waited for a CPU is starved, not stalled: held while that lasts, aborted as stalled once it ends', () => {
    const h = setup(config, { scheduler: 'support' });
    const lastProgress = h.enter();
    // The worker sleeps (waiting on the supervisor, say for its model step's dispatch), and the
    // supervisor's thread is runnable but not scheduled.
    h.worker(ASLEEP);
    h.main(STARVED);
    h.run(2 * config.timeoutMs);
    expect(h.seen).toEqual([]);
    expect(h.starved.length).toBeGreaterThanOrEqual(2);
    expect(h.starved[0]!.at - lastProgress).toBeLessThanOrEqual(config.timeoutMs + config.pollMs);
    // The turn's own threads are reported, not the support thread.
    expect(h.starved[0]!.info).toMatchObject({ threads: [WORKER] });
    expect(h.starved[0]!.info.reading).toMatchObject({ verdict: 'starved', waitShare: 0.85, runShare: 0 });
    // The supervisor is scheduled again and the turn stays silent: stalled.
    h.main({ run: 0.3, wait: 0 });
    h.run(config.timeoutMs);
    expect(h.committed()?.info.sched).toMatchObject({ verdict: 'stalled', waitShare: 0 });
  });

  it('L1 L3: the support thread’s CPU never makes a turn wedged — a supervisor busy all the window beside a sleeping worker is a stall, and only the worker’s run share is reported', () => {
    const h = setup(config, { scheduler: 'support' });
    const lastProgress = h.enter();
    h.worker(ASLEEP);
    h.main(SPINNING);
    h.run(config.timeoutMs + 2 * config.pollMs);
    const committed = h.committed();
    expect(committed!.at - lastProgress).toBeLessThanOrEqual(config.timeoutMs + config.pollMs);
    expect(committed!.info.sched).toMatchObject({ verdict: 'stalled', runShare: 0, runMs: 0 });
    // Without a thread of its own to read, the support thread alone judges nothing: silence alone.
    const lone = setup(config, { scheduler: 'support', threads: () => [] });
    lone.enter();
    lone.main(STARVED);
    lone.run(config.timeoutMs + config.pollMs);
    expect(lone.committed()?.info.sched).toBeUndefined();
    expect(lone.starved).toEqual([]);
  });

  it('L1: a wedged turn (on a CPU through the window) is aborted at its bound, exactly when it would be without a scheduler', () => {
    const withSched = setup(config);
    const without = setup(config, { scheduler: 'none' });
    for (const h of [withSched, without]) {
      h.enter();
      h.run(400); // working, then wedged
      h.stamp.touch(Activity.toolStart);
      h.worker(SPINNING);
      h.run(config.timeoutMs + 2 * config.pollMs);
    }
    const a = withSched.committed();
    expect(a?.info.sched).toMatchObject({ verdict: 'wedged', runShare: 1 });
    expect(a!.at).toBe(without.committed()!.at);
    expect(a!.info.idleMs).toBeGreaterThanOrEqual(config.timeoutMs);
    expect(withSched.starved).toEqual([]);
    expect(withSched.watchdog.stats()).toMatchObject({ wedged: 1, starved: 0 });
  });

  it('L1: a stalled turn (asleep through the window) is aborted at its bound, exactly when it would be without a scheduler', () => {
    const withSched = setup(config);
    const without = setup(config, { scheduler: 'none' });
    for (const h of [withSched, without]) {
      h.enter();
      h.worker({ run: 0.02, wait: 0.01 });
      h.run(config.timeoutMs + 2 * config.pollMs);
    }
    const a = withSched.committed();
    expect(a?.info.sched).toMatchObject({ verdict: 'stalled' });
    expect(a!.at).toBe(without.committed()!.at);
    expect(withSched.watchdog.stats()).toMatchObject({ stalled: 1, starved: 0 });
  });

  it('L1 L3: a wedge on a saturated host — starved too, always runnable — is aborted once it burned the CPU budget (a twentieth of a window on a CPU, summed over its windows)', () => {
    const h = setup(config);
    const lastProgress = h.enter();
    // 3 % on a CPU, 80 % waiting: 15 ms of CPU per 500 ms window without a stamp; the budget is 25 ms.
    h.worker({ run: 0.03, wait: 0.8 });
    h.run(5 * config.timeoutMs);
    const committed = h.committed();
    expect(committed?.info.sched).toMatchObject({ verdict: 'wedged', runShare: 0.03, waitShare: 0.8 });
    expect(committed!.info.sched!.runMs).toBe(30);
    // One starved window (15 ms of CPU), the second reaches the budget.
    expect(h.starved.map((s) => s.info.reading.runMs)).toEqual([15]);
    expect(committed!.at - lastProgress).toBe(config.timeoutMs + config.timeoutMs / 2);
  });

  it('L1: a wedge that the host lets run most of the window (on a CPU half of it or more) is wedged, not starved, however long it waited', () => {
    const h = setup(config);
    const lastProgress = h.enter();
    h.worker({ run: 0.55, wait: 0.4 });
    h.run(2 * config.timeoutMs);
    expect(h.committed()?.info.sched).toMatchObject({ verdict: 'wedged', runShare: 0.55, waitShare: 0.4 });
    expect(h.committed()!.at - lastProgress).toBe(config.timeoutMs);
    expect(h.starved).toEqual([]);
  });

  it('L1: starvation defers an abort at most until the silence is 4 × timeoutMs long: then it is aborted, starved or not', () => {
    const h = setup(config);
    const lastProgress = h.enter();
    // Mostly asleep, but its wakeups wait a quarter of every window on a saturated host.
    h.worker({ run: 0.005, wait: 0.3 });
    h.run(6 * config.timeoutMs);
    const committed = h.committed();
    expect(committed!.at - lastProgress).toBe(4 * config.timeoutMs);
    expect(committed!.info.sched).toMatchObject({ verdict: 'starved', waitShare: 0.3 });
    // Deferred at 1, 1.5, 2, 2.5, 3 and 3.5 × timeoutMs.
    expect(h.starved.map((s) => s.at - lastProgress)).toEqual([1_000, 1_500, 2_000, 2_500, 3_000, 3_500]);
    expect(h.watchdog.stats()).toMatchObject({ starved: 6, committed: 1 });
  });

  it('the scheduler is read only for a turn silent for half its idle bound: never for one that keeps stamping, once at half the bound and once at the bound', () => {
    const h = setup(config);
    h.enter();
    h.worker(STARVED);
    // Progress every 450 ms (< timeoutMs / 2) for 10 s: a healthy turn, however starved.
    for (let i = 0; i < 22; i++) {
      h.run(450);
      h.stamp.touch(Activity.streamToken);
    }
    expect(h.sched.readsOf(WORKER)).toEqual([]);
    expect(h.seen).toEqual([]);
    // Silent from here: a first read at half the bound (not before), the second at the bound.
    h.run(config.pollMs / 2); // the poll that sees the last stamp
    const silentFrom = h.now();
    h.worker(ASLEEP);
    h.run(config.timeoutMs + config.pollMs);
    const reads = h.sched.readsOf(WORKER).map((at) => at - silentFrom);
    expect(reads).toEqual([config.timeoutMs / 2, config.timeoutMs]);
    expect(h.committed()?.at).toBe(silentFrom + config.timeoutMs);
  });

  it('a starved turn that stamps again starts a new silence: its next read is at half the bound from that stamp', () => {
    const h = setup(config);
    h.enter();
    h.worker(STARVED);
    h.run(config.timeoutMs + config.pollMs);
    expect(h.starved).toHaveLength(1);
    h.stamp.touch(Activity.streamToken);
    h.run(config.pollMs / 2);
    const seenAt = h.now();
    const before = h.sched.readsOf(WORKER).length;
    h.run(config.timeoutMs / 2 - config.pollMs / 2);
    expect(h.sched.readsOf(WORKER)).toHaveLength(before);
    h.run(config.pollMs / 2);
    expect(h.sched.readsOf(WORKER).slice(before)).toEqual([seenAt + config.timeoutMs / 2]);
    expect(h.seen).toEqual([]);
  });

  it('no thread, a thread that exited, a sampler that throws: judged on silence alone, exactly as without a scheduler', () => {
    const reference = setup(config, { scheduler: 'none' });
    reference.enter();
    reference.run(config.timeoutMs + config.pollMs);
    const at = reference.committed()!.at;

    const noThread = setup(config, { threads: () => [] });
    const exited = setup(config);
    const throwing = setup(config);
    const throwingThreads = setup(config, {
      threads: () => {
        throw new Error('no worker');
      },
    });
    for (const h of [noThread, exited, throwing, throwingThreads]) {
      h.enter();
      h.worker(STARVED);
    }
    exited.run(600);
    exited.sched.figures.delete(WORKER); // the thread exited between the two reads
    exited.run(config.timeoutMs + config.pollMs - 600);
    throwing.sched.throws = true;
    for (const h of [noThread, throwing, throwingThreads]) h.run(config.timeoutMs + config.pollMs);
    for (const h of [noThread, exited, throwing, throwingThreads]) {
      expect(h.committed()?.at).toBe(at);
      expect(h.committed()!.info.sched).toBeUndefined();
      expect(h.starved).toEqual([]);
    }
  });

  it('L11: the per-turn deadline still ends a starved turn', () => {
    const h = setup({ ...config, turnDeadlineMs: 2_500 });
    const armedAt = h.enter();
    h.worker(STARVED);
    h.run(4 * config.timeoutMs);
    expect(h.starved.length).toBeGreaterThanOrEqual(2);
    const committed = h.committed();
    expect(committed?.info.bound).toBe('deadline');
    expect(committed!.at - armedAt).toBe(2_500);
  });

  it('L1: when the poll at half the bound never came (the supervisor’s thread was blocked), the turn is judged over one poll period from the bound', () => {
    const starved = setup(config);
    const stalled = setup(config);
    const spinning = setup(config);
    for (const h of [starved, stalled, spinning]) {
      h.enter();
      h.block(config.timeoutMs + 20); // no poll between the last progress and past the bound
    }
    starved.worker(STARVED);
    starved.run(config.pollMs);
    expect(starved.seen).toEqual([]);
    expect(starved.starved[0]?.info.reading).toMatchObject({
      verdict: 'starved',
      windowMs: config.pollMs / 2,
    });
    stalled.run(config.pollMs);
    expect(stalled.committed()?.info.sched).toMatchObject({
      verdict: 'stalled',
      windowMs: config.pollMs / 2,
    });
    // Too short a window to burn the CPU budget: on a CPU through it is wedged all the same.
    spinning.worker(SPINNING);
    spinning.run(config.pollMs);
    expect(spinning.committed()?.info.sched).toMatchObject({ verdict: 'wedged', runShare: 1, runMs: 50 });
  });

  it('L1: a window is never shorter than one poll period — a silence first read late (near its bound), then polled again sooner than a period, is held until the period is over', () => {
    // First read at 990 ms of silence (the poll at half the bound never came), polled again at 1,005.
    const probedLate = setup(config);
    // First read at the bound itself (1,020 ms: no poll since the last progress), polled again at 1,035.
    const atBound = setup(config);
    for (const [h, firstRead] of [
      [probedLate, 990],
      [atBound, config.timeoutMs + 20],
    ] as const) {
      const lastProgress = h.enter();
      h.block(firstRead);
      h.watchdog.poll();
      h.block(15);
      h.watchdog.poll();
      // 15 ms is too short a window to tell a stall from a starved thread: not aborted yet.
      expect(h.seen).toEqual([]);
      h.run(config.pollMs / 2);
      const committed = h.committed();
      expect(committed?.info.sched).toMatchObject({ verdict: 'stalled', windowMs: 15 + config.pollMs / 2 });
      expect(committed!.at - lastProgress).toBe(firstRead + 15 + config.pollMs / 2);
    }
  });

  it('L1: with no thread to read, a silence first seen late is aborted at that poll — nothing is held for a window that cannot be read', () => {
    // First seen at the bound (no poll since the last progress).
    const atBound = setup(config, { threads: () => [] });
    let lastProgress = atBound.enter();
    atBound.block(config.timeoutMs + 20);
    atBound.watchdog.poll();
    expect(atBound.committed()!.at - lastProgress).toBe(config.timeoutMs + 20);
    expect(atBound.committed()!.info.sched).toBeUndefined();
    // First seen at 990 ms, then polled at 1,005 ms: aborted there, not a poll period later.
    const late = setup(config, { threads: () => [] });
    lastProgress = late.enter();
    late.block(990);
    late.watchdog.poll();
    expect(late.seen).toEqual([]);
    late.block(15);
    late.watchdog.poll();
    expect(late.committed()!.at - lastProgress).toBe(1_005);
  });

  it('without a scheduler the turn’s threads are never asked for (nothing is read that nothing would judge)', () => {
    let asked = 0;
    const h = setup(config, {
      scheduler: 'none',
      threads: () => {
        asked++;
        return [WORKER];
      },
    });
    h.enter();
    h.run(config.timeoutMs + config.pollMs);
    expect(h.committed()?.info.bound).toBe('idle');
    expect(asked).toBe(0);
    expect(h.sched.reads).toEqual([]);
  });

  it('a delegate without a starved handler: a starved turn is still held and counted, and nothing is logged as an error', () => {
    const h = setup(config, { noStarvedHandler: true });
    h.enter();
    h.worker(STARVED);
    h.run(config.timeoutMs + config.pollMs);
    expect(h.watchdog.stats()).toMatchObject({ starved: 1, committed: 0 });
    expect(h.seen).toEqual([]);
    expect(h.logs).toEqual([]);
  });

  it('the host’s saturation: the supervisor’s own thread, read at most once a second, over about the last 10 s', () => {
    const h = setup(config, { scheduler: 'with-self' });
    expect(h.watchdog.stats().saturation).toBeUndefined();
    h.main({ run: 0.4, wait: 0.25 });
    h.run(3_000);
    expect(h.watchdog.stats().saturation).toEqual({ runShare: 0.4, waitShare: 0.25, windowMs: 2_000 });
    const reads = h.sched.readsOf(MAIN);
    expect(reads).toHaveLength(3);
    h.main({ run: 0.9, wait: 0.6 });
    h.run(20_000);
    expect(h.watchdog.stats().saturation).toEqual({ runShare: 0.9, waitShare: 0.6, windowMs: 10_000 });
    // No turn watched: nothing but the supervisor's own thread is ever read.
    expect(h.sched.readsOf(WORKER)).toEqual([]);
    expect(setup(config).watchdog.stats().saturation).toBeUndefined();
  });
});

describe('classify', () => {
  it('wedged from half the window on a CPU or a budget of a twentieth of a window in all; else starved from a quarter waiting; else stalled', () => {
    expect(classify(500, 250, 0, 250, 500).verdict).toBe('wedged');
    expect(classify(500, 24, 0, 24, 500).verdict).toBe('stalled');
    expect(classify(500, 24, 250, 24, 500).verdict).toBe('starved');
    expect(classify(500, 20, 125, 20, 500).verdict).toBe('starved');
    expect(classify(500, 20, 124, 20, 500).verdict).toBe('stalled');
    expect(classify(500, 10, 400, 25, 500).verdict).toBe('wedged');
    expect(classify(500, 10, 400, 24, 500).verdict).toBe('starved');
    expect(classify(500, 0, 0, 0, 500)).toEqual({
      verdict: 'stalled',
      windowMs: 500,
      runShare: 0,
      waitShare: 0,
      runMs: 0,
    });
  });
});

describe.runIf(process.platform === 'linux')("the platform's scheduler statistics (Linux)", () => {
  /** The kernel's own figures for a thread: run ns, wait ns (the first two fields). */
  const read = (tid: number) => {
    const [run, wait] = readFileSync(`/proc/self/task/${tid}/schedstat`, 'latin1').split(' ');
    return { runNs: Number(run), waitNs: Number(wait) };
  };

  it("L12: a thread's sample is its schedstat's run and wait time, between two reads of the file", () => {
    const tid = osThreadId()!;
    const before = read(tid);
    const sample = procSchedStats.sample(tid)!;
    const after = read(tid);
    expect(sample.runNs).toBeGreaterThan(0);
    expect(sample.runNs).toBeGreaterThanOrEqual(before.runNs);
    expect(sample.runNs).toBeLessThanOrEqual(after.runNs);
    expect(sample.waitNs).toBeGreaterThanOrEqual(before.waitNs);
    expect(sample.waitNs).toBeLessThanOrEqual(after.waitNs);
    expect(Object.keys(sample).sort()).toEqual(['runNs', 'waitNs']);
  });

  it('L12: a thread that is not there (exited) samples as undefined, without throwing', () => {
    expect(procSchedStats.sample(2 ** 30)).toBeUndefined();
  });

  it("L12: the platform scheduler is /proc's, and its own thread is the one calling", () => {
    expect(platformScheduler()).toEqual({ stats: procSchedStats, self: osThreadId() });
  });
});
