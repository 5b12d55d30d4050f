/**
 * Spawning one session worker: its thread with the bundled entry, its ports (control, the
 * worker's API, the supervisor's API), its harness channel when a harness is attached, the
 * start bound, and what happens when it becomes ready, crashes or exits. The pool keeps the
 * bookkeeping (slots, warm list, counters) through the callbacks.
 */
import { MessageChannel, receiveMessageOnPort, Worker } from 'node:worker_threads';
import type {
  HarnessLink,
  SeamContext,
  SeamFault,
  SeamName,
  WorkerApi,
  WorkerEvent,
} from '@turnwarden/protocol';
import { client, errors, fromWire, goneSignal, serve } from '@turnwarden/protocol';
import { ARG, DECISION, Decision, RELEASED } from '@turnwarden/session';
import type { PoolOptions } from './pool.js';
import { WorkerHandle } from './worker-handle.js';

/** The model and tool names a worker's registry holds (the same in every worker). */
export interface Catalogue {
  readonly models: readonly string[];
  readonly tools: readonly string[];
  /** Each tool's arguments schema, where it declares one (edited arguments are checked against it). */
  readonly schemas: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  /** Models whose provider checks a user message before the claim. */
  readonly checks: readonly string[];
}

export interface SpawnCallbacks {
  /** The worker serves its API; `catalogue` is what its registry can run. */
  ready(h: WorkerHandle, catalogue: Catalogue): void;
  startTimedOut(h: WorkerHandle): void;
  crashed(h: WorkerHandle): void;
  /** After the handle is dead and its ports closed; the slot is free again. */
  exited(h: WorkerHandle, how: { readonly terminated: boolean; readonly beforeReady: boolean }): void;
}

/** The supervisor's end of a worker's seam channel (see session/src/seam-client.ts). */
function harnessChannel(workerId: number, link: HarnessLink) {
  const buffer = new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT);
  const words = new Int32Array(buffer);
  const { port1, port2 } = new MessageChannel();
  port1.on('message', (m: { t: 'seam'; ticket: number; name: SeamName; ctx: SeamContext }) => {
    let released = false;
    link.workerArrived(workerId, { name: m.name, ctx: m.ctx }, (fault?: SeamFault) => {
      if (released) return;
      released = true;
      // `lose-ack` applies to the journal seam only: a worker seam proceeds.
      const decision =
        fault === undefined || fault.kind === 'lose-ack'
          ? Decision.proceed
          : fault.kind === 'crash'
            ? Decision.crash
            : fault.kind === 'delay'
              ? Decision.delay
              : Decision.throw;
      Atomics.store(words, DECISION, decision);
      Atomics.store(words, ARG, fault?.kind === 'delay' ? fault.ms : 0);
      Atomics.store(words, RELEASED, m.ticket);
      Atomics.notify(words, RELEASED);
    });
  });
  return { worker: { buffer, port: port2 }, close: () => port1.close() };
}

export function spawnSessionWorker(
  opts: PoolOptions,
  id: number,
  slot: number,
  on: SpawnCallbacks,
): WorkerHandle {
  const control = new MessageChannel();
  const workerRpc = new MessageChannel();
  const hostRpc = new MessageChannel();
  const harness = opts.harness ? harnessChannel(id, opts.harness) : undefined;
  const worker = new Worker(opts.workerUrl, {
    workerData: {
      clock: opts.clock,
      slot,
      workerId: id,
      pluginModules: typeof opts.pluginModules === 'function' ? opts.pluginModules() : opts.pluginModules,
      ...(opts.models === undefined ? {} : { models: opts.models }),
      ...(opts.hostTools === undefined ? {} : { hostTools: opts.hostTools() }),
      ...(opts.workerNice ? { nice: opts.workerNice } : {}),
      control: control.port2,
      workerRpc: workerRpc.port2,
      hostRpc: hostRpc.port2,
      ...(harness ? { harness: harness.worker } : {}),
    },
    transferList: [control.port2, workerRpc.port2, hostRpc.port2, ...(harness ? [harness.worker.port] : [])],
    resourceLimits: {
      ...(opts.maxOldGenerationSizeMb === undefined
        ? {}
        : { maxOldGenerationSizeMb: opts.maxOldGenerationSizeMb }),
      ...(opts.maxYoungGenerationSizeMb === undefined
        ? {}
        : { maxYoungGenerationSizeMb: opts.maxYoungGenerationSizeMb }),
    },
  });
  const log = opts.logger.child({ workerId: id, slot });
  const { gone, markGone } = goneSignal();
  let markReady!: () => void;
  let failReady!: (e: unknown) => void;
  const ready = new Promise<void>((resolve, reject) => {
    markReady = resolve;
    failReady = reject;
  });
  ready.catch(() => {});
  const exited = new Promise<number>((resolve) => worker.once('exit', resolve));
  const h = new WorkerHandle(
    id,
    slot,
    worker,
    client<WorkerApi>(workerRpc.port1, gone),
    control.port1,
    exited,
    ready,
  );
  serve(hostRpc.port1, opts.host);

  // A worker that never becomes ready (a plugin module whose import hangs) would hold its slot
  // forever: it is terminated and its start fails with a typed error.
  const startTimer = setTimeout(() => {
    if (h.state !== 'starting' || h.terminating) return;
    log.error({ startTimeoutMs: opts.startTimeoutMs }, 'session worker did not become ready; terminating it');
    failReady(
      errors.timeout(
        `session worker ${id} did not become ready within ${opts.startTimeoutMs} ms (check pluginModules)`,
      ),
    );
    on.startTimedOut(h);
    h.terminating = true;
    void worker.terminate();
  }, opts.startTimeoutMs);
  startTimer.unref();

  const onControl = (event: WorkerEvent) => {
    h.received();
    if (event.t === 'ready') {
      clearTimeout(startTimer);
      h.tid = event.tid;
      on.ready(h, {
        models: event.models,
        tools: event.tools,
        schemas: event.schemas ?? {},
        checks: event.checks,
      });
      markReady();
      return;
    }
    if (event.t === 'fatal') {
      // Its registry was refused (a plugin module): the typed reason, before the exit.
      clearTimeout(startTimer);
      failReady(fromWire(event.error));
      return;
    }
    if (event.t === 'log') {
      log[event.level](event.data ?? {}, event.msg);
      return;
    }
    h.onEvent?.(event);
  };
  control.port1.on('message', onControl);
  worker.on('error', (err) => {
    log.error({ err }, 'session worker crashed');
    on.crashed(h);
  });
  void exited.then((code) => {
    clearTimeout(startTimer);
    const wasTerminating = h.terminating;
    const beforeReady = h.state === 'starting';
    // Messages on a port and the exit event are not ordered: what the worker posted before it
    // exited (a `fatal` naming the plugin module that failed) is read now, before the exit wins.
    for (
      let m = receiveMessageOnPort(control.port1);
      m !== undefined;
      m = receiveMessageOnPort(control.port1)
    ) {
      onControl(m.message as WorkerEvent);
    }
    h.state = 'dead';
    h.drainWaiters();
    const reason = wasTerminating
      ? `worker ${id} was terminated`
      : `worker ${id} exited unexpectedly with code ${code}`;
    markGone(reason);
    failReady(errors.workerExited(reason));
    control.port1.close();
    harness?.close();
    workerRpc.port1.close();
    hostRpc.port1.close();
    log.debug({ code, terminated: wasTerminating }, 'session worker exited');
    on.exited(h, { terminated: wasTerminating, beforeReady });
  });
  return h;
}
