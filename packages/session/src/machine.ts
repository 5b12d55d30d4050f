/**
 * The session machine (XState v5): the one authority on what a session may do next. Each
 * session is a virtual actor of this machine. While a turn runs, the actor runs in the session's
 * worker and its invoked actors do the work: the model stream in `streaming`, one tool call
 * occurrence at a time in `tool-debt`. Between turns its snapshot is durable with the
 * workstream and no thread holds it. When an abort commits or the worker dies, the supervisor
 * restores the same machine from the last snapshot and finishes `force-abandoning`: its
 * `repair` actor synthesizes the missing results (S2), and only then is the session idle.
 *
 *   idle ──CLAIM──▶ claimed ──STREAM──▶ streaming ──(answer)──▶ idle
 *                     ▲  │                  │ (tool calls)
 *                     │  └─FAIL─▶ idle       ▼
 *                     └──(debt paid)──── tool-debt ⟲ (one occurrence answered)
 *   tool-debt.running ──(the call needs approval)──▶ tool-debt.awaiting-approval
 *   tool-debt.awaiting-approval ──DECIDE (its nonce)──▶ tool-debt.running (the decision applied)
 *   claimed | streaming | tool-debt ──ABORT──▶ force-abandoning.pending
 *   streaming ──(the model or the answer's write failed)──▶ force-abandoning.pending
 *   tool-debt ──(a result cannot be journaled, S5)──▶ force-abandoning.pending
 *   force-abandoning.pending ──REPAIR──▶ repairing ──(repaired)──▶ idle
 *                                                 └─(repair failed, S3)──▶ pending
 *   idle ──CLOSE──▶ closed (final)
 *
 * Only `idle` takes CLAIM: a session with unanswered calls (tool-debt) or unrepaired debt
 * (force-abandoning) refuses every claim (S3). Which actor implementations run depends on the
 * side: the worker provides `streamModel` and `runTool`, the supervisor provides `repair`
 * (`sessionMachine.provide`); the states and transitions are the same everywhere. Durable
 * snapshots carry no child actors (see `persistable`): a restored session never resumes a
 * half-run model call or tool — it abandons them. Deadlines are not `after` delays (they are
 * not re-armed on restore); the watchdog owns them.
 */
import type { SessionSnapshotData, SessionState } from '@turnwarden/protocol';
import { assign, fromPromise, type SnapshotFrom, setup } from 'xstate';

export interface SessionContext {
  readonly workstreamId: string;
  /** Generation of the current (or last) turn. */
  readonly generation: number;
  /** Call occurrences (indexes into the last assistant message's calls) still without a result (S1). */
  readonly openCalls: readonly number[];
  /** Why the turn is being abandoned (an abort reason, or `failure`). */
  readonly abortReason: string | undefined;
  /** Why the last repair failed, while the debt stays unrepaired (S3). */
  readonly repairError: string | undefined;
  /**
   * The approval the first open call waits for (in `tool-debt.awaiting-approval`), or was given
   * (back in `tool-debt.running` with `decision`): cleared once that call has its result.
   */
  readonly approval?: Approval | undefined;
  /** Tools whose calls this turn's send asked to approve (`'all'`: every call), besides the runtime's policy. */
  readonly sendApprovals?: readonly string[] | 'all' | undefined;
  /** The last decision taken (its nonce): the same decision again is recognised, not repeated. */
  readonly decided?: { readonly nonce: string; readonly approved: boolean } | undefined;
}

/** A person's answer to a call that needs approval. */
export interface Decision {
  readonly approved: boolean;
  /** Approved with edited arguments (JSON object text): the call runs with them. */
  readonly arguments?: string;
  /** Denied: why (the call's result says it). */
  readonly reason?: string;
}

/** A call waiting for approval: which occurrence, the token's nonce, until when. */
export interface Approval {
  readonly callIndex: number;
  /** Random, fresh for each wait: an approval token names it, so a stale token cannot match. */
  readonly nonce: string;
  /** When the wait ends unanswered (epoch ms): the call is then denied (`approvals.timeoutMs`). */
  readonly expiresAt: number;
  readonly decision?: Decision;
}

/** What `runTool` resolves with: nothing (the result is journaled), or the wait it asks for. */
export interface ToolOutput {
  readonly awaiting?: { readonly nonce: string; readonly expiresAt: number };
}

