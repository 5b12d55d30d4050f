/**
 * The turn loop alone, with its dependencies stubbed: which stamps it makes and when, what it
 * journals, and what each tool outcome becomes. The supervisor tests drive the same loop in a
 * real worker; these pin down the loop's own decisions.
 */
import { Activity } from '@turnwarden/clock';
import type { HistoryMessage, JournalRequest, ToolResultMessage, TurnRequest } from '@turnwarden/protocol';
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import type { ModelEvent, ModelProvider, Tool } from './contracts.js';
import { contextOf, newSession, offer, stateNameOf } from './lifecycle.js';
import { runTurn } from './turn.js';

type Trace = (string | number)[];

function request(overrides: Partial<TurnRequest> = {}): TurnRequest {
  const input = { role: 'user' as const, content: 'go' };
  return {
    workstreamId: 'ws',
    tenantId: 't',
    generation: 3,
    fencingToken: 9,
    history: [input],
    input,
    model: 'stub',
    limits: { maxModelSteps: 4, maxToolArgBytes: 64 },
    snapshot: offer(newSession('ws'), { type: 'CLAIM', generation: 3 })!,
    ...overrides,
  };
}

/** A model that answers with `rounds[i]` on its i-th call, recording the call in the trace. */
function stubModel(trace: Trace, rounds: readonly ModelEvent[][]): ModelProvider {
  let call = 0;
  return {
    name: 'stub',
    async *stream() {
      trace.push(`model:${call}`);
      for (const event of rounds[call++] ?? [{ type: 'text', text: 'done' }]) yield event;
    },
  };
}

function tool(name: string, run: Tool['run']): Tool {
  return { name, description: `${name} (test)`, run };
}

async function drive(rounds: readonly ModelEvent[][], tools: Tool[] = [], req = request()) {
  const trace: Trace = [];
  const journaled: JournalRequest[] = [];
  const outcome = await runTurn(req, {
    touch: (code) => {
      trace.push(code);
      return true;
    },
    journal: async (r) => {
      journaled.push(r);
      return { seqs: r.entries.map((_, i) => i + 1) };
    },
    emit: () => {},
    model: stubModel(trace, rounds),
    tools: new Map(tools.map((t) => [t.name, t])),
    abort: new AbortController(),
    abortReason: () => undefined,
  });
  const rows = journaled.flatMap((r) => r.entries.map((e) => e.message));
  const results = rows.filter((m): m is ToolResultMessage => m.role === 'tool');
  return { outcome, trace, journaled, rows, results };
}

const callOf = (id: string, name: string, args: string): ModelEvent => ({
  type: 'tool_call',
  call: { id, name, arguments: args },
});

