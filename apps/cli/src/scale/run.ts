/**
 * The scale runs, shared by `turnwarden scale` and the bench's `scale` section: for each
 * provider and each N, fresh child processes — ours (ours-child.ts), then the in-process
 * baseline (baseline-child.ts), back to back — while a timer runs in a sibling process the
 * whole time (bench/timer-child.ts), with, for the http provider, the loopback server in a
 * process of its own (loopback-child.ts); and once per invocation an empty-Worker child
 * (empty-worker-child.ts) for the rss reference. Every child has a bound: one that does not
 * report in time is killed and its run reported as an error, and the next run goes on.
 */
import { fileURLToPath } from 'node:url';
import { runChild, startHelper } from '../bench/child.js';
import { errorText } from '../bench/common.js';
import { type OtherTimer, startOtherTimer } from '../bench/other-timer.js';
import type { SectionResult } from '../bench/report.js';
import { scaleFigures } from './figures.js';
import type {
  BaselineConfig,
  EmptyWorkerConfig,
  EmptyWorkerReport,
  OursConfig,
  RunReport,
  ScaleProvider,
} from './types.js';
import type { Workload } from './workload.js';

const child = (name: string) => fileURLToPath(new URL(`./${name}.js`, import.meta.url));

export interface ScaleOptions {
  readonly ns: readonly number[];
  readonly providers: readonly ScaleProvider[];
  readonly workload: Workload;
  readonly timeoutMs: number;
  readonly pollMs: number;
  readonly boundMs: number;
  readonly emptyWorkers: number;
}

interface ScaleRun {
  readonly provider: ScaleProvider;
  readonly n: number;
  readonly section: Omit<SectionResult, 'durationMs'> & { readonly durationMs: number };
  readonly ours?: RunReport;
  readonly baseline?: RunReport;
  /** Lateness samples of the other process's timer (ms). */
  readonly timer?: {
    readonly oursWindow: number[];
    readonly baselineWindow: number[];
    readonly oursLife: number[];
  };
}

export interface ScaleResult {
  readonly emptyWorker?: EmptyWorkerReport;
  readonly emptyWorkerError?: string;
  readonly runs: readonly ScaleRun[];
}

/** How long the pool may take to warm N workers before the clock starts anyway (reported). */
function warmBoundMs(n: number): number {
  return 60_000 + 500 * n;
}

const PROVIDER_TEXT: Record<ScaleProvider, string> = {
  scripted: 'the scripted model, on the shared model threads (models.placement: shared, the default)',
  http: 'the OpenAI-compatible provider on the shared model threads, against the loopback server (its own process)',
};

const BASELINE_TEXT: Record<ScaleProvider, string> = {
  scripted: 'tokens on setTimeout',
  http: 'a bare fetch of the same loopback server per model call (TextDecoder, split, JSON.parse)',
};

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function oneRun(
  opts: ScaleOptions,
  provider: ScaleProvider,
  n: number,
  timer: OtherTimer,
  empty: EmptyWorkerReport | undefined,
  progress: (line: string) => void,
): Promise<ScaleRun> {
  const t0 = performance.now();
  const w = opts.workload;
  const head = {
    name: 'scale' as const,
    title: `${provider === 'http' ? 'OpenAI-compatible provider over HTTP' : 'scripted model'}, N = ${n}`,
    ours: `${n} sessions on Turnwarden (public API), ${PROVIDER_TEXT[provider]}; SQLite file store, pool warmed with ${n} workers, watchdog ${opts.timeoutMs} / ${opts.pollMs} ms, one listener per workstream`,
    baseline: `the same ${n} turns as async functions on one thread (${BASELINE_TEXT[provider]}), the same rows to better-sqlite3 (WAL file); an empty Worker's rss; a setInterval(pollMs/2) in another process`,
  };
  let loopback: Awaited<ReturnType<typeof startHelper<string>>> | undefined;
  try {
    if (provider === 'http')
      loopback = await startHelper<string>('the loopback server', child('loopback-child'), {}, 20_000);
    const url = loopback?.ready;
    const oursCfg: OursConfig = {
      n,
      provider,
      ...(url === undefined ? {} : { url }),
      workload: w,
      timeoutMs: opts.timeoutMs,
      pollMs: opts.pollMs,
      boundMs: opts.boundMs,
      warmBoundMs: warmBoundMs(n),
    };
    progress(`scale: ${provider} N = ${n}: our runtime…`);
    const ours = await runChild<RunReport>(
      `ours (${provider}, N = ${n})`,
      child('ours-child'),
      oursCfg,
      oursCfg.warmBoundMs + opts.boundMs + 180_000,
      { exposeGc: true },
    );
    await sleep(1_000);
    const baseCfg: BaselineConfig = {
      n,
      provider,
      ...(url === undefined ? {} : { url }),
      workload: w,
      boundMs: opts.boundMs,
    };
    progress(`scale: ${provider} N = ${n}: the in-process baseline…`);
    const baseline = await runChild<RunReport>(
      `baseline (${provider}, N = ${n})`,
      child('baseline-child'),
      baseCfg,
      opts.boundMs + 120_000,
      { exposeGc: true },
    );
    const samples = {
      oursWindow: await timer.samples(ours.windowStart, ours.windowEnd),
      baselineWindow: await timer.samples(baseline.windowStart, baseline.windowEnd),
      oursLife: await timer.samples(ours.lifeStart, ours.windowEnd),
    };
    if (!empty) throw new Error('no empty-Worker reference: its child failed');
    const figures = scaleFigures(w, ours, baseline, empty, samples);
    return {
      provider,
      n,
      ours,
      baseline,
      timer: samples,
      section: { ...head, rows: figures.rows, notes: figures.notes, durationMs: performance.now() - t0 },
    };
  } catch (e) {
    return {
      provider,
      n,
      section: { ...head, rows: [], notes: [], durationMs: performance.now() - t0, error: errorText(e) },
    };
  } finally {
    await loopback?.close();
  }
}

/** Every provider × N, in order; `progress` gets a line as each child starts. */
export async function runScale(
  opts: ScaleOptions,
  progress: (line: string) => void = () => {},
): Promise<ScaleResult> {
  const timer = await startOtherTimer(opts.pollMs / 2);
  try {
    let emptyWorker: EmptyWorkerReport | undefined;
    let emptyWorkerError: string | undefined;
    progress(`scale: ${opts.emptyWorkers} empty Workers (the rss reference)…`);
    try {
      const cfg: EmptyWorkerConfig = { count: opts.emptyWorkers };
      emptyWorker = await runChild<EmptyWorkerReport>(
        'empty Workers',
        child('empty-worker-child'),
        cfg,
        120_000,
        {
          exposeGc: true,
        },
      );
    } catch (e) {
      emptyWorkerError = errorText(e);
    }
    const runs: ScaleRun[] = [];
    for (const provider of opts.providers) {
      for (const n of opts.ns) {
        await sleep(1_000);
        runs.push(await oneRun(opts, provider, n, timer, emptyWorker, progress));
      }
    }
    return {
      ...(emptyWorker ? { emptyWorker } : {}),
      ...(emptyWorkerError ? { emptyWorkerError } : {}),
      runs,
    };
  } finally {
    await timer.close();
  }
}
