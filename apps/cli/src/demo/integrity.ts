/**
 * Integrity checks: the verdict on every turn (did it end the way its kind must?) and the
 * audit of the durable history re-read after shutdown (S1: no dangling tool call; S2: every
 * synthesized result says `unknown` or `none`; L3: nothing of an aborted turn is journaled
 * after its recovery).
 */
import type { HistoryRow } from '@turnwarden/protocol';
import { openToolCalls } from '@turnwarden/protocol';
import type { ObservedStatus, TurnRecord, Verdict } from './types.js';
import type { Expectation } from './workload.js';

export interface Observation {
  readonly status: ObservedStatus;
  readonly abortReason?: string | undefined;
  readonly workerTerminated: boolean;
  readonly errorCode?: string | undefined;
  /** An approval turn: how its wait was decided (seen by the driver). */
  readonly approval?: 'approved' | 'denied' | 'timed_out' | undefined;
  /** A double-text turn: its policy and how the second message ended (seen by the driver). */
  readonly doubleText?: { readonly policy: string; readonly second: string } | undefined;
}

const WATCHDOG_REASONS: ReadonlySet<string> = new Set(['watchdog', 'deadline']);

/** The verdict on one turn, from what it was expected to do and how it ended. */
export function classifyTurn(expected: Expectation, obs: Observation): Verdict {
  if (obs.abortReason === 'shutdown' || obs.errorCode === 'SHUTTING_DOWN') return 'cancelled';
  const byWatchdog = obs.status === 'interrupted' && obs.abortReason === 'watchdog';
  switch (expected) {
    case 'completed':
      if (obs.status === 'completed') return 'ok';
      if (
        obs.status === 'interrupted' &&
        obs.abortReason !== undefined &&
        WATCHDOG_REASONS.has(obs.abortReason)
      ) {
        return 'false_abort';
      }
      return 'unexpected_failure';
    case 'interrupted':
      // L1: detected, aborted and unwound (a wedge-style termination still counts as recovered).
      return byWatchdog ? 'ok' : 'not_recovered';
    case 'terminated':
      // L3: only terminating the thread ends a synchronous loop.
      return byWatchdog && obs.workerTerminated ? 'ok' : 'not_recovered';
    case 'force-cancelled':
      // C3: the host's force cancel ended the turn (its results synthesized before it released).
      return obs.status === 'interrupted' && obs.abortReason === 'cancel' ? 'ok' : 'unexpected_failure';
    case 'failed':
      // S5: the store refused a tool row: the turn fails with the store's error (and is repaired).
      return obs.status === 'failed' && obs.errorCode === 'STORE_ERROR' ? 'ok' : 'unexpected_failure';
    case 'decided':
      // A1–A4: the turn ended waiting; approved or denied, the resumed turn completed; let to
      // time out, the wait was denied by its timeout (the driver saw the call's result).
      if (obs.approval === 'timed_out')
        return obs.status === 'awaiting_approval' ? 'ok' : 'unexpected_failure';
      return obs.status === 'completed' && obs.approval !== undefined ? 'ok' : 'unexpected_failure';
    case 'double-texted': {
      // M1–M4: the first turn completed — or, for interrupt and rollback, was ended by the
      // cancel —; the second message was refused (reject, while the first ran) or ran to its end.
      const dt = obs.doubleText;
      if (dt === undefined) return 'unexpected_failure';
      const cancelled = obs.status === 'interrupted' && obs.abortReason === 'cancel';
      const ending = dt.policy === 'interrupt' || dt.policy === 'rollback';
      const firstOk = obs.status === 'completed' || (ending && cancelled);
      const secondOk = dt.second === 'completed' || (dt.policy === 'reject' && dt.second === 'refused');
      return firstOk && secondOk ? 'ok' : 'unexpected_failure';
    }
  }
}

export interface HistoryAudit {
  readonly workstreams: number;
  readonly rows: number;
  readonly userMessages: number;
  /** Tool call occurrences without a result (S1): must be 0. */
  readonly danglingToolCalls: number;
  readonly synthesizedResults: number;
  readonly synthesizedUnknown: number;
  readonly synthesizedNone: number;
  /** Synthesized results claiming any other effect (S2): must be 0. */
  readonly badSynthesizedEffects: number;
  /** Rows of a turn journaled after that turn's recovery wrote its synthesized results (L3): must be 0. */
  readonly lateRows: number;
}

const EMPTY_AUDIT: HistoryAudit = {
  workstreams: 0,
  rows: 0,
  userMessages: 0,
  danglingToolCalls: 0,
  synthesizedResults: 0,
  synthesizedUnknown: 0,
  synthesizedNone: 0,
  badSynthesizedEffects: 0,
  lateRows: 0,
};

