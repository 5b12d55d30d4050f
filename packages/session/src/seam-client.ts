/**
 * The worker's end of the harness channel. At a seam the worker posts its arrival and blocks on
 * Atomics.wait until the harness, on the supervisor's thread, writes a decision and bumps the
 * released ticket. Blocking is the point: a parked worker makes no progress and sends nothing,
 * exactly like a thread preempted at that line. Installed only when the supervisor was started
 * with a harness; otherwise `seamSync` is a no-op.
 */
import type { MessagePort } from 'node:worker_threads';
import { attachWorkerSeams, errors } from '@turnwarden/protocol';

/** Words of the per-worker channel buffer. */
export const RELEASED = 0;
export const DECISION = 1;
export const ARG = 2;
const SLEEP = 3;

export const Decision = { proceed: 0, throw: 1, crash: 2, delay: 3 } as const;

export interface WorkerHarnessChannel {
  readonly buffer: SharedArrayBuffer;
  readonly port: MessagePort;
}

export function installWorkerSeams(channel: WorkerHarnessChannel): void {
  const words = new Int32Array(channel.buffer);
  let ticket = 0;
  attachWorkerSeams((name, generation, detail) => {
    const mine = ++ticket;
    channel.port.postMessage({ t: 'seam', ticket: mine, name, ctx: { generation, detail } });
    for (;;) {
      const released = Atomics.load(words, RELEASED);
      if (released >= mine) break;
      Atomics.wait(words, RELEASED, released, 1_000);
    }
    const decision = Atomics.load(words, DECISION);
    if (decision === Decision.crash) process.exit(70);
    if (decision === Decision.delay) Atomics.wait(words, SLEEP, 0, Atomics.load(words, ARG));
    if (decision === Decision.throw) {
      throw errors.internal(`fault injected at ${name}`, { injected: true });
    }
  });
}
