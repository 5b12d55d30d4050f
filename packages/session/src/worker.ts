/**
 * Session worker entry. One worker serves one active session at a time; between turns it
 * waits in the supervisor's warm pool. It owns one slot of the activity clock.
 *
 * Channels: `control` (raw: abort in, events out), `workerRpc` (serves WorkerApi), `hostRpc`
 * (calls the supervisor's HostApi; rejects with WORKER_EXITED-style errors if the port closes).
 */
import type { MessagePort } from 'node:worker_threads';
import { workerData } from 'node:worker_threads';
import { SlotStamp } from '@turnwarden/clock';
import type {
  AbortReason,
  ControlMessage,
  HostApi,
  TurnOutcome,
  TurnRequest,
  WorkerApi,
  WorkerEvent,
  WorkerInit,
} from '@turnwarden/protocol';
import { client, errors, goneSignal, isTurnwardenError, serve, toWire } from '@turnwarden/protocol';
import type { ModelProvider, Tool } from './contracts.js';
import { lowerThreadPriority, osThreadId } from './priority.js';
import { loadRegistry } from './registry.js';
import { installWorkerSeams, type WorkerHarnessChannel } from './seam-client.js';
import { toolError } from './tool-call.js';
import { type RemoteModel, runTurn } from './turn.js';
import { warmUp } from './warm-up.js';

export interface WorkerBoot extends WorkerInit {
  readonly control: MessagePort;
  readonly workerRpc: MessagePort;
  readonly hostRpc: MessagePort;
  /** Present only when the supervisor runs under the interleaving harness. */
  readonly harness?: WorkerHarnessChannel;
}

const boot = workerData as WorkerBoot;
// First, before any plugin runs: a turn that spins must not take the watchdog's CPU (L12).
if (boot.nice) lowerThreadPriority(boot.nice);
// The OS thread the turn runs on, reported when ready: the watchdog reads its scheduler
// statistics before it aborts a silent turn (a thread starved of CPU is not stalled).
const tid = osThreadId();
const stamp = new SlotStamp(boot.clock, boot.slot);
let registry: Awaited<ReturnType<typeof loadRegistry>>;
const { gone, markGone } = goneSignal();
boot.hostRpc.on('close', () => markGone('supervisor port closed'));
const host = client<HostApi>(boot.hostRpc, gone);

/**
 * Host tools run on the supervisor's thread; here each is a proxy whose call crosses the host
 * RPC. The tool's abort cancels the call there; a declared effect comes back in the error.
 */
let hostCalls = 0;
const hostTools: Tool[] = (boot.hostTools ?? []).map((spec) => ({
  ...spec,
  async run(args, ctx) {
    if (current === undefined) throw toolError(`${spec.name} was called outside a turn`, 'none');
    const { workstreamId, generation } = current;
    const taskId = `g${generation}:h${++hostCalls}`;
    const onAbort = () => void host.cancelHostTool(workstreamId, taskId).catch(() => {});
    ctx.signal.addEventListener('abort', onAbort, { once: true });
    try {
      return await host.callHostTool({
        workstreamId,
        generation,
        taskId,
        callId: ctx.callId,
        name: spec.name,
        args,
      });
    } catch (e) {
      const effect = isTurnwardenError(e) ? e.details?.toolEffect : undefined;
      if (effect === 'none' || effect === 'applied') throw toolError((e as Error).message, effect);
      throw e;
    } finally {
      ctx.signal.removeEventListener('abort', onAbort);
    }
  },
}));

let current:
  | {
      /** The workstream's key (the host RPC names it so; the tool's context by its id). */
      workstreamId: string;
      generation: number;
      abort: AbortController;
      reason: AbortReason | undefined;
    }
  | undefined;
let isolatedTasks = 0;

/**
 * Token events are coalesced per macrotask: a model that streams through microtasks only would
 * otherwise post one message per token without yielding, and the supervisor's thread drains a
 * port's whole queue in one callback — starving its timers, the watchdog's included (L12).
 * Any other event flushes pending text first, so listeners see the original order. Stamps are
 * not coalesced: every token still stamps the clock.
 */
let posted = 0;
const post = (event: WorkerEvent) => {
  posted++;
  boot.control.postMessage(event);
};
let pendingText: { generation: number; text: string } | undefined;
let flushScheduled = false;
const flushText = () => {
  flushScheduled = false;
  if (pendingText === undefined) return;
  const { generation, text } = pendingText;
  pendingText = undefined;
  post({ t: 'token', generation, text });
};
const emit = (event: WorkerEvent) => {
  if (event.t === 'token') {
    if (pendingText !== undefined && pendingText.generation !== event.generation) flushText();
    if (pendingText === undefined) pendingText = { generation: event.generation, text: event.text };
    else pendingText.text += event.text;
    if (!flushScheduled) {
      flushScheduled = true;
      setImmediate(flushText);
    }
    return;
  }
  flushText();
  post(event);
};

