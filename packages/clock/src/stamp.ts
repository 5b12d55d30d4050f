import { ACT, CODE, FENCE, GEN, HIGH, NOW, slotBase, TIME } from './layout.js';

/**
 * The worker's side of one clock slot. `touch` is the hot path: one atomic load of NOW, two
 * plain stores and one `Atomics.add` — lock-free and allocation-free. The plain stores are
 * published by the seq-cst add that follows them, so a supervisor that loads ACT and sees the
 * new value also sees TIME and CODE at least as new.
 */
export class SlotStamp {
  readonly slot: number;
  private readonly words: Int32Array;
  private readonly base: number;

  constructor(buffer: SharedArrayBuffer, slot: number) {
    this.words = new Int32Array(buffer);
    this.slot = slot;
    this.base = slotBase(slot);
    if (this.base + ACT >= this.words.length) throw new RangeError(`clock slot ${slot} is out of range`);
  }

  /**
   * Stamps progress. Returns false when the armed turn's abort has already committed: the
   * stamp is then ordered after the commit (L6) and cannot revive the turn — the caller
   * must unwind.
   */
  touch(code: number): boolean {
    const w = this.words;
    const b = this.base;
    w[b + TIME] = Atomics.load(w, NOW);
    w[b + CODE] = code;
    const before = Atomics.add(w, b + ACT, 1);
    if ((before & HIGH) !== 0) this.fold();
    return (before & FENCE) === 0;
  }

  /** The generation of the turn armed on the slot (written by the supervisor's `arm`). */
  generation(): number {
    return Atomics.load(this.words, this.base + GEN);
  }

  /** True once the armed turn's abort has committed. */
  fenced(): boolean {
    return (Atomics.load(this.words, this.base + ACT) & FENCE) !== 0;
  }

  /**
   * Keeps the counter out of the FENCE bit: after 2^30 stamps the stamping thread clears bit 30
   * with a CAS that preserves FENCE. (A sampled value could only recur after another 2^30
   * stamps inside one sampling interval, which no turn reaches.)
   */
  private fold(): void {
    const w = this.words;
    const i = this.base + ACT;
    for (;;) {
      const v = Atomics.load(w, i);
      if ((v & HIGH) === 0) return;
      if (Atomics.compareExchange(w, i, v, v & ~HIGH) === v) return;
    }
  }
}
