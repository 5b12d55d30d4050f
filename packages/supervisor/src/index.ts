// The typed errors a host checks, so it needs no second import.
export { ErrorCode, isTurnwardenError, TurnwardenError } from '@turnwarden/protocol';
export type {
  LeaseConfig,
  LimitsConfig,
  PoolConfig,
  SupervisorConfig,
  SupervisorConfigInput,
  WatchdogConfig,
} from './config.js';
export { DEFAULT_CONFIG, resolveConfig } from './config.js';
export type { Listener, TurnwardenEvent, TurnwardenEventType } from './events.js';
export { EventHub } from './events.js';
export type { PoolOptions, PoolStats, WorkerHandle } from './pool.js';
// Building blocks, exported for benchmarks and hosts that compose their own supervisor.
export { WorkerPool } from './pool.js';
export type { RuntimeStats, TurnwardenOptions } from './runtime.js';
export { Turnwarden } from './runtime.js';
export type { RuntimeCounters } from './stats.js';
export type { CancelTimer, Timers } from './timers.js';
export type { SendInput, TurnHandle, TurnResult, WorkstreamInfo, WorkstreamStatus } from './types.js';
export type {
  StallBound,
  StallInfo,
  WatchdogDelegate,
  WatchdogHooks,
  WatchdogStats,
  WatchedTurn,
} from './watchdog.js';
export { Watchdog } from './watchdog.js';
