/**
 * Thread-isolated tools: one piscina pool shared by every session, on the supervisor's side.
 * A session worker asks for a task over its host RPC (`runIsolated`); the pool runs it in a
 * thread of its own with the turn's clock slot, so the task's heartbeat stamps the turn (the
 * runner stamps only while the slot is armed for that turn). Cancelling a task — the tool's
 * abort, or the turn's end — aborts its `run`: piscina terminates that thread only, and the
 * session worker, which was only waiting on the RPC, is left running and goes back to the pool.
 * The pool is created on first use.
 */
import { errors, type IsolatedRequest } from '@turnwarden/protocol';
import { isolatedRunnerUrl } from '@turnwarden/session';
import type { Logger } from 'pino';
import { Piscina } from 'piscina';
import type { Turn } from '../turn/turn.js';
import { TurnTasks } from './turn-tasks.js';

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
  turnOf(workstreamId: string): Turn | undefined;
  readonly clock: SharedArrayBuffer;
  readonly logger: Logger;
}

export class IsolatedPool {
  private pool: Piscina | undefined;
  private started = 0;
  private cancelled = 0;
  private failed = 0;
  private readonly tasks = new TurnTasks((turn, taskId, why) => {
    this.cancelled++;
    turn.log.info({ taskId, why }, 'isolated tool task cancelled; its thread is terminated');
  });

  constructor(
    private readonly config: IsolationConfig,
    private readonly host: IsolationHost,
  ) {}

  async run(req: IsolatedRequest): Promise<string> {
    const task = this.tasks.start(this.host.turnOf(req.workstreamId), req, 'isolated task');
    this.started++;
    try {
      return (await this.piscina().run(
        {
          module: req.module,
          exportName: req.exportName,
          args: req.args,
          clock: this.host.clock,
          slot: task.turn.worker.slot,
          generation: task.turn.generation,
        },
        { signal: task.signal },
      )) as string;
    } catch (e) {
      if (task.signal.aborted) {
        throw errors.turnAborted('the isolated task was cancelled; its thread was terminated');
      }
      this.failed++;
      throw errors.toolError(e instanceof Error ? e.message : String(e));
    } finally {
      task.end();
    }
  }

  /** Cancels one task (the tool's abort): its thread is terminated. */
  cancel(workstreamId: string, taskId: string): void {
    this.tasks.cancel(workstreamId, taskId, 'the tool was aborted');
  }

  /** Cancels every task of a turn that has ended (settle). */
  cancelTurn(turn: Turn): void {
    this.tasks.cancelTurn(turn);
  }

  stats(): IsolationStats {
    return {
      started: this.started,
      cancelled: this.cancelled,
      failed: this.failed,
      running: this.tasks.running,
      threads: this.pool?.threads.length ?? 0,
    };
  }

  async close(): Promise<void> {
    this.tasks.abortAll();
    await this.pool?.destroy();
    this.pool = undefined;
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
