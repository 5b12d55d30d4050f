import {
  ACT,
  byteLengthFor,
  CODE,
  COUNTER_MASK,
  FENCE,
  GEN,
  NOW,
  SLOT_COUNT,
  slotBase,
  TICKS_PER_MS,
  TIME,
} from './layout.js';

/** A monotonic millisecond source (performance.now by default; tests inject their own). */
export type MonotonicMs = () => number;

/**
 * The supervisor's side of the activity clock: creates the shared buffer, advances the
 * shared time, arms slots for new turns, samples them and commits aborts.
 */
export class ActivityClock {
  readonly buffer: SharedArrayBuffer;
  readonly slots: number;
  private readonly words: Int32Array;
  private readonly now: MonotonicMs;
  private readonly epochMs: number;

  private constructor(buffer: SharedArrayBuffer, now: MonotonicMs, epochMs?: number) {
    this.buffer = buffer;
    this.words = new Int32Array(buffer);
    this.slots = Atomics.load(this.words, SLOT_COUNT);
    this.now = now;
    this.epochMs = epochMs ?? now();
  }

  static create(slots: number, now: MonotonicMs = () => performance.now()): ActivityClock {
    if (!Number.isInteger(slots) || slots < 1 || slots > 1_000_000) {
      throw new RangeError(`clock slots must be an integer in 1..1000000, got ${slots}`);
    }
    const buffer = new SharedArrayBuffer(byteLengthFor(slots));
    Atomics.store(new Int32Array(buffer), SLOT_COUNT, slots);
    const clock = new ActivityClock(buffer, now);
    clock.advance();
    return clock;
  }

  /**
   * The same clock seen from another thread (the watchdog's own thread): `now` must read the same
   * monotonic time as the creator's source, and `epochMs` is the creator's (`epoch`), so that both
   * publish `NOW` on one scale.
   */
  static attach(buffer: SharedArrayBuffer, now: MonotonicMs, epochMs: number): ActivityClock {
    const slots = Atomics.load(new Int32Array(buffer), SLOT_COUNT);
    if (!Number.isInteger(slots) || slots < 1) throw new RangeError('not an activity clock buffer');
    if (!Number.isFinite(epochMs)) throw new RangeError(`clock epoch must be finite, got ${epochMs}`);
    return new ActivityClock(buffer, now, epochMs);
  }

  /** The source time `NOW` counts from (for `attach`). */
  get epoch(): number {
    return this.epochMs;
  }

  /** Milliseconds on the clock's monotonic source (never wall-clock: L10). */
  nowMs(): number {
    return this.now();
  }

  /** Publishes the current monotonic time to every thread; returns it in ms. */
  advance(): number {
    const ms = this.now();
    Atomics.store(this.words, NOW, ((ms - this.epochMs) * TICKS_PER_MS) | 0);
    return ms;
  }

  /**
   * Arms a slot for a new turn: clears FENCE and moves the version forward in one CAS, so an
   * abort sampled against the previous turn can never commit against this one.
   * Call only while no turn runs on the slot.
   */
  arm(slot: number, generation: number): number {
    const b = this.base(slot);
    const w = this.words;
    w[b + GEN] = generation | 0;
    w[b + TIME] = Atomics.load(w, NOW);
    w[b + CODE] = 0;
    for (;;) {
      const v = Atomics.load(w, b + ACT);
      const next = ((v & ~FENCE) + 1) & COUNTER_MASK;
      if (Atomics.compareExchange(w, b + ACT, v, next) === v) return next;
    }
  }

  /** The slot's activity version (bit 31 set once an abort committed). */
  sample(slot: number): number {
    return Atomics.load(this.words, this.base(slot) + ACT);
  }

  /**
   * The abort commit (L6): one compare-and-swap that succeeds only if the slot still holds the
   * sampled version — no stamp and no re-arm since the sample — and that sets FENCE, so every
   * later stamp sees the abort. Returns false (the abort declines) otherwise.
   */
  commitAbort(slot: number, sampled: number): boolean {
    if ((sampled & FENCE) !== 0) return false;
    const i = this.base(slot) + ACT;
    return Atomics.compareExchange(this.words, i, sampled, sampled | FENCE) === sampled;
  }

  /**
   * Unconditional abort commit (force cancel, shutdown, worker death): sets FENCE whatever the
   * activity. Returns false if the slot was already fenced.
   */
  fence(slot: number): boolean {
    return (Atomics.or(this.words, this.base(slot) + ACT, FENCE) & FENCE) === 0;
  }

  /** Milliseconds since the slot's last stamp, by the shared time (modular int32 ticks). */
  idleMs(slot: number): number {
    const w = this.words;
    const diff = (Atomics.load(w, NOW) - Atomics.load(w, this.base(slot) + TIME)) | 0;
    return diff / TICKS_PER_MS;
  }

  lastCode(slot: number): number {
    return Atomics.load(this.words, this.base(slot) + CODE);
  }

  generation(slot: number): number {
    return Atomics.load(this.words, this.base(slot) + GEN);
  }

  private base(slot: number): number {
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.slots) {
      throw new RangeError(`clock slot ${slot} is out of range 0..${this.slots - 1}`);
    }
    return slotBase(slot);
  }
}

export function isFenced(version: number): boolean {
  return (version & FENCE) !== 0;
}
