/** A session worker as the pool and the turn engine hold it. */
import type { MessagePort, Worker } from 'node:worker_threads';
import type { WorkerApi, WorkerEvent } from '@turnwarden/protocol';

export type WorkerState = 'starting' | 'warm' | 'busy' | 'dead';

export class WorkerHandle {
  state: WorkerState = 'starting';
  /** Receives the events of the turn the worker is serving. */
  onEvent: ((event: WorkerEvent) => void) | undefined;
  /** Set once `terminate` was asked for (escalation or crash cleanup). */
  terminating = false;
  /** When it last became warm (performance.now()): the pool stops the longest idle after a peak. */
  idleSince = 0;
  /**
   * The worker's OS thread id, from its `ready` report (Linux only): the thread the watchdog asks
   * the scheduler about before it aborts a silent turn (liveness/sched.ts).
   */
  tid: number | undefined = undefined;
  /** Control-port events received from the worker (it counts what it posts the same way). */
  eventsReceived = 0;
  private waiters: { n: number; resolve: () => void }[] = [];

  constructor(
    readonly id: number,
    readonly slot: number,
    readonly worker: Worker,
    readonly api: WorkerApi,
    readonly control: MessagePort,
    /** Resolves when the thread has exited. */
    readonly exited: Promise<number>,
    /** Resolves when the worker serves its API. */
    readonly ready: Promise<void>,
  ) {}

  /**
   * Resolves once `n` control events have been received. Messages on different ports are not
   * ordered: a request or result that says how many events preceded it waits for them here.
   * Resolves at once when the worker is gone (nothing more will arrive).
   */
  caughtUp(n: number): Promise<void> {
    if (this.eventsReceived >= n || this.state === 'dead') return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ n, resolve }));
  }

  /** Counts one received event and wakes the waiters it satisfies. */
  received(): void {
    this.eventsReceived++;
    if (this.waiters.length === 0) return;
    const ready = this.waiters.filter((w) => w.n <= this.eventsReceived);
    this.waiters = this.waiters.filter((w) => w.n > this.eventsReceived);
    for (const w of ready) w.resolve();
  }

  /** The worker exited: no waiter may wait forever. */
  drainWaiters(): void {
    for (const w of this.waiters.splice(0)) w.resolve();
  }
}
