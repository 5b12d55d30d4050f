/**
 * Messages between the supervisor (main thread) and a session worker.
 *
 * Two channels per worker:
 *  - the control port carries raw, fire-and-forget messages: abort (supervisor → worker) and
 *    turn events (worker → supervisor). The abort path never goes through RPC.
 *  - the RPC port carries comlink calls: `WorkerApi.runTurn` (supervisor → worker) and
 *    `HostApi.journal` (worker → supervisor). Every call is raced against the worker's exit
 *    so it rejects with WORKER_EXITED instead of hanging.
 */
import type { MessagePort } from 'node:worker_threads';
import type { WireError } from './errors.js';
import type { HistoryMessage, ToolCall, UserMessage } from './history.js';
import type { AbortReason, SessionState, TurnStatus } from './rules.js';

/**
 * A persisted snapshot of a session's machine (packages/session/src/machine.ts), without child
 * actors: durable with the workstream, and sent between the supervisor and the worker. Opaque
 * outside the session package, except its `value` (the state).
 */
export interface SessionSnapshotData {
  readonly value: unknown;
  readonly [key: string]: unknown;
}

export interface TurnLimits {
  /** Model round-trips (assistant messages) allowed in one turn. */
  readonly maxModelSteps: number;
  /** Largest tool-call argument text accepted from the model (T6). */
  readonly maxToolArgBytes: number;
}

export interface TurnRequest {
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly generation: number;
  /** The lease's fencing token; every journal write of the turn carries it (P6). */
  readonly fencingToken: number;
  /**
   * The durable history, ending with this turn's user message (already journaled) — for a
   * worker that runs the model itself (`session` placement). Empty with `shared` model threads,
   * which read the context from the store per call.
   */
  readonly history: readonly HistoryMessage[];
  readonly input: UserMessage;
  /** Name of the model provider (the built-in one is `scripted`). */
  readonly model: string;
  /** The tools offered this turn (the send's allow-list); absent: every registered tool. */
  readonly tools?: readonly string[];
  readonly limits: TurnLimits;
  /** The session's machine, claimed for this turn: the worker restores it and drives it. */
  readonly snapshot: SessionSnapshotData;
  /** Calls that need a person's approval before they run (besides tools that say so themselves). */
  readonly approvals?: ApprovalPolicy;
  /**
   * A turn resumed by a decision: `snapshot` waits in `tool-debt.awaiting-approval`; the worker
   * applies `decision` (the step the supervisor made durable) and goes on from the call.
   */
  readonly resume?: TurnResume;
}

/** Which calls of a turn need approval, and how long a wait lasts. */
export interface ApprovalPolicy {
  /** Tool names whose calls need approval (`'all'`: every call). */
  readonly tools: readonly string[] | 'all';
  /** How long a call waits for its decision before it is denied (ms). */
  readonly timeoutMs: number;
  /** The host has an approval policy: each call not otherwise decided is asked about (`HostApi.approvalNeeded`). */
  readonly hostPolicy?: boolean;
}

export interface TurnResume {
  /** The model steps the turn had taken (its assistant rows' commit keys go on from them). */
  readonly steps: number;
  /** The calls of the turn's last assistant message. */
  readonly calls: readonly ToolCall[];
  readonly decision: {
    readonly nonce: string;
    readonly approved: boolean;
    readonly arguments?: string;
    readonly reason?: string;
  };
}

