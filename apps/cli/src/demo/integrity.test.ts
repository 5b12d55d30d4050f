import type { HistoryMessage, HistoryRow } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { auditHistory, classifyTurn, countVerdicts, integrityChecks, mergeAudits } from './integrity.js';
import type { TurnRecord } from './types.js';

function rows(...items: [generation: number, message: HistoryMessage][]): HistoryRow[] {
  return items.map(([generation, message], i) => ({
    workstreamId: 'ws-01',
    seq: i + 1,
    commitKey: `k${i + 1}`,
    generation,
    message,
    createdAt: 0,
  }));
}

const user = (content = 'hi'): HistoryMessage => ({ role: 'user', content });
const calls = (...ids: string[]): HistoryMessage => ({
  role: 'assistant',
  content: '',
  toolCalls: ids.map((id) => ({ id, name: 'echo', arguments: '{}' })),
});
const result = (id: string, callIndex: number, extra: Partial<HistoryMessage> = {}): HistoryMessage =>
  ({
    role: 'tool',
    toolCallId: id,
    callIndex,
    name: 'echo',
    content: 'ok',
    isError: false,
    effect: 'applied',
    ...extra,
  }) as HistoryMessage;
const synth = (id: string, callIndex: number, effect: 'unknown' | 'none' | 'applied'): HistoryMessage =>
  result(id, callIndex, { isError: true, effect, synthesized: true } as Partial<HistoryMessage>);

