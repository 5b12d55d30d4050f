/**
 * Running scenarios under schedules: one schedule (`runSchedule`), a replay of a recorded trace,
 * and an exploration under seeded random and PCT schedules within a budget.
 */
import type { Mutation } from '@turnwarden/protocol';
import { COMMON_INVARIANTS } from './invariants.js';
import type { RunRecord } from './record.js';
import { Run, Stuck } from './run.js';
import { HarnessRuntime } from './runtime.js';
import type { Scenario } from './scenario.js';
import {
  PctScheduler,
  RandomScheduler,
  type Scheduler,
  type SchedulerKind,
  ScriptedScheduler,
} from './schedulers.js';
import { decodeTrace, encodeTrace, type Trace } from './trace.js';

export interface Violation {
  readonly scenario: string;
  readonly invariant: string;
  readonly guarantee: string;
  readonly message: string;
  /** Replays this run exactly: `turnwarden stress --replay <trace>`. */
  readonly trace: string;
}

export interface RunOutcome {
  /** What the invariants judged (history, events, logs, commit attempts, the turn's result). */
  readonly record: RunRecord;
  readonly trace: Trace;
  readonly encoded: string;
  readonly violations: readonly Violation[];
}

/**
 * Runs one schedule of a scenario and judges it. On `runtime` when given (it stays up for the
 * next run); otherwise on a runtime of its own, closed afterwards.
 */
export async function runSchedule(
  scenario: Scenario,
  scheduler: Scheduler,
  options: {
    seed: number;
    mutation?: Mutation;
    runtime?: HarnessRuntime;
    delayedWrites?: boolean;
    /** A PostgreSQL connection string: the run's store (a schema of its own). */
    postgres?: string;
  },
): Promise<RunOutcome> {
  const own =
    options.runtime === undefined
      ? await HarnessRuntime.start(scenario.pluginModules, {
          delayedWrites: options.delayedWrites === true,
          ...(options.postgres === undefined ? {} : { postgres: options.postgres }),
        })
      : undefined;
  try {
    return await runOn(own ?? options.runtime!, scenario, scheduler, options);
  } finally {
    await own?.close();
  }
}

async function runOn(
  runtime: HarnessRuntime,
  scenario: Scenario,
  scheduler: Scheduler,
  options: { seed: number; mutation?: Mutation },
): Promise<RunOutcome> {
  const choices: string[] = [];
  const delayedWrites = runtime.delayedWrites;
  const run = await Run.start(scenario, options.mutation, runtime);
  try {
    for (let step = 0; step < scenario.maxSteps; step++) {
      await run.quiesce();
      if (run.turnDone) break;
      const enabled = [
        ...run.harness.enabled(),
        ...scenario.actions.filter((a) => a.enabled(run)).map((a) => `A:${a.name}`),
      ];
      if (enabled.length === 0) break;
      const choice = scheduler.pick(enabled, step);
      choices.push(choice);
      await run.step(choice);
    }
    await run.drain();
    await run.collect();
  } catch (e) {
    if (!(e instanceof Stuck)) throw e;
  } finally {
    await run.close();
  }
  const trace: Trace = {
    scenario: scenario.id,
    scheduler: scheduler.kind,
    seed: options.seed,
    ...(options.mutation ? { mutation: options.mutation } : {}),
    ...(delayedWrites ? { delayedWrites } : {}),
    choices,
  };
  const encoded = encodeTrace(trace);
  const violations: Violation[] = [];
  for (const inv of [...COMMON_INVARIANTS, ...(scenario.invariants ?? [])]) {
    const message = inv.check(run.record);
    if (message !== undefined) {
      violations.push({
        scenario: scenario.id,
        invariant: inv.id,
        guarantee: inv.guarantee,
        message,
        trace: encoded,
      });
    }
  }
  return { record: run.record, trace, encoded, violations };
}

/** Reruns a recorded trace: the same scenario, mutation and choices, hence the same run. */
export async function replay(text: string, scenarios: readonly Scenario[]): Promise<RunOutcome> {
  const trace = decodeTrace(text);
  const scenario = scenarios.find((s) => s.id === trace.scenario);
  if (!scenario) throw new Error(`trace names unknown scenario ${trace.scenario}`);
  return runSchedule(scenario, new ScriptedScheduler(trace.choices), {
    seed: trace.seed,
    ...(trace.mutation ? { mutation: trace.mutation } : {}),
    ...(trace.delayedWrites ? { delayedWrites: true } : {}),
  });
}

export function schedulerFor(
  kind: Exclude<SchedulerKind, 'scripted'>,
  seed: number,
  scenario: Scenario,
): Scheduler {
  return kind === 'random' ? new RandomScheduler(seed) : new PctScheduler(seed, 3, scenario.maxSteps);
}

