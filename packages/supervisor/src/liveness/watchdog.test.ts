/**
 * The watchdog alone, on injected time: a manual monotonic clock and fake interval timers that
 * move together one millisecond at a time, so detection bounds are exact, not sampled.
 */
import { Activity, ActivityClock, SlotStamp } from '@turnwarden/clock';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { WatchdogConfig } from '../config.js';
import { type StallInfo, Watchdog, type WatchdogDelegate, type WatchdogHooks } from './watchdog.js';

type Seen = { stage: 'fired' | 'committed' | 'declined'; at: number; info: StallInfo };

function harness(
  config: WatchdogConfig,
  options: { hooks?: WatchdogHooks; delegate?: Partial<WatchdogDelegate> } = {},
) {
  let t = 0;
  const clock = ActivityClock.create(1, () => t);
  const seen: Seen[] = [];
  const why: string[] = [];
  const delegate: WatchdogDelegate = {
    fired: (_w, info) => void seen.push({ stage: 'fired', at: t, info }),
    committed: (_w, info) => void seen.push({ stage: 'committed', at: t, info }),
    declined: (_w, info, reason) => {
      why.push(reason);
      seen.push({ stage: 'declined', at: t, info });
    },
    ...options.delegate,
  };
  const logs: { msg: string; [k: string]: unknown }[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void logs.push(JSON.parse(s)) });
  const watchdog = new Watchdog(clock, config, delegate, logger, options.hooks);
  const stamp = new SlotStamp(clock.buffer, 0);
  return {
    clock,
    watchdog,
    seen,
    why,
    logs,
    stamp,
    now: () => t,
    /** Real time passes: the monotonic clock and the timers move together, 1 ms at a time. */
    run(ms: number) {
      for (let i = 0; i < ms; i++) {
        t++;
        vi.advanceTimersByTime(1);
      }
    },
    /** The supervisor's thread is blocked for `ms`: time moves, timers cannot run. */
    block(ms: number) {
      t += ms;
    },
    start(generation = 1) {
      clock.arm(0, generation);
      const watched = watchdog.watch({ slot: 0, workstreamId: 'ws', tenantId: 't', generation });
      watchdog.start();
      return watched;
    },
  };
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('watchdog detection bounds', () => {
  // A timeout that is not a multiple of the poll period exposes a coarser sampling period.
  const config = { timeoutMs: 250, pollMs: 100, graceMs: 1_000, dispatchMs: 5_000 };

  it('L9: a turn is not charged for time before its worker entered it; the dispatch bound ends one never entered', () => {
    const h = harness({ ...config, dispatchMs: 4_000 });
    h.start();
    // The worker has not stamped the turn's entry: ten times timeoutMs pass without an abort.
    h.run(10 * config.timeoutMs);
    expect(h.seen).toEqual([]);
    h.run(4_000 - 10 * config.timeoutMs + config.pollMs);
    const committed = h.seen.find((s) => s.stage === 'committed');
    expect(committed?.info.bound).toBe('dispatch');
    expect(committed!.at).toBeGreaterThanOrEqual(4_000);
    expect(committed!.at).toBeLessThanOrEqual(4_000 + config.pollMs);
  });

  it('L9: once the worker entered the turn, the idle bound counts from the entry', () => {
    const h = harness(config);
    h.start();
    h.run(3 * config.timeoutMs); // queued behind a spawn storm, say
    h.stamp.touch(Activity.turnEntry);
    const enteredAt = h.now();
    h.run(config.timeoutMs + 2 * config.pollMs);
    const committed = h.seen.find((s) => s.stage === 'committed');
    expect(committed?.info.bound).toBe('idle');
    expect(committed!.at - enteredAt).toBeGreaterThanOrEqual(config.timeoutMs);
    expect(committed!.at - enteredAt).toBeLessThanOrEqual(config.timeoutMs + config.pollMs);
  });

  it('L1 L2: a stall is committed no earlier than timeoutMs and no later than timeoutMs + pollMs after the last progress, wherever it falls in the poll period', () => {
    const delays: number[] = [];
    for (let offset = 0; offset < config.pollMs; offset += 7) {
      const h = harness(config);
      h.start();
      h.run(100 + offset);
      h.stamp.touch(Activity.streamToken); // the last progress
      const lastProgress = h.now();
      h.run(config.timeoutMs + 2 * config.pollMs);
      const committed = h.seen.find((s) => s.stage === 'committed');
      expect(committed, `no commit for a stall after offset ${offset}`).toBeDefined();
      const delay = committed!.at - lastProgress;
      delays.push(delay);
      expect(delay, `offset ${offset}: committed ${delay} ms after the last progress`).toBeGreaterThanOrEqual(
        config.timeoutMs,
      );
      expect(delay, `offset ${offset}: committed ${delay} ms after the last progress`).toBeLessThanOrEqual(
        config.timeoutMs + config.pollMs,
      );
      h.watchdog.stop();
    }
    // The bound is used, not merely respected: sampling twice per pollMs lands close to it.
    expect(Math.max(...delays)).toBeGreaterThan(config.timeoutMs + config.pollMs / 4);
  });

  it('L1: the fired report carries the idle time and the last activity, and precedes the commit', () => {
    const h = harness(config);
    h.start();
    h.stamp.touch(Activity.turnEntry);
    h.run(30);
    h.stamp.touch(Activity.toolStart);
    h.run(config.timeoutMs + config.pollMs);
    expect(h.seen.map((s) => s.stage)).toEqual(['fired', 'committed']);
    const fired = h.seen[0]!;
    expect(fired.at).toBe(h.seen[1]!.at);
    expect(fired.info).toMatchObject({ bound: 'idle', lastActivity: 'toolStart', workstreamId: 'ws' });
    expect(fired.info.idleMs).toBeGreaterThanOrEqual(config.timeoutMs);
    expect(fired.info.idleMs).toBeLessThanOrEqual(config.timeoutMs + config.pollMs / 2);
  });

  it('L2: a turn that stamps every timeoutMs - 1 ms is never fired at', () => {
    const h = harness(config);
    h.start();
    h.stamp.touch(Activity.turnEntry);
    for (let i = 0; i < 20; i++) {
      h.run(config.timeoutMs - 1);
      h.stamp.touch(Activity.toolHeartbeat);
    }
    expect(h.seen).toEqual([]);
  });

  it('L11: the per-turn deadline counts from the turn start, not from the last activity', () => {
    const h = harness({ ...config, timeoutMs: 10_000, pollMs: 100, turnDeadlineMs: 1_000 });
    h.run(40);
    h.start();
    const startedAt = h.now();
    // Heartbeats throughout: the idle bound never fires; only the deadline may.
    for (let i = 0; i < 30 && !h.seen.some((s) => s.stage === 'committed'); i++) {
      h.run(50);
      h.stamp.touch(Activity.toolHeartbeat);
    }
    const committed = h.seen.find((s) => s.stage === 'committed');
    expect(committed?.info.bound).toBe('deadline');
    expect(committed!.at - startedAt).toBeGreaterThanOrEqual(1_000);
    expect(committed!.at - startedAt).toBeLessThanOrEqual(1_000 + 50);
  });

  it('L12: poll lateness is measured against the schedule (a blocked thread shows as late ticks)', () => {
    const h = harness(config);
    h.start();
    h.run(500); // ten punctual ticks
    h.block(40); // the thread is busy for 40 ms: the next tick runs 40 ms late
    h.run(50);
    const { pollLateness, polls } = h.watchdog.stats();
    expect(polls).toBe(11);
    expect(pollLateness.p50).toBe(0);
    expect(pollLateness.max).toBe(40);
    expect(pollLateness.p99).toBe(40);
    // The schedule restarts from the late tick: the ticks after it are punctual again, not
    // all charged the same 40 ms.
    h.run(500);
    expect(h.watchdog.stats().polls).toBe(21);
    expect(h.watchdog.stats().pollLateness.p99).toBe(40);
    expect(h.watchdog.stats().pollLateness.p50).toBe(0);
  });
});

