export { raceAbort } from './abort.js';
export type {
  IsolatedTask,
  ModelEvent,
  ModelProvider,
  ModelRequest,
  Tool,
  ToolContext,
  ToolSpec,
  TurnSignals,
} from './contracts.js';
export { type IsolatedInput, isolatedTool } from './isolated.js';
export type { Abandoned, RepairFn } from './lifecycle.js';
export {
  accepts,
  contextOf,
  finishAbandoning,
  newSession,
  offer,
  stateNameOf,
  stateOf,
  waitingApproval,
} from './lifecycle.js';
export type {
  Approval,
  Decision as ApprovalDecision,
  SessionContext,
  SessionEvent,
  SessionInput,
  SessionMachine,
  StreamOutput,
  Transition,
} from './machine.js';
export { sessionMachine } from './machine.js';
export { osThreadId } from './priority.js';
export type { Script, ScriptSegment, ScriptStep, ScriptStepKind } from './scripted/index.js';
export { createScriptedModel, parseScript, SCRIPT_DONE_TEXT, SCRIPT_LIMITS } from './scripted/index.js';
export { declaredEffect, parseToolArguments, toolError } from './tool-call.js';
export { demoTools } from './tools/index.js';
export { commitKey } from './turn.js';

/** URL of the isolated-tool task runner, for the supervisor's shared pool (piscina). */
export const isolatedRunnerUrl: URL = new URL('./isolated-runner.js', import.meta.url);

/** URL of the session worker entry, for the supervisor's pool. */
export const sessionWorkerUrl: URL = new URL('./worker.bundle.js', import.meta.url);
export type { WorkerHarnessChannel } from './seam-client.js';
export { ARG, DECISION, Decision, RELEASED } from './seam-client.js';

/** URL of the shared model thread entry (the `shared` model placement), for the supervisor. */
export const modelThreadUrl: URL = new URL('./model-thread.bundle.js', import.meta.url);
