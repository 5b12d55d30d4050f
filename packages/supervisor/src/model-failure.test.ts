/**
 * A model that fails mid-stream: the turn is abandoned through force-abandoning, never dropped
 * straight to idle. The machine goes streaming → force-abandoning.pending → repairing → idle,
 * as the `session transition` log lines and the `state` events show in order. The turn is
 * `failed` with the model's MODEL_ERROR, the history stays structurally valid (S1), and the
 * repaired session takes the next turn. Each case is a scripted model that streams, then throws:
 * in the turn's first model call (nothing of the answer journaled), and in its second (after
 * the first answer's assistant row and its tool result are durable).
 */
import { type HistoryRow, openToolCalls, structuralRefusal } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { type LogLine, script, startRuntime } from './test-support/runtime.js';

type Runtime = Awaited<ReturnType<typeof startRuntime>>;
/** The subject is the model's failure, not the watchdog: a loaded machine's slow step is no stall. */
const PATIENT = { watchdog: { timeoutMs: 10_000, pollMs: 50, graceMs: 1_000 } } as const;
let rt: Runtime | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

/** The machine's steps a generation took, as logged (`from --via--> to`), in order. */
function steps(logs: readonly LogLine[], generation: number): string[] {
  return logs
    .filter((l) => l.msg === 'session transition' && l.generation === generation)
    .map((l) => `${String(l.from)} --${String(l.via)}--> ${String(l.to)}`);
}

/** Every row admissible after the rows before it (S1), and no call left open. */
function expectValid(rows: readonly HistoryRow[]): void {
  rows.forEach((row, i) => {
    expect(structuralRefusal(rows.slice(0, i), row.message), `row ${i}`).toBeUndefined();
  });
  expect(openToolCalls(rows)).toEqual([]);
}

/** The failed model call's end: through force-abandoning and the repair, then idle. */
const ABANDONED = [
  'streaming --xstate.error.actor.stream--> force-abandoning.pending',
  'force-abandoning.pending --REPAIR--> force-abandoning.repairing',
  'force-abandoning.repairing --xstate.done.actor.repair--> idle',
];

describe('a model that fails mid-stream', () => {
  it('S1: in the first model call: streaming → force-abandoning.pending → repairing → idle; failed with MODEL_ERROR; nothing of the answer is history', async () => {
    rt = await startRuntime(PATIENT);
    const turn = await rt.send(
      script({ text: 'half an answer', chunks: 3 }, { fail: 'upstream overloaded' }),
    );
    const result = await turn.done;
    expect(result).toMatchObject({
      status: 'failed',
      error: { code: 'MODEL_ERROR', message: 'upstream overloaded' },
    });
    expect(steps(rt.logs, turn.generation)).toEqual([
      'idle --CLAIM--> claimed',
      'claimed --STREAM--> streaming',
      ...ABANDONED,
    ]);
    // The `state` reports, in the same order: force-abandoning before idle.
    expect(
      rt.events
        .filter((e) => e.type === 'state' && e.generation === turn.generation)
        .map((e) => (e.data as { state: string }).state),
    ).toEqual(['claimed', 'streaming', 'force-abandoning', 'idle']);
    // The tokens streamed; the half answer was never journaled (S4).
    expect(rt.events.some((e) => e.type === 'token' && e.generation === turn.generation)).toBe(true);
    const rows = await rt.history();
    expect(rows.map((r) => r.message.role)).toEqual(['user']);
    expectValid(rows);
    // The repaired session is idle, durably, and takes the next turn.
    const status = await rt.tw.status({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' });
    expect(status).toMatchObject({ state: 'idle', cleanupPending: false });
    const next = await (await rt.send(script({ text: 'fine now' }))).done;
    expect(next).toMatchObject({ status: 'completed', finalText: 'fine now' });
  });

  it('S1: in a later model call, after an answer and its tool result are durable: the same path; the history keeps them, valid', async () => {
    rt = await startRuntime(PATIENT);
    const turn = await rt.send(
      script(
        { text: 'let me check' },
        { tools: [{ name: 'echo', args: { text: 'ping' } }] },
        { text: 'it said', chunks: 2 },
        { fail: 'connection reset mid-answer' },
      ),
    );
    const result = await turn.done;
    expect(result).toMatchObject({
      status: 'failed',
      error: { code: 'MODEL_ERROR', message: 'connection reset mid-answer' },
    });
    expect(steps(rt.logs, turn.generation)).toEqual([
      'idle --CLAIM--> claimed',
      'claimed --STREAM--> streaming',
      'streaming --xstate.done.actor.stream--> tool-debt.running',
      'tool-debt.running --xstate.done.actor.tool--> claimed',
      'claimed --STREAM--> streaming',
      ...ABANDONED,
    ]);
    expect(
      rt.events
        .filter((e) => e.type === 'state' && e.generation === turn.generation)
        .map((e) => (e.data as { state: string }).state),
    ).toEqual(['claimed', 'streaming', 'tool-debt', 'claimed', 'streaming', 'force-abandoning', 'idle']);
    const rows = await rt.history();
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool']);
    expect(rows[2]?.message).toMatchObject({ role: 'tool', content: 'ping', effect: 'applied' });
    expectValid(rows);
    // Nothing was open, so the repair synthesized nothing.
    expect(rt.events.some((e) => e.type === 'tool_results_synthesized')).toBe(false);
    const status = await rt.tw.status({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' });
    expect(status).toMatchObject({ state: 'idle', cleanupPending: false });
  });
});