describe('watchdog bookkeeping', () => {
  const config = { timeoutMs: 250, pollMs: 100, graceMs: 1_000, dispatchMs: 5_000 };

  it('counts fired, committed and declined attempts exactly', () => {
    const h = harness(config);
    h.start();
    h.stamp.touch(Activity.turnEntry);
    h.run(config.timeoutMs + config.pollMs);
    expect(h.watchdog.stats()).toMatchObject({ watched: 1, fired: 1, committed: 1, declined: 0 });
    expect(h.watchdog.active()).toBe(1);
  });

  it('L4: a commit that finds activity since the sample declines, counts it, and watches on from now', () => {
    const h = harness(config, {
      hooks: {
        beforeCommit: () => {
          h.stamp.touch(Activity.toolHeartbeat);
        },
      },
    });
    h.start();
    h.stamp.touch(Activity.turnEntry);
    h.run(config.timeoutMs + config.pollMs / 2);
    expect(h.why).toEqual(['activity']);
    expect(h.watchdog.stats()).toMatchObject({ fired: 1, committed: 0, declined: 1 });
    // The decline restarts the idle count: the next attempt comes timeoutMs later, not sooner.
    h.run(2 * config.timeoutMs);
    const fired = h.seen.filter((s) => s.stage === 'fired').map((s) => s.at);
    expect(fired.length).toBeGreaterThan(1);
    for (let i = 1; i < fired.length; i++)
      expect(fired[i]! - fired[i - 1]!).toBeGreaterThanOrEqual(config.timeoutMs);
  });

  it('L7: a beforeCommit that throws or rejects declines fail-closed and counts it', async () => {
    const h = harness(config, {
      hooks: {
        beforeCommit: () => {
          throw new Error('boom');
        },
      },
    });
    h.start();
    h.stamp.touch(Activity.turnEntry);
    h.run(config.timeoutMs + config.pollMs);
    expect(h.why).toEqual(['failed']);
    expect(h.watchdog.stats()).toMatchObject({ committed: 0, declined: 1 });
    const r = harness(config, { hooks: { beforeCommit: () => Promise.reject(new Error('async boom')) } });
    r.start();
    r.stamp.touch(Activity.turnEntry);
    r.run(config.timeoutMs + config.pollMs);
    await Promise.resolve();
    await Promise.resolve();
    expect(r.why).toEqual(['failed']);
    expect(r.watchdog.stats().committed).toBe(0);
  });

  it('L7: a commit that throws (the clock itself failing) declines fail-closed: nothing committed, sampling goes on', () => {
    const h = harness(config);
    const commitAbort = vi.spyOn(h.clock, 'commitAbort').mockImplementation(() => {
      throw new Error('clock broken');
    });
    h.start();
    h.stamp.touch(Activity.turnEntry);
    h.run(config.timeoutMs + config.pollMs);
    expect(commitAbort).toHaveBeenCalledTimes(1);
    expect(h.why).toEqual(['failed']);
    expect(h.watchdog.stats()).toMatchObject({ fired: 1, committed: 0, declined: 1 });
    // Fail-closed restarts the idle count: the next attempt comes a full timeoutMs later.
    commitAbort.mockRestore();
    h.run(config.timeoutMs - config.pollMs);
    expect(h.watchdog.stats().fired).toBe(1);
    h.run(2 * config.pollMs);
    expect(h.watchdog.stats()).toMatchObject({ fired: 2, committed: 1 });
  });

  it('an attempt whose turn ended meanwhile declines as ended, without a commit', async () => {
    let release!: () => void;
    const h = harness(config, {
      hooks: {
        beforeCommit: () =>
          new Promise<void>((r) => {
            release = r;
          }),
      },
    });
    const watched = h.start();
    h.stamp.touch(Activity.turnEntry);
    h.run(config.timeoutMs + config.pollMs);
    h.watchdog.unwatch(watched);
    release();
    await Promise.resolve();
    await Promise.resolve();
    expect(h.why).toEqual(['ended']);
    expect(h.watchdog.stats()).toMatchObject({ watched: 0, committed: 0, declined: 1 });
  });

  it('L11: the deadline fences whatever the activity (the bound is not about progress)', () => {
    const h = harness(
      { ...config, timeoutMs: 10_000, turnDeadlineMs: 300 },
      {
        hooks: {
          beforeCommit: () => {
            h.stamp.touch(Activity.toolHeartbeat);
          },
        },
      },
    );
    h.start();
    h.stamp.touch(Activity.turnEntry);
    h.run(300 + config.pollMs);
    expect(h.seen.filter((s) => s.stage === 'committed').map((s) => s.info.bound)).toEqual(['deadline']);
  });

  it('L11: the deadline and dispatch bounds fire at exactly their bound, not before', () => {
    const d = harness({ ...config, timeoutMs: 10_000, turnDeadlineMs: 400, pollMs: 200 });
    d.start();
    d.stamp.touch(Activity.turnEntry);
    d.run(399);
    d.stamp.touch(Activity.toolHeartbeat);
    expect(d.seen).toEqual([]);
    d.run(1);
    expect(d.seen.map((s) => [s.stage, s.at, s.info.bound])).toEqual([
      ['fired', 400, 'deadline'],
      ['committed', 400, 'deadline'],
    ]);
    const p = harness({ ...config, dispatchMs: 400, pollMs: 200 });
    p.start();
    p.run(399);
    expect(p.seen).toEqual([]);
    p.run(1);
    expect(p.seen.map((s) => [s.stage, s.at, s.info.bound])).toEqual([
      ['fired', 400, 'dispatch'],
      ['committed', 400, 'dispatch'],
    ]);
  });

  it('a slot another path already fenced (cancel, shutdown) is skipped', () => {
    const h = harness(config);
    h.start();
    h.stamp.touch(Activity.turnEntry);
    h.clock.fence(0);
    h.run(3 * config.timeoutMs);
    expect(h.seen).toEqual([]);
  });

  it('a delegate that throws is logged and the watchdog goes on', () => {
    const h = harness(config, {
      delegate: {
        fired: () => {
          throw new Error('listener broke');
        },
      },
    });
    h.start();
    h.stamp.touch(Activity.turnEntry);
    h.run(config.timeoutMs + config.pollMs);
    expect(h.logs).toEqual([
      expect.objectContaining({
        msg: 'watchdog delegate threw',
        stage: 'fired',
        err: expect.objectContaining({ message: 'listener broke' }),
      }),
    ]);
    expect(h.seen.map((s) => s.stage)).toEqual(['committed']);
  });

  it('start is idempotent, stop stops the ticks, and unwatch of a replaced turn keeps the new one', () => {
    const h = harness(config);
    const first = h.start();
    h.watchdog.start();
    h.run(500);
    expect(h.watchdog.stats().polls).toBe(10);
    h.watchdog.stop();
    h.run(500);
    expect(h.watchdog.stats().polls).toBe(10);
    const second = h.watchdog.watch({ slot: 0, workstreamId: 'ws', tenantId: 't', generation: 2 });
    h.watchdog.unwatch(first);
    expect(h.watchdog.stats().watched).toBe(1);
    h.watchdog.unwatch(second);
    expect(h.watchdog.stats().watched).toBe(0);
  });
});
