/**
 * Work spread over event-loop turns. Messages from many workers arrive in one poll phase and
 * are handled back to back; if each starts heavy work (ending an aborted turn: repair, writes,
 * retiring the worker), an abort storm becomes one long block of the supervisor's thread and
 * the watchdog's timer waits behind it (L12). Work queued here runs one item per loop turn
 * (a chain of `setImmediate`, which lets timers run in between), in arrival order.
 */
export class LoopTurns {
  private readonly queue: (() => void)[] = [];
  private scheduled = false;

  /** `perTurn`: items started per loop turn (their synchronous work and microtasks run in it). */
  constructor(private readonly perTurn = 1) {}

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
      const batch = this.queue.splice(0, this.perTurn);
      if (this.queue.length > 0) this.schedule();
      else this.scheduled = false;
      for (const work of batch) work();
    });
  }
}
