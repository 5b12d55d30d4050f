/**
 * The turn loop, run inside the session worker: model stream → assistant message → tool calls
 * → tool results → again, until the model answers without tools. Every step stamps the
 * activity clock; every durable row goes through the supervisor's `journal`, which refuses
 * rows from a turn whose abort has committed (L3).
 */
import { Activity } from '@turnwarden/clock';
import type {
  AbortReason,
  AssistantMessage,
  HistoryMessage,
  JournalAck,
  JournalRequest,
  TurnOutcome,
  TurnRequest,
  WorkerEvent,
} from '@turnwarden/protocol';
import {
  ErrorCode,
  isTurnwardenError,
  SeamName,
  seamSync,
  TurnwardenError,
  toWire,
} from '@turnwarden/protocol';
import { createActor } from 'xstate';
import { abortError } from './abort.js';
import type { ModelProvider, Tool, ToolSpec, TurnSignals } from './contracts.js';
import { sessionMachine } from './machine.js';
import { streamAssistant } from './stream.js';
import { runToolCall } from './tool-call.js';

export interface TurnDeps {
  /** Stamps the clock; false once the turn's abort has committed. */
  readonly touch: (code: number) => boolean;
  readonly journal: (req: JournalRequest) => Promise<JournalAck>;
  readonly emit: (event: WorkerEvent) => void;
  readonly model: ModelProvider;
  readonly tools: ReadonlyMap<string, Tool>;
  /** Aborted by the supervisor's abort message or by a stamp that saw the committed fence. */
  readonly abort: AbortController;
  /** The reason carried by the abort message, once it arrived. */
  readonly abortReason: () => AbortReason | undefined;
}

export function commitKey(generation: number, step: number, callIndex?: number): string {
  return callIndex === undefined ? `g${generation}:a${step}` : `g${generation}:a${step}:t${callIndex}`;
}

/** The turn's outcome, before the worker adds its event count. */
export type LoopOutcome = Omit<TurnOutcome, 'eventsPosted'>;

export async function runTurn(req: TurnRequest, deps: TurnDeps): Promise<LoopOutcome> {
  const { generation } = req;
  const signal = deps.abort.signal;
  let alive = true;
  // Progress from this turn only: a tool that leaks past the turn cannot stamp the next one.
  const progress = (code: number) => {
    if (!alive) return;
    if (!deps.touch(code) && !signal.aborted) {
      deps.abort.abort(new TurnwardenError(ErrorCode.TURN_ABORTED, 'turn aborted: abort committed'));
    }
  };
  const signals: TurnSignals = { signal, heartbeat: () => progress(Activity.toolHeartbeat) };

  const actor = createActor(sessionMachine, { input: { workstreamId: req.workstreamId, generation } });
  let lastState: string | undefined;
  actor.subscribe((snap) => {
    const state = snap.value;
    if (state === lastState) return;
    lastState = state;
    deps.emit({ t: 'state', generation, state });
  });
  actor.start();

  progress(Activity.turnEntry); // L9: idle time before this turn never counts
  actor.send({ type: 'CLAIM', generation });

  const history: HistoryMessage[] = [...req.history];
  const toolSpecs: ToolSpec[] = [...deps.tools.values()].map((t) => ({
    name: t.name,
    description: t.description,
  }));
  const started: number[] = [];
  let steps = 0;
  const journal = (key: string, message: HistoryMessage) =>
    deps.journal({
      workstreamId: req.workstreamId,
      generation,
      fencingToken: req.fencingToken,
      entries: [{ commitKey: key, message }],
    });
  const outcome = (status: TurnOutcome['status'], extra: Partial<LoopOutcome> = {}): LoopOutcome => ({
    generation,
    status,
    startedCalls: [...started],
    modelSteps: steps,
    ...extra,
  });

  try {
    for (;;) {
      if (signal.aborted) throw abortError(signal);
      if (steps >= req.limits.maxModelSteps) {
        throw new TurnwardenError(
          ErrorCode.MODEL_ERROR,
          `model exceeded ${req.limits.maxModelSteps} steps in one turn`,
        );
      }
      progress(Activity.modelRequest);
      const streamed = await streamAssistant(deps.model, { history, tools: toolSpecs }, signals, {
        onFirstEvent: () => actor.send({ type: 'STREAM_START' }),
        onText: (text) => {
          seamSync(SeamName.workerStreamEvent, generation, 'text');
          progress(Activity.streamToken);
          deps.emit({ t: 'token', generation, text });
        },
        onToolCall: () => {
          seamSync(SeamName.workerStreamEvent, generation, 'tool_call');
          progress(Activity.streamToken);
        },
      });
      steps++;
      const assistant: AssistantMessage =
        streamed.calls.length > 0
          ? { role: 'assistant', content: streamed.content, toolCalls: streamed.calls }
          : { role: 'assistant', content: streamed.content };
      // S4: the row joins live history only once it is durable.
      await journal(commitKey(generation, steps), assistant);
      history.push(assistant);
      if (streamed.calls.length === 0) {
        actor.send({ type: 'ASSISTANT_FINAL' });
        return outcome('completed', { finalText: streamed.content });
      }

      actor.send({ type: 'ASSISTANT_TOOLS', calls: streamed.calls.length });
      started.length = 0;
      for (const [callIndex, call] of streamed.calls.entries()) {
        if (signal.aborted) throw abortError(signal);
        const result = await runToolCall(call, callIndex, {
          tools: deps.tools,
          maxToolArgBytes: req.limits.maxToolArgBytes,
          workstreamId: req.workstreamId,
          signal,
          heartbeat: signals.heartbeat,
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
        actor.send({ type: 'TOOL_RESULT' });
        deps.emit({ t: 'tool_finished', generation, callIndex, isError: result.isError });
      }
      actor.send({ type: 'DEBT_PAID' });
    }
  } catch (e) {
    if (signal.aborted) {
      const reason = deps.abortReason();
      actor.send({ type: 'ABORT', reason: reason ?? 'aborted' });
      return outcome('interrupted', {
        ...(reason === undefined ? {} : { abortReason: reason }),
        error: toWire(e),
      });
    }
    // A failure in tool-debt leaves the debt for the supervisor to repair (S2, S5).
    actor.send({ type: 'FAIL' });
    const error = isTurnwardenError(e)
      ? e
      : new TurnwardenError(ErrorCode.MODEL_ERROR, (e as Error).message ?? String(e));
    return outcome('failed', { error: toWire(error) });
  } finally {
    alive = false;
    actor.stop();
  }
}
