/**
 * Work a turn handed to the supervisor's side — a thread-isolated task (isolation.ts) or a host
 * tool call (host-tools.ts) — tracked per workstream and task id, so that the tool's abort
 * (`cancel`) or the turn's end (`cancelTurn`, at the turn's end) can abort it. Cancelling marks the turn
 * its work reclaimed (`reclaimWork`): its session worker was only waiting on this work, and is kept.
 */
import { errors } from '@turnwarden/protocol';
import type { Turn } from '../turn/turn.js';

interface Task {
  readonly taskId: string;
  readonly turn: Turn;
  readonly controller: AbortController;
}

export class TurnTasks {
  private readonly byWorkstream = new Map<string, Map<string, Task>>();

  /** `onCancel` runs once per task cancelled (counters, a log line), before its signal aborts. */
  constructor(private readonly onCancel: (turn: Turn, taskId: string, why: string) => void = () => {}) {}

  /**
   * Registers a task of the workstream's running turn of `generation`; its signal aborts when
   * it is cancelled. A turn that has ended (or another generation) is refused: TURN_ABORTED.
   */
  start(
    turn: Turn | undefined,
    req: { readonly workstreamId: string; readonly generation: number; readonly taskId: string },
    what: string,
  ): { readonly turn: Turn; readonly signal: AbortSignal; end(): void } {
    if (turn === undefined || turn.generation !== req.generation || turn.ending) {
      throw errors.turnAborted(`the turn that asked for the ${what} has ended`);
    }
    const controller = new AbortController();
    const tasks = this.byWorkstream.get(req.workstreamId) ?? new Map<string, Task>();
    tasks.set(req.taskId, { taskId: req.taskId, turn, controller });
    this.byWorkstream.set(req.workstreamId, tasks);
    return {
      turn,
      signal: controller.signal,
      end: () => {
        tasks.delete(req.taskId);
        if (tasks.size === 0 && this.byWorkstream.get(req.workstreamId) === tasks) {
          this.byWorkstream.delete(req.workstreamId);
        }
      },
    };
  }

  /** The tool's abort (from the worker). */
  cancel(workstreamId: string, taskId: string, why: string): void {
    const task = this.byWorkstream.get(workstreamId)?.get(taskId);
    if (task !== undefined) this.abort(task, why);
  }

  /** The turn ended: its tasks still running are cancelled. */
  cancelTurn(turn: Turn): void {
    for (const task of this.byWorkstream.get(turn.workstreamId)?.values() ?? []) {
      if (task.turn === turn) this.abort(task, 'its turn ended');
    }
  }

  /** Shutdown: every task's signal aborts (not counted as a cancellation). */
  abortAll(): void {
    for (const tasks of this.byWorkstream.values())
      for (const task of tasks.values()) task.controller.abort();
  }

  get running(): number {
    let n = 0;
    for (const tasks of this.byWorkstream.values()) n += tasks.size;
    return n;
  }

  private abort(task: Task, why: string): void {
    if (task.controller.signal.aborted) return;
    task.turn.reclaimWork();
    this.onCancel(task.turn, task.taskId, why);
    task.controller.abort();
  }
}
