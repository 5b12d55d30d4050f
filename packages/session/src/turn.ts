/**
 * One turn, inside the session worker: the session's machine, restored from the claimed
 * snapshot the supervisor sent, runs the turn. Its invoked actors do the work — `streamModel`
 * streams the model's answer and journals it, `runTool` runs one call occurrence and journals
 * its result — and the machine decides what comes next: another occurrence, another model
 * call, or the end. This file provides those actors for the worker and returns when the machine
 * is idle (the turn completed or failed with nothing open) or force-abandoning (aborted, or a
 * result could not be journaled: the supervisor finishes it). Every step stamps the activity
 * clock; every durable row goes through the supervisor's journal gate, which refuses rows from a
 * turn whose abort has committed (L3).
 */
import { Activity } from '@turnwarden/clock';
import type {
  AbortReason,
  AssistantMessage,
  HistoryMessage,
  JournalAck,
  JournalRequest,
  ToolCall,
  TurnOutcome,
  TurnRequest,
  WireError,
  WorkerEvent,
} from '@turnwarden/protocol';
import { errors, keyWorkstreamId, SeamName, seamSync, toWire } from '@turnwarden/protocol';
import { createActor, fromPromise } from 'xstate';
import { raceAbort } from './abort.js';
import type { IsolatedTask, ModelProvider, ModelRequest, Tool, ToolSpec } from './contracts.js';
import { contextOf } from './lifecycle.js';
import {
  type Decision,
  persistable,
  type SessionSnapshot,
  sessionMachine,
  sessionState,
  stateName,
  type ToolOutput,
  watchTransitions,
} from './machine.js';
import { asModelError } from './model-error.js';
import { type StreamedAssistant, streamAssistant } from './stream.js';
import { parseToolArguments, runToolCall } from './tool-call.js';

export interface TurnDeps {
  /** Stamps the clock; false once the turn's abort has committed. */
  readonly touch: (code: number) => boolean;
  readonly journal: (req: JournalRequest) => Promise<JournalAck>;
  readonly emit: (event: WorkerEvent) => void;
  /**
   * How the turn asks the model: a provider that streams here (`session` placement), or a call
   * that returns the complete assistant message (`shared` placement: the supervisor's model
   * threads stream it, stamp the turn's slot per event and send its tokens to listeners; this
   * thread sleeps until it is complete).
   */
  readonly model: ModelProvider | RemoteModel;
  readonly tools: ReadonlyMap<string, Tool>;
  /** Aborted by the supervisor's abort message or by a stamp that saw the committed fence. */
  readonly abort: AbortController;
  /** The reason carried by the abort message, once it arrived. */
  readonly abortReason: () => AbortReason | undefined;
  /** The host's approval policy, asked about a call (`req.approvals.hostPolicy`); absent: never. */
  readonly approvalNeeded?: (call: ToolCall) => Promise<boolean>;
  /** Runs a thread-isolated task in the supervisor's pool; cancels it when `signal` aborts. */
  readonly runIsolated?: (
    task: IsolatedTask,
    args: Record<string, unknown>,
    signal: AbortSignal,
  ) => Promise<string>;
}

/** A model call made elsewhere: resolves with the complete assistant message, or rejects. */
export interface RemoteModel {
  readonly remote: (req: ModelRequest, signal: AbortSignal) => Promise<StreamedAssistant>;
}

const isRemote = (m: ModelProvider | RemoteModel): m is RemoteModel => 'remote' in m;

export function commitKey(generation: number, step: number, callIndex?: number): string {
  return callIndex === undefined ? `g${generation}:a${step}` : `g${generation}:a${step}:t${callIndex}`;
}

/** The turn's outcome, before the worker adds its event count. */
export type LoopOutcome = Omit<TurnOutcome, 'eventsPosted'>;

/** What a turn's invoked actors do, bound to the turn (its deps, history and calls). */
interface TurnScope {
  streamModel(signal: AbortSignal): Promise<{ calls: number }>;
  runTool(
    input: { callIndex: number; decision: Decision | undefined },
    signal: AbortSignal,
  ): Promise<ToolOutput | undefined>;
}

/**
 * The machine with the worker's actors, provided once (providing builds a whole machine: a
 * quarter of a millisecond per turn). Each actor runs the scope of the turn whose actor system
 * invoked it.
 */
