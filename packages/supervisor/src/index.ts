/**
 * @turnwarden/supervisor — what a host imports: the runtime, its typed errors and the types
 * of its calls, results and events. Building blocks and test seams live in
 * `@turnwarden/supervisor/testing`.
 */
export type {
  AbandonReason,
  AbortReason,
  AssistantMessage,
  CapacityReason,
  CodeSpec,
  DoubleTexting,
  EffectStatus,
  ErrorDetails,
  HistoryMessage,
  HistoryRow,
  LeaseRefusal,
  ModelPlacement,
  PersistenceState,
  RevokeReason,
  SystemMessage,
  ToolCall,
  ToolResultMessage,
  TurnStatus,
  TurnwardenErrorDetails,
  TurnwardenErrorOptions,
  UserMessage,
  WireError,
  WorkstreamStatusName,
} from '@turnwarden/protocol';
export {
  ABANDON_REASONS,
  ABORT_REASONS,
  DOUBLE_TEXTING_POLICIES,
  ERROR_TABLE,
  ErrorCode,
  isTurnwardenError,
  PERSISTENCE_STATES,
  SessionState,
  TURN_STATUSES,
  TurnwardenError,
  WORKSTREAM_STATUSES,
} from '@turnwarden/protocol';
export type { Store } from '@turnwarden/store';
export type { AdmissionStats } from './capacity/admission.js';
export type { PoolStats } from './capacity/pool.js';
export type { ClusterStats } from './cluster/cluster.js';
export type { EventRelay, RelayedBatch, RelaySink } from './cluster/relay.js';
export type {
  AdmissionConfig,
  ApprovalsConfig,
  IsolationConfig,
  LeaseConfig,
  LimitsConfig,
  ModelsConfig,
  PoolConfig,
  SupervisorConfig,
  SupervisorConfigInput,
  WatchdogConfig,
} from './config.js';
export type { JournalStats } from './journal/journal-gate.js';
export type { WatchdogStats } from './liveness/watchdog.js';
export type { ModelThreadStats } from './models/threads.js';
export type { TurnwardenOptions } from './runtime.js';
export { Turnwarden } from './runtime.js';
export type { RuntimeCounters, RuntimeStats } from './stats.js';
export type {
  EventData,
  EventStats,
  Listener,
  TurnwardenEvent,
  TurnwardenEventType,
} from './streams/events.js';
export type { LifecycleListener, WorkstreamLifecycleEvent } from './streams/lifecycle-feed.js';
export type { IsolationStats } from './tools/isolation.js';
export type {
  ApprovalCall,
  ApprovalPolicyFn,
  ApprovalRequest,
  ApproveInput,
  Caller,
  CloseInput,
  CompactInput,
  CreateWorkstreamInput,
  DecisionResult,
  DeleteInput,
  DenyInput,
  HistoryInput,
  HistoryMore,
  HistoryPage,
  HistoryRead,
  ListWorkstreamsInput,
  PersistenceStatus,
  RewindInput,
  RewindResult,
  SendInput,
  SubscribeInput,
  TurnHandle,
  TurnResult,
  WorkstreamDetails,
  WorkstreamInfo,
  WorkstreamPage,
  WorkstreamRef,
  WorkstreamStatus,
} from './types.js';
