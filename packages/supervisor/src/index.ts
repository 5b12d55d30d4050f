export { DEFAULT_CONFIG, resolveConfig } from './config.js';
export type {
  LeaseConfig,
  LimitsConfig,
  PoolConfig,
  SupervisorConfig,
  SupervisorConfigInput,
  WatchdogConfig,
} from './config.js';
export type { Listener, TurnwardenEvent, TurnwardenEventType } from './events.js';
export { Turnwarden } from './runtime.js';
export type { RuntimeStats, TurnwardenOptions } from './runtime.js';
export type { RuntimeCounters } from './stats.js';
export type { SendInput, TurnHandle, TurnResult, WorkstreamInfo, WorkstreamStatus } from './types.js';
export type { StallBound, StallInfo, WatchdogHooks, WatchdogStats } from './watchdog.js';
// Building blocks, exported for benchmarks and hosts that compose their own supervisor.
export { WorkerPool } from './pool.js';
export type { PoolOptions, PoolStats, WorkerHandle } from './pool.js';
export { Watchdog } from './watchdog.js';
export type { WatchdogDelegate, WatchedTurn } from './watchdog.js';
export { EventHub } from './events.js';
