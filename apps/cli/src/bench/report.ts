/** Result shapes of the bench sections and their text / JSON rendering. */
import type { SectionName } from './args.js';

export interface Target {
  /** Human-readable rule, e.g. "≤ 2× and ≤ 50 ns". */
  readonly text: string;
  readonly met: boolean;
}

export interface Row {
  readonly figure: string;
  readonly unit: string;
  readonly ours: number;
  /** The raw baseline measured in the same run, when there is one. */
  readonly baseline?: number;
  /** ours / baseline. */
  readonly ratio?: number;
  readonly target?: Target;
}

export interface SectionResult {
  readonly name: SectionName;
  readonly title: string;
  /** What "ours" measures. */
  readonly ours: string;
  /** What the baseline measures. */
  readonly baseline: string;
  readonly rows: readonly Row[];
  readonly notes: readonly string[];
  readonly durationMs: number;
  /** Set when the section could not run to the end (not a timing failure). */
  readonly error?: string;
}

export interface RowOptions {
  readonly baseline?: number;
  readonly target?: Target;
}

export function row(figure: string, unit: string, ours: number, opts: RowOptions = {}): Row {
  const { baseline, target } = opts;
  const ratio =
    baseline === undefined || !(baseline > 0) || !Number.isFinite(ours) ? undefined : ours / baseline;
  return {
    figure,
    unit,
    ours,
    ...(baseline === undefined ? {} : { baseline }),
    ...(ratio === undefined ? {} : { ratio }),
    ...(target === undefined ? {} : { target }),
  };
}

export function target(text: string, met: boolean): Target {
  return { text, met };
}

// ── formatting ────────────────────────────────────────────────────────────────

function num(v: number): string {
  if (!Number.isFinite(v)) return 'n/a';
  const a = Math.abs(v);
  if (a >= 10_000) return Math.round(v).toLocaleString('en-US');
  if (Number.isInteger(v)) return String(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  if (a === 0) return '0';
  return v.toPrecision(2);
}

function withUnit(v: number, unit: string): string {
  const n = num(v);
  return n === 'n/a' || unit === '' ? n : `${n} ${unit}`;
}

function ratioText(r: number | undefined): string {
  if (r === undefined || !Number.isFinite(r)) return '—';
  if (r === 0) return '0×';
  if (r >= 0.1) return `${r.toFixed(2)}×`;
  const inv = 1 / r;
  return `1/${inv >= 100 ? inv.toFixed(0) : inv.toFixed(1)}`;
}

function table(header: readonly string[], lines: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const render = (cells: readonly string[]) =>
    `  ${cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd()}\n`;
  return render(header) + render(widths.map((w) => '─'.repeat(w))) + lines.map(render).join('');
}

export function formatSection(s: SectionResult): string {
  const title = `${s.name} — ${s.title}`;
  let text = `\n── ${title} ${'─'.repeat(Math.max(3, 100 - title.length))}\n`;
  text += `  ours:     ${s.ours}\n  baseline: ${s.baseline}\n\n`;
  if (s.rows.length > 0) {
    text += table(
      ['figure', 'ours', 'baseline', 'ratio', 'target', 'met?'],
      s.rows.map((r) => [
        r.figure,
        withUnit(r.ours, r.unit),
        r.baseline === undefined ? '—' : withUnit(r.baseline, r.unit),
        ratioText(r.ratio),
        r.target?.text ?? '—',
        r.target === undefined ? '' : r.target.met ? 'met' : 'MISSED',
      ]),
    );
  }
  for (const note of s.notes) text += `  · ${note}\n`;
  if (s.error !== undefined) text += `  ! section error: ${s.error}\n`;
  text += `  (${(s.durationMs / 1000).toFixed(1)} s)\n`;
  return text;
}

export interface Summary {
  readonly targets: number;
  readonly met: number;
  readonly missed: readonly string[];
  readonly errors: readonly string[];
  readonly durationMs: number;
}

/** How the summary names a section (`turnwarden scale` names its runs by provider and N). */
export type SectionLabel = (s: SectionResult) => string;

const byName: SectionLabel = (s) => s.name;

export function summarize(
  results: readonly SectionResult[],
  durationMs: number,
  label: SectionLabel = byName,
): Summary {
  let targets = 0;
  let met = 0;
  const missed: string[] = [];
  const errors: string[] = [];
  for (const s of results) {
    if (s.error !== undefined) errors.push(`${label(s)}: ${s.error}`);
    for (const r of s.rows) {
      if (!r.target) continue;
      targets++;
      if (r.target.met) met++;
      else missed.push(`${label(s)}: ${r.figure} = ${withUnit(r.ours, r.unit)} (target ${r.target.text})`);
    }
  }
  return { targets, met, missed, errors, durationMs };
}

export function formatSummary(
  results: readonly SectionResult[],
  summary: Summary,
  label: SectionLabel = byName,
): string {
  let text = `\n── summary ${'─'.repeat(92)}\n`;
  text += table(
    ['section', 'targets met', 'time', 'status'],
    results.map((s) => {
      const withTarget = s.rows.filter((r) => r.target);
      const ok = withTarget.filter((r) => r.target?.met).length;
      return [
        label(s),
        withTarget.length === 0 ? '—' : `${ok}/${withTarget.length}`,
        `${(s.durationMs / 1000).toFixed(1)} s`,
        s.error !== undefined ? 'ERROR' : ok === withTarget.length ? 'ok' : 'target missed',
      ];
    }),
  );
  text += `\n  ${summary.met}/${summary.targets} targets met in ${(summary.durationMs / 1000).toFixed(1)} s.`;
  text += ' Timing never fails the run; figures are from a noisy shared machine.\n';
  for (const m of summary.missed) text += `  missed: ${m}\n`;
  for (const e of summary.errors) text += `  error:  ${e}\n`;
  return text;
}

/** JSON-safe number: NaN and ±Infinity become null. */
function jsonNumbers(_key: string, value: unknown): unknown {
  return typeof value === 'number' && !Number.isFinite(value) ? null : value;
}

export function toJson(doc: unknown): string {
  return `${JSON.stringify(doc, jsonNumbers, 2)}\n`;
}
