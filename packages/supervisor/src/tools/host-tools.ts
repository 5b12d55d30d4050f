/**
 * Host tools: tools that run on the supervisor's thread instead of in each session worker —
 * for tools whose work happens in another process or service (MCP servers, HTTP APIs), so that
 * one set of connections or child processes serves every session and lives as long as the host,
 * not as long as a worker (a child process a terminated worker thread spawned cannot be reaped).
 *
 * `hostToolModules` are imported here at start (each exports `tools`, and may export `close()`,
 * called at shutdown). Workers offer them to the model like their own tools; a call crosses the
 * worker's host RPC. The call's signal aborts with the tool's abort or the turn's end; its
 * `heartbeat()` stamps the turn's clock slot (only while the slot is armed for that turn).
 * A host tool must never block: the supervisor's thread is the watchdog's. CPU work belongs in an
 * isolated tool. One that ignores its signal is abandoned, not waited for.
 */
import { Activity, SlotStamp } from '@turnwarden/clock';
import {
  errors,
  type HostToolRequest,
  type HostToolSpec,
  keyTenantId,
  keyWorkstreamId,
  type TurnwardenError,
} from '@turnwarden/protocol';
import { declaredEffect, raceAbort, type Tool, type ToolContext } from '@turnwarden/session';
import type { Logger } from 'pino';
import type { Turn } from '../turn/turn.js';
import { TurnTasks } from './turn-tasks.js';

export interface HostToolsHost {
  turnOf(workstreamId: string): Turn | undefined;
  readonly clock: SharedArrayBuffer;
  readonly logger: Logger;
}

function refuse(field: string, message: string, cause?: unknown): TurnwardenError {
  return errors.invalidConfig(
    `${field} ${message}`,
    { field },
    { ...(cause === undefined ? {} : { cause }) },
  );
}

/** Runtimes started in this process: each imports its host tool modules as instances of its own. */
let loads = 0;

export class HostTools {
  private readonly tools = new Map<string, Tool>();
  private readonly closers: (() => unknown)[] = [];
  private readonly tasks = new TurnTasks();
  private calls = 0;

  constructor(private readonly host: HostToolsHost) {}

  /** Imports the modules (resolved URLs), in order; refusals name `hostToolModules[i]`. */
  async load(modules: readonly string[]): Promise<void> {
    loads++;
    for (const [i, specifier] of modules.entries()) {
      const field = `hostToolModules[${i}]`;
      let mod: { tools?: unknown; close?: unknown };
      try {
        // Evaluated anew for each runtime (a query makes a file module a new instance): a module
        // an earlier runtime in this process closed at its shutdown is not handed out again.
        const url = specifier.startsWith('file:') ? `${specifier}?turnwarden-runtime=${loads}` : specifier;
        mod = (await import(url)) as { tools?: unknown; close?: unknown };
      } catch (e) {
        throw refuse(field, `(${specifier}) failed to load: ${(e as Error).message}`, e);
      }
      if (!Array.isArray(mod.tools)) throw refuse(field, `(${specifier}) exports no tools array`);
      for (const tool of mod.tools as Tool[]) {
        if (typeof tool?.name !== 'string' || tool.name === '' || typeof tool.run !== 'function') {
          throw refuse(field, `(${specifier}) exports a tool without a name and a run function`);
        }
        if (this.tools.has(tool.name))
          throw refuse(field, `(${specifier}) exports a second tool named ${tool.name}`);
        this.tools.set(tool.name, tool);
      }
      if (typeof mod.close === 'function') this.closers.push(mod.close as () => unknown);
    }
  }

  /** What workers offer the model. */
  specs(): HostToolSpec[] {
    return [...this.tools.values()].map((t) => ({
      name: t.name,
      description: t.description,
      ...(t.parameters === undefined ? {} : { parameters: t.parameters }),
    }));
  }

  async call(req: HostToolRequest): Promise<string> {
    const tool = this.tools.get(req.name);
    const task = this.tasks.start(this.host.turnOf(req.workstreamId), req, 'host tool call');
    if (tool === undefined) {
      task.end();
      throw errors.toolError(`no host tool named ${req.name}`, { toolEffect: 'none' });
    }
    this.calls++;
    const stamp = new SlotStamp(this.host.clock, task.turn.worker.slot);
    let settled = false;
    const generation = task.turn.generation | 0;
    const ctx: ToolContext = {
      signal: task.signal,
      // A tool that outlives its call (it ignored the abort) stamps nothing: the slot may already
      // serve another turn, whose generation number can be the same.
      heartbeat: () => {
        if (!settled && stamp.generation() === generation) stamp.touch(Activity.toolHeartbeat);
      },
      callId: req.callId,
      // The request names the workstream by key (T2); the tool by its tenant's id.
      workstreamId: keyWorkstreamId(req.workstreamId),
      tenantId: keyTenantId(req.workstreamId),
    };
    const run = Promise.resolve()
      .then(() => tool.run({ ...req.args }, ctx))
      .then(String, (e: unknown) => {
        const effect = declaredEffect(e);
        throw errors.toolError(
          e instanceof Error ? e.message : String(e),
          effect === undefined ? undefined : { toolEffect: effect },
        );
      });
    try {
      // A tool that ignores its signal is abandoned, not waited for.
      return await raceAbort(run, task.signal, () => errors.turnAborted(`host tool ${req.name} was aborted`));
    } finally {
      settled = true;
      task.end();
    }
  }

  /** The tool's abort (from the worker). */
  cancel(workstreamId: string, taskId: string): void {
    this.tasks.cancel(workstreamId, taskId, 'the tool was aborted');
  }

  /** The turn ended (settle): its calls still running are aborted. */
  cancelTurn(turn: Turn): void {
    this.tasks.cancelTurn(turn);
  }

  get count(): { tools: number; calls: number } {
    return { tools: this.tools.size, calls: this.calls };
  }

  /** Shutdown: every call aborted, then each module's `close()`. */
  async close(): Promise<void> {
    this.tasks.abortAll();
    for (const close of this.closers.splice(0)) {
      try {
        await close();
      } catch (err) {
        this.host.logger.warn({ err }, 'a host tool module failed to close');
      }
    }
  }
}
