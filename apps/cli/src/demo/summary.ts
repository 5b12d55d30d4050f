/**
 * The demo's summary: one machine-readable object (printed by `--json`) and its
 * human-readable rendering.
 */
import type { RuntimeStats } from '@turnwarden/supervisor';
import type { Styler } from '../output.js';
import type { HistoryAudit, IntegrityCheck, VerdictCounts } from './integrity.js';
import type { RecordKind, TurnRecord } from './types.js';
import { EXPECTED, type Expectation, TURN_KINDS } from './workload.js';

export interface KindSummary {
  readonly expected: Expectation;
  readonly planned: number;
  readonly completed: number;
  readonly interrupted: number;
  readonly worker_terminated: number;
  readonly failed: number;
  readonly rejected: number;
  /** Turns whose outcome matched the expectation. */
  readonly as_expected: number;
  /** Turns that failed their check (false abort, not recovered, unexpected failure). */
  readonly check_failures: number;
  readonly avg_ms: number;
  readonly max_ms: number;
}

export interface DemoSummary {
  readonly ok: boolean;
  readonly failed_checks: readonly string[];
  readonly stopped_early: boolean;
  readonly sessions: number;
  readonly turns_per_session: number;
  readonly seed: number;
  readonly turns_planned: number;
  readonly idle_checks: number;
  // Supervisor counters (tw.stats()), idle checks included.
  readonly turns_completed: number;
  readonly turns_interrupted: number;
  readonly turns_failed: number;
  readonly watchdog_fired: number;
  readonly aborts_committed: number;
  readonly aborts_declined: number;
  readonly workers_terminated: number;
  readonly workers_crashed: number;
  readonly tool_results_synthesized: number;
  readonly lease_renewals: number;
  readonly lease_losses: number;
  readonly journal_refused_fenced: number;
  /** Store faults the demo's store injected, by kind, and how many the plan asked for. */
  readonly store_faults: {
    readonly planned: number;
    readonly reject: number;
    readonly transient: number;
    readonly lost_ack: number;
    readonly slow: number;
  };
  /** Times a journal became `retrying` (P3): each a transient failure or a lost acknowledgement. */
  readonly journal_retries: number;
  /** Force cancels the host issued (cancel turns). */
  readonly force_cancels: number;
  /**
   * Approval turns (A1–A4): turns that ended waiting for an approval (the supervisor's count),
   * and how the driver decided them — approved, denied, or let time out.
   */
  readonly approvals: {
    readonly awaited: number;
    readonly approved: number;
    readonly denied: number;
    readonly timed_out: number;
  };
  /**
   * Double-text turns (M1–M4): how many sent their second message with each policy; of those,
   * second messages refused (reject), first turns ended by the second (interrupt, rollback), and
   * first turns whose rows a rollback removed.
   */
  readonly double_texts: {
    readonly reject: number;
    readonly enqueue: number;
    readonly interrupt: number;
    readonly rollback: number;
    readonly refused: number;
    readonly interrupted: number;
    readonly rolled_back: number;
  };
  readonly watchdog_poll_lateness_ms: { readonly p50: number; readonly p99: number; readonly max: number };
  // Integrity (per-turn verdicts, and the durable history re-read after shutdown).
  readonly false_aborts: number;
  readonly not_recovered: number;
  readonly unexpected_failures: number;
  readonly idle_check_failures: number;
  readonly dangling_tool_calls: number;
  readonly bad_synthesized_effects: number;
  readonly late_rows: number;
  readonly history_mismatches: number;
  readonly history: {
    readonly rows: number;
    readonly user_messages: number;
    readonly synthesized_results: number;
    readonly synthesized_unknown: number;
    readonly synthesized_none: number;
  };
  /**
   * Fair admission (T4), per tenant: turns admitted and how long their sends waited for a
   * worker. The demo never retries a send: over capacity it waits in the supervisor's queue.
   */
  readonly admission: {
    readonly tenants: Readonly<
      Record<string, { readonly workstreams: number; readonly turns: number; readonly wait_ms: Percentiles }>
    >;
    readonly admitted_after_waiting: number;
    readonly capacity_refusals: number;
  };
  readonly by_kind: Readonly<Record<RecordKind, KindSummary>>;
  readonly config: {
    readonly timeout_ms: number;
    readonly poll_ms: number;
    readonly grace_ms: number;
    readonly lease_ttl_ms: number;
    readonly lease_renew_ms: number;
    readonly max_workers: number;
    readonly warm_workers: number;
    readonly max_active_per_tenant: number;
    /** Which model played the turns. */
    readonly model: string;
  };
  readonly elapsed_ms: number;
  readonly db: string;
  /** Log file, or `stderr`. */
  readonly log: string;
}