describe('turn classification', () => {
  it('L2: a heartbeating/normal/tool turn interrupted by the watchdog is a false abort', () => {
    expect(
      classifyTurn('completed', { status: 'interrupted', abortReason: 'watchdog', workerTerminated: false }),
    ).toBe('false_abort');
    expect(classifyTurn('completed', { status: 'completed', workerTerminated: false })).toBe('ok');
  });

  it('a turn that should complete but fails, is refused or loses its lease is an unexpected failure', () => {
    expect(
      classifyTurn('completed', { status: 'failed', workerTerminated: false, errorCode: 'MODEL_ERROR' }),
    ).toBe('unexpected_failure');
    expect(
      classifyTurn('completed', {
        status: 'rejected',
        workerTerminated: false,
        errorCode: 'TOOL_CLEANUP_PENDING',
      }),
    ).toBe('unexpected_failure');
    expect(
      classifyTurn('completed', {
        status: 'interrupted',
        abortReason: 'lease_lost',
        workerTerminated: false,
      }),
    ).toBe('unexpected_failure');
  });

  it('A1–A4: an approval turn is as expected once decided — completed after approve or deny, or still waiting when its turn ended and then timed out; anything else is an unexpected failure', () => {
    const w = { workerTerminated: false };
    expect(classifyTurn('decided', { ...w, status: 'completed', approval: 'approved' })).toBe('ok');
    expect(classifyTurn('decided', { ...w, status: 'completed', approval: 'denied' })).toBe('ok');
    expect(classifyTurn('decided', { ...w, status: 'awaiting_approval', approval: 'timed_out' })).toBe('ok');
    expect(classifyTurn('decided', { ...w, status: 'awaiting_approval' })).toBe('unexpected_failure');
    expect(classifyTurn('decided', { ...w, status: 'completed' })).toBe('unexpected_failure');
    expect(classifyTurn('decided', { ...w, status: 'failed', approval: 'approved' })).toBe(
      'unexpected_failure',
    );
    expect(classifyTurn('decided', { ...w, status: 'completed', approval: 'timed_out' })).toBe(
      'unexpected_failure',
    );
  });

  it('M1–M4: a double-text turn is as expected when its first turn completed (or, for interrupt and rollback, was cancelled) and its second message was refused by reject or ran to its end', () => {
    const w = { workerTerminated: false };
    const dt = (policy: string, second: string) => ({ doubleText: { policy, second } });
    const cancelled = { ...w, status: 'interrupted' as const, abortReason: 'cancel' };
    expect(classifyTurn('double-texted', { ...w, status: 'completed', ...dt('reject', 'refused') })).toBe(
      'ok',
    );
    expect(classifyTurn('double-texted', { ...w, status: 'completed', ...dt('reject', 'completed') })).toBe(
      'ok',
    );
    expect(classifyTurn('double-texted', { ...w, status: 'completed', ...dt('enqueue', 'completed') })).toBe(
      'ok',
    );
    expect(classifyTurn('double-texted', { ...cancelled, ...dt('interrupt', 'completed') })).toBe('ok');
    expect(classifyTurn('double-texted', { ...cancelled, ...dt('rollback', 'completed') })).toBe('ok');
    expect(classifyTurn('double-texted', { ...w, status: 'completed', ...dt('rollback', 'completed') })).toBe(
      'ok',
    );
    // A cancel is only an interrupt's or a rollback's doing; a refusal only reject's.
    expect(classifyTurn('double-texted', { ...cancelled, ...dt('enqueue', 'completed') })).toBe(
      'unexpected_failure',
    );
    expect(classifyTurn('double-texted', { ...w, status: 'completed', ...dt('enqueue', 'refused') })).toBe(
      'unexpected_failure',
    );
    expect(classifyTurn('double-texted', { ...cancelled, ...dt('interrupt', 'failed') })).toBe(
      'unexpected_failure',
    );
    expect(classifyTurn('double-texted', { ...w, status: 'failed', ...dt('interrupt', 'completed') })).toBe(
      'unexpected_failure',
    );
    expect(classifyTurn('double-texted', { ...w, status: 'completed' })).toBe('unexpected_failure');
  });

  it('L1: a stalled turn that completes or fails instead of being interrupted is not recovered', () => {
    expect(
      classifyTurn('interrupted', {
        status: 'interrupted',
        abortReason: 'watchdog',
        workerTerminated: false,
      }),
    ).toBe('ok');
    expect(classifyTurn('interrupted', { status: 'completed', workerTerminated: false })).toBe(
      'not_recovered',
    );
    expect(
      classifyTurn('interrupted', { status: 'failed', abortReason: 'crash', workerTerminated: true }),
    ).toBe('not_recovered');
    expect(
      classifyTurn('interrupted', {
        status: 'rejected',
        workerTerminated: false,
        errorCode: 'TURN_IN_PROGRESS',
      }),
    ).toBe('not_recovered');
  });

  it('L3: a wedged turn must be interrupted with its worker terminated', () => {
    expect(
      classifyTurn('terminated', { status: 'interrupted', abortReason: 'watchdog', workerTerminated: true }),
    ).toBe('ok');
    expect(
      classifyTurn('terminated', { status: 'interrupted', abortReason: 'watchdog', workerTerminated: false }),
    ).toBe('not_recovered');
  });

  it('turns cut short by stopping the demo are not judged', () => {
    expect(
      classifyTurn('completed', { status: 'interrupted', abortReason: 'shutdown', workerTerminated: false }),
    ).toBe('cancelled');
    expect(
      classifyTurn('terminated', { status: 'rejected', workerTerminated: false, errorCode: 'SHUTTING_DOWN' }),
    ).toBe('cancelled');
  });

  it('counts verdicts, idle-check failures apart', () => {
    const r = (kind: TurnRecord['kind'], verdict: TurnRecord['verdict']) => ({ kind, verdict }) as TurnRecord;
    expect(
      countVerdicts([
        r('normal', 'ok'),
        r('heartbeat', 'false_abort'),
        r('stall', 'not_recovered'),
        r('wedge', 'not_recovered'),
        r('tools', 'unexpected_failure'),
        r('idle-check', 'unexpected_failure'),
        r('normal', 'cancelled'),
      ]),
    ).toEqual({
      ok: 1,
      falseAborts: 1,
      notRecovered: 2,
      unexpectedFailures: 1,
      cancelled: 1,
      idleCheckFailures: 1,
    });
  });
});