describe('turn loop', () => {
  it('L9: the first stamp of a turn is its entry, made before the model is asked anything', async () => {
    const { trace, outcome } = await drive([[{ type: 'text', text: 'hi' }]]);
    expect(outcome.status).toBe('completed');
    expect(trace[0]).toBe(Activity.turnEntry);
    expect(trace.indexOf('model:0')).toBeGreaterThan(trace.indexOf(Activity.modelRequest));
    expect(trace.filter((x) => x === Activity.turnEntry)).toHaveLength(1);
  });

  it('L1: a model’s heartbeat is stamped as a model heartbeat, a tool’s as a tool heartbeat', async () => {
    const trace: Trace = [];
    const model: ModelProvider = {
      name: 'stub',
      async *stream(_req, ctx) {
        ctx.heartbeat(); // waiting on a live request, no output yet
        trace.push('model heartbeat');
        yield callOf('c1', 'slow', '{}');
      },
    };
    const slow = tool('slow', async (_args, ctx) => {
      ctx.heartbeat();
      trace.push('tool heartbeat');
      return 'ok';
    });
    await runTurn(request({ limits: { maxModelSteps: 1, maxToolArgBytes: 64 } }), {
      touch: (code) => {
        trace.push(code);
        return true;
      },
      journal: async (r) => ({ seqs: r.entries.map((_, i) => i + 1) }),
      emit: () => {},
      model,
      tools: new Map([['slow', slow]]),
      abort: new AbortController(),
      abortReason: () => undefined,
    });
    expect(trace[trace.indexOf('model heartbeat') - 1]).toBe(Activity.modelHeartbeat);
    expect(trace[trace.indexOf('tool heartbeat') - 1]).toBe(Activity.toolHeartbeat);
  });

  it('P6: every row the turn journals carries its generation and its lease fencing token', async () => {
    const { journaled } = await drive(
      [[callOf('c1', 'echo', '{}')], [{ type: 'text', text: 'ok' }]],
      [tool('echo', async () => 'echoed')],
    );
    expect(journaled.length).toBe(3); // assistant with the call, its result, the final answer
    for (const r of journaled)
      expect(r).toMatchObject({ workstreamId: 'ws', generation: 3, fencingToken: 9 });
  });

  it('S2: a tool that throws after it started gets effect unknown, not none', async () => {
    const { results, outcome } = await drive(
      [[callOf('c1', 'flaky', '{}')], [{ type: 'text', text: 'after' }]],
      [
        tool('flaky', async () => {
          throw new Error('connection reset while writing');
        }),
      ],
    );
    expect(outcome.status).toBe('completed');
    expect(outcome.startedCalls).toEqual([0]);
    expect(results).toEqual([
      expect.objectContaining({
        callIndex: 0,
        isError: true,
        effect: 'unknown',
        content: 'tool error: connection reset while writing',
      }),
    ]);
  });

  it('S2: a tool that reports a typed error after it started is unknown as well', async () => {
    const { results } = await drive(
      [[callOf('c1', 'typed', '{}')], [{ type: 'text', text: 'after' }]],
      [
        tool('typed', async () => {
          throw new TurnwardenError(ErrorCode.TOOL_ERROR, 'quota exceeded');
        }),
      ],
    );
    expect(results).toEqual([expect.objectContaining({ effect: 'unknown', isError: true })]);
  });

  it('T6: arguments over maxToolArgBytes (counted in UTF-8 bytes) are refused with effect none, and the tool never runs', async () => {
    let ran = 0;
    const echo = tool('echo', async () => {
      ran++;
      return 'ran';
    });
    // 30 three-byte characters: 32 characters of JSON, 92 bytes, over the 64-byte limit.
    const wide = JSON.stringify({ text: '€'.repeat(30) });
    const fits = JSON.stringify({ text: 'x'.repeat(40) }); // 51 bytes
    const { results, outcome } = await drive(
      [[callOf('c1', 'echo', wide), callOf('c2', 'echo', fits)], [{ type: 'text', text: 'ok' }]],
      [echo],
    );
    expect(outcome.startedCalls).toEqual([1]);
    expect(ran).toBe(1);
    expect(results).toEqual([
      expect.objectContaining({
        callIndex: 0,
        isError: true,
        effect: 'none',
        content: 'tool arguments exceed 64 bytes',
      }),
      expect.objectContaining({ callIndex: 1, isError: false, effect: 'applied' }),
    ]);
  });

  it('S1: duplicate provider ids are answered by occurrence, each with its own call index', async () => {
    const seen: string[] = [];
    const { results } = await drive(
      [
        [
          callOf('dup', 'echo', '{"n":1}'),
          callOf('dup', 'echo', '{"n":2}'),
          callOf('dup', 'echo', '{"n":3}'),
        ],
        [{ type: 'text', text: 'ok' }],
      ],
      [
        tool('echo', async (args) => {
          seen.push(String(args.n));
          return `n=${String(args.n)}`;
        }),
      ],
    );
    expect(seen).toEqual(['1', '2', '3']);
    expect(results.map((r) => [r.toolCallId, r.callIndex, r.content])).toEqual([
      ['dup', 0, 'n=1'],
      ['dup', 1, 'n=2'],
      ['dup', 2, 'n=3'],
    ]);
  });

  it('a model that throws mid-stream ends the turn in force-abandoning (for the supervisor to repair), never idle: failed with its MODEL_ERROR, the half answer not journaled', async () => {
    const states: string[] = [];
    const journaled: JournalRequest[] = [];
    const failure = new TurnwardenError(
      ErrorCode.MODEL_ERROR,
      'model m: the stream reported an error: Overloaded',
      {
        details: { model: 'm', provider: 'anthropic', type: 'overloaded_error', message: 'Overloaded' },
      },
    );
    const model: ModelProvider = {
      name: 'stub',
      async *stream() {
        yield { type: 'text', text: 'half an ' };
        throw failure;
      },
    };
    const outcome = await runTurn(request(), {
      touch: () => true,
      journal: async (r) => {
        journaled.push(r);
        return { seqs: r.entries.map(() => 1) };
      },
      emit: (e) => {
        if (e.t === 'state') states.push(`${e.from} --${e.via}--> ${stateNameOf(e.snapshot)}`);
      },
      model,
      tools: new Map(),
      abort: new AbortController(),
      abortReason: () => undefined,
    });
    expect(states).toEqual([
      'claimed --STREAM--> streaming',
      'streaming --xstate.error.actor.stream--> force-abandoning.pending',
    ]);
    expect(stateNameOf(outcome.snapshot)).toBe('force-abandoning.pending');
    expect(contextOf(outcome.snapshot).abortReason).toBe('failure');
    // The provider's error reaches the outcome whole: code, message and details.
    expect(outcome).toMatchObject({ status: 'failed', error: failure.toWire() });
    expect(journaled).toEqual([]);
  });

  it('a model that throws something other than an Error fails the turn with what it threw, not "[object Object]"', async () => {
    for (const [thrown, said] of [
      [{ reason: 'rate limited', retryInS: 3 }, '{"reason":"rate limited","retryInS":3}'],
      [{ message: 'plain object with a message' }, 'plain object with a message'],
      ['a string', 'a string'],
    ] as const) {
      const model: ModelProvider = {
        name: 'stub',
        // biome-ignore lint/correctness/useYield: the model fails before its first event
        async *stream() {
          throw thrown;
        },
      };
      const outcome = await runTurn(request(), {
        touch: () => true,
        journal: async (r) => ({ seqs: r.entries.map(() => 1) }),
        emit: () => {},
        model,
        tools: new Map(),
        abort: new AbortController(),
        abortReason: () => undefined,
      });
      expect(outcome).toMatchObject({
        status: 'failed',
        error: { code: ErrorCode.MODEL_ERROR, message: said },
      });
    }
  });

  it('the model sees the history grow by each journaled row, in order', async () => {
    const histories: HistoryMessage[][] = [];
    const model: ModelProvider = {
      name: 'stub',
      async *stream(req) {
        histories.push([...req.history]);
        yield histories.length === 1 ? callOf('c1', 'echo', '{}') : { type: 'text', text: 'end' };
      },
    };
    await runTurn(request(), {
      touch: () => true,
      journal: async (r) => ({ seqs: r.entries.map(() => 1) }),
      emit: () => {},
      model,
      tools: new Map([['echo', tool('echo', async () => 'e')]]),
      abort: new AbortController(),
      abortReason: () => undefined,
    });
    expect(histories.map((h) => h.map((m) => m.role))).toEqual([['user'], ['user', 'assistant', 'tool']]);
  });
});
