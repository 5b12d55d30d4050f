/**
 * `turnwarden stress`: runs the interleaving harness's scenarios under seeded random and PCT
 * schedules for a time or seed budget, and reports schedules explored, distinct interleavings
 * and every violation with the command that replays it. `--replay TRACE` reruns one run.
 */
import { parseArgs } from 'node:util';
import {
  decodeTrace,
  type ExploreReport,
  explore,
  replay,
  SCENARIOS,
  type Scenario,
  type Violation,
} from '@turnwarden/harness';
import { Mutation } from '@turnwarden/protocol/mutations';
import type { Output } from '../output.js';

const STRESS_USAGE = `turnwarden stress — explore the crossings under random and PCT schedules

usage: turnwarden stress [--seconds N | --seeds N] [--scheduler random|pct|both]
                         [--scenario ID[,ID]] [--mutation NAME] [--first-seed N]
                         [--delayed-writes] [--json]
       turnwarden stress --replay TRACE

  --seconds N      time budget (default 60)
  --seeds N        instead of a time budget: N schedules per scenario and scheduler
  --scheduler S    random, pct or both (default both)
  --scenario IDS   only these scenarios (${SCENARIOS.map((s) => s.id).join(', ')})
  --mutation NAME  break one mechanism on purpose (${Object.values(Mutation).join(', ')})
  --first-seed N   the first seed (default 1); each schedule's seed is in its trace
  --delayed-writes the store delays every write by a random time (an asynchronous store)
  --replay TRACE   rerun one recorded run exactly and judge it again
  --json           print only a JSON report
Exit code: 0 when every run satisfied every invariant, 1 on a violation, 2 on bad flags.
`;

class StressUsage extends Error {}

function positiveInt(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw new StressUsage(`--${name} must be a positive integer (got ${value})`);
  return n;
}

function describeViolation(v: Violation): string {
  return `  ✗ ${v.scenario} [${v.guarantee}] ${v.invariant}: ${v.message}\n    replay: turnwarden stress --replay ${v.trace}\n`;
}