describe('durable history audit', () => {
  it('S1: flags a dangling tool call (duplicate ids counted by occurrence)', () => {
    const audit = auditHistory(rows([1, user()], [1, calls('dup', 'dup')], [1, result('dup', 0)]));
    expect(audit.danglingToolCalls).toBe(1);
    const checks = integrityChecks({
      verdicts: countVerdicts([]),
      audit,
      historyMismatches: 0,
      synthesizedCounted: 0,
      faultsNotInjected: 0,
      capacityRefusals: 0,
    });
    expect(checks.filter((c) => !c.ok).map((c) => c.id)).toEqual(['dangling_tool_calls']);
  });

  it('S2: accepts synthesized results marked unknown or none, flags any other effect', () => {
    const good = auditHistory(
      rows(
        [1, user()],
        [1, calls('a', 'b', 'c')],
        [1, result('a', 0)],
        [1, synth('b', 1, 'unknown')],
        [1, synth('c', 2, 'none')],
      ),
    );
    expect(good).toMatchObject({
      danglingToolCalls: 0,
      synthesizedResults: 2,
      synthesizedUnknown: 1,
      synthesizedNone: 1,
    });
    expect(good.badSynthesizedEffects).toBe(0);
    const bad = auditHistory(rows([1, user()], [1, calls('a')], [1, synth('a', 0, 'applied')]));
    expect(bad.badSynthesizedEffects).toBe(1);
  });

  it('L3: flags rows of a turn journaled after its recovery, not a repair before a claim', () => {
    const late = auditHistory(
      rows(
        [1, user()],
        [1, calls('w')],
        [1, synth('w', 0, 'unknown')],
        [1, { role: 'assistant', content: 'zombie' }],
      ),
    );
    expect(late.lateRows).toBe(1);
    // Repair of a crash's leftovers is written under the new generation before its user row.
    const repairFirst = auditHistory(
      rows(
        [1, user()],
        [1, calls('w')],
        [2, synth('w', 0, 'unknown')],
        [2, user()],
        [2, { role: 'assistant', content: 'ok' }],
      ),
    );
    expect(repairFirst.lateRows).toBe(0);
  });

  it('merges per-workstream audits and fails the synthesized-count check on a mismatch', () => {
    const a = auditHistory(rows([1, user()], [1, calls('a')], [1, synth('a', 0, 'unknown')]));
    const merged = mergeAudits([a, a]);
    expect(merged).toMatchObject({ workstreams: 2, userMessages: 2, synthesizedResults: 2 });
    const checks = integrityChecks({
      verdicts: countVerdicts([]),
      audit: merged,
      historyMismatches: 0,
      synthesizedCounted: 3,
      faultsNotInjected: 2,
      capacityRefusals: 1,
    });
    expect(checks.find((c) => c.id === 'synthesized_mismatch')).toMatchObject({ ok: false, value: 1 });
    // T4: a send refused for capacity fails the run: over capacity sends wait, never refused.
    expect(checks.find((c) => c.id === 'capacity_refusals')).toMatchObject({ ok: false, value: 1 });
    // Planned store faults that never fired: the demo did not test what it claims to.
    expect(checks.find((c) => c.id === 'faults_not_injected')).toMatchObject({ ok: false, value: 2 });
  });
});

describe('verdicts of the host-driven kinds', () => {
  it('C3 S5: a force-cancelled turn must end interrupted by the cancel; a store-rejected one failed with STORE_ERROR', () => {
    const interrupted = (abortReason: string) => ({
      status: 'interrupted' as const,
      abortReason,
      workerTerminated: false,
    });
    expect(classifyTurn('force-cancelled', interrupted('cancel'))).toBe('ok');
    expect(classifyTurn('force-cancelled', interrupted('watchdog'))).toBe('unexpected_failure');
    expect(classifyTurn('force-cancelled', { status: 'completed', workerTerminated: false })).toBe(
      'unexpected_failure',
    );
    const failed = (errorCode: string) => ({ status: 'failed' as const, workerTerminated: false, errorCode });
    expect(classifyTurn('failed', failed('STORE_ERROR'))).toBe('ok');
    expect(classifyTurn('failed', failed('MODEL_ERROR'))).toBe('unexpected_failure');
    expect(classifyTurn('failed', { status: 'completed', workerTerminated: false })).toBe(
      'unexpected_failure',
    );
  });
});
