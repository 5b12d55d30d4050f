/**
 * What the OS scheduler says of a thread, for the watchdog: a turn whose thread was runnable but
 * not scheduled (a saturated host) is not progressless through its own fault. On Linux,
 * `/proc/self/task/<tid>/schedstat` holds a thread's cumulative on-CPU time (ns), its run-queue
 * wait (ns: runnable, not running) and its timeslices. Elsewhere there is nothing to read, and
 * the watchdog judges silence alone, as it always did.
 *
 * The verdict over a window of a silent turn (`classify`):
 * - **wedged**: one of its threads was on a CPU for at least half the window — or, over the
 *   silence's windows, for a twentieth of a window in total (the CPU budget): it runs and does not
 *   stamp;
 * - **starved**: else, one of its threads waited on a run queue for at least a quarter of the
 *   window: it wanted the CPU and the host did not give it;
 * - **stalled**: neither: it was asleep (waiting on something that never came).
 */
import { readFileSync } from 'node:fs';

/** A thread's cumulative scheduler figures. */
export interface ThreadSched {
  /** Time on a CPU (ns). */
  readonly runNs: number;
  /** Time runnable but waiting on a run queue (ns). */
  readonly waitNs: number;
}

/**
 * Reads a thread's scheduler figures. Called on the supervisor's thread, by the watchdog, only for
 * a turn silent for half its idle bound (and once a second for the supervisor's own thread): it
 * must be cheap and synchronous, and answer undefined — never throw — for a thread that exited.
 */
export interface SchedulerStats {
  sample(tid: number): ThreadSched | undefined;
}

/** Linux: `/proc/self/task/<tid>/schedstat` ("<run ns> <wait ns> <timeslices>"). */
export const procSchedStats: SchedulerStats = {
  sample(tid) {
    let text: string;
    try {
      text = readFileSync(`/proc/self/task/${tid}/schedstat`, 'latin1');
    } catch {
      return undefined; // the thread exited (ENOENT, ESRCH), or /proc is not there
    }
    const space = text.indexOf(' ');
    const runNs = Number(text.slice(0, space));
    const waitNs = Number(text.slice(space + 1, text.indexOf(' ', space + 1)));
    return space > 0 && Number.isFinite(runNs) && Number.isFinite(waitNs) ? { runNs, waitNs } : undefined;
  },
};

/** ≥ this share of the window waiting on a run queue: the turn was starved (see `classify`). */
const STARVED_WAIT_SHARE = 0.25;
/** ≥ this share of the window on a CPU: wedged. */
const WEDGED_RUN_SHARE = 0.5;
/**
 * ≥ this share of a window on a CPU in total, over the silence's windows so far: wedged (the CPU
 * budget). A starved but healthy thread stamps as soon as it runs — its timers and messages make
 * progress in well under a millisecond each — so CPU it burns without a stamp is spinning.
 */
const WEDGED_BUDGET_SHARE = 0.05;
/**
 * Starvation defers an abort, never forever: a silence this many times `timeoutMs` long is
 * aborted whatever its threads' verdict (the watchdog's `judge`). What it bounds: a thread that is
 * mostly asleep but wakes often enough, on a saturated host, to wait a quarter of every window.
 */
export const STARVED_MAX_IDLE_FACTOR = 4;

export type SchedVerdict = 'starved' | 'wedged' | 'stalled';

/** What the watchdog read of a silent turn's threads over one window (logged with the verdict). */
export interface SchedReading {
  readonly verdict: SchedVerdict;
  /** The window the shares are of (ms). */
  readonly windowMs: number;
  /** The largest share of the window one of the turn's threads spent on a CPU. */
  readonly runShare: number;
  /** The largest share of the window one of the turn's threads spent waiting for a CPU. */
  readonly waitShare: number;
  /** CPU time (ms) the turn's busiest thread used since the first window of this silence. */
  readonly runMs: number;
}