export interface SummaryInput {
  readonly records: readonly TurnRecord[];
  readonly storeFaults: DemoSummary['store_faults'];
  readonly journalRetries: number;
  readonly forceCancels: number;
  readonly planned: Readonly<Record<RecordKind, number>>;
  readonly sessions: number;
  readonly turnsPerSession: number;
  readonly seed: number;
  readonly stats: RuntimeStats;
  readonly verdicts: VerdictCounts;
  readonly audit: HistoryAudit;
  readonly checks: readonly IntegrityCheck[];
  readonly stoppedEarly: boolean;
  readonly config: DemoSummary['config'];
  readonly elapsedMs: number;
  readonly db: string;
  readonly log: string;
}

interface Percentiles {
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
}

function percentiles(values: readonly number[]): Percentiles {
  if (values.length === 0) return { p50: 0, p99: 0, max: 0 };
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
  return { p50: at(0.5), p99: at(0.99), max: sorted.at(-1)! };
}

function admission(records: readonly TurnRecord[], stats: RuntimeStats): DemoSummary['admission'] {
  const tenants: Record<string, { workstreams: number; turns: number; wait_ms: Percentiles }> = {};
  for (const tenant of [...new Set(records.map((r) => r.tenant))].sort()) {
    const ran = records.filter((r) => r.tenant === tenant && r.status !== 'rejected');
    tenants[tenant] = {
      workstreams: new Set(records.filter((r) => r.tenant === tenant).map((r) => r.workstreamId)).size,
      turns: ran.length,
      wait_ms: percentiles(ran.map((r) => r.waitMs)),
    };
  }
  return {
    tenants,
    admitted_after_waiting: stats.admission.admittedAfterWait,
    capacity_refusals: records.filter((r) => r.errorCode === 'CAPACITY_EXHAUSTED').length,
  };
}

function byKind(records: readonly TurnRecord[], planned: Readonly<Record<RecordKind, number>>) {
  const kinds: RecordKind[] = [...TURN_KINDS, 'idle-check'];
  const out = {} as Record<RecordKind, KindSummary>;
  for (const kind of kinds) {
    const rs = records.filter((r) => r.kind === kind);
    const ran = rs.filter((r) => r.status !== 'rejected');
    const total = ran.reduce((n, r) => n + r.durationMs, 0);
    out[kind] = {
      expected: kind === 'idle-check' ? 'completed' : EXPECTED[kind],
      planned: planned[kind],
      completed: rs.filter((r) => r.status === 'completed').length,
      interrupted: rs.filter((r) => r.status === 'interrupted').length,
      worker_terminated: rs.filter((r) => r.workerTerminated).length,
      failed: rs.filter((r) => r.status === 'failed').length,
      rejected: rs.filter((r) => r.status === 'rejected').length,
      as_expected: rs.filter((r) => r.verdict === 'ok').length,
      check_failures: rs.filter((r) => r.verdict !== 'ok' && r.verdict !== 'cancelled').length,
      avg_ms: ran.length === 0 ? 0 : Math.round(total / ran.length),
      max_ms: ran.reduce((m, r) => Math.max(m, r.durationMs), 0),
    };
  }
  return out;
}

