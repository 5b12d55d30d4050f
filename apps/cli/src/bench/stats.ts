/** Small order statistics over samples (nearest-rank quantiles; NaN when there are none). */

function sortedCopy(xs: readonly number[]): number[] {
  return [...xs].sort((a, b) => a - b);
}

export function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = sortedCopy(xs);
  const rank = Math.min(s.length, Math.max(1, Math.ceil(q * s.length)));
  return s[rank - 1] ?? Number.NaN;
}

export function median(xs: readonly number[]): number {
  return quantile(xs, 0.5);
}

export function max(xs: readonly number[]): number {
  return xs.length === 0 ? Number.NaN : Math.max(...xs);
}

export function min(xs: readonly number[]): number {
  return xs.length === 0 ? Number.NaN : Math.min(...xs);
}

/** Resolves after `ms` on a timer (yields to the event loop). */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Yields one macrotask turn (lets timers and messages run). */
export function yieldToLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * A setInterval measuring its own lateness, the way the watchdog's tick does: each sample is
 * how long after its due time a tick ran. `stop` ends it and returns the samples (ms).
 */
export function latenessProbe(intervalMs: number): { stop: () => number[] } {
  const samples: number[] = [];
  let dueAt = performance.now() + intervalMs;
  const timer = setInterval(() => {
    const now = performance.now();
    samples.push(Math.max(0, now - dueAt));
    dueAt = Math.max(dueAt, now) + intervalMs;
  }, intervalMs);
  return {
    stop: () => {
      clearInterval(timer);
      return samples;
    },
  };
}