/**
 * The verdict over a window of `windowMs`: `runMs` and `waitMs` are the busiest thread's on-CPU
 * and run-queue time in it, `budgetRunMs` the on-CPU time over this silence's windows so far,
 * this one included, `nominalWindowMs` half the idle bound.
 *
 * The thresholds, from what the kernel reports (measured on the 2-core VM, load average 33):
 * a sleeping worker waits 0.00 of the window; a spinning one (nice 10) ran 0.72–0.96 and waited
 * 0.03–0.28 over 500 ms windows, 0.67 and 0.20 over a 150 ms one — run and wait do not add up to
 * the window (time stolen by the hypervisor is neither; a running thread's CPU time is booked at
 * the scheduler's tick; a wait in progress is booked when it ends), so "on a CPU nearly all the
 * window" cannot be asked for. Wedged: half the window on a CPU — the thread had the CPU more
 * than anything else and did not stamp. Starved: a quarter of the window waiting — a hundred
 * times what a sleeping thread waits, so a stall is never taken for it, and low enough that a
 * starved thread on a VM that loses time to steal still is; a mistaken "starved" costs one more
 * window, never the abort. A wedge on a saturated host is itself starved (always runnable,
 * rarely running): the budget recognises it by the CPU it burns without a stamp — a twentieth
 * of a window in all, over as many windows as that takes: on this machine 32 spinning workers
 * get a 16th of a core each (about 30 ms of a 500 ms window), so a half-window budget kept an
 * abort storm's wedges alive 4 s past their bound (`bench --only storm`) and a tenth one window
 * more, where a twentieth finds them at the bound. A healthy thread that is starved runs for
 * well under a millisecond before it stamps.
 */
export function classify(
  windowMs: number,
  runMs: number,
  waitMs: number,
  budgetRunMs: number,
  nominalWindowMs: number,
): SchedReading {
  const span = Math.max(windowMs, 1e-3);
  const runShare = Math.min(1, runMs / span);
  const waitShare = Math.min(1, waitMs / span);
  const verdict: SchedVerdict =
    runShare >= WEDGED_RUN_SHARE || budgetRunMs >= WEDGED_BUDGET_SHARE * nominalWindowMs
      ? 'wedged'
      : waitShare >= STARVED_WAIT_SHARE
        ? 'starved'
        : 'stalled';
  return {
    verdict,
    windowMs: Math.round(windowMs),
    runShare: round2(runShare),
    waitShare: round2(waitShare),
    runMs: Math.round(budgetRunMs),
  };
}

const round2 = (x: number) => Math.round(x * 100) / 100;

/**
 * The supervisor's own thread over the last ~10 s: the share of wall time it spent on a CPU and
 * waiting for one. The wait share is the host's saturation as the runtime feels it (its thread
 * is not niced; session workers are, so their own load shows less here than another process's).
 * Read at most once per `periodMs`, from the watchdog's poll.
 */
export class HostSaturation {
  private readonly at: number[] = [];
  private readonly run: number[] = [];
  private readonly wait: number[] = [];

  constructor(
    private readonly stats: SchedulerStats,
    private readonly tid: number,
    private readonly periodMs = 1_000,
    private readonly samples = 11,
  ) {}

  observe(now: number): void {
    const last = this.at[this.at.length - 1];
    if (last !== undefined && now - last < this.periodMs) return;
    let s: ThreadSched | undefined;
    try {
      s = this.stats.sample(this.tid);
    } catch {
      s = undefined;
    }
    if (s === undefined) return;
    this.at.push(now);
    this.run.push(s.runNs);
    this.wait.push(s.waitNs);
    if (this.at.length > this.samples) {
      this.at.shift();
      this.run.shift();
      this.wait.shift();
    }
  }

  /** Over the samples kept (undefined until two were read). */
  read(): { readonly runShare: number; readonly waitShare: number; readonly windowMs: number } | undefined {
    const n = this.at.length;
    if (n < 2) return undefined;
    const windowMs = this.at[n - 1]! - this.at[0]!;
    if (!(windowMs > 0)) return undefined;
    const ns = windowMs * 1e6;
    return {
      runShare: round2(Math.min(1, (this.run[n - 1]! - this.run[0]!) / ns)),
      waitShare: round2(Math.min(1, (this.wait[n - 1]! - this.wait[0]!) / ns)),
      windowMs: Math.round(windowMs),
    };
  }
}
