import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { ActivityClock } from './clock.js';

/**
 * Two threads, one slot: a worker stamps as fast as it can while the main thread samples and
 * commits aborts. The total order (L6) says every stamp is either before a commit — counted
 * in the version the commit sampled — or after it — and then it reports the abort. So for
 * every committed round, the worker's count of stamps that returned `true` must equal the
 * committed version minus the armed version, exactly.
 */
describe('activity clock across threads', () => {
  it('L6: a million touch-versus-commit rounds keep a total order', async () => {
    const clock = ActivityClock.create(1);
    const ctlBuf = new SharedArrayBuffer(32);
    const ctl = new Int32Array(ctlBuf);
    const worker = new Worker(new URL('./test-support/hammer-worker.mjs', import.meta.url), {
      workerData: { clock: clock.buffer, ctl: ctlBuf },
    });
    const exited = new Promise((resolve) => worker.once('exit', resolve));
    let armed = clock.arm(0, 1);
    let generation = 1;
    let committed = 0;
    let declined = 0;
    let mismatches = 0;
    let contestedRounds = 0;
    try {
      for (let attempt = 0; attempt < 1_000_000; attempt++) {
        const sampled = clock.sample(0);
        if (!clock.commitAbort(0, sampled)) {
          declined++;
          continue;
        }
        committed++;
        // Wait for the worker to see the fence and report its count for this round.
        const deadline = performance.now() + 10_000;
        while (Atomics.load(ctl, 2) !== committed) {
          if (performance.now() > deadline) throw new Error(`worker never reported round ${committed}`);
        }
        const stamps = ctl[1]!;
        if (stamps > 0) contestedRounds++;
        if (stamps !== sampled - armed) mismatches++;
        armed = clock.arm(0, ++generation);
        Atomics.store(ctl, 3, committed);
        while (Atomics.load(ctl, 4) !== committed) {
          if (performance.now() > deadline) throw new Error(`worker never resumed after round ${committed}`);
        }
      }
    } finally {
      Atomics.store(ctl, 0, 1);
      await exited;
    }
    expect(mismatches).toBe(0);
    // The window was really contested: both outcomes happened many times.
    expect(committed).toBeGreaterThan(100);
    expect(declined).toBeGreaterThan(100);
    expect(contestedRounds).toBeGreaterThan(100);
  }, 120_000);
});
