/**
 * What the demo shows while it runs. On a terminal: a grid redrawn in place (ANSI cursor
 * movement, at most 10 times a second), one cell per workstream with its turns so far, its
 * session state and the kind of the running turn, plus a totals line. Elsewhere (CI, a pipe):
 * one plain line per finished turn. Quiet: nothing.
 */
import type { TurnwardenEvent } from '@turnwarden/supervisor';
import type { Output, Styler } from '../output.js';
import { CLEAR_BELOW, CLEAR_LINE, cursorUp, fit, HIDE_CURSOR, SHOW_CURSOR, styler } from '../output.js';
import type { DemoObserver } from './driver.js';
import type { RecordKind, TurnRecord } from './types.js';
import type { WorkloadPlan } from './workload.js';

export type ViewMode = 'tty' | 'lines' | 'quiet';

export interface LiveTotals {
  readonly watchdogFired: number;
  readonly workersTerminated: number;
  readonly toolResultsSynthesized: number;
  readonly admission: { readonly waiting: number };
}

interface Row {
  readonly id: string;
  readonly total: number;
  state: string;
  kind: RecordKind | undefined;
  readonly done: TurnRecord[];
}

const REDRAW_MS = 100;
const CELL_GAP = '  ';
/** `force-abandoning` is too wide for a cell. */
const SHORT_STATE: Readonly<Record<string, string>> = { 'force-abandoning': 'abandoning' };

const LEGEND = '✓ completed  ↺ interrupted by the watchdog  ✕ worker terminated  ! check failed  · to do';

function glyph(r: TurnRecord, s: Styler): string {
  if (r.verdict !== 'ok' && r.verdict !== 'cancelled') return s.red('!');
  if (r.status === 'completed') return s.green('✓');
  if (r.workerTerminated) return s.cyan('✕');
  if (r.status === 'interrupted') return s.yellow('↺');
  return s.dim('-');
}

/** `ws-07 turn 3/4 completed 812 ms (heartbeat/tool)` */
export function turnLine(r: TurnRecord): string {
  const what = r.kind === 'idle-check' ? 'idle check' : `turn ${r.index}/${r.total}`;
  const notes: string[] = [r.kind === 'idle-check' ? 'plain' : `${r.kind}/${r.variant}`];
  if (r.abortReason !== undefined) notes.push(`${r.abortReason} abort`);
  if (r.workerTerminated) notes.push('worker terminated');
  if (r.synthesized > 0) notes.push(`${r.synthesized} result${r.synthesized === 1 ? '' : 's'} synthesized`);
  if (r.errorCode !== undefined && r.status !== 'interrupted') notes.push(r.errorCode);
  const flag =
    r.verdict === 'ok' || r.verdict === 'cancelled'
      ? ''
      : `  <- ${r.verdict.toUpperCase().replace('_', ' ')}`;
  const ms = r.status === 'rejected' ? '' : ` ${r.durationMs} ms`;
  return `${r.workstreamId} ${what} ${r.status}${ms} (${notes.join(', ')})${flag}`;
}

export class LiveView implements DemoObserver {
  private readonly rows = new Map<string, Row>();
  private readonly s: Styler;
  private readonly startedAt = performance.now();
  private timer: NodeJS.Timeout | undefined;
  private drawn = 0;
  private finished = 0;
  private readonly planned: number;
  private readonly idWidth: number;
  /** Visible width of a cell plus the gap after it. */
  private readonly cellWidth: number;

  constructor(
    private readonly out: Output,
    readonly mode: ViewMode,
    plan: WorkloadPlan,
    private readonly totals: () => LiveTotals,
  ) {
    this.s = styler(out.color);
    for (const ws of plan.workstreams) {
      this.rows.set(ws.id, { id: ws.id, total: ws.turns.length, state: 'idle', kind: undefined, done: [] });
    }
    this.planned = plan.workstreams.reduce((n, ws) => n + ws.turns.length + 1, 0);
    this.idWidth = Math.max(0, ...plan.workstreams.map((ws) => ws.id.length));
    const slots = Math.max(0, ...plan.workstreams.map((ws) => ws.turns.length + 1));
    this.cellWidth = this.idWidth + 1 + (slots <= 12 ? slots : 7) + 1 + 10 + 1 + 10 + CELL_GAP.length;
  }

