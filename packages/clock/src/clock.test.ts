import { describe, expect, it, vi } from 'vitest';
import { Activity } from './activity.js';
import { ActivityClock, isFenced } from './clock.js';
import { ACT, CODE, FENCE, HIGH, slotBase, TICKS_PER_MS, TIME } from './layout.js';
import { SlotStamp } from './stamp.js';

function manualClock(slots = 4) {
  let now = 1_000;
  const clock = ActivityClock.create(slots, () => now);
  return {
    clock,
    stamp: (slot: number) => new SlotStamp(clock.buffer, slot),
    set: (ms: number) => {
      now = ms;
      clock.advance();
    },
  };
}

describe('activity clock', () => {
  it('L6: a commit against the sampled version fences every later stamp', () => {
    const { clock, stamp } = manualClock();
    const s = stamp(1);
    clock.arm(1, 7);
    expect(s.touch(Activity.turnEntry)).toBe(true);
    const sampled = clock.sample(1);
    expect(clock.commitAbort(1, sampled)).toBe(true);
    expect(isFenced(clock.sample(1))).toBe(true);
    // The stamp is ordered after the commit: it reports the abort and cannot revive the turn.
    expect(s.touch(Activity.streamToken)).toBe(false);
    expect(s.fenced()).toBe(true);
    expect(isFenced(clock.sample(1))).toBe(true);
  });

  it('L4: activity between sample and commit makes the commit decline and leaves no fence', () => {
    const { clock, stamp } = manualClock();
    const s = stamp(0);
    clock.arm(0, 1);
    const sampled = clock.sample(0);
    expect(s.touch(Activity.toolHeartbeat)).toBe(true);
    expect(clock.commitAbort(0, sampled)).toBe(false);
    expect(isFenced(clock.sample(0))).toBe(false);
    expect(s.touch(Activity.toolHeartbeat)).toBe(true);
  });

  it('L6: an abort sampled against one turn cannot commit against the next (arm moves the version)', () => {
    const { clock } = manualClock();
    clock.arm(2, 1);
    const stale = clock.sample(2);
    clock.arm(2, 2);
    expect(clock.commitAbort(2, stale)).toBe(false);
    expect(clock.generation(2)).toBe(2);
    // The version only moves forward: a stamp then an arm never lands back on a sampled value.
    const sampled = clock.sample(2);
    new SlotStamp(clock.buffer, 2).touch(Activity.streamToken);
    const armed = clock.arm(2, 3);
    expect(armed).toBe(sampled + 2);
    expect(clock.commitAbort(2, sampled)).toBe(false);
  });

  it('arm clears a committed fence for the next turn', () => {
    const { clock, stamp } = manualClock();
    const s = stamp(3);
    clock.arm(3, 1);
    expect(clock.fence(3)).toBe(true);
    expect(clock.fence(3)).toBe(false);
    expect(s.touch(Activity.streamToken)).toBe(false);
    clock.arm(3, 2);
    expect(s.touch(Activity.streamToken)).toBe(true);
  });

  it('L10: stamps carry the shared monotonic time published by the supervisor', () => {
    const { clock, stamp, set } = manualClock();
    const s = stamp(0);
    clock.arm(0, 1);
    set(2_000);
    s.touch(Activity.toolStart);
    expect(clock.lastCode(0)).toBe(Activity.toolStart);
    set(2_250);
    expect(clock.idleMs(0)).toBeCloseTo(250, 1);
    // A wall-clock jump is invisible: the clock never reads Date.
    const realNow = Date.now;
    Date.now = () => realNow() + 3_600_000;
    try {
      set(2_260);
      expect(clock.idleMs(0)).toBeCloseTo(260, 1);
    } finally {
      Date.now = realNow;
    }
  });

  it("L10: a clock attached from another thread publishes NOW on the creator's scale, and commits on the same slots", () => {
    let now = 1_000;
    const clock = ActivityClock.create(2, () => now);
    let other = 5_000; // another thread's source, 4 s ahead of the creator's
    const attached = ActivityClock.attach(clock.buffer, () => other - 4_000, clock.epoch);
    expect(attached.slots).toBe(2);
    expect(attached.epoch).toBe(1_000);
    const s = new SlotStamp(clock.buffer, 1);
    clock.arm(1, 3);
    now = 1_500;
    other = 5_500;
    attached.advance();
    s.touch(Activity.toolStart);
    other = 5_800;
    attached.advance();
    // The creator reads the stamp's time on its own scale: 300 ms idle.
    expect(clock.idleMs(1)).toBeCloseTo(300, 1);
    const v = attached.sample(1);
    expect(attached.commitAbort(1, v)).toBe(true);
    expect(isFenced(clock.sample(1))).toBe(true);
    expect(s.touch(Activity.toolStart)).toBe(false);
    expect(() => ActivityClock.attach(new SharedArrayBuffer(64 * 4), () => 0, 0)).toThrow(RangeError);
    expect(() => ActivityClock.attach(clock.buffer, () => 0, Number.NaN)).toThrow(RangeError);
  });

  it('folds the counter before it can reach the fence bit, preserving a committed fence', () => {
    const { clock, stamp } = manualClock();
    const words = new Int32Array(clock.buffer);
    const i = slotBase(1) + ACT;
    Atomics.store(words, i, HIGH - 1);
    const s = stamp(1);
    expect(s.touch(Activity.streamToken)).toBe(true); // reaches HIGH
    expect(s.touch(Activity.streamToken)).toBe(true); // sees HIGH, folds
    expect(Atomics.load(words, i) & HIGH).toBe(0);
    expect(isFenced(Atomics.load(words, i))).toBe(false);
    Atomics.store(words, i, (HIGH - 1) | FENCE);
    expect(s.touch(Activity.streamToken)).toBe(false);
    expect(s.touch(Activity.streamToken)).toBe(false);
    expect(Atomics.load(words, i) & HIGH).toBe(0);
    expect(isFenced(Atomics.load(words, i))).toBe(true);
    // The supervisor's arm also adds 1 and may be the one that reaches HIGH: the worker's next
    // stamp sees HIGH in the value before its own add and folds.
    Atomics.store(words, i, HIGH);
    expect(s.touch(Activity.streamToken)).toBe(true);
    expect(Atomics.load(words, i)).toBe(1);
  });

  it('refuses out-of-range slots and sizes', () => {
    for (const n of [0, -1, 1.5, 1_000_001])
      expect(() => ActivityClock.create(n)).toThrow(/slots must be an integer/);
    expect(ActivityClock.create(1).slots).toBe(1);
    expect(ActivityClock.create(1_000_000).slots).toBe(1_000_000); // the upper bound is allowed
    const { clock } = manualClock(2);
    for (const slot of [2, -1, 0.5]) expect(() => clock.sample(slot)).toThrow('is out of range 0..1');
    expect(() => clock.arm(2, 1)).toThrow(/out of range/);
    expect(() => new SlotStamp(clock.buffer, 2)).toThrow(/out of range/); // one past the last slot
    expect(() => new SlotStamp(clock.buffer, 1)).not.toThrow();
  });

  it('L10: the default time source is the monotonic clock, read by nowMs', () => {
    const before = performance.now();
    const now = ActivityClock.create(1).nowMs();
    expect(now).toBeGreaterThanOrEqual(before);
    expect(now).toBeLessThanOrEqual(performance.now());
    const { clock, set } = manualClock();
    set(4_321);
    expect(clock.nowMs()).toBe(4_321);
  });

  it('arm starts the slot afresh: no code, no idle time, the generation, and no other slot touched', () => {
    const { clock, stamp, set } = manualClock(3);
    stamp(0).touch(Activity.toolHeartbeat);
    stamp(2).touch(Activity.streamToken);
    set(9_000);
    clock.arm(1, 1);
    stamp(1).touch(Activity.toolStart);
    set(12_000);
    expect([clock.lastCode(1), clock.idleMs(1)]).toEqual([Activity.toolStart, 3_000]);
    clock.arm(1, 42);
    expect([clock.lastCode(1), clock.idleMs(1), clock.generation(1)]).toEqual([0, 0, 42]);
    expect([clock.lastCode(0), clock.lastCode(2)]).toEqual([Activity.toolHeartbeat, Activity.streamToken]);
  });

  it('L6: a commit against an already fenced sample, or a second fence, does nothing', () => {
    const { clock, stamp } = manualClock();
    clock.arm(0, 1);
    stamp(0).touch(Activity.turnEntry);
    expect(clock.fence(0)).toBe(true);
    const fencedSample = clock.sample(0);
    expect(clock.commitAbort(0, fencedSample)).toBe(false);
    expect(clock.fence(0)).toBe(false);
    expect(stamp(0).fenced()).toBe(true);
    clock.arm(0, 2);
    expect(stamp(0).fenced()).toBe(false);
  });
});

