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
