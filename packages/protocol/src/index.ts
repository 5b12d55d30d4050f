export type { WireError } from './errors.js';
export { ErrorCode, fromWire, isTurnwardenError, TurnwardenError, toWire } from './errors.js';
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
  AbortReason,
  ControlMessage,
  HostApi,
  HostToolRequest,
  HostToolSpec,
  IsolatedRequest,
  JournalAck,
  JournalEntry,
  JournalRequest,
  SessionSnapshotData,
  TurnLimits,
  TurnOutcome,
  TurnRequest,
  TurnStatus,
  WorkerApi,
  WorkerEvent,
  WorkerInit,
  WorkerPorts,
} from './messages.js';
export { SessionState } from './messages.js';
export type { Mutation } from './mutations.js';
export { client, goneSignal, serve } from './rpc.js';
export type { HarnessLink, MainSeamController, SeamContext, SeamFault, WorkerSeamFn } from './seams.js';
export {
  attachSeamController,
  attachWorkerSeams,
  detachSeamController,
  SeamName,
  seam,
  seamSync,
} from './seams.js';
