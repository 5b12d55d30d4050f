/**
 * The contracts between the turn loop and what it drives: model providers and tools.
 * Both run inside the session worker, on the turn's thread, and share one rule: honour
 * `signal`, and call `heartbeat()` whenever you make progress the clock cannot see.
 */
import type { HistoryMessage, ToolCall } from '@turnwarden/protocol';

/** What a turn gives to everything it runs: the abort signal and the activity clock. */
export interface TurnSignals {
  /** Aborted when the turn is aborted (watchdog, cancel, deadline). */
  readonly signal: AbortSignal;
  /** Stamp progress on the activity clock (cheap; call as often as you like). */
  heartbeat(): void;
}

/** One event of a streamed assistant message. Every event counts as progress. */
export type ModelEvent =
  /** A streamed token/chunk of the assistant message's text. */
  | { readonly type: 'text'; readonly text: string }
  /** One tool call of the assistant message (several may follow, in order). */
  | { readonly type: 'tool_call'; readonly call: ToolCall };

/** What the model is told about a tool. */
export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  /**
   * The JSON Schema of the tool's arguments (an object schema), as a model provider sends it
   * to the model. Absent: any object.
   */
  readonly parameters?: Readonly<Record<string, unknown>>;
}

/** One model call: the history so far (ending with a user or tool message) and the tools on offer. */
export interface ModelRequest {
  readonly history: readonly HistoryMessage[];
  readonly tools: readonly ToolSpec[];
}

export interface ModelProvider {
  /** The name a turn request selects it by (`TurnRequest.model`). */
  readonly name: string;
  /** Streams one assistant message. Ends when the message is complete. Throw a TurnwardenError(MODEL_ERROR) on failure. */
  stream(req: ModelRequest, ctx: TurnSignals): AsyncIterable<ModelEvent>;
  /**
   * Optional: refuse a user message this provider cannot take, before anything is written —
   * throw a TurnwardenError and `send` rejects with it (the scripted model refuses a malformed
   * script with INVALID_SCRIPT). Synchronous and quick: it runs in the worker about to take the
   * turn, before the claim.
   */
  checkInput?(content: string): void;
}

/** A function of a module, to run in the supervisor's shared thread pool (see `isolatedTool`). */
export interface IsolatedTask {
  /** The module's URL (`new URL('./my-task.js', import.meta.url).href`, or a package specifier). */
  readonly module: string;
  /** The function the module exports (default `default`). */
  readonly exportName?: string;
}

/** What a tool run gets: the turn's signals plus which call occurrence it serves. */
export interface ToolContext extends TurnSignals {
  readonly callId: string;
  /**
   * The workstream whose turn called the tool, as its tenant names it. Ids are per tenant (T2):
   * two tenants may use the same one, so a tool that keeps state per workstream keys it by
   * `tenantId` and `workstreamId` together.
   */
  readonly workstreamId: string;
  readonly tenantId: string;
  /**
   * Runs `task` with `args` in a thread of the supervisor's shared pool, not in this session
   * worker; resolves with its result text. The turn's abort terminates that thread (and only
   * it); the task's `heartbeat()` stamps this turn's clock. Absent outside a turn.
   */
  readonly runIsolated?: (task: IsolatedTask, args: Record<string, unknown>) => Promise<string>;
}

export interface Tool extends ToolSpec {
  /**
   * A person must approve each call before it runs (or, as a function of the call's parsed
   * arguments, the calls it says): the turn waits, holding no thread, until `approve` or `deny`.
   * Honoured only where the runtime sends the turn an approval policy (`TurnRequest.approvals`).
   */
  readonly needsApproval?: boolean | ((args: Record<string, unknown>) => boolean);
  /** Runs the tool. `args` is the parsed JSON object. Resolve with the result text; throw to report a tool error. */
  run(args: Record<string, unknown>, ctx: ToolContext): Promise<string>;
}