export interface TurnOutcome {
  readonly generation: number;
  readonly status: TurnStatus;
  readonly finalText?: string;
  readonly error?: WireError;
  /** Set when interrupted: why. */
  readonly abortReason?: AbortReason;
  /**
   * Call indexes (of the last assistant message) whose tool was started. The rest provably
   * never started: their synthesized results say effect `none` (S2).
   */
  readonly startedCalls: readonly number[];
  readonly modelSteps: number;
  /** Control-port events the worker had posted when it returned (see `JournalRequest.eventsPosted`). */
  readonly eventsPosted: number;
  /**
   * The machine where the worker left it: idle, force-abandoning for the supervisor to finish, or
   * waiting for an approval (`awaiting_approval`).
   */
  readonly snapshot: SessionSnapshotData;
  /** `awaiting_approval`: the call that waits. */
  readonly approval?: {
    readonly callIndex: number;
    readonly call: ToolCall;
    readonly nonce: string;
    readonly expiresAt: number;
  };
}

/** A row the worker asks the supervisor to make durable. */
export interface JournalEntry {
  readonly commitKey: string;
  readonly message: HistoryMessage;
}

export interface JournalRequest {
  readonly workstreamId: string;
  readonly generation: number;
  readonly fencingToken: number;
  readonly entries: readonly JournalEntry[];
  /**
   * Control-port events the worker had posted before this request. Messages on different ports
   * are not ordered, so the supervisor admits the request only once it has received that many
   * events: listeners see a turn's tokens before the message they make up.
   */
  readonly eventsPosted?: number;
}

export interface JournalAck {
  readonly seqs: readonly number[];
}

/** What the model is offered of a tool (the worker's registry and host tools, by the turn's allow-list). */
export interface ModelToolSpec {
  readonly name: string;
  readonly description: string;
  readonly parameters?: Readonly<Record<string, unknown>>;
}

/**
 * A session worker asks the supervisor for one model call of its running turn (the `shared`
 * model placement): the call runs on a shared model thread, which reads the turn's context
 * from the store, stamps the turn's clock slot on every event and sends the tokens to
 * listeners; the worker sleeps until the assistant message is complete.
 */
export interface ModelStepRequest {
  readonly workstreamId: string;
  readonly generation: number;
  /** The model provider, by name. */
  readonly model: string;
  /** The tools offered on this call. */
  readonly tools: readonly ModelToolSpec[];
  /**
   * Control-port events the worker had posted before this request (its `streaming` step among
   * them): the call starts only once the supervisor has received them, so listeners hear of
   * the step before its first token.
   */
  readonly eventsPosted: number;
}

/** One complete assistant message of a model call. */
export interface ModelStepResult {
  readonly content: string;
  readonly calls: readonly ToolCall[];
}

/** RPC surface a session worker exposes (comlink). */
export interface WorkerApi {
  runTurn(req: TurnRequest): Promise<TurnOutcome>;
  ping(): Promise<'pong'>;
  /** The model provider's `checkInput` on a user message (rejects with its typed error). */
  checkInput(model: string, content: string): Promise<void>;
}

/** A tool call to run in the supervisor's shared thread pool instead of the session worker. */
export interface IsolatedRequest {
  readonly workstreamId: string;
  readonly generation: number;
  /** Chosen by the worker, unique within the turn: `cancelIsolated` names it. */
  readonly taskId: string;
  /** The module the pool's thread imports (a file or package URL, resolved by the worker). */
  readonly module: string;
  /** The function of that module to call. */
  readonly exportName: string;
  readonly args: Readonly<Record<string, unknown>>;
}

