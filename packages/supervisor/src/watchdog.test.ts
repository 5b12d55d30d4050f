/**
 * The watchdog alone, on injected time: a manual monotonic clock and fake interval timers that
 * move together one millisecond at a time, so detection bounds are exact, not sampled.
 */
import { Activity, ActivityClock, SlotStamp } from '@turnwarden/clock';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { WatchdogConfig } from './config.js';
import { type StallInfo, Watchdog, type WatchdogDelegate } from './watchdog.js';

type Seen = { stage: 'fired' | 'committed' | 'declined'; at: number; info: StallInfo };

function harness(config: WatchdogConfig) {
  let t = 0;
  const clock = ActivityClock.create(1, () => t);
  const seen: Seen[] = [];
  const delegate: WatchdogDelegate = {
    fired: (_w, info) => void seen.push({ stage: 'fired', at: t, info }),
    committed: (_w, info) => void seen.push({ stage: 'committed', at: t, info }),
    declined: (_w, info) => void seen.push({ stage: 'declined', at: t, info }),
  };
  const watchdog = new Watchdog(clock, config, delegate, pino({ level: 'silent' }));
  const stamp = new SlotStamp(clock.buffer, 0);
  return {
    clock,
    watchdog,
    seen,
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
      watchdog.watch({ slot: 0, workstreamId: 'ws', tenantId: 't', generation });
      watchdog.start();
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
  });
});
