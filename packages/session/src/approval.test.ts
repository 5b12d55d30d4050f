/**
 * Approvals in the session machine and the turn loop (issue 26): a call that needs a person's
 * approval is journaled with its assistant message and nothing else; the machine waits in
 * `tool-debt.awaiting-approval` and the turn returns (its worker is free); a decision — the
 * waiting nonce's only — resumes it from that snapshot: approved, the call runs (with edited
 * arguments when given); denied, its result says so with effect `none` and the tool never runs.
 */
import type { JournalRequest, ToolResultMessage, TurnOutcome, TurnRequest } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import type { ModelEvent, ModelProvider, Tool } from './contracts.js';
import { contextOf, newSession, offer, stateNameOf } from './lifecycle.js';
import { runTurn } from './turn.js';

const input = { role: 'user' as const, content: 'go' };
/** The runtime's policy: no tool named, so only the tools' own rules make calls wait. */
const approvals = { tools: [], timeoutMs: 60_000 };
function request(overrides: Partial<TurnRequest> = {}): TurnRequest {
  return {
    workstreamId: 'ws',
    tenantId: 't',
    generation: 3,
    fencingToken: 9,
    history: [input],
    input,
    model: 'stub',
    limits: { maxModelSteps: 4, maxToolArgBytes: 256 },
    snapshot: offer(newSession('ws'), { type: 'CLAIM', generation: 3 })!,
    approvals,
    ...overrides,
  };
}

const callOf = (id: string, name: string, args: string): ModelEvent => ({
  type: 'tool_call',
  call: { id, name, arguments: args },
});

/** A model answering `rounds[i]` on its i-th call (counted across the turns that share it). */
function stubModel(rounds: readonly ModelEvent[][], asked: { n: number }): ModelProvider {
  return {
    name: 'stub',
    async *stream() {
      for (const event of rounds[asked.n++] ?? [{ type: 'text', text: 'done' }]) yield event;
    },
  };
}

async function drive(req: TurnRequest, tools: readonly Tool[], model: ModelProvider) {
  const journaled: JournalRequest[] = [];
  const outcome: TurnOutcome = {
    ...(await runTurn(req, {
      touch: () => true,
      journal: async (r) => {
        journaled.push(r);
        return { seqs: r.entries.map((_, i) => i + 1) };
      },
      emit: () => {},
      model,
      tools: new Map(tools.map((t) => [t.name, t])),
      abort: new AbortController(),
      abortReason: () => undefined,
    })),
    eventsPosted: 0,
  };
  const entries = journaled.flatMap((r) => r.entries);
  const results = entries.flatMap((e) => (e.message.role === 'tool' ? [e.message as ToolResultMessage] : []));
  return { outcome, entries, results };
}

/** The request that resumes a turn which ended waiting (`first`), decided with `decision`, from `snapshot`. */
function resumeRequest(
  first: Awaited<ReturnType<typeof drive>>,
  decision: NonNullable<TurnRequest['resume']>['decision'],
  snapshot = first.outcome.snapshot,
): TurnRequest {
  return request({ snapshot, resume: { steps: 1, calls: [first.outcome.approval!.call], decision } });
}

/** A tool that records the arguments of every run. */
function recording(name: string, needsApproval?: Tool['needsApproval']) {
  const runs: Record<string, unknown>[] = [];
  const tool: Tool = {
    name,
    description: `${name} (test)`,
    ...(needsApproval === undefined ? {} : { needsApproval }),
    run: async (args) => {
      runs.push(args);
      return `ran ${JSON.stringify(args)}`;
    },
  };
  return { tool, runs };
}