const scopes = new WeakMap<object, TurnScope>();
const scopeOf = (system: object): TurnScope => {
  const scope = scopes.get(system);
  if (scope === undefined) throw errors.internal('a turn actor ran outside its turn');
  return scope;
};
const turnMachine = sessionMachine.provide({
  actors: {
    streamModel: fromPromise(({ signal, system }) => scopeOf(system).streamModel(signal)),
    runTool: fromPromise(({ input, signal, system }) => scopeOf(system).runTool(input, signal)),
  },
});

export async function runTurn(req: TurnRequest, deps: TurnDeps): Promise<LoopOutcome> {
  const { generation } = req;
  const turnSignal = deps.abort.signal;
  let alive = true;
  const history: HistoryMessage[] = [...req.history];
  const toolSpecs: ToolSpec[] = [...deps.tools.values()].map((t) => ({
    name: t.name,
    description: t.description,
    ...(t.parameters === undefined ? {} : { parameters: t.parameters }),
  }));
  // A turn resumed by a decision goes on from its last assistant message's calls and steps.
  let calls: readonly ToolCall[] = req.resume?.calls ?? [];
  const started: number[] = [];
  let steps = req.resume?.steps ?? 0;
  // The send's own approval policy, carried by the machine (a resumed turn's snapshot has it too).
  const sendApprovals = contextOf(req.snapshot).sendApprovals;
  let finalText: string | undefined;
  let failure: WireError | undefined;

  // Progress from this turn only: a tool that leaks past the turn cannot stamp the next one.
  const progress = (code: number) => {
    if (!alive) return;
    if (!deps.touch(code) && !turnSignal.aborted) {
      deps.abort.abort(errors.turnAborted('turn aborted: abort committed'));
    }
  };
  // Each caller's heartbeat says who made the progress (the watchdog's log names it).
  const toolHeartbeat = () => progress(Activity.toolHeartbeat);
  const modelHeartbeat = () => progress(Activity.modelHeartbeat);
  // Journal requests in flight. An aborted step is abandoned, but the turn answers only once
  // every request it made has its answer: the supervisor then learns the outcome after the rows
  // (on another port, so otherwise in either order).
  const inFlight = new Set<Promise<unknown>>();
  const journal = (key: string, message: HistoryMessage) => {
    const request = deps.journal({
      workstreamId: req.workstreamId,
      generation,
      fencingToken: req.fencingToken,
      entries: [{ commitKey: key, message }],
    });
    const tracked: Promise<unknown> = request.then(
      () => inFlight.delete(tracked),
      () => inFlight.delete(tracked),
    );
    inFlight.add(tracked);
    return request;
  };
  // An invoked actor starts inside the machine's step, before the step is reported; waiting one
  // microtask lets the report (the `state` event) go first.
  const reported = Promise.resolve();
  /** Records why the step failed (for the outcome), then fails the invoked actor with it. */
  const failing = async <T>(work: () => Promise<T>): Promise<T> => {
    try {
      return await work();
    } catch (e) {
      if (!turnSignal.aborted) failure = toWire(asModelError(e));
      throw e;
    }
  };

  const scope: TurnScope = {
    // streaming: one assistant message; S4 — it joins live history only once it is durable.
    streamModel: (signal) =>
      failing(async () => {
        await reported; // listeners hear of `streaming` before its first token
        progress(Activity.modelRequest);
        const { model } = deps;
        const streamed = isRemote(model)
          ? await raceAbort(model.remote({ history, tools: toolSpecs }, signal), signal)
          : await streamAssistant(
              model,
              { history, tools: toolSpecs },
              { signal, heartbeat: modelHeartbeat },
              {
                onText: (text) => {
                  seamSync(SeamName.workerStreamEvent, generation, 'text');
                  progress(Activity.streamToken);
                  deps.emit({ t: 'token', generation, text });
                },
                onToolCall: () => {
                  seamSync(SeamName.workerStreamEvent, generation, 'tool_call');
                  progress(Activity.streamToken);
                },
              },
            );
        steps++;
        const assistant: AssistantMessage =
          streamed.calls.length > 0
            ? { role: 'assistant', content: streamed.content, toolCalls: streamed.calls }
            : { role: 'assistant', content: streamed.content };
        await journal(commitKey(generation, steps), assistant);
        history.push(assistant);
        if (streamed.calls.length === 0) {
          finalText = streamed.content;
        } else {
          calls = streamed.calls;
          started.length = 0;
        }
        return { calls: streamed.calls.length };
      }),
    // tool-debt: one call occurrence, by index (S1); its result joins history once durable.
    runTool: (input, signal) =>
      failing(async () => {
        await reported; // listeners hear of `tool-debt` before the tool starts
        const { callIndex, decision } = input;
        const asked = calls[callIndex];
        if (asked === undefined) throw errors.internal(`no call #${callIndex}`);
        if (
          decision === undefined &&
          (needsApproval(asked, deps.tools, req, sendApprovals) ||
            (req.approvals?.hostPolicy === true && (await raceAbort(askHost(deps, asked), signal))))
        ) {
          // Nothing runs and nothing is journaled: the machine waits, durable, for a decision.
          return {
            awaiting: {
              nonce: globalThis.crypto.randomUUID(),
              expiresAt: Date.now() + (req.approvals?.timeoutMs ?? DEFAULT_APPROVAL_TIMEOUT_MS),
            },
          };
        }
        if (decision?.approved === false) {
          // Denied: the call never runs; its result says so (effect none).
          const denied = deniedResult(asked, callIndex, decision.reason);
          await journal(commitKey(generation, steps, callIndex), denied);
          history.push(denied);
          deps.emit({ t: 'tool_finished', generation, callIndex, isError: true });
          return undefined;
        }
        // Approved, with the arguments as edited when they were.
        const call = decision?.arguments === undefined ? asked : { ...asked, arguments: decision.arguments };
        const result = await runToolCall(call, callIndex, {
          tools: deps.tools,
          ...(deps.runIsolated === undefined
            ? {}
            : { runIsolated: (task, args) => deps.runIsolated!(task, args, signal) }),
          maxToolArgBytes: req.limits.maxToolArgBytes,
          // The request names the workstream by key (T2); the tool by its tenant's id.
          workstreamId: keyWorkstreamId(req.workstreamId),
          tenantId: req.tenantId,
          signal,
          heartbeat: toolHeartbeat,
          onStart: () => {
            started.push(callIndex);
            progress(Activity.toolStart);
            deps.emit({ t: 'tool_started', generation, callIndex, id: call.id, name: call.name });
          },
        });
        progress(Activity.toolResult);
        seamSync(SeamName.workerToolToJournal, generation, callIndex);
        await journal(commitKey(generation, steps, callIndex), result);
        history.push(result);
        deps.emit({ t: 'tool_finished', generation, callIndex, isError: result.isError });
        return undefined;
      }),
  };

  let settle!: (snapshot: SessionSnapshot) => void;
  const settled = new Promise<SessionSnapshot>((resolve) => {
    settle = resolve;
  });
  // Every step of the machine is reported (with the event that caused it) and made durable by
  // the supervisor; the machine's state decides what this loop does next.
  let self: unknown;
  const actor = createActor(turnMachine, {
    snapshot: req.snapshot as unknown as SessionSnapshot,
    input: { workstreamId: req.workstreamId },
    inspect: watchTransitions(
      req.snapshot,
      () => self,
      (step, snap) => {
        const state = sessionState(snap);
        deps.emit({
          t: 'state',
          generation,
          state,
          snapshot: persistable(snap),
          from: step.from,
          via: step.via,
        });
        if (state === 'claimed') next();
        else if (state === 'idle' || state === 'force-abandoning' || awaiting(snap)) settle(snap);
      },
    ),
  });
  self = actor;
  scopes.set(actor.system, scope);
  /** In `claimed`: ask the model again, unless the turn is out of model steps. */
  const next = () => {
    if (steps >= req.limits.maxModelSteps) {
      const reason = `model exceeded ${req.limits.maxModelSteps} steps in one turn`;
      failure = toWire(errors.modelError(reason));
      actor.send({ type: 'FAIL', reason });
    } else {
      actor.send({ type: 'STREAM' });
    }
  };
  const onAbort = () => actor.send({ type: 'ABORT', reason: deps.abortReason() ?? 'aborted' });

  actor.start();
  progress(Activity.turnEntry); // L9: the turn is measured from its own entry
  turnSignal.addEventListener('abort', onAbort, { once: true });
  const resume = req.resume;
  if (resume !== undefined && awaiting(actor.getSnapshot())) {
    // A decision resumes the turn: the step the supervisor made durable, applied here, runs the call.
    if (turnSignal.aborted) onAbort();
    else actor.send({ type: 'DECIDE', ...resume.decision });
    if (awaiting(actor.getSnapshot()) && !turnSignal.aborted) {
      failure = toWire(errors.internal('the decision does not answer the waiting call'));
      settle(actor.getSnapshot());
    }
  } else if (sessionState(actor.getSnapshot()) !== 'claimed') {
    // Only a claimed session runs a turn; anything else is handed back as it is.
    failure = toWire(errors.internal(`the session is not claimed`));
    settle(actor.getSnapshot());
  } else if (turnSignal.aborted) onAbort();
  else next();
  const end = await settled;
  alive = false;
  await Promise.all([...inFlight]);
  turnSignal.removeEventListener('abort', onAbort);
  actor.stop();

  const snapshot = persistable(end);
  const base = { generation, startedCalls: [...started], modelSteps: steps, snapshot };
  const waiting = end.context.approval;
  if (awaiting(end) && waiting !== undefined && failure === undefined) {
    const call = calls[waiting.callIndex]!;
    return {
      ...base,
      status: 'awaiting_approval',
      approval: { callIndex: waiting.callIndex, call, nonce: waiting.nonce, expiresAt: waiting.expiresAt },
    };
  }
  if (awaiting(end)) return { ...base, status: 'failed', ...(failure ? { error: failure } : {}) };
  if (sessionState(end) === 'idle') {
    return finalText !== undefined
      ? { ...base, status: 'completed', finalText }
      : { ...base, status: 'failed', ...(failure ? { error: failure } : {}) };
  }
  // force-abandoning: aborted, or a result could not be journaled (S5) — the supervisor repairs.
  const reason = deps.abortReason();
  if (end.context.abortReason === 'failure' || !turnSignal.aborted) {
    return { ...base, status: 'failed', ...(failure ? { error: failure } : {}) };
  }
  return {
    ...base,
    status: 'interrupted',
    ...(reason === undefined ? {} : { abortReason: reason }),
    error: toWire(turnSignal.reason instanceof Error ? turnSignal.reason : asModelError(turnSignal.reason)),
  };
}