/** Audits one workstream's durable history (rows in seq order). */
export function auditHistory(rows: readonly HistoryRow[]): HistoryAudit {
  let userMessages = 0;
  let synthesizedResults = 0;
  let synthesizedUnknown = 0;
  let synthesizedNone = 0;
  let badSynthesizedEffects = 0;
  let lateRows = 0;
  // Generations whose user row was journaled, and those whose recovery has written results.
  // (Repair before a claim writes under the new generation *before* its user row: not recovery.)
  const claimed = new Set<number>();
  const recovered = new Set<number>();
  for (const row of rows) {
    const m = row.message;
    const synthesized = m.role === 'tool' && m.synthesized === true;
    if (recovered.has(row.generation) && !synthesized) lateRows++;
    if (m.role === 'user') {
      userMessages++;
      claimed.add(row.generation);
    }
    if (m.role === 'tool' && synthesized) {
      synthesizedResults++;
      if (m.effect === 'unknown') synthesizedUnknown++;
      else if (m.effect === 'none') synthesizedNone++;
      else badSynthesizedEffects++;
      if (claimed.has(row.generation)) recovered.add(row.generation);
    }
  }
  return {
    workstreams: 1,
    rows: rows.length,
    userMessages,
    danglingToolCalls: openToolCalls(rows).length,
    synthesizedResults,
    synthesizedUnknown,
    synthesizedNone,
    badSynthesizedEffects,
    lateRows,
  };
}

export function mergeAudits(audits: readonly HistoryAudit[]): HistoryAudit {
  const total = { ...EMPTY_AUDIT } as Record<keyof HistoryAudit, number>;
  for (const a of audits) {
    for (const key of Object.keys(total) as (keyof HistoryAudit)[]) total[key] += a[key];
  }
  return total;
}

/**
 * The durable user rows a record accounts for: its send's, unless refused; a double text's second
 * message's when it ran; less the first turn's when a rollback removed it (M1–M4).
 */
export function userRowsOf(r: TurnRecord): number {
  const own = r.status === 'rejected' ? 0 : 1;
  const dt = r.doubleText;
  if (dt === undefined) return own;
  const second = dt.second === 'refused' || dt.second === 'not_sent' ? 0 : 1;
  return own + second - (dt.rolledBack ? 1 : 0);
}

/** The synthesized results of a record still in the history: none of a turn a rollback removed (M4). */
export function durableSynthesizedOf(r: TurnRecord): number {
  return r.doubleText?.rolledBack === true ? 0 : r.synthesized;
}

export interface VerdictCounts {
  readonly ok: number;
  readonly falseAborts: number;
  readonly notRecovered: number;
  readonly unexpectedFailures: number;
  readonly cancelled: number;
  /** Idle checks (after the last turn) that did not complete. */
  readonly idleCheckFailures: number;
}

export function countVerdicts(records: readonly TurnRecord[]): VerdictCounts {
  let ok = 0;
  let falseAborts = 0;
  let notRecovered = 0;
  let unexpectedFailures = 0;
  let cancelled = 0;
  let idleCheckFailures = 0;
  for (const r of records) {
    if (r.verdict === 'ok') ok++;
    else if (r.verdict === 'cancelled') cancelled++;
    else if (r.kind === 'idle-check') idleCheckFailures++;
    else if (r.verdict === 'false_abort') falseAborts++;
    else if (r.verdict === 'not_recovered') notRecovered++;
    else unexpectedFailures++;
  }
  return { ok, falseAborts, notRecovered, unexpectedFailures, cancelled, idleCheckFailures };
}

export interface IntegrityCheck {
  readonly id: string;
  readonly label: string;
  readonly guarantee: string;
  readonly value: number;
  readonly ok: boolean;
}

export interface IntegrityInput {
  readonly verdicts: VerdictCounts;
  readonly audit: HistoryAudit;
  /** Workstreams whose durable user rows differ from the messages `send` accepted. */
  readonly historyMismatches: number;
  /** Synthesized results the supervisor counted (`tw.stats()`), to compare with the durable ones. */
  readonly synthesizedCounted: number;
  /** Store faults the plan asked for that the store never injected (the demo did not test them). */
  readonly faultsNotInjected: number;
  /** Sends refused with CAPACITY_EXHAUSTED: over capacity a send waits for a worker (T4). */
  readonly capacityRefusals: number;
}

/** Every check, passing or not, in the order the summary prints them. */
export function integrityChecks(input: IntegrityInput): IntegrityCheck[] {
  const { verdicts: v, audit: a } = input;
  const zero = (id: string, label: string, guarantee: string, value: number): IntegrityCheck => ({
    id,
    label,
    guarantee,
    value,
    ok: value === 0,
  });
  return [
    zero('false_aborts', 'progressing turns aborted by the watchdog', 'L2', v.falseAborts),
    zero('not_recovered', 'stalled/wedged turns not recovered', 'L1 L3', v.notRecovered),
    zero('unexpected_failures', 'turns that should have completed but did not', 'T', v.unexpectedFailures),
    zero('idle_check_failures', 'workstreams not idle after their last turn', 'L1 L3', v.idleCheckFailures),
    zero('dangling_tool_calls', 'dangling tool calls in the durable history', 'S1', a.danglingToolCalls),
    zero(
      'bad_synthesized_effects',
      'synthesized results not marked unknown/none',
      'S2',
      a.badSynthesizedEffects,
    ),
    zero('late_rows', 'rows journaled after a turn was recovered', 'L3', a.lateRows),
    zero(
      'synthesized_mismatch',
      'synthesized results counted but not durable (or the reverse)',
      'S2',
      Math.abs(input.synthesizedCounted - a.synthesizedResults),
    ),
    zero(
      'capacity_refusals',
      'sends refused for capacity (they wait in the fair admission queue)',
      'T4',
      input.capacityRefusals,
    ),
    zero('faults_not_injected', 'planned store faults never injected', 'P3 S5', input.faultsNotInjected),
    zero(
      'history_mismatches',
      'workstreams whose user rows differ from accepted sends',
      'P',
      input.historyMismatches,
    ),
  ];
}
