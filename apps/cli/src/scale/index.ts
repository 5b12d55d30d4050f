/**
 * `turnwarden scale`: N concurrently streaming sessions on the runtime beside the same N turns
 * in process (issue 24, item 5), one table per provider and N, targets marked met or MISSED.
 *
 *   runScaleCommand(argv) → exit code: 0 (figures printed, whatever they are), 1 (a run could
 *   not finish), 2 (bad flags).
 */
import { cpus, loadavg } from 'node:os';
import { err, out } from '../bench/out.js';
import { formatSection, formatSummary, summarize, toJson } from '../bench/report.js';
import { parseScaleArgs, SCALE_USAGE, type ScaleArgs, ScaleUsageError } from './args.js';
import { runScale } from './run.js';
import { idealTurnMs } from './workload.js';

function load(): number[] {
  return loadavg().map((x) => Math.round(x * 100) / 100);
}

export async function runScaleCommand(argv: readonly string[]): Promise<number> {
  let args: ScaleArgs;
  try {
    args = parseScaleArgs(argv);
  } catch (e) {
    if (!(e instanceof ScaleUsageError)) throw e;
    err(`turnwarden scale: ${e.message}\n\n${SCALE_USAGE}`);
    return 2;
  }
  if (args.help) {
    out(SCALE_USAGE);
    return 0;
  }
  const started = new Date();
  const cpu = cpus();
  const machine = {
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    cpus: cpu.length,
    cpuModel: cpu[0]?.model ?? 'unknown',
    loadavg: load(),
  };
  const w = args.workload;
  if (!args.json) {
    out(
      `turnwarden scale — ${started.toISOString()}\n` +
        `node ${machine.node} ${machine.platform}, ${machine.cpus} CPUs (${machine.cpuModel}), load ${machine.loadavg.join(' ')}\n` +
        `N = ${args.ns.join(', ')}; provider ${args.providers.join(' and ')}. Per session: ${w.tokens} tokens ${w.delayMs} ms apart, ` +
        `a ${w.toolMs} ms tool heartbeating every ${w.heartbeatMs} ms, ${w.tokens} more (ideal ${(idealTurnMs(w) / 1000).toFixed(2)} s); ` +
        `watchdog ${args.timeoutMs} / ${args.pollMs} ms; a turn is given ${Math.round(args.boundMs / 1000)} s.\n` +
        'Each N runs in fresh child processes, ours then the in-process baseline, back to back. Timing never fails the run.\n',
    );
  }
  const t0 = performance.now();
  const result = await runScale(
    args,
    args.json ? () => {} : (line) => err(`${line}  (load ${load().join(' ')})\n`),
  );
  const sections = result.runs.map((r) => r.section);
  if (!args.json) for (const s of sections) out(formatSection(s));
  const summary = summarize(sections, performance.now() - t0, (s) => `scale, ${s.title}`);
  const errors = [
    ...summary.errors,
    ...(result.emptyWorkerError ? [`empty Workers: ${result.emptyWorkerError}`] : []),
  ];
  if (args.json) {
    out(
      toJson({
        tool: 'turnwarden scale',
        date: started.toISOString(),
        quick: args.quick,
        machine: { ...machine, loadavgAtEnd: load() },
        workload: { ...w, idealTurnMs: idealTurnMs(w) },
        runtime: { timeoutMs: args.timeoutMs, pollMs: args.pollMs, boundMs: args.boundMs },
        emptyWorker: result.emptyWorker ?? null,
        sections,
        runs: result.runs.map((r) => ({
          provider: r.provider,
          n: r.n,
          ours: r.ours ?? null,
          baseline: r.baseline ?? null,
        })),
        summary: { ...summary, errors },
      }),
    );
  } else {
    out(formatSummary(sections, { ...summary, errors }, (s) => s.title));
    out(`  load at the end: ${load().join(' ')}\n`);
  }
  return errors.length > 0 ? 1 : 0;
}