export interface ExploreOptions {
  readonly scenarios: readonly Scenario[];
  readonly schedulers: readonly Exclude<SchedulerKind, 'scripted'>[];
  /** Stop after this long (ms) … */
  readonly budgetMs?: number;
  /** … or after this many schedules per scenario and scheduler. */
  readonly seedsPerScenario?: number;
  readonly firstSeed?: number;
  readonly mutation?: Mutation;
  /** Stop at the first violation. */
  readonly stopOnViolation?: boolean;
  /** Run on a store that delays every write by a random time (an asynchronous store). */
  readonly delayedWrites?: boolean;
  /** Run on the PostgreSQL store of this database (a schema per runtime). */
  readonly postgres?: string;
  readonly onRun?: (progress: ExploreProgress) => void;
}

export interface ExploreProgress {
  readonly runs: number;
  /** Schedules per second so far. */
  readonly rate: number;
  readonly distinct: number;
  readonly violations: number;
  readonly elapsedMs: number;
  readonly last: { readonly scenario: string; readonly scheduler: string; readonly seed: number };
}

export interface ExploreReport {
  readonly runs: number;
  /** Schedules per second over the whole exploration. */
  readonly rate: number;
  /** Supervisor runtimes started: runs share one until a run leaves something behind. */
  readonly runtimes: number;
  /** Distinct interleavings: distinct (scenario, choices) sequences. */
  readonly distinct: number;
  readonly perScenario: Readonly<Record<string, { runs: number; distinct: number }>>;
  readonly violations: readonly Violation[];
  readonly elapsedMs: number;
}

export async function explore(options: ExploreOptions): Promise<ExploreReport> {
  const runtimes = new RuntimeCache(options.delayedWrites === true, options.postgres);
  try {
    return await exploreOn(runtimes, options);
  } finally {
    await runtimes.close();
  }
}

/** One reused runtime per set of plugin modules; replaced after a run that leaked or got stuck. */
class RuntimeCache {
  private readonly live = new Map<string, HarnessRuntime>();
  started = 0;

  constructor(
    private readonly delayedWrites: boolean,
    private readonly postgres: string | undefined,
  ) {}

  async get(scenario: Scenario): Promise<HarnessRuntime> {
    const key = JSON.stringify(scenario.pluginModules ?? []);
    let rt = this.live.get(key);
    if (!rt) {
      rt = await HarnessRuntime.start(scenario.pluginModules, {
        delayedWrites: this.delayedWrites,
        ...(this.postgres === undefined ? {} : { postgres: this.postgres }),
      });
      this.started++;
      this.live.set(key, rt);
    }
    return rt;
  }

  async discard(scenario: Scenario): Promise<void> {
    const key = JSON.stringify(scenario.pluginModules ?? []);
    const rt = this.live.get(key);
    this.live.delete(key);
    await rt?.close();
  }

  async close(): Promise<void> {
    for (const rt of this.live.values()) await rt.close();
    this.live.clear();
  }
}

async function exploreOn(runtimes: RuntimeCache, options: ExploreOptions): Promise<ExploreReport> {
  const started = performance.now();
  const seen = new Set<string>();
  const perScenario: Record<string, { runs: number; distinct: number }> = {};
  const violations: Violation[] = [];
  let runs = 0;
  const outOfBudget = () => options.budgetMs !== undefined && performance.now() - started > options.budgetMs;
  const rate = () => runs / Math.max(0.001, (performance.now() - started) / 1000);
  let seed = options.firstSeed ?? 1;
  for (
    let round = 0;
    options.seedsPerScenario === undefined || round < options.seedsPerScenario;
    round++, seed++
  ) {
    for (const scenario of options.scenarios) {
      for (const kind of options.schedulers) {
        if (outOfBudget()) return report();
        const runtime = await runtimes.get(scenario);
        const outcome = await runSchedule(scenario, schedulerFor(kind, seed, scenario), {
          seed,
          runtime,
          ...(options.mutation ? { mutation: options.mutation } : {}),
        });
        // A run that got stuck may leave work behind: the next run starts on a fresh runtime.
        if (outcome.record.stuck !== undefined || outcome.record.leaked !== undefined) {
          await runtimes.discard(scenario);
        }
        runs++;
        const key = `${scenario.id}|${outcome.trace.choices.join(',')}`;
        perScenario[scenario.id] ??= { runs: 0, distinct: 0 };
        const stats = perScenario[scenario.id]!;
        stats.runs++;
        if (!seen.has(key)) {
          seen.add(key);
          stats.distinct++;
        }
        violations.push(...outcome.violations);
        options.onRun?.({
          runs,
          rate: rate(),
          distinct: seen.size,
          violations: violations.length,
          elapsedMs: performance.now() - started,
          last: { scenario: scenario.id, scheduler: kind, seed },
        });
        if (options.stopOnViolation && violations.length > 0) return report();
      }
    }
    if (options.seedsPerScenario === undefined && options.budgetMs === undefined) break;
  }
  return report();

  function report(): ExploreReport {
    return {
      runs,
      rate: rate(),
      runtimes: runtimes.started,
      distinct: seen.size,
      perScenario,
      violations,
      elapsedMs: performance.now() - started,
    };
  }
}
