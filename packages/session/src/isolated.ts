/**
 * Thread-isolated tools. A tool made with `isolatedTool` runs its work in a thread of the
 * supervisor's shared pool (piscina) instead of the session worker: for CPU-heavy work, or code
 * that may block the thread. Its abort terminates only that task's thread, so a wedged isolated
 * tool is reclaimed without terminating the session worker; its `heartbeat()` stamps the turn's
 * clock like any tool's.
 *
 * The task module runs in another thread: it gets plain data, not closures. It exports a
 * function `(input: { args, heartbeat }) => string | Promise<string>`; throwing is a tool error.
 * Worker threads are not a sandbox: untrusted code needs a process or a container.
 */
import type { IsolatedTask, Tool, ToolSpec } from './contracts.js';
import { toolError } from './tool-call.js';

/** What an isolated task function receives in its thread. */
export interface IsolatedInput {
  readonly args: Record<string, unknown>;
  /** Stamps the turn's clock (ignored once the turn's abort committed or another turn runs). */
  readonly heartbeat: () => void;
}

export function isolatedTool(spec: ToolSpec & IsolatedTask): Tool {
  const { module, exportName, ...toolSpec } = spec;
  const task: IsolatedTask = { module, ...(exportName === undefined ? {} : { exportName }) };
  return {
    ...toolSpec,
    async run(args, ctx) {
      if (ctx.runIsolated === undefined) {
        throw toolError(`${spec.name} runs isolated, and this context has no isolated pool`, 'none');
      }
      return ctx.runIsolated(task, args);
    },
  };
}