export function buildSummary(input: SummaryInput): DemoSummary {
  const { stats, verdicts: v, audit: a } = input;
  const failed = input.checks.filter((c) => !c.ok).map((c) => c.id);
  if (input.stoppedEarly) failed.push('stopped_early');
  const lateness = stats.watchdog.pollLateness;
  const round = (n: number) => Math.round(n * 10) / 10;
  return {
    ok: failed.length === 0,
    failed_checks: failed,
    stopped_early: input.stoppedEarly,
    sessions: input.sessions,
    turns_per_session: input.turnsPerSession,
    seed: input.seed,
    turns_planned: input.sessions * input.turnsPerSession,
    idle_checks: input.planned['idle-check'],
    turns_completed: stats.turnsCompleted,
    turns_interrupted: stats.turnsInterrupted,
    turns_failed: stats.turnsFailed,
    watchdog_fired: stats.watchdogFired,
    aborts_committed: stats.abortsCommitted,
    aborts_declined: stats.abortsDeclined,
    workers_terminated: stats.workersTerminated,
    workers_crashed: stats.workersCrashed,
    tool_results_synthesized: stats.toolResultsSynthesized,
    lease_renewals: stats.leaseRenewals,
    lease_losses: stats.leaseLosses,
    journal_refused_fenced: stats.journalRefusedFenced,
    store_faults: input.storeFaults,
    journal_retries: input.journalRetries,
    force_cancels: input.forceCancels,
    approvals: {
      awaited: stats.turnsAwaitingApproval,
      approved: input.records.filter((r) => r.approval === 'approved').length,
      denied: input.records.filter((r) => r.approval === 'denied').length,
      timed_out: input.records.filter((r) => r.approval === 'timed_out').length,
    },
    double_texts: doubleTexts(input.records),
    watchdog_poll_lateness_ms: {
      p50: round(lateness.p50),
      p99: round(lateness.p99),
      max: round(lateness.max),
    },
    false_aborts: v.falseAborts,
    not_recovered: v.notRecovered,
    unexpected_failures: v.unexpectedFailures,
    idle_check_failures: v.idleCheckFailures,
    dangling_tool_calls: a.danglingToolCalls,
    bad_synthesized_effects: a.badSynthesizedEffects,
    late_rows: a.lateRows,
    history_mismatches: input.checks.find((c) => c.id === 'history_mismatches')?.value ?? 0,
    history: {
      rows: a.rows,
      user_messages: a.userMessages,
      synthesized_results: a.synthesizedResults,
      synthesized_unknown: a.synthesizedUnknown,
      synthesized_none: a.synthesizedNone,
    },
    admission: admission(input.records, stats),
    by_kind: byKind(input.records, input.planned),
    config: input.config,
    elapsed_ms: Math.round(input.elapsedMs),
    db: input.db,
    log: input.log,
  };
}

const GUARANTEE: Readonly<Record<RecordKind, string>> = {
  normal: '',
  tools: 'S1',
  heartbeat: 'L2',
  stall: 'L1',
  wedge: 'L3',
  cancel: 'C3',
  'store-fault': 'P1 P3',
  'store-reject': 'S5',
  approval: 'A1–A4',
  'double-text': 'M1–M4',
  'idle-check': 'L1 L3',
};