/** The host's policy on a call; one it cannot answer asks for approval (fail closed). */
async function askHost(deps: TurnDeps, call: ToolCall): Promise<boolean> {
  if (deps.approvalNeeded === undefined) return true;
  return deps.approvalNeeded(call).catch(() => true);
}

/** How long a call waits for its decision when the request does not say (one hour). */
const DEFAULT_APPROVAL_TIMEOUT_MS = 3_600_000;

const awaiting = (snapshot: { readonly value: unknown }): boolean =>
  stateName(snapshot) === 'tool-debt.awaiting-approval';

/**
 * Whether a call needs a person's approval: its tool says so, or the turn's policy names it. Only
 * a runtime that sends a policy (`req.approvals`) can resume a waiting turn: without one, no call
 * waits.
 */
function needsApproval(
  call: ToolCall,
  tools: ReadonlyMap<string, Tool>,
  req: TurnRequest,
  sendApprovals: readonly string[] | 'all' | undefined,
): boolean {
  if (req.approvals === undefined) return false;
  for (const policy of [req.approvals.tools, sendApprovals]) {
    if (policy === 'all' || policy?.includes(call.name)) return true;
  }
  const rule = tools.get(call.name)?.needsApproval;
  if (typeof rule !== 'function') return rule === true;
  const args = parseToolArguments(call.arguments);
  // Malformed: refused by the call's run, never reaching the tool.
  if (typeof args === 'string') return false;
  try {
    return rule(args) === true;
  } catch {
    return false;
  }
}

/** A denied call's result: it never ran (effect none). */
function deniedResult(call: ToolCall, callIndex: number, reason: string | undefined) {
  return {
    role: 'tool' as const,
    toolCallId: call.id,
    callIndex,
    name: call.name,
    content: `denied: ${reason ?? 'not approved'}`,
    isError: true,
    effect: 'none' as const,
  };
}
