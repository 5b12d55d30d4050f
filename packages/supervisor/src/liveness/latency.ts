const BUCKETS = 20_001;

/**
 * A fixed-bucket histogram (0.1 ms buckets up to 2 s): allocation-free on the poll path. Given a
 * buffer (`LatencyHistogram.bytes` long, a `SharedArrayBuffer`), it lives there: the watchdog's
 * own thread records and the supervisor's thread reads the same figures.
 */
export class LatencyHistogram {
  /** Bytes of a buffer that holds one histogram. */
  static readonly bytes = 16 + BUCKETS * 4;
  private readonly buckets: Uint32Array;
  /** [count, max]. */
  private readonly totals: Float64Array;

  constructor(buffer: ArrayBufferLike = new ArrayBuffer(LatencyHistogram.bytes)) {
    if (buffer.byteLength < LatencyHistogram.bytes) {
      throw new RangeError(`a latency histogram needs ${LatencyHistogram.bytes} bytes`);
    }
    this.totals = new Float64Array(buffer, 0, 2);
    this.buckets = new Uint32Array(buffer, 16, BUCKETS);
  }

  record(ms: number): void {
    const v = Math.max(0, ms);
    const i = Math.min(BUCKETS - 1, Math.round(v * 10));
    this.buckets[i] = (this.buckets[i] ?? 0) + 1;
    this.totals[0] = (this.totals[0] ?? 0) + 1;
    if (v > (this.totals[1] ?? 0)) this.totals[1] = v;
  }

  count(): number {
    return this.totals[0] ?? 0;
  }

  max(): number {
    return this.totals[1] ?? 0;
  }

  quantile(q: number): number {
    const n = this.count();
    if (n === 0) return 0;
    const target = Math.ceil(q * n);
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.buckets[i] ?? 0;
      if (seen >= target) return i / 10;
    }
    return this.max();
  }
}