describe('approvals in the turn loop', () => {
  it('A1: a call that needs approval: its assistant row is journaled, the tool does not run, the turn returns awaiting_approval with the machine waiting in tool-debt', async () => {
    const pay = recording('pay', true);
    const asked = { n: 0 };
    const { outcome, entries, results } = await drive(
      request(),
      [pay.tool],
      stubModel([[callOf('c1', 'pay', '{"amount":5}')]], asked),
    );
    expect(outcome.status).toBe('awaiting_approval');
    expect(pay.runs).toEqual([]);
    expect(results).toEqual([]);
    expect(entries.map((e) => e.commitKey)).toEqual(['g3:a1']);
    expect(stateNameOf(outcome.snapshot)).toBe('tool-debt.awaiting-approval');
    expect(outcome.approval).toMatchObject({
      callIndex: 0,
      call: { id: 'c1', name: 'pay', arguments: '{"amount":5}' },
      nonce: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
    expect(contextOf(outcome.snapshot).approval).toEqual({
      callIndex: 0,
      nonce: outcome.approval!.nonce,
      expiresAt: outcome.approval!.expiresAt,
    });
    expect(contextOf(outcome.snapshot).openCalls).toEqual([0]);
  });

  it('A3: approved (arguments edited): resumed from the waiting snapshot, the call runs with them under the commit key it would have had, and the turn goes on to the model', async () => {
    const pay = recording('pay', true);
    const asked = { n: 0 };
    const model = stubModel([[callOf('c1', 'pay', '{"amount":5}')], [{ type: 'text', text: 'paid' }]], asked);
    const first = await drive(request(), [pay.tool], model);
    const { nonce } = first.outcome.approval!;
    const resumed = await drive(
      resumeRequest(first, { nonce, approved: true, arguments: '{"amount":4}' }),
      [pay.tool],
      model,
    );
    expect(resumed.outcome).toMatchObject({ status: 'completed', finalText: 'paid', startedCalls: [0] });
    expect(pay.runs).toEqual([{ amount: 4 }]);
    expect(resumed.entries.map((e) => e.commitKey)).toEqual(['g3:a1:t0', 'g3:a2']);
    expect(resumed.results[0]).toMatchObject({ toolCallId: 'c1', isError: false, effect: 'applied' });
    expect(stateNameOf(resumed.outcome.snapshot)).toBe('idle');
    expect(contextOf(resumed.outcome.snapshot).approval).toBeUndefined();
  });

  it('A3: denied: the tool never runs; the result says why with effect none, and the model is asked again', async () => {
    const pay = recording('pay', true);
    const asked = { n: 0 };
    const model = stubModel([[callOf('c1', 'pay', '{}')], [{ type: 'text', text: 'ok, not paying' }]], asked);
    const first = await drive(request(), [pay.tool], model);
    const resumed = await drive(
      resumeRequest(first, { nonce: first.outcome.approval!.nonce, approved: false, reason: 'too much' }),
      [pay.tool],
      model,
    );
    expect(pay.runs).toEqual([]);
    expect(resumed.results).toEqual([
      {
        role: 'tool',
        toolCallId: 'c1',
        callIndex: 0,
        name: 'pay',
        content: 'denied: too much',
        isError: true,
        effect: 'none',
      },
    ]);
    expect(resumed.outcome).toMatchObject({
      status: 'completed',
      finalText: 'ok, not paying',
      startedCalls: [],
    });
  });

  it('A2: only the waiting nonce decides: another is refused by the machine, and a turn resumed with it runs nothing', async () => {
    const pay = recording('pay', true);
    const asked = { n: 0 };
    const model = stubModel([[callOf('c1', 'pay', '{}')]], asked);
    const first = await drive(request(), [pay.tool], model);
    const waiting = first.outcome.snapshot;
    expect(offer(waiting, { type: 'DECIDE', nonce: 'stale', approved: true })).toBeUndefined();
    expect(offer(waiting, { type: 'CLAIM', generation: 4 })).toBeUndefined();
    expect(
      stateNameOf(offer(waiting, { type: 'DECIDE', nonce: first.outcome.approval!.nonce, approved: true })!),
    ).toBe('tool-debt.running');
    const stale = await drive(
      resumeRequest(first, { nonce: 'stale', approved: true }, waiting),
      [pay.tool],
      model,
    );
    expect(stale.outcome.status).toBe('failed');
    expect(stale.entries).toEqual([]);
    expect(pay.runs).toEqual([]);
    expect(stateNameOf(stale.outcome.snapshot)).toBe('tool-debt.awaiting-approval');
  });

  it('A1: which calls wait: the turn’s policy by tool name (or all), a tool’s rule on its arguments; the others run at once, in order, before the one that waits', async () => {
    const read = recording('read');
    const pay = recording('pay', (args) => Number(args.amount) > 100);
    const asked = { n: 0 };
    const model = stubModel(
      [
        [
          callOf('c1', 'read', '{}'),
          callOf('c2', 'pay', '{"amount":5}'),
          callOf('c3', 'pay', '{"amount":500}'),
        ],
      ],
      asked,
    );
    const rule = await drive(request(), [read.tool, pay.tool], model);
    expect(rule.outcome.approval).toMatchObject({ callIndex: 2, call: { id: 'c3' } });
    expect(read.runs).toHaveLength(1);
    expect(pay.runs).toEqual([{ amount: 5 }]);
    expect(contextOf(rule.outcome.snapshot).openCalls).toEqual([2]);

    asked.n = 0;
    const byName = await drive(
      request({ approvals: { tools: ['read'], timeoutMs: 60_000 } }),
      [read.tool, pay.tool],
      model,
    );
    expect(byName.outcome.approval).toMatchObject({ callIndex: 0, call: { id: 'c1' } });
    expect(byName.outcome.approval!.expiresAt).toBeGreaterThan(Date.now() + 50_000);

    // Without a policy (a runtime that cannot resume a waiting turn) no call waits.
    asked.n = 0;
    const { approvals: _, ...none } = request();
    const unasked = await drive(none, [read.tool, pay.tool], model);
    expect(unasked.outcome.status).toBe('completed');
    expect(pay.runs).toEqual([{ amount: 5 }, { amount: 5 }, { amount: 500 }]);

    asked.n = 0;
    const all = recording('read');
    const everything = await drive(
      request({ approvals: { tools: 'all', timeoutMs: 1_000 } }),
      [all.tool],
      model,
    );
    expect(everything.outcome.approval).toMatchObject({ callIndex: 0 });
    expect(all.runs).toEqual([]);
  });

  it('A4 S1 S2: a session waiting for approval takes ABORT (cancel, close, delete, timeout): force-abandoning, the call still open for the repair', () => {
    const waiting = {
      ...offer(newSession('ws'), { type: 'CLAIM', generation: 1 })!,
      value: { 'tool-debt': 'awaiting-approval' },
      context: {
        workstreamId: 'ws',
        generation: 1,
        openCalls: [0],
        abortReason: undefined,
        repairError: undefined,
        approval: { callIndex: 0, nonce: 'n', expiresAt: 1 },
      },
    };
    const aborted = offer(waiting, { type: 'ABORT', reason: 'cancel' })!;
    expect(stateNameOf(aborted)).toBe('force-abandoning.pending');
    expect(contextOf(aborted).openCalls).toEqual([0]);
    // A snapshot stored before tool-debt had substates restores, and aborts the same way.
    const older = { ...waiting, value: 'tool-debt' };
    expect(stateNameOf(offer(older, { type: 'ABORT', reason: 'crash' })!)).toBe('force-abandoning.pending');
  });
});
