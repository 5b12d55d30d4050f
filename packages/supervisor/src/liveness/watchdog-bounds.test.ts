/**
 * The watchdog's three bounds at their exact edge, on injected time. The polls are run by hand
 * (`poll()` is public for this) at chosen instants, so "idle for timeoutMs − 1" and "idle for
 * exactly timeoutMs" are two instants a millisecond apart, not two samples a poll period apart.
 *
 * What the docs promise (guarantees.md L1, L2, L11; architecture.md "The watchdog"): a version
 * change seen at time t means progress at or before t, so the idle time is measured from the
 * poll that saw the last change; a turn idle for less than timeoutMs is never aborted (L2), and
 * one idle for timeoutMs is detected (L1: "a turn that makes no progress for timeoutMs is
 * detected") — at exactly timeoutMs, the same as the deadline (turnDeadlineMs after the start,
 * L11) and the dispatch bound (dispatchMs after the start without the worker's first stamp).
 * With the poll timer running, detection comes no later than timeoutMs + pollMs after the last
 * progress, whatever the phase of the progress in the poll period (L1).
 */
import { Activity, ActivityClock, SlotStamp } from '@turnwarden/clock';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { WatchdogConfig } from '../config.js';
import { type StallInfo, Watchdog, type WatchdogDelegate } from './watchdog.js';

interface Seen {
  readonly stage: 'fired' | 'committed' | 'declined';
  readonly at: number;
  readonly info: StallInfo;
}

/** A watchdog on a manual clock; nothing polls unless the test calls `pollAt` (or starts the timer). */
function manual(config: WatchdogConfig) {
  let t = 1_000;
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
    watchdog,
    seen,
    stamp,
    now: () => t,
    /** Moves the clock to `at` (never backwards) and polls once there. */
    pollAt(at: number) {
      expect(at).toBeGreaterThanOrEqual(t);
      t = at;
      watchdog.poll();
    },
    /** Moves the clock without polling. */
    set(at: number) {
      t = at;
    },
    /** Arms the slot and watches a new turn now; returns the arm time. */
    arm(generation = 1) {
      clock.arm(0, generation);
      watchdog.watch({ slot: 0, workstreamId: 'ws', tenantId: 't', generation });
      return t;
    },
    stages: () => seen.map((s) => [s.stage, s.at, s.info.bound]),
  };
}

describe('the watchdog at exactly its bounds (injected time, polls by hand)', () => {
  const config = { timeoutMs: 250, pollMs: 100, graceMs: 1_000, dispatchMs: 5_000 };

  it('L2 L1: idle for timeoutMs − 1 since the poll that saw the last progress is not aborted; idle for exactly timeoutMs is', () => {
    const h = manual(config);
    h.arm();
    h.stamp.touch(Activity.turnEntry);
    h.pollAt(1_010); // sees the entry: the idle time counts from here
    h.stamp.touch(Activity.streamToken);
    h.pollAt(1_020); // sees the last progress
    h.pollAt(1_020 + config.timeoutMs - 1);
    expect(h.seen).toEqual([]);
    h.pollAt(1_020 + config.timeoutMs);
    expect(h.stages()).toEqual([
      ['fired', 1_270, 'idle'],
      ['committed', 1_270, 'idle'],
    ]);
    expect(h.seen[0]!.info).toMatchObject({ idleMs: config.timeoutMs, lastActivity: 'streamToken' });
  });

  it('L2: a stamp seen by the poll at exactly timeoutMs is progress: no abort, and the idle count restarts there', () => {
    const h = manual(config);
    h.arm();
    h.stamp.touch(Activity.turnEntry);
    h.pollAt(1_000);
    h.pollAt(1_000 + config.timeoutMs - 1);
    h.stamp.touch(Activity.toolHeartbeat); // lands between the last two polls
    h.pollAt(1_000 + config.timeoutMs);
    expect(h.seen).toEqual([]);
    h.pollAt(1_000 + 2 * config.timeoutMs - 1);
    expect(h.seen).toEqual([]);
    h.pollAt(1_000 + 2 * config.timeoutMs);
    expect(h.stages()).toEqual([
      ['fired', 1_500, 'idle'],
      ['committed', 1_500, 'idle'],
    ]);
    expect(h.seen[0]!.info).toMatchObject({ idleMs: config.timeoutMs, lastActivity: 'toolHeartbeat' });
  });

  it('L2: a turn never polled in between is measured from the poll that saw its progress, not from the stamp’s own time', () => {
    const h = manual(config);
    h.arm();
    h.stamp.touch(Activity.turnEntry);
    // The supervisor's thread was busy: the first poll after the stamp comes 200 ms late.
    h.pollAt(1_200);
    h.pollAt(1_200 + config.timeoutMs - 1);
    expect(h.seen).toEqual([]);
    h.pollAt(1_200 + config.timeoutMs);
    expect(h.stages()).toEqual([
      ['fired', 1_450, 'idle'],
      ['committed', 1_450, 'idle'],
    ]);
  });

  it('L11: the deadline fires at exactly turnDeadlineMs after the arm, not a millisecond before, even while the turn makes progress', () => {
    const h = manual({ ...config, timeoutMs: 10_000, turnDeadlineMs: 700 });
    const armedAt = h.arm();
    h.stamp.touch(Activity.turnEntry);
    for (let at = armedAt + 1; at < armedAt + 700; at += 99) {
      h.stamp.touch(Activity.toolHeartbeat);
      h.pollAt(at);
    }
    h.stamp.touch(Activity.toolHeartbeat);
    h.pollAt(armedAt + 699);
    expect(h.seen).toEqual([]);
    h.stamp.touch(Activity.toolHeartbeat);
    h.pollAt(armedAt + 700);
    expect(h.stages()).toEqual([
      ['fired', 1_700, 'deadline'],
      ['committed', 1_700, 'deadline'],
    ]);
  });

  it('L11: the deadline also ends a turn its worker never entered, when it comes before the dispatch bound', () => {
    const h = manual({ ...config, dispatchMs: 5_000, turnDeadlineMs: 300 });
    const armedAt = h.arm();
    h.pollAt(armedAt + 299);
    expect(h.seen).toEqual([]);
    h.pollAt(armedAt + 300);
    expect(h.stages()).toEqual([
      ['fired', 1_300, 'deadline'],
      ['committed', 1_300, 'deadline'],
    ]);
  });

  it('L9: the dispatch bound fires at exactly dispatchMs after the arm (not after the first poll), never before; the idle bound does not run until the entry', () => {
    const h = manual({ ...config, dispatchMs: 600 });
    const armedAt = h.arm();
    // The first poll comes late; the dispatch bound counts from the arm all the same.
    h.pollAt(armedAt + 400);
    h.pollAt(armedAt + 599);
    expect(h.seen).toEqual([]);
    h.pollAt(armedAt + 600);
    expect(h.stages()).toEqual([
      ['fired', 1_600, 'dispatch'],
      ['committed', 1_600, 'dispatch'],
    ]);
  });

  it('L9: a first stamp seen at dispatchMs − 1 ends the dispatch bound; the idle bound then runs from that poll', () => {
    const h = manual({ ...config, dispatchMs: 600 });
    const armedAt = h.arm();
    h.pollAt(armedAt + 300);
    h.stamp.touch(Activity.turnEntry);
    h.pollAt(armedAt + 599);
    h.pollAt(armedAt + 600);
    h.pollAt(armedAt + 599 + config.timeoutMs - 1);
    expect(h.seen).toEqual([]);
    h.pollAt(armedAt + 599 + config.timeoutMs);
    expect(h.stages()).toEqual([
      ['fired', 1_849, 'idle'],
      ['committed', 1_849, 'idle'],
    ]);
  });
});