/** RPC surface the supervisor exposes to a worker (comlink). */
export interface HostApi {
  journal(req: JournalRequest): Promise<JournalAck>;
  /**
   * One model call of the worker's running turn, on a shared model thread (see
   * `ModelStepRequest`). Rejects with MODEL_ERROR (the provider failed, or its thread was lost)
   * or TURN_ABORTED / FENCED (the turn is no longer live).
   */
  modelStep(req: ModelStepRequest): Promise<ModelStepResult>;
  /**
   * Runs a thread-isolated tool call in the supervisor's pool for the worker's running turn;
   * resolves with the tool's result text, rejects with a TurnwardenError (TOOL_ERROR: the tool
   * threw; TURN_ABORTED: cancelled or the turn ended).
   */
  runIsolated(req: IsolatedRequest): Promise<string>;
  /** Cancels a task `runIsolated` started: its thread is terminated. */
  cancelIsolated(workstreamId: string, taskId: string): Promise<void>;
  /**
   * Runs a host tool (one of `WorkerInit.hostTools`) for the worker's running turn. Rejects with
   * TOOL_ERROR (`details.toolEffect` when the tool declared its effect) or TURN_ABORTED.
   */
  callHostTool(req: HostToolRequest): Promise<string>;
  /** Aborts a call `callHostTool` started (the tool's signal). */
  cancelHostTool(workstreamId: string, taskId: string): Promise<void>;
  /**
   * Whether the host's approval policy (`approvalPolicy`) asks a person to approve this call of
   * the worker's running turn (`TurnRequest.approvals.hostPolicy`).
   */
  approvalNeeded(req: ApprovalQuestion): Promise<boolean>;
}

/** A call the host's approval policy is asked about. */
export interface ApprovalQuestion {
  /** The workstream's key. */
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly generation: number;
  readonly name: string;
  /** The model's arguments (JSON text). */
  readonly arguments: string;
}

/** Supervisor → worker, raw on the control port. */
export type ControlMessage = {
  readonly t: 'abort';
  /** Only the turn of this generation may act on it; others ignore it. */
  readonly generation: number;
  readonly reason: AbortReason;
};

/** Worker → supervisor, raw on the control port. */
export type WorkerEvent =
  /** The worker loaded its registry and serves WorkerApi; the names it can run. */
  | {
      readonly t: 'ready';
      readonly workerId: number;
      readonly models: readonly string[];
      readonly tools: readonly string[];
      /** Each tool's arguments schema (JSON Schema), by name, where it declares one: edited arguments are checked against it. */
      readonly schemas?: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
      /** The models that check a user message before a claim (`ModelProvider.checkInput`). */
      readonly checks: readonly string[];
      /**
       * The worker's OS thread id (Linux: from `/proc/thread-self`), absent elsewhere. The
       * watchdog reads the thread's scheduler statistics with it, to tell a turn starved of CPU
       * from a stalled or a wedged one before it aborts (liveness/sched.ts).
       */
      readonly tid?: number;
    }
  /** The worker cannot start (its registry was refused): the error, then it exits. */
  | { readonly t: 'fatal'; readonly error: WireError }
  | {
      readonly t: 'state';
      readonly generation: number;
      readonly state: SessionState;
      readonly snapshot: SessionSnapshotData;
      /** The full state it left (`tool-debt`, `force-abandoning.pending` …) and the event's type. */
      readonly from: string;
      readonly via: string;
    }
  | { readonly t: 'token'; readonly generation: number; readonly text: string }
  | {
      readonly t: 'tool_started';
      readonly generation: number;
      readonly callIndex: number;
      readonly id: string;
      readonly name: string;
    }
  | {
      readonly t: 'tool_finished';
      readonly generation: number;
      readonly callIndex: number;
      readonly isError: boolean;
    }
  | {
      readonly t: 'log';
      readonly level: 'debug' | 'info' | 'warn' | 'error';
      readonly msg: string;
      readonly data?: Readonly<Record<string, unknown>>;
    };

/** `workerData` given to every session worker. */
export interface WorkerInit {
  readonly clock: SharedArrayBuffer;
  readonly slot: number;
  readonly workerId: number;
  /** Modules the worker imports for extra tools and model providers (see session README). */
  readonly pluginModules: readonly string[];
  /** How much to lower the worker thread's scheduling priority (`pool.workerNice`; 0: not at all). */
  readonly nice?: number;
  /** Tools that run on the supervisor's thread (`hostToolModules`): offered like the worker's own. */
  readonly hostTools?: readonly HostToolSpec[];
  /**
   * Where the turn's model calls run: `shared` — on the supervisor's shared model threads, asked
   * through `HostApi.modelStep` (the worker loads no provider); `session` (default) — in this
   * worker, as a plugin's provider.
   */
  readonly models?: ModelPlacement;
}

