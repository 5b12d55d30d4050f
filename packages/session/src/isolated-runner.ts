/**
 * The task runner of the supervisor's shared isolated-tool pool (piscina): it runs in a pool
 * thread, imports the tool's task module and calls its function with the arguments and a
 * heartbeat that stamps the turn's clock slot. A stamp is made only while the slot is still
 * armed for the task's turn: a task being terminated after its turn ended cannot stamp the next
 * turn of the same session worker.
 */
import { Activity, SlotStamp } from '@turnwarden/clock';
import type { IsolatedInput } from './isolated.js';

export interface RunnerTask {
  readonly module: string;
  readonly exportName: string;
  readonly args: Record<string, unknown>;
  readonly clock: SharedArrayBuffer;
  readonly slot: number;
  readonly generation: number;
}

export default async function runIsolatedTask(task: RunnerTask): Promise<string> {
  const stamp = new SlotStamp(task.clock, task.slot);
  const heartbeat = () => {
    if (stamp.generation() === (task.generation | 0)) stamp.touch(Activity.toolHeartbeat);
  };
  const mod = (await import(task.module)) as Record<string, unknown>;
  const fn = mod[task.exportName];
  if (typeof fn !== 'function') throw new Error(`${task.module} exports no function ${task.exportName}`);
  const input: IsolatedInput = { args: task.args, heartbeat };
  const result: unknown = await (fn as (i: IsolatedInput) => unknown)(input);
  return typeof result === 'string' ? result : JSON.stringify(result);
}