describe('the watchdog’s detection bound on its own poll timer (injected timers)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  /**
   * Last progress `phase` ms into a poll period, then silence: when is the abort committed,
   * in ms after the last progress? Time and the fake interval timer move together, 1 ms at a time.
   */
  function delayAfter(config: WatchdogConfig, phase: number): number {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const h = manual(config);
      h.set(0);
      h.arm();
      h.watchdog.start();
      const run = (ms: number) => {
        for (let i = 0; i < ms; i++) {
          h.set(h.now() + 1);
          vi.advanceTimersByTime(1);
        }
      };
      h.stamp.touch(Activity.turnEntry);
      run(config.pollMs + phase); // whole periods, then `phase` into the next
      h.stamp.touch(Activity.streamToken);
      const last = h.now();
      run(config.timeoutMs + 3 * config.pollMs);
      h.watchdog.stop();
      const committed = h.seen.find((s) => s.stage === 'committed');
      expect(committed, `no commit for the phase ${phase}`).toBeDefined();
      return committed!.at - last;
    } finally {
      vi.useRealTimers();
    }
  }

  it('L1 L2: for every phase of the last progress in the poll period, the commit comes no earlier than timeoutMs and no later than timeoutMs + pollMs after it (a timeout that is a multiple of the sampling period, and one that is not)', () => {
    for (const config of [
      { timeoutMs: 200, pollMs: 100, graceMs: 1_000, dispatchMs: 5_000 },
      { timeoutMs: 230, pollMs: 100, graceMs: 1_000, dispatchMs: 5_000 },
    ]) {
      const delays: number[] = [];
      for (let phase = 0; phase < config.pollMs; phase++) {
        const delay = delayAfter(config, phase);
        delays.push(delay);
        const where = `timeoutMs ${config.timeoutMs}, phase ${phase}`;
        expect(delay, where).toBeGreaterThanOrEqual(config.timeoutMs);
        expect(delay, where).toBeLessThanOrEqual(config.timeoutMs + config.pollMs);
      }
      // Sampling twice per pollMs: the worst phase is within half a period past the timeout
      // when the timeout is a multiple of the half period, and within a full one otherwise.
      const half = config.pollMs / 2;
      const worst = Math.max(...delays);
      expect(worst, `timeoutMs ${config.timeoutMs}: the worst phase`).toBeLessThanOrEqual(
        config.timeoutMs % half === 0 ? config.timeoutMs + half : config.timeoutMs + config.pollMs,
      );
      // And the fastest detection is at the timeout itself (a stamp just before a sample).
      expect(Math.min(...delays), `timeoutMs ${config.timeoutMs}: the best phase`).toBeLessThan(
        config.timeoutMs + half,
      );
    }
  });
});
