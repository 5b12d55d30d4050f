import type { SchedulerStats, ThreadSched } from '../liveness/sched.js';

/** Every thread asked about spends `shares` of real time on a CPU and waiting for one. */
export class RealTimeScheduler implements SchedulerStats {
  shares = { run: 0.02, wait: 0.85 };
  readonly asked: number[] = [];
  private readonly threads = new Map<number, { at: number; runNs: number; waitNs: number }>();

  sample(tid: number): ThreadSched | undefined {
    this.asked.push(tid);
    const now = performance.now();
    const t = this.threads.get(tid) ?? { at: now, runNs: 0, waitNs: 0 };
    const ns = (now - t.at) * 1e6;
    const next = { at: now, runNs: t.runNs + this.shares.run * ns, waitNs: t.waitNs + this.shares.wait * ns };
    this.threads.set(tid, next);
    return { runNs: next.runNs, waitNs: next.waitNs };
  }
}
