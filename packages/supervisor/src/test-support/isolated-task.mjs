// Task functions for isolated-plugin.mjs: they run in a thread of the supervisor's shared pool.
import { isMainThread, threadId } from 'node:worker_threads';

/** Wedged: a synchronous loop that never stamps (only terminating its thread ends it). */
export function spin() {
  for (;;) {
    // spin
  }
}

/** Busy for args.ms, stamping the turn's clock every 20 ms. */
export async function beat({ args, heartbeat }) {
  const until = Date.now() + Number(args.ms ?? 100);
  while (Date.now() < until) {
    heartbeat();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return 'beat done';
}

export function where() {
  return JSON.stringify({ isMainThread, threadId });
}

export function fail() {
  throw new Error('the isolated task failed');
}
