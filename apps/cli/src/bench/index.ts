/**
 * `turnwarden bench`: figures side by side with a raw baseline measured in the same run, with
 * ratios and targets marked met or missed. Timing never fails the command.
 *
 *   runBench(argv) → exit code: 0 (figures printed, whatever they are), 1 (a section could not
 *   run), 2 (bad flags).
 */
import { cpus, loadavg } from 'node:os';
import { benchActivation } from './activation.js';
import { benchAdmission } from './admission.js';
import { BenchUsageError, parseBenchArgs, type SectionName, USAGE } from './args.js';
import { benchClaim } from './claim.js';
import { type BenchContext, errorText, silentLogger, within } from './common.js';
import { benchEvents } from './events.js';
import { benchHistory } from './history.js';
import { benchIsolation } from './isolation.js';
import { benchJournal } from './journal.js';
import { benchL12 } from './l12.js';
import { benchMcp } from './mcp.js';
import { benchMemory } from './memory.js';
import { err, out } from './out.js';
import { benchPoll } from './poll.js';
import { benchPostgres } from './postgres.js';
import { benchProvider } from './provider.js';
import { formatSection, formatSummary, type SectionResult, summarize, toJson } from './report.js';
import { benchScale } from './scale.js';
import { benchSeams } from './seams.js';
import { benchServer } from './server.js';
import { benchSpawn } from './spawn.js';
import { benchStall } from './stall.js';
import { benchStorm } from './storm.js';
import { benchTouch } from './touch.js';
import { benchWedge } from './wedge.js';

type SectionFn = (ctx: BenchContext) => Promise<Omit<SectionResult, 'durationMs'>>;

interface Section {
  readonly title: string;
  readonly run: SectionFn;
  /** A section whose workload is long by design (scale: pool warm-up, ~15 s turns, a baseline) has its own. */
  readonly deadlineMs?: { readonly quick: number; readonly full: number };
}

const SECTIONS: Record<SectionName, Section> = {
  touch: { title: 'activity stamp cost', run: benchTouch },
  seams: { title: 'harness seams when detached', run: benchSeams },
  poll: { title: 'watchdog sampling pass', run: benchPoll },
  stall: { title: 'stall detection', run: benchStall },
  wedge: { title: 'wedged turn recovery', run: benchWedge },
  activation: { title: 'activating a session worker', run: benchActivation },
  spawn: { title: 'spawning a session worker', run: benchSpawn },
  storm: { title: 'abort storm', run: benchStorm },
  memory: { title: 'memory per workstream', run: benchMemory },
  l12: { title: 'watchdog starvation', run: benchL12 },
  journal: { title: 'durable rows through the journal', run: benchJournal },
  events: { title: 'event streams', run: benchEvents },
  history: { title: 'reading a long history', run: benchHistory },
  admission: { title: 'fair admission', run: benchAdmission },
  provider: { title: 'a real model provider', run: benchProvider },
  isolation: { title: 'thread-isolated tools', run: benchIsolation },
  mcp: { title: 'MCP tool calls', run: benchMcp },
  server: { title: 'Turnwarden over HTTP', run: benchServer },
  postgres: { title: 'several hosts on PostgreSQL', run: benchPostgres },
  claim: { title: 'a claim on a long history', run: benchClaim },
  scale: {
    title: 'streaming sessions at scale',
    run: benchScale,
    deadlineMs: { quick: 150_000, full: 300_000 },
  },
};

/** A section that hangs is reported as an error instead of holding the run forever. */
const SECTION_DEADLINE_MS = { quick: 60_000, full: 150_000 } as const;

async function runSection(name: SectionName, ctx: BenchContext): Promise<SectionResult> {
  const t0 = performance.now();
  const deadlines = SECTIONS[name].deadlineMs ?? SECTION_DEADLINE_MS;
  const deadlineMs = ctx.quick ? deadlines.quick : deadlines.full;
  try {
    const result = await within(SECTIONS[name].run(ctx), deadlineMs);
    if (result === undefined) throw new Error(`did not finish within ${deadlineMs / 1000} s`);
    return { ...result, durationMs: performance.now() - t0 };
  } catch (e) {
    return {
      name,
      title: SECTIONS[name].title,
      ours: '—',
      baseline: '—',
      rows: [],
      notes: [],
      durationMs: performance.now() - t0,
      error: errorText(e),
    };
  }
}

function machine() {
  const cpu = cpus();
  return {
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    cpus: cpu.length,
    cpuModel: cpu[0]?.model ?? 'unknown',
    loadavg: loadavg().map((x) => Math.round(x * 100) / 100),
  };
}

export async function runBench(argv: readonly string[]): Promise<number> {
  let args: ReturnType<typeof parseBenchArgs>;
  try {
    args = parseBenchArgs(argv);
  } catch (e) {
    if (!(e instanceof BenchUsageError)) throw e;
    err(`turnwarden bench: ${e.message}\n\n${USAGE}`);
    return 2;
  }
  if (args.help) {
    out(USAGE);
    return 0;
  }
  const ctx: BenchContext = { quick: args.quick, logger: silentLogger() };
  const started = new Date();
  const env = machine();
  if (!args.json) {
    out(
      `turnwarden bench${args.quick ? ' --quick' : ''} — ${started.toISOString()}\n` +
        `node ${env.node} ${env.platform}, ${env.cpus} CPUs (${env.cpuModel}), load ${env.loadavg.join(' ')}\n` +
        `sections: ${args.sections.join(', ')}. Ours and baseline run in the same process, interleaved where possible;\n` +
        'ratio = ours / baseline. Timing never fails the run: targets are only marked met or MISSED.\n',
    );
  }
  const t0 = performance.now();
  const results: SectionResult[] = [];
  for (const name of args.sections) {
    const result = await runSection(name, ctx);
    results.push(result);
    if (!args.json) out(formatSection(result));
  }
  const summary = summarize(results, performance.now() - t0);
  if (args.json) {
    out(
      toJson({
        tool: 'turnwarden bench',
        date: started.toISOString(),
        quick: args.quick,
        machine: { ...env, loadavgAtEnd: loadavg().map((x) => Math.round(x * 100) / 100) },
        sections: results,
        summary,
      }),
    );
  } else {
    out(formatSummary(results, summary));
  }
  return summary.errors.length > 0 ? 1 : 0;
}
