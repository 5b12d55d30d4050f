/**
 * Memory layout of the activity clock. Int32 words in one SharedArrayBuffer:
 *
 *   header (one 64-byte line):  NOW — the shared monotonic time in ticks, written by the
 *                               supervisor's poll; workers copy it into their stamps (L10).
 *   slots (one 64-byte line each, so two workers never share a cache line):
 *     ACT   activity version: bit 31 = FENCE (abort committed), bits 0..30 = counter.
 *           Every stamp adds 1; every arm (new turn) clears FENCE and adds 1, so the value
 *           only moves forward and a sampled value names one generation at one point in its
 *           activity. The abort commit is one CAS on this word (L6).
 *     TIME  NOW at the last stamp (ticks).
 *     CODE  what the turn was doing at the last stamp (ActivityCode).
 *     GEN   the generation of the armed turn (informational; the CAS on ACT is what binds).
 */
const WORDS_PER_LINE = 16;
const HEADER_WORDS = WORDS_PER_LINE;
export const NOW = 0;
export const SLOT_COUNT = 1;

export const ACT = 0;
export const TIME = 1;
export const CODE = 2;
export const GEN = 3;

/** Bit 31: the abort for the armed generation has committed; later stamps cannot revive it. */
export const FENCE = 0x80000000 | 0;
/** Bit 30: the counter is about to reach the fence bit and is folded back by the stamping thread. */
export const HIGH = 0x40000000;
export const COUNTER_MASK = 0x3fffffff;

/** Ticks per millisecond of the shared time (1 tick = 62.5 µs; int32 wraps after ~37 h, diffs are modular). */
export const TICKS_PER_MS = 16;

export function slotBase(slot: number): number {
  return HEADER_WORDS + slot * WORDS_PER_LINE;
}

export function byteLengthFor(slots: number): number {
  return (HEADER_WORDS + slots * WORDS_PER_LINE) * Int32Array.BYTES_PER_ELEMENT;
}
