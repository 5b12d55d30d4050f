/**
 * The session state machine (XState v5). One actor per turn runs inside the session worker;
 * the supervisor mirrors its state from the `state` events the worker posts, and drives
 * `force-abandoning` itself when the worker is gone.
 *
 *   idle ──CLAIM──▶ claimed ──STREAM_START──▶ streaming ──ASSISTANT_FINAL──▶ idle
 *                     ▲                          │
 *                     └──DEBT_PAID── tool-debt ◀─┘ASSISTANT_TOOLS
 *   claimed | streaming | tool-debt ──ABORT──▶ force-abandoning ──SETTLED──▶ idle
 *   claimed | streaming ──FAIL──▶ idle          tool-debt ──FAIL──▶ force-abandoning
 *   idle ──CLOSE──▶ closed
 *
 * tool-debt refuses CLAIM (S3) and pays its debt only when every call occurrence has its
 * result (S1). Deadlines live in context, not in `after` delays, because `after` is not re-armed
 * when an actor is restored from a persisted snapshot.
 */
import { assign, setup } from 'xstate';

export interface SessionContext {
  readonly workstreamId: string;
  readonly generation: number;
  /** Call occurrences of the last assistant message still without a result. */
  readonly openCalls: number;
  /** Monotonic ms after which the turn must end (L11); undefined when unbounded. */
  readonly deadlineAt: number | undefined;
  readonly abortReason: string | undefined;
}

export type SessionEvent =
  | { type: 'CLAIM'; generation: number; deadlineAt?: number }
  | { type: 'STREAM_START' }
  | { type: 'ASSISTANT_FINAL' }
  | { type: 'ASSISTANT_TOOLS'; calls: number }
  | { type: 'TOOL_RESULT' }
  | { type: 'DEBT_PAID' }
  | { type: 'ABORT'; reason: string }
  | { type: 'FAIL' }
  | { type: 'SETTLED' }
  | { type: 'CLOSE' };

export interface SessionInput {
  readonly workstreamId: string;
  readonly generation: number;
}

export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionEvent,
    input: {} as SessionInput,
  },
  guards: {
    debtPaid: ({ context }) => context.openCalls === 0,
  },
  actions: {
    recordAbort: assign({ abortReason: (_, params: { reason: string }) => params.reason }),
  },
}).createMachine({
  id: 'session',
  initial: 'idle',
  context: ({ input }) => ({
    workstreamId: input.workstreamId,
    generation: input.generation,
    openCalls: 0,
    deadlineAt: undefined,
    abortReason: undefined,
  }),
  states: {
    idle: {
      on: {
        CLAIM: {
          target: 'claimed',
          actions: assign({
            generation: ({ event }) => event.generation,
            deadlineAt: ({ event }) => event.deadlineAt,
            openCalls: 0,
            abortReason: undefined,
          }),
        },
        CLOSE: 'closed',
      },
    },
    claimed: {
      on: {
        STREAM_START: 'streaming',
        ABORT: { target: 'force-abandoning', actions: { type: 'recordAbort', params: ({ event }) => event } },
        FAIL: 'idle',
      },
    },
    streaming: {
      on: {
        ASSISTANT_FINAL: 'idle',
        ASSISTANT_TOOLS: { target: 'tool-debt', actions: assign({ openCalls: ({ event }) => event.calls }) },
        ABORT: { target: 'force-abandoning', actions: { type: 'recordAbort', params: ({ event }) => event } },
        FAIL: 'idle',
      },
    },
    'tool-debt': {
      on: {
        TOOL_RESULT: { actions: assign({ openCalls: ({ context }) => Math.max(0, context.openCalls - 1) }) },
        DEBT_PAID: { guard: 'debtPaid', target: 'claimed' },
        ABORT: { target: 'force-abandoning', actions: { type: 'recordAbort', params: ({ event }) => event } },
        FAIL: { target: 'force-abandoning', actions: { type: 'recordAbort', params: { reason: 'failure' } } },
      },
    },
    'force-abandoning': {
      on: { SETTLED: 'idle' },
    },
    closed: { type: 'final' },
  },
});

export type SessionMachine = typeof sessionMachine;
