/**
 * Work spread over event-loop turns. Messages from many workers arrive in one poll phase and
 * are handled back to back; if each starts heavy work (ending an aborted turn: repair, writes,
 * retiring the worker), an abort storm becomes one long block of the supervisor's thread and
 * the watchdog's timer waits behind it (L12). Work queued here runs in arrival order, in loop
 * turns of its own (a chain of `setImmediate`, which lets timers run in between): items run back
 * to back only while they stay within `budgetMs` of the loop turn's start, so light items (a
 * command's start) never wait behind one another for a loop turn each, and a heavy one yields
 * right after it.
 */
export class LoopTurns {
  private readonly queue: (() => void)[] = [];
  private scheduled = false;

  constructor(
    private readonly budgetMs = 1,
    private readonly now: () => number = () => performance.now(),
  ) {}

  run(work: () => void): void {
    this.queue.push(work);
    if (!this.scheduled) this.schedule();
  }

  get pending(): number {
    return this.queue.length;
  }

  private schedule(): void {
    this.scheduled = true;
    setImmediate(() => {
      const start = this.now();
      do {
        const work = this.queue.shift();
        work?.();
      } while (this.queue.length > 0 && this.now() - start < this.budgetMs);
      if (this.queue.length > 0) this.schedule();
      else this.scheduled = false;
    });
  }
}
