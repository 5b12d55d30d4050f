/**
 * @turnwarden/supervisor/testing — not for hosts. The runtime's building blocks (the worker
 * pool, the watchdog, the event hub, the journal gate, the configuration resolver) for benchmarks and tools, and
 * the seams tests and the interleaving harness drive: injected time and timers, watchdog hooks,
 * injected scheduler statistics, a watchdog polled by hand, the harness link.
 *
 * The interleaving harness imports `@turnwarden/supervisor/harness` (harness.ts): this entry
 * with the harness's variants of the parts installed (dist-harness/, never published).
 */
import { errors, type HostApi } from '@turnwarden/protocol';

export type { PoolOptions, WorkerHandle } from './capacity/pool.js';
export { WorkerPool } from './capacity/pool.js';
export { DEFAULT_CONFIG, resolveConfig } from './config.js';
// The public entry too, so a consumer of the harness build takes every value and type from one build.
export * from './index.js';
export type { GateHost } from './journal/journal-gate.js';
export { JournalGate } from './journal/journal-gate.js';
export { platformScheduler } from './liveness/platform-sched.js';
export type { SchedReading, SchedulerStats, SchedVerdict, ThreadSched } from './liveness/sched.js';
export { procSchedStats } from './liveness/sched.js';
export type { CancelTimer, Timers } from './liveness/timers.js';
export { nodeTimers } from './liveness/timers.js';
export type {
  StallBound,
  StallInfo,
  StarvedInfo,
  WatchdogDelegate,
  WatchdogHooks,
  WatchdogScheduler,
  WatchedTurn,
} from './liveness/watchdog.js';
export { Watchdog } from './liveness/watchdog.js';
export type { TestControls, TestSeams } from './runtime.js';
export { startForTesting, testControls } from './runtime.js';
export { EventHub } from './streams/events.js';

/**
 * The host side of a bare `WorkerPool` that runs no turn (benchmarks of spawning and
 * activation, pool tests): every call a worker could make is refused with a typed error naming
 * `who`.
 */
export function refusingHost(who: string): HostApi {
  const refuse = (what: string) => Promise.reject(errors.fenced(`${who} ${what}`));
  return {
    journal: () => refuse('journals nothing'),
    modelStep: () => refuse('runs no model call'),
    runIsolated: () => refuse('runs no isolated task'),
    cancelIsolated: async () => {},
    callHostTool: () => refuse('has no host tools'),
    approvalNeeded: () => refuse('asks no approval policy'),
    cancelHostTool: async () => {},
  };
}
