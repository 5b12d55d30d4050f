/**
 * The harness finds real bugs and replays them exactly. Every mutation switch breaks one
 * mechanism on purpose; the harness must report the guarantee it protects within a CI budget.
 */
import { Mutation } from '@turnwarden/protocol/mutations';
import { describe, expect, it } from 'vitest';
import { explore, replay, runSchedule } from './explore.js';
import { SCENARIOS } from './scenarios/index.js';
import { l4 } from './scenarios/l4.scenario.js';
import { ScriptedScheduler } from './schedulers.js';
import { decodeTrace } from './trace.js';

const BUDGET_MS = 25_000;

describe('interleaving harness', () => {
  it('L3 L4 L6 L7 L8 S3 C1 C3 C4 C7 E2 D4 D6 A3 A4 M3: the correct runtime passes every invariant under random and PCT schedules', async () => {
    const report = await explore({
      scenarios: SCENARIOS,
      schedulers: ['random', 'pct'],
      seedsPerScenario: 4,
    });
    expect(report.violations).toEqual([]);
    expect(report.runs).toBe(SCENARIOS.length * 2 * 4);
    // The schedules really differ: more than one interleaving per scenario.
    for (const scenario of SCENARIOS) expect(report.perScenario[scenario.id]!.distinct).toBeGreaterThan(1);
  }, 120_000);

  it('L3 L8 S3 S6 T7 C1 C3 C7 E2 D4 D6: every scenario holds on a store that delays every write by a random time (an asynchronous store)', async () => {
    const report = await explore({
      scenarios: SCENARIOS,
      schedulers: ['random', 'pct'],
      seedsPerScenario: 3,
      delayedWrites: true,
    });
    expect(report.violations).toEqual([]);
    expect(report.runs).toBe(SCENARIOS.length * 2 * 3);
    // A trace recorded on such a store replays on one.
    const first = await runSchedule(l4, new ScriptedScheduler(['W1:worker.stream-event', 'A:advance']), {
      seed: 1,
      delayedWrites: true,
    });
    const again = await replay(first.encoded, SCENARIOS);
    expect(again.trace).toEqual(first.trace);
    expect(again.trace.delayedWrites).toBe(true);
  }, 120_000);

  // Each switch against the scenarios of the crossing it breaks (`stress --mutation` runs them all).
  it.each([
    [Mutation.commitIgnoresActivity, 'no-abort-after-progress', 'L4', ['L4', 'L6']],
    [Mutation.publishBeforeCommit, 'abort-and-log-agree', 'L5', ['L4', 'L6']],
    [Mutation.renewAfterAbort, 'no-renewal-after-commit', 'L3', ['L3', 'L4']],
    [Mutation.admitFencedJournal, 'no-late-rows', 'L3', ['L3']],
    [Mutation.commitOnPublishFailure, 'fault-declines', 'L7', ['L7']],
    [Mutation.skipRepair, 'history-complete', 'S1', ['L3', 'T7']],
    [Mutation.rewriteIgnoresAbort, 'committed-abort-revokes-rewrite', 'L8', ['L8']],
    [Mutation.abortTearsRewrite, 'rewrite-not-torn', 'L8', ['L8']],
    [Mutation.claimIgnoresFence, 'no-queued-start-after-cancel', 'C7', ['C7']],
    [Mutation.handoffRowsTwice, 'handoff-exact', 'E2', ['E2']],
    [Mutation.lateListenerKept, 'listeners-quiesced', 'D6', ['D6']],
    [Mutation.successorSharesStream, 'successor-untouched', 'D4', ['D4']],
  ])(
    'finds the %s mutation: a %s violation of %s',
    async (mutation, invariant, guarantee, ids) => {
      const report = await explore({
        scenarios: SCENARIOS.filter((s) => ids.includes(s.id)),
        schedulers: ['random', 'pct'],
        budgetMs: BUDGET_MS,
        mutation,
        stopOnViolation: true,
      });
      const found = report.violations.find((v) => v.invariant === invariant);
      expect(found, `no ${invariant} violation in ${report.runs} runs`).toBeDefined();
      expect(found!.guarantee).toBe(guarantee);
    },
    60_000,
  );

  it('replay is exact: a recorded failing trace reruns to the same choices and the same violation', async () => {
    const report = await explore({
      scenarios: SCENARIOS,
      schedulers: ['pct', 'random'],
      budgetMs: BUDGET_MS,
      mutation: Mutation.admitFencedJournal,
      stopOnViolation: true,
    });
    const failing = report.violations[0];
    expect(failing).toBeDefined();
    const recorded = decodeTrace(failing!.trace);
    expect(recorded.mutation).toBe(Mutation.admitFencedJournal);
    for (let i = 0; i < 2; i++) {
      const again = await replay(failing!.trace, SCENARIOS);
      expect(again.trace.choices).toEqual(recorded.choices);
      expect(again.violations.map((v) => [v.invariant, v.message])).toEqual(
        report.violations.filter((v) => v.trace === failing!.trace).map((v) => [v.invariant, v.message]),
      );
    }
  }, 90_000);

  it('L4: a scripted schedule lands the stamp in the exact window, and the abort declines', async () => {
    const window = [
      'W1:worker.stream-event', // first token stamps
      'A:advance', // the watchdog sees the stamp
      'A:advance', // … then a stall: S samples and parks before its commit
      'W1:worker.stream-event', // the turn stamps inside the window
      'S:watchdog.sample→commit', // the commit runs: it must decline
      'W1:worker.stream-event', // the last token; the turn completes
    ];
    const outcome = await runSchedule(l4, new ScriptedScheduler(window), { seed: 0 });
    expect(outcome.trace.choices.slice(0, window.length)).toEqual(window);
    expect(outcome.violations).toEqual([]);
    expect(outcome.record.attempts).toEqual([expect.objectContaining({ committed: false })]);
    expect(outcome.record.result?.status).toBe('completed');
    // The same window with the commit first: the abort stands and the turn is interrupted.
    const first = await runSchedule(
      l4,
      new ScriptedScheduler(['W1:worker.stream-event', 'A:advance', 'A:advance', 'S:watchdog.sample→commit']),
      { seed: 0 },
    );
    expect(first.violations).toEqual([]);
    expect(first.record.attempts[0]).toMatchObject({ committed: true });
    expect(first.record.result?.status).toBe('interrupted');
  }, 30_000);
});