  start(): void {
    if (this.mode !== 'tty') return;
    this.out.out(`${this.s.dim(LEGEND)}\n${HIDE_CURSOR}`);
    this.render();
    this.timer = setInterval(() => this.render(), REDRAW_MS);
    this.timer.unref();
  }

  /** Final redraw; restores the cursor. Idempotent. */
  stop(): void {
    if (this.timer === undefined) return;
    clearInterval(this.timer);
    this.timer = undefined;
    for (const row of this.rows.values()) row.state = 'done';
    this.render();
    this.out.out(`${SHOW_CURSOR}\n`);
  }

  /** Supervisor events of a workstream (subscribed by the runner). */
  event(ev: TurnwardenEvent): void {
    const row = this.rows.get(ev.workstreamId);
    if (!row) return;
    if (ev.type === 'state' && typeof ev.data.state === 'string') row.state = ev.data.state;
    else if (ev.type === 'idle') row.state = 'idle';
  }

  waiting(workstreamId: string): void {
    const row = this.rows.get(workstreamId);
    if (row) row.state = 'waiting';
  }

  turnStarted(workstreamId: string, _index: number, kind: RecordKind): void {
    const row = this.rows.get(workstreamId);
    if (!row) return;
    row.kind = kind;
    if (row.state === 'waiting') row.state = 'claimed';
  }

  turnFinished(record: TurnRecord): void {
    this.finished++;
    const row = this.rows.get(record.workstreamId);
    if (row) {
      row.done.push(record);
      row.kind = undefined;
      row.state = record.kind === 'idle-check' ? 'done' : 'idle';
    }
    if (this.mode === 'lines') this.out.out(`${turnLine(record)}\n`);
  }

  private cell(row: Row): string {
    const slots = row.total + 1;
    const progress =
      slots <= 12
        ? row.done.map((r) => glyph(r, this.s)).join('') +
          (row.done.length < slots ? this.s.dim('·'.repeat(slots - row.done.length)) : '')
        : `${row.done.length}/${slots}`.padEnd(7);
    const state = (SHORT_STATE[row.state] ?? row.state).padEnd(10);
    const kind = (row.kind ?? '').padEnd(10);
    return `${row.id.padEnd(this.idWidth)} ${progress} ${state} ${kind}`;
  }

  private totalsLines(): string[] {
    let completed = 0;
    let interrupted = 0;
    let bad = 0;
    for (const row of this.rows.values()) {
      for (const r of row.done) {
        if (r.status === 'completed') completed++;
        else if (r.status === 'interrupted') interrupted++;
        if (r.verdict !== 'ok' && r.verdict !== 'cancelled') bad++;
      }
    }
    const t = this.totals();
    const secs = ((performance.now() - this.startedAt) / 1000).toFixed(1);
    return [
      [
        this.s.bold(`turns ${this.finished}/${this.planned}`),
        `${completed} completed`,
        `${interrupted} interrupted`,
        bad === 0 ? this.s.green('no check failed') : this.s.red(`${bad} failed a check`),
        `${secs} s`,
      ].join(' · '),
      [
        `watchdog fired ${t.watchdogFired}`,
        `workers terminated ${t.workersTerminated}`,
        `results synthesized ${t.toolResultsSynthesized}`,
        `waiting for a worker ${t.admission.waiting}`,
      ].join(' · '),
    ];
  }

  private render(): void {
    const cells = [...this.rows.values()].map((r) => this.cell(r));
    const fits = Math.floor((this.out.columns + CELL_GAP.length) / this.cellWidth);
    const perLine = Math.max(1, Math.min(6, fits));
    let lines: string[] = [];
    for (let i = 0; i < cells.length; i += perLine) {
      lines.push(
        cells
          .slice(i, i + perLine)
          .join(CELL_GAP)
          .trimEnd(),
      );
    }
    const totals = this.totalsLines();
    const room = Math.max(1, this.out.rows - totals.length - 2);
    if (lines.length > room) {
      lines = [...lines.slice(0, room - 1), this.s.dim(`… ${lines.length - room + 1} more lines`)];
    }
    lines.push(...totals);
    // A line that wraps would break the cursor arithmetic of the next redraw.
    lines = lines.map((l) => fit(l, Math.max(10, this.out.columns - 1)));
    const up = this.drawn > 0 ? cursorUp(this.drawn) : '';
    this.out.out(`${up}${lines.map((l) => CLEAR_LINE + l).join('\n')}\n${CLEAR_BELOW}`);
    this.drawn = lines.length;
  }
}