boot.control.on('message', (msg: ControlMessage) => {
  // Generation-bound: an abort meant for an earlier turn never touches this one.
  if (msg.t !== 'abort' || current === undefined || current.generation !== msg.generation) return;
  current.reason = msg.reason;
  if (!current.abort.signal.aborted) {
    current.abort.abort(errors.turnAborted(`turn aborted: ${msg.reason}`));
  }
});

const api: WorkerApi = {
  async runTurn(req: TurnRequest): Promise<TurnOutcome> {
    if (current !== undefined) {
      throw errors.turnInProgress(`worker ${boot.workerId} is already running a turn`);
    }
    // `shared` placement: the supervisor's model threads run the call; this worker sleeps until
    // the assistant message is complete (and loads no provider).
    const model: ModelProvider | RemoteModel | undefined =
      boot.models === 'shared'
        ? {
            remote: (call) => {
              flushText();
              return host.modelStep({
                workstreamId: req.workstreamId,
                generation: req.generation,
                model: req.model,
                tools: call.tools,
                eventsPosted: posted,
              });
            },
          }
        : registry.models.get(req.model);
    if (!model) throw errors.invalidInput(`unknown model provider: ${req.model}`);
    const turn = {
      workstreamId: req.workstreamId,
      generation: req.generation,
      abort: new AbortController(),
      reason: undefined as AbortReason | undefined,
    };
    current = turn;
    try {
      const outcome = await runTurn(req, {
        touch: (code) => stamp.touch(code),
        journal: (r) => {
          flushText();
          return host.journal({ ...r, eventsPosted: posted });
        },
        emit,
        model,
        // A call to a tool outside the send's allow-list is an unknown tool (T6).
        tools: req.tools
          ? new Map([...registry.tools].filter(([name]) => req.tools!.includes(name)))
          : registry.tools,
        abort: turn.abort,
        abortReason: () => turn.reason,
        approvalNeeded: (call) =>
          host.approvalNeeded({
            workstreamId: req.workstreamId,
            tenantId: req.tenantId,
            generation: req.generation,
            name: call.name,
            arguments: call.arguments,
          }),
        runIsolated: (task, args, signal) => {
          const taskId = `g${req.generation}:i${++isolatedTasks}`;
          // The tool's abort terminates the task's thread in the supervisor's pool.
          const onAbort = () => void host.cancelIsolated(req.workstreamId, taskId).catch(() => {});
          signal.addEventListener('abort', onAbort, { once: true });
          return host
            .runIsolated({
              workstreamId: req.workstreamId,
              generation: req.generation,
              taskId,
              module: task.module,
              exportName: task.exportName ?? 'default',
              args,
            })
            .finally(() => signal.removeEventListener('abort', onAbort));
        },
      });
      flushText();
      return { ...outcome, eventsPosted: posted };
    } finally {
      current = undefined;
    }
  },
  async ping() {
    return 'pong';
  },
  async checkInput(name: string, content: string) {
    registry.models.get(name)?.checkInput?.(content);
  },
};

/**
 * The start: warm-up, plugins, host tools, then `ready`. Not top-level await: a module whose
 * evaluation is still pending when the supervisor terminates the worker (its shutdown, a start
 * timeout) can crash the whole process in V8 — seen once on Node 20 (`Check failed:
 * (location_) != nullptr` in `SourceTextModule::ExecuteAsyncModule`). This module's evaluation
 * ends at once; the start runs as an ordinary async function, which a termination simply stops.
 */
async function start(): Promise<void> {
  // Before the harness's seams are installed (the warm-up must never reach one): compile the
  // turn's code now, at the spawn, not on the first turn's hot path (warm-up.ts).
  await warmUp();
  if (boot.harness) installWorkerSeams(boot.harness);
  try {
    registry = await loadRegistry(boot.pluginModules);
  } catch (e) {
    // Typed, so the supervisor's start fails with INVALID_CONFIG naming the plugin module.
    fatal(e);
  }
  for (const t of hostTools) {
    if (registry.tools.has(t.name)) {
      fatal(
        errors.invalidConfig(`hostToolModules and pluginModules both export a tool named ${t.name}`, {
          field: 'hostToolModules',
        }),
      );
    }
    (registry.tools as Map<string, Tool>).set(t.name, t);
  }
  serve(boot.workerRpc, api);
  emit({
    t: 'ready',
    workerId: boot.workerId,
    models: [...registry.models.keys()],
    tools: [...registry.tools.keys()],
    schemas: Object.fromEntries(
      [...registry.tools.values()].flatMap((t) =>
        t.parameters === undefined ? [] : [[t.name, t.parameters]],
      ),
    ),
    checks: [...registry.models.values()]
      .filter((m) => typeof m.checkInput === 'function')
      .map((m) => m.name),
    ...(tid === undefined ? {} : { tid }),
  });
}

/** A start that cannot go on: told to the supervisor, typed, then thrown (the worker exits). */
function fatal(e: unknown): never {
  boot.control.postMessage({ t: 'fatal', error: toWire(e) } satisfies WorkerEvent);
  boot.control.close();
  throw e;
}

// A failed start rejects: unhandled, it is the worker's error, as a thrown top-level error was.
void start();