function table(rows: readonly (readonly string[])[], rightAligned: ReadonlySet<number>): string[] {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows.map((r) =>
    r
      .map((cell, i) => (rightAligned.has(i) ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd(),
  );
}

/** The human-readable summary. */
export function formatSummary(s: DemoSummary, checks: readonly IntegrityCheck[], st: Styler): string {
  const lines: string[] = [];
  const secs = (s.elapsed_ms / 1000).toFixed(1);
  lines.push(
    st.bold(
      `Turnwarden demo: ${s.sessions} workstreams × ${s.turns_per_session} turns (seed ${s.seed}) in ${secs} s`,
    ),
  );
  lines.push(`  db   ${s.db}`, `  log  ${s.log}`, '');

  const head = [
    'kind',
    'expected',
    'planned',
    'completed',
    'interrupted',
    'terminated',
    'failed',
    'avg ms',
    'max ms',
    'ok',
  ];
  const rows: string[][] = [head];
  for (const [kind, k] of Object.entries(s.by_kind) as [RecordKind, KindSummary][]) {
    // ✗ a turn failed its check; – not every planned turn ran (stopped early).
    const mark = k.check_failures > 0 ? '✗' : k.as_expected < k.planned ? '–' : '✓';
    rows.push([
      kind,
      k.expected,
      String(k.planned),
      String(k.completed),
      String(k.interrupted),
      String(k.worker_terminated),
      String(k.failed + k.rejected),
      String(k.avg_ms),
      String(k.max_ms),
      `${mark} ${GUARANTEE[kind]}`.trimEnd(),
    ]);
  }
  const rendered = table(rows, new Set([2, 3, 4, 5, 6, 7, 8]));
  lines.push(`  ${st.dim(rendered[0] ?? '')}`, ...rendered.slice(1).map((l) => `  ${l}`), '');

  const lat = s.watchdog_poll_lateness_ms;
  const counters = table(
    [
      [
        'turns completed / interrupted / failed',
        `${s.turns_completed} / ${s.turns_interrupted} / ${s.turns_failed}`,
      ],
      [
        'watchdog fired / aborts committed / declined',
        `${s.watchdog_fired} / ${s.aborts_committed} / ${s.aborts_declined}`,
      ],
      ['workers terminated / crashed', `${s.workers_terminated} / ${s.workers_crashed}`],
      ['tool results synthesized', String(s.tool_results_synthesized)],
      ['lease renewals / losses', `${s.lease_renewals} / ${s.lease_losses}`],
      ['journal writes refused (fenced)', String(s.journal_refused_fenced)],
      [
        'store faults injected: reject / transient / lost ack / slow',
        `${s.store_faults.reject} / ${s.store_faults.transient} / ${s.store_faults.lost_ack} / ${s.store_faults.slow}`,
      ],
      ['journal retries (persistence retrying)', String(s.journal_retries)],
      ['force cancels by the host', String(s.force_cancels)],
      [
        'double texts: reject / enqueue / interrupt / rollback',
        `${s.double_texts.reject} / ${s.double_texts.enqueue} / ${s.double_texts.interrupt} / ${s.double_texts.rollback}`,
      ],
      [
        'double texts refused / turns they interrupted / turns rolled back',
        `${s.double_texts.refused} / ${s.double_texts.interrupted} / ${s.double_texts.rolled_back}`,
      ],
      [
        'turns that waited for an approval: approved / denied / timed out',
        `${s.approvals.awaited}: ${s.approvals.approved} / ${s.approvals.denied} / ${s.approvals.timed_out}`,
      ],
      [
        'sends admitted after waiting for a worker / refused for capacity',
        `${s.admission.admitted_after_waiting} / ${s.admission.capacity_refusals}`,
      ],
      ...Object.entries(s.admission.tenants).map(([tenant, t]): [string, string] => [
        `tenant ${tenant}: turns, wait for a worker p50 / p99 / max`,
        `${t.turns}, ${t.wait_ms.p50} / ${t.wait_ms.p99} / ${t.wait_ms.max} ms`,
      ]),
      ['watchdog poll lateness p50 / p99 / max', `${lat.p50} / ${lat.p99} / ${lat.max} ms`],
    ],
    new Set(),
  );
  lines.push(`  ${st.bold('supervisor')} ${st.dim('(tw.stats)')}`, ...counters.map((l) => `    ${l}`), '');

  const h = s.history;
  lines.push(
    `  ${st.bold('integrity')} ${st.dim(
      `(durable history re-read after shutdown: ${h.rows} rows, ${h.synthesized_results} synthesized results — ${h.synthesized_unknown} unknown, ${h.synthesized_none} none)`,
    )}`,
  );
  const checkRows = table(
    checks.map((c) => [c.ok ? '✓' : '✗', c.label, String(c.value), c.guarantee]),
    new Set([2]),
  );
  checks.forEach((c, i) => {
    const line = `    ${checkRows[i] ?? ''}`;
    lines.push(c.ok ? line : st.red(line));
  });
  lines.push('');
  if (s.stopped_early) lines.push(st.yellow('  stopped early: not every turn ran'));
  lines.push(
    s.ok
      ? st.green(st.bold('  RESULT: OK — every check passed'))
      : st.red(st.bold(`  RESULT: FAILED — ${s.failed_checks.join(', ')}`)),
  );
  return `${lines.join('\n')}\n`;
}

/** The double-text turns' counts (M1–M4). */
function doubleTexts(records: readonly TurnRecord[]): DemoSummary['double_texts'] {
  const dt = records.flatMap((r) => (r.doubleText === undefined ? [] : [{ ...r.doubleText, record: r }]));
  const by = (policy: string) => dt.filter((d) => d.policy === policy).length;
  return {
    reject: by('reject'),
    enqueue: by('enqueue'),
    interrupt: by('interrupt'),
    rollback: by('rollback'),
    refused: dt.filter((d) => d.second === 'refused').length,
    interrupted: dt.filter((d) => d.record.status === 'interrupted' && d.record.abortReason === 'cancel')
      .length,
    rolled_back: dt.filter((d) => d.rolledBack).length,
  };
}
