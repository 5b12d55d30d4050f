/** A fixed-bucket histogram (0.1 ms buckets up to 2 s): allocation-free on the poll path. */
export class LatencyHistogram {
  private readonly buckets = new Uint32Array(20_001);
  private n = 0;
  private maxMs = 0;

  record(ms: number): void {
    const v = Math.max(0, ms);
    const i = Math.min(this.buckets.length - 1, Math.round(v * 10));
    this.buckets[i] = (this.buckets[i] ?? 0) + 1;
    this.n++;
    if (v > this.maxMs) this.maxMs = v;
  }

  count(): number {
    return this.n;
  }

  max(): number {
    return this.maxMs;
  }

  quantile(q: number): number {
    if (this.n === 0) return 0;
    const target = Math.ceil(q * this.n);
    let seen = 0;
    for (let i = 0; i < this.buckets.length; i++) {
      seen += this.buckets[i] ?? 0;
      if (seen >= target) return i / 10;
    }
    return this.maxMs;
  }
}
