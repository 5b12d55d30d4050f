export type { CodeSpec, ErrorDetails } from './error-codes.js';
export { ERROR_TABLE, ErrorCode } from './error-codes.js';
export type { TurnwardenErrorDetails, TurnwardenErrorOptions, WireError } from './errors.js';
export { errors, fromWire, isTurnwardenError, TurnwardenError, toWire } from './errors.js';
export type {
  AssistantMessage,
  EffectStatus,
  HistoryMessage,
  HistoryRow,
  OpenToolCall,
  SystemMessage,
  ToolCall,
  ToolResultMessage,
  UserMessage,
} from './history.js';
export { openToolCalls, structuralRefusal } from './history.js';
export type {
  ApprovalPolicy,
  ApprovalQuestion,
  ControlMessage,
  HistoryReaderSpec,
  HostApi,
  HostToolRequest,
  HostToolSpec,
  IsolatedRequest,
  JournalAck,
  JournalEntry,
  JournalRequest,
  ModelPlacement,
  ModelStepRequest,
  ModelStepResult,
  ModelThreadCommand,
  ModelThreadEvent,
  ModelThreadInit,
  ModelToolSpec,
  SessionSnapshotData,
  TurnLimits,
  TurnOutcome,
  TurnRequest,
  TurnResume,
  WorkerApi,
  WorkerEvent,
  WorkerInit,
  WorkerPorts,
} from './messages.js';
export type { Mutation } from './mutations.js';
export { client, goneSignal, serve } from './rpc.js';
export type {
  AbandonReason,
  AbortReason,
  Bound,
  CapacityReason,
  DoubleTexting,
  LeaseRefusal,
  PersistenceState,
  RevokeReason,
  TurnStatus,
  WorkstreamStatusName,
} from './rules.js';
export {
  ABANDON_REASONS,
  ABORT_REASONS,
  Bounds,
  DOUBLE_TEXTING_POLICIES,
  HOST_ID_PATTERN,
  HOST_ID_RULE,
  ID_MAX_LENGTH,
  ID_PATTERN,
  ID_RULE,
  inBound,
  isId,
  isWorkstreamKey,
  keyTenantId,
  keyWorkstreamId,
  Lengths,
  ofLength,
  PERSISTENCE_STATES,
  SESSION_STATES,
  SessionState,
  TURN_STATUSES,
  WORKSTREAM_KEY_RULE,
  WORKSTREAM_STATUSES,
  workstreamKey,
} from './rules.js';
export type { HarnessLink, MainSeamController, SeamContext, SeamFault, WorkerSeamFn } from './seams.js';
export {
  attachSeamController,
  attachWorkerSeams,
  detachSeamController,
  SeamName,
  seam,
  seamSync,
} from './seams.js';