/** Where model calls run (`models.placement`). */
export type ModelPlacement = 'shared' | 'session';

/**
 * How a model thread reads a turn's context from the store itself (off the supervisor's
 * thread): the module that opens a reader and what it opens.
 */
export interface HistoryReaderSpec {
  /** The module exporting `openHistoryReader(options)` (a resolved URL). */
  readonly module: string;
  readonly options: Readonly<Record<string, unknown>>;
}

/** `workerData` of a shared model thread. */
export interface ModelThreadInit {
  readonly clock: SharedArrayBuffer;
  /** The thread's own clock slot: it stamps it while its event loop turns (its liveness). */
  readonly slot: number;
  readonly threadId: number;
  readonly pluginModules: readonly string[];
  /** How often the thread stamps its own slot. */
  readonly beatMs: number;
  /** How much to lower the thread's scheduling priority (as a session worker's, `pool.workerNice`). */
  readonly nice?: number;
  /** Tokens are sent to the supervisor in batches at most this often (0: every loop turn). */
  readonly flushMs: number;
  readonly reader?: HistoryReaderSpec;
}

/** Supervisor → model thread. */
export type ModelThreadCommand =
  | {
      readonly t: 'run';
      readonly id: number;
      readonly workstreamId: string;
      readonly generation: number;
      /** The turn's clock slot: every event of the call stamps it while it is armed for `generation`. */
      readonly slot: number;
      readonly model: string;
      readonly tools: readonly ModelToolSpec[];
      /** The context, when the thread cannot read it from the store itself. */
      readonly history?: readonly HistoryMessage[];
    }
  | { readonly t: 'abort'; readonly id: number; readonly reason: string }
  | { readonly t: 'check'; readonly id: number; readonly model: string; readonly content: string }
  | { readonly t: 'reader'; readonly reader: HistoryReaderSpec };

/** Model thread → supervisor. */
export type ModelThreadEvent =
  | {
      readonly t: 'ready';
      readonly models: readonly string[];
      readonly checks: readonly string[];
      /** Per plugin module (in order): whether it exports tools (session workers load only those). */
      readonly toolModules: readonly boolean[];
      /** The thread's OS thread id (Linux), when known. */
      readonly tid?: number;
    }
  | { readonly t: 'fatal'; readonly error: WireError }
  /** Text of running calls, in order: [call id, text, call id, text, …]. */
  | { readonly t: 'tokens'; readonly items: readonly (number | string)[] }
  | { readonly t: 'done'; readonly id: number; readonly result: ModelStepResult }
  | { readonly t: 'failed'; readonly id: number; readonly error: WireError }
  | { readonly t: 'checked'; readonly id: number; readonly error?: WireError }
  | {
      readonly t: 'log';
      readonly level: 'debug' | 'info' | 'warn' | 'error';
      readonly msg: string;
      readonly data?: Readonly<Record<string, unknown>>;
    };

/** A tool that runs on the supervisor's thread, as the worker offers it to the model. */
export interface HostToolSpec {
  readonly name: string;
  readonly description: string;
  readonly parameters?: Readonly<Record<string, unknown>>;
}

/** A call of a host tool (see `HostApi.callHostTool`). */
export interface HostToolRequest {
  readonly workstreamId: string;
  readonly generation: number;
  /** Chosen by the worker, unique within the turn: `cancelHostTool` names it. */
  readonly taskId: string;
  readonly callId: string;
  readonly name: string;
  readonly args: Readonly<Record<string, unknown>>;
}

/** First message on the worker's parentPort: its two ports (transferred). */
export interface WorkerPorts {
  readonly t: 'ports';
  readonly control: MessagePort;
  readonly rpc: MessagePort;
}