describe('stamp publication order', () => {
  it('L6 L1: a stamp writes its time and code before the Atomics.add that publishes it', () => {
    // A supervisor that loads ACT and sees a new version must also see that stamp's TIME and
    // CODE (the seq-cst add publishes the plain stores before it). Checked where it is decided:
    // at the moment of the add, both words already hold the stamp's values.
    const { clock, stamp, set } = manualClock();
    const s = stamp(2);
    clock.arm(2, 1);
    set(5_000);
    const words = new Int32Array(clock.buffer);
    const base = slotBase(2);
    const seen: { time: number; code: number }[] = [];
    const realAdd = Atomics.add;
    const spy = vi.spyOn(Atomics, 'add').mockImplementation(((arr: Int32Array, i: number, v: number) => {
      if (arr.buffer === clock.buffer && i === base + ACT) {
        seen.push({ time: words[base + TIME]!, code: words[base + CODE]! });
      }
      return realAdd(arr, i, v);
    }) as typeof Atomics.add);
    try {
      s.touch(Activity.toolHeartbeat);
      set(6_000);
      s.touch(Activity.streamToken);
    } finally {
      spy.mockRestore();
    }
    expect(seen).toEqual([
      { time: 5_000 * TICKS_PER_MS - 1_000 * TICKS_PER_MS, code: Activity.toolHeartbeat },
      { time: 6_000 * TICKS_PER_MS - 1_000 * TICKS_PER_MS, code: Activity.streamToken },
    ]);
  });
});
