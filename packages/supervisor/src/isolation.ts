/**
 * Thread-isolated tools: one piscina pool shared by every session, on the supervisor's side.
 * A session worker asks for a task over its host RPC (`runIsolated`); the pool runs it in a
 * thread of its own with the turn's clock slot, so the task's heartbeat stamps the turn (the
 * runner stamps only while the slot is armed for that turn). Cancelling a task — the tool's
 * abort, or the turn's end — aborts its `run`: piscina terminates that thread only, and the
 * session worker, which was only waiting on the RPC, is left running and goes back to the pool.
 * The pool is created on first use.
 */
import { ErrorCode, type IsolatedRequest, TurnwardenError } from '@turnwarden/protocol';
import { isolatedRunnerUrl } from '@turnwarden/session';
import type { Logger } from 'pino';
import { Piscina } from 'piscina';
import type { ActiveTurn } from './active-turn.js';

export interface IsolationConfig {
  /** Threads of the shared pool (tasks beyond it queue). */
  readonly maxThreads: number;
  /** A thread idle this long exits (the pool keeps none warm). */
  readonly idleTimeoutMs: number;
  /** Per-thread heap limit; a task that exceeds it fails as a tool error. */
  readonly maxOldGenerationSizeMb?: number;
}

export interface IsolationStats {
  /** Tasks run, ended by cancellation (their thread terminated), failed. */
  readonly started: number;
  readonly cancelled: number;
  readonly failed: number;
  /** Tasks running now. */
  readonly running: number;
  /** Pool threads alive now. */
  readonly threads: number;
}

export interface IsolationHost {
  /** The running turn of a workstream, if any. */
  turnOf(workstreamId: string): ActiveTurn | undefined;
  readonly clock: SharedArrayBuffer;
  readonly logger: Logger;
}

interface Running {
  readonly taskId: string;
  readonly turn: ActiveTurn;
  readonly controller: AbortController;
}

export class IsolatedPool {
  private pool: Piscina | undefined;
  private readonly running = new Map<string, Map<string, Running>>();
  private started = 0;
  private cancelled = 0;
  private failed = 0;

  constructor(
    private readonly config: IsolationConfig,
    private readonly host: IsolationHost,
  ) {}

  async run(req: IsolatedRequest): Promise<string> {
    const turn = this.host.turnOf(req.workstreamId);
    if (turn === undefined || turn.generation !== req.generation || turn.finished) {
      throw new TurnwardenError(
        ErrorCode.TURN_ABORTED,
        'the turn that asked for the isolated task has ended',
      );
    }
    const controller = new AbortController();
    const entry: Running = { taskId: req.taskId, turn, controller };
    const byTask = this.running.get(req.workstreamId) ?? new Map<string, Running>();
    byTask.set(req.taskId, entry);
    this.running.set(req.workstreamId, byTask);
    this.started++;
    try {
      return (await this.piscina().run(
        {
          module: req.module,
          exportName: req.exportName,
          args: req.args,
          clock: this.host.clock,
          slot: turn.worker.slot,
          generation: turn.generation,
        },
        { signal: controller.signal },
      )) as string;
    } catch (e) {
      if (controller.signal.aborted) {
        throw new TurnwardenError(
          ErrorCode.TURN_ABORTED,
          'the isolated task was cancelled; its thread was terminated',
        );
      }
      this.failed++;
      throw new TurnwardenError(ErrorCode.TOOL_ERROR, e instanceof Error ? e.message : String(e));
    } finally {
      byTask.delete(req.taskId);
      if (byTask.size === 0 && this.running.get(req.workstreamId) === byTask)
        this.running.delete(req.workstreamId);
    }
  }

  /** Cancels one task (the tool's abort): its thread is terminated. */
  cancel(workstreamId: string, taskId: string): void {
    const entry = this.running.get(workstreamId)?.get(taskId);
    if (entry !== undefined) this.abort(entry, 'the tool was aborted');
  }

  /** Cancels every task of a turn that has ended (settle). Returns how many were running. */
  cancelTurn(turn: ActiveTurn): number {
    let n = 0;
    for (const entry of this.running.get(turn.workstreamId)?.values() ?? []) {
      if (entry.turn !== turn) continue;
      this.abort(entry, 'its turn ended');
      n++;
    }
    return n;
  }

  stats(): IsolationStats {
    let running = 0;
    for (const byTask of this.running.values()) running += byTask.size;
    return {
      started: this.started,
      cancelled: this.cancelled,
      failed: this.failed,
      running,
      threads: this.pool?.threads.length ?? 0,
    };
  }

  async close(): Promise<void> {
    for (const byTask of this.running.values()) for (const entry of byTask.values()) entry.controller.abort();
    await this.pool?.destroy();
    this.pool = undefined;
  }

  private abort(entry: Running, why: string): void {
    if (entry.controller.signal.aborted) return;
    this.cancelled++;
    entry.turn.workReclaimed = true;
    entry.turn.log.info(
      { taskId: entry.taskId, why },
      'isolated tool task cancelled; its thread is terminated',
    );
    entry.controller.abort();
  }

  private piscina(): Piscina {
    this.pool ??= new Piscina({
      filename: isolatedRunnerUrl.href,
      minThreads: 0,
      maxThreads: this.config.maxThreads,
      idleTimeout: this.config.idleTimeoutMs,
      ...(this.config.maxOldGenerationSizeMb === undefined
        ? {}
        : { resourceLimits: { maxOldGenerationSizeMb: this.config.maxOldGenerationSizeMb } }),
    });
    return this.pool;
  }
}