export async function runStress(argv: readonly string[], output: Output): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        seconds: { type: 'string' },
        seeds: { type: 'string' },
        scheduler: { type: 'string' },
        scenario: { type: 'string' },
        mutation: { type: 'string' },
        'first-seed': { type: 'string' },
        'delayed-writes': { type: 'boolean' },
        replay: { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (e) {
    output.err(`turnwarden stress: ${(e as Error).message}\n`);
    return 2;
  }
  if (values.help) {
    output.out(STRESS_USAGE);
    return 0;
  }
  try {
    if (typeof values.replay === 'string')
      return await replayOne(values.replay, values.json === true, output);
    const seconds = positiveInt('seconds', values.seconds as string | undefined);
    const seeds = positiveInt('seeds', values.seeds as string | undefined);
    if (seconds !== undefined && seeds !== undefined)
      throw new StressUsage('give --seconds or --seeds, not both');
    const firstSeed = positiveInt('first-seed', values['first-seed'] as string | undefined) ?? 1;
    const which = (values.scheduler as string | undefined) ?? 'both';
    if (!['random', 'pct', 'both'].includes(which))
      throw new StressUsage(`--scheduler must be random, pct or both`);
    const schedulers = which === 'both' ? (['random', 'pct'] as const) : ([which] as ['random'] | ['pct']);
    let scenarios: readonly Scenario[] = SCENARIOS;
    if (typeof values.scenario === 'string') {
      const ids = values.scenario.split(',').map((s) => s.trim().toUpperCase());
      const unknown = ids.filter((id) => !SCENARIOS.some((s) => s.id === id));
      if (unknown.length > 0) throw new StressUsage(`unknown scenario ${unknown.join(', ')}`);
      scenarios = SCENARIOS.filter((s) => ids.includes(s.id));
    }
    const mutation = values.mutation as string | undefined;
    if (mutation !== undefined && !(Object.values(Mutation) as string[]).includes(mutation)) {
      throw new StressUsage(`unknown mutation ${mutation}`);
    }
    const json = values.json === true;
    const budgetMs = seeds === undefined ? (seconds ?? 60) * 1_000 : undefined;
    let lastPrint = 0;
    const report = await explore({
      scenarios,
      schedulers,
      firstSeed,
      ...(budgetMs === undefined ? {} : { budgetMs }),
      ...(seeds === undefined ? {} : { seedsPerScenario: seeds }),
      ...(mutation === undefined ? {} : { mutation: mutation as Mutation }),
      ...(values['delayed-writes'] === true ? { delayedWrites: true } : {}),
      onRun: (p) => {
        if (json) return;
        const line = `stress: ${p.runs} schedules (${p.rate.toFixed(1)}/s), ${p.distinct} distinct interleavings, ${p.violations} violation(s), ${(p.elapsedMs / 1000).toFixed(1)} s — last ${p.last.scenario} ${p.last.scheduler} seed ${p.last.seed}`;
        if (output.isTTY) output.out(`\r\x1b[2K${line}`);
        else if (p.elapsedMs - lastPrint >= 5_000) {
          lastPrint = p.elapsedMs;
          output.out(`${line}\n`);
        }
      },
    });
    if (json) {
      output.out(`${JSON.stringify(toJson(report, mutation), null, 2)}\n`);
    } else {
      if (output.isTTY) output.out('\n');
      output.out(summary(report, mutation));
    }
    return report.violations.length === 0 ? 0 : 1;
  } catch (e) {
    if (e instanceof StressUsage) {
      output.err(`turnwarden stress: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
}

async function replayOne(text: string, json: boolean, output: Output): Promise<number> {
  let trace: ReturnType<typeof decodeTrace>;
  try {
    trace = decodeTrace(text);
  } catch (e) {
    throw new StressUsage((e as Error).message);
  }
  const outcome = await replay(text, SCENARIOS);
  if (json) {
    output.out(`${JSON.stringify({ trace, violations: outcome.violations }, null, 2)}\n`);
  } else {
    output.out(
      `replay of ${trace.scenario} (${trace.scheduler} seed ${trace.seed}${trace.mutation ? `, mutation ${trace.mutation}` : ''}):\n` +
        `  choices: ${outcome.trace.choices.join(' → ')}\n` +
        `  turn: ${outcome.record.result?.status ?? 'unfinished'}; commit attempts: ${
          outcome.record.attempts
            .map((a) => (a.committed ? 'committed' : a.fault ? 'faulted' : 'declined'))
            .join(', ') || 'none'
        }\n` +
        (outcome.violations.length === 0
          ? '  every invariant holds\n'
          : outcome.violations.map((v) => `  ✗ [${v.guarantee}] ${v.invariant}: ${v.message}\n`).join('')),
    );
  }
  return outcome.violations.length === 0 ? 0 : 1;
}

function summary(report: ExploreReport, mutation: string | undefined): string {
  const rows = Object.entries(report.perScenario)
    .map(([id, s]) => `  ${id.padEnd(4)} ${String(s.runs).padStart(6)} ${String(s.distinct).padStart(10)}\n`)
    .join('');
  const head = `stress${mutation ? ` (mutation ${mutation})` : ''}: ${report.runs} schedules, ${report.distinct} distinct interleavings in ${(report.elapsedMs / 1000).toFixed(1)} s — ${report.rate.toFixed(1)} schedules/s on ${report.runtimes} reused runtime(s)\n\n  scen  runs   distinct\n${rows}\n`;
  if (report.violations.length === 0) return `${head}no violation: every invariant held in every run\n`;
  const unique = new Map<string, Violation>();
  for (const v of report.violations)
    if (!unique.has(`${v.scenario}|${v.invariant}`)) unique.set(`${v.scenario}|${v.invariant}`, v);
  return `${head}${report.violations.length} violation(s):\n${[...unique.values()].map(describeViolation).join('')}`;
}

function toJson(report: ExploreReport, mutation: string | undefined) {
  return {
    mutation: mutation ?? null,
    schedules: report.runs,
    schedules_per_second: Number(report.rate.toFixed(2)),
    runtimes: report.runtimes,
    distinct_interleavings: report.distinct,
    per_scenario: report.perScenario,
    violations: report.violations.map((v) => ({ ...v, replay: `turnwarden stress --replay ${v.trace}` })),
    elapsed_ms: Math.round(report.elapsedMs),
    ok: report.violations.length === 0,
  };
}