export type SessionEvent =
  /** A turn is admitted (supervisor): only `idle` takes it; `approvals`: the send's own approval policy. */
  | { readonly type: 'CLAIM'; readonly generation: number; readonly approvals?: readonly string[] | 'all' }
  /** The worker asks the model (again): the response streams. */
  | { readonly type: 'STREAM' }
  /** The turn cannot go on before asking the model (step limit): nothing is open. */
  | { readonly type: 'FAIL'; readonly reason: string }
  /** The turn is abandoned: abort committed, force cancel, worker death, lease loss. */
  | { readonly type: 'ABORT'; readonly reason: string }
  /** Synthesize the missing results (supervisor); again after a failed repair. */
  | { readonly type: 'REPAIR' }
  /** The answer to the approval the session waits for: only its nonce's wait takes it. */
  | ({ readonly type: 'DECIDE'; readonly nonce: string } & Decision)
  | { readonly type: 'CLOSE' };

export interface SessionInput {
  readonly workstreamId: string;
}

/** What the streamed assistant message asked for: how many tool call occurrences. */
export interface StreamOutput {
  readonly calls: number;
}

function unprovided<Output, Input>(name: string) {
  return fromPromise<Output, Input>(async () => {
    throw new Error(`session actor ${name} is not provided on this side`);
  });
}

export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionEvent,
    input: {} as SessionInput,
  },
  actors: {
    /** Worker: streams one assistant message and journals it (S4); resolves with its call count. */
    streamModel: unprovided<StreamOutput, { generation: number }>('streamModel'),
    /**
     * Worker: runs one call occurrence and journals its result — or, for a call that needs
     * approval and has no decision, journals nothing and asks to wait (`awaiting`).
     */
    runTool: unprovided<
      ToolOutput | undefined,
      { generation: number; callIndex: number; decision: Decision | undefined }
    >('runTool'),
    /** Supervisor: journals a synthesized result for every open occurrence (S2). */
    repair: unprovided<number, { generation: number; reason: string | undefined }>('repair'),
  },
  guards: {
    askedForTools: (_, output: StreamOutput) => output.calls > 0,
    lastOpenCall: ({ context }) => context.openCalls.length <= 1,
    awaitsApproval: (_, output: ToolOutput | undefined) => output?.awaiting !== undefined,
    decides: ({ context, event }) =>
      event.type === 'DECIDE' && context.approval !== undefined && event.nonce === context.approval.nonce,
  },
  actions: {
    recordAbort: assign({ abortReason: (_, params: { reason: string }) => params.reason }),
    answerFirstOpenCall: assign({
      openCalls: ({ context }) => context.openCalls.slice(1),
      approval: undefined,
    }),
  },
}).createMachine({
  id: 'session',
  initial: 'idle',
  context: ({ input }) => ({
    workstreamId: input.workstreamId,
    generation: 0,
    openCalls: [],
    abortReason: undefined,
    repairError: undefined,
  }),
  states: {
    idle: {
      on: {
        CLAIM: {
          target: 'claimed',
          actions: assign({
            generation: ({ event }) => event.generation,
            openCalls: [],
            abortReason: undefined,
            sendApprovals: ({ event }) => event.approvals,
          }),
        },
        CLOSE: 'closed',
      },
    },
    claimed: {
      on: {
        STREAM: 'streaming',
        FAIL: { target: 'idle', actions: { type: 'recordAbort', params: ({ event }) => event } },
        ABORT: { target: 'force-abandoning', actions: { type: 'recordAbort', params: ({ event }) => event } },
      },
    },
    streaming: {
      invoke: {
        id: 'stream',
        src: 'streamModel',
        input: ({ context }) => ({ generation: context.generation }),
        onDone: [
          {
            guard: { type: 'askedForTools', params: ({ event }) => event.output },
            target: 'tool-debt',
            actions: assign({
              openCalls: ({ event }) => Array.from({ length: event.output.calls }, (_, i) => i),
            }),
          },
          { target: 'idle' },
        ],
        // The model failed, or its answer's write failed. A rejected write left nothing (S4), but
        // a write whose acknowledgement was lost may have landed with its calls (S6): the turn
        // is abandoned, and the repair — which reads the durable history — decides.
        onError: { target: 'force-abandoning', actions: assign({ abortReason: 'failure' }) },
      },
      on: {
        ABORT: { target: 'force-abandoning', actions: { type: 'recordAbort', params: ({ event }) => event } },
      },
    },
    'tool-debt': {
      initial: 'running',
      states: {
        running: {
          invoke: {
            id: 'tool',
            src: 'runTool',
            input: ({ context }) => {
              const callIndex = context.openCalls[0] ?? -1;
              const approval = context.approval;
              return {
                generation: context.generation,
                callIndex,
                decision: approval?.callIndex === callIndex ? approval.decision : undefined,
              };
            },
            onDone: [
              {
                guard: { type: 'awaitsApproval', params: ({ event }) => event.output },
                target: 'awaiting-approval',
                actions: assign({
                  approval: ({ context, event }) => ({
                    callIndex: context.openCalls[0] ?? -1,
                    nonce: event.output!.awaiting!.nonce,
                    expiresAt: event.output!.awaiting!.expiresAt,
                  }),
                }),
              },
              { guard: 'lastOpenCall', target: '#session.claimed', actions: 'answerFirstOpenCall' },
              { target: 'running', reenter: true, actions: 'answerFirstOpenCall' },
            ],
            // A result that cannot be journaled leaves the debt in place (S5).
            onError: { target: '#session.force-abandoning', actions: assign({ abortReason: 'failure' }) },
          },
        },
        // Durable, and no thread holds it: the turn's worker returned; a decision resumes it.
        'awaiting-approval': {
          on: {
            DECIDE: {
              guard: 'decides',
              target: 'running',
              actions: assign({
                approval: ({ context, event }) => {
                  const {
                    type: _,
                    nonce: __,
                    ...decision
                  } = event as Extract<SessionEvent, { type: 'DECIDE' }>;
                  return { ...context.approval!, decision };
                },
                decided: ({ event }) => {
                  const e = event as Extract<SessionEvent, { type: 'DECIDE' }>;
                  return { nonce: e.nonce, approved: e.approved };
                },
              }),
            },
          },
        },
      },
      on: {
        ABORT: { target: 'force-abandoning', actions: { type: 'recordAbort', params: ({ event }) => event } },
      },
    },
    'force-abandoning': {
      initial: 'pending',
      states: {
        pending: {
          on: { REPAIR: 'repairing' },
        },
        repairing: {
          invoke: {
            id: 'repair',
            src: 'repair',
            input: ({ context }) => ({ generation: context.generation, reason: context.abortReason }),
            onDone: {
              target: '#session.idle',
              actions: assign({ openCalls: [], repairError: undefined }),
            },
            onError: {
              target: 'pending',
              actions: assign({
                repairError: ({ event }) => String((event.error as Error)?.message ?? event.error),
              }),
            },
          },
        },
      },
    },
    closed: { type: 'final' },
  },
});

export type SessionMachine = typeof sessionMachine;
export type SessionSnapshot = SnapshotFrom<SessionMachine>;

/** The full state, substates included (`force-abandoning.pending`), for transition reports. */
export function stateName(snapshot: { readonly value: unknown }): string {
  const v = snapshot.value;
  if (typeof v === 'string') return v;
  const [top, sub] = Object.entries(v as Record<string, unknown>)[0]!;
  return `${top}.${stateName({ value: sub })}`;
}

/** One step of a session's machine, as reported for operators and model-based coverage. */
export interface Transition {
  readonly from: string;
  readonly to: string;
  /** The event's type (`CLAIM`, `xstate.done.actor.tool`, …). */
  readonly via: string;
}

/**
 * Watches an actor's steps: calls `report` for every event that moved it — to another state, or
 * back into the same one (tool-debt re-entered for the next occurrence).
 */
export function watchTransitions(
  initial: { readonly value: unknown },
  root: () => unknown,
  report: (t: Transition, snapshot: SessionSnapshot) => void,
): (event: { type: string; event?: { type: string }; snapshot?: unknown; actorRef?: unknown }) => void {
  let from = stateName(initial);
  return (ev) => {
    if (ev.type !== '@xstate.snapshot' || ev.event === undefined) return;
    if (ev.actorRef !== root()) return; // a child actor's own snapshot
    const snapshot = ev.snapshot as SessionSnapshot;
    const to = stateName(snapshot);
    const via = ev.event.type;
    if (via === 'xstate.init') return;
    if (to === from && !via.startsWith('xstate.done.actor.')) return;
    const step = { from, to, via };
    from = to;
    report(step, snapshot);
  };
}

/** The six lifecycle states, from a snapshot (force-abandoning's substates fold into it). */
export function sessionState(snapshot: { readonly value: unknown }): SessionState {
  const v = snapshot.value;
  return (typeof v === 'string' ? v : Object.keys(v as object)[0]) as SessionState;
}

/**
 * A persisted snapshot without child actors: what is stored and sent between threads. Restoring
 * it starts no invoked actor; the next event decides what runs.
 */
export function persistable(snapshot: SessionSnapshot): SessionSnapshotData {
  const persisted = snapshot.machine.getPersistedSnapshot(snapshot) as unknown as SessionSnapshotData;
  return { ...persisted, children: {} };
}
