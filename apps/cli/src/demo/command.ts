/** `turnwarden demo`: runs the demo, prints the summary (or JSON), returns the exit code. */
import { errors } from '@turnwarden/protocol';
import type { DemoArgs } from '../args.js';
import { type Output, styler } from '../output.js';
import { formatHosts, runHostsDemo } from './hosts.js';
import { turnLine } from './live-view.js';
import { formatRemote, runRemoteDemo } from './remote.js';
import { runDemo } from './run.js';
import { formatSummary } from './summary.js';

const EXIT_OK = 0;
const EXIT_FAILED = 1;
const EXIT_INTERRUPTED = 130;
const MAX_LISTED_TURNS = 10;

export async function demoCommand(args: DemoArgs, output: Output): Promise<number> {
  if (args.hosts !== undefined && args.postgres !== undefined) {
    const report = await runHostsDemo({
      ...args,
      hosts: args.hosts,
      postgres: args.postgres === true ? undefined : args.postgres,
    });
    if (args.json) output.out(`${JSON.stringify(report, null, 2)}\n`);
    else output.out(formatHosts(report));
    for (const c of report.checks.filter((c) => !c.ok)) {
      output.err(`turnwarden demo: check failed (${c.guarantee}): ${c.label}: ${c.value}\n`);
    }
    return report.ok ? EXIT_OK : EXIT_FAILED;
  }
  if (args.server !== undefined && args.token !== undefined) {
    const report = await runRemoteDemo({ ...args, server: args.server, token: args.token });
    if (args.json)
      output.out(
        `${JSON.stringify({ ok: report.ok, server: report.server, checks: report.checks, records: report.records }, null, 2)}\n`,
      );
    else output.out(formatRemote(report));
    for (const c of report.checks.filter((c) => !c.ok)) {
      output.err(`turnwarden demo: check failed (${c.guarantee}): ${c.label}: ${c.value}\n`);
    }
    return report.ok ? EXIT_OK : EXIT_FAILED;
  }
  const stop = new AbortController();
  const onSigint = () => {
    if (stop.signal.aborted) {
      output.err('turnwarden demo: forced exit\n');
      process.exit(EXIT_INTERRUPTED);
    }
    output.err('\nturnwarden demo: stopping (running turns are aborted; Ctrl-C again to force)…\n');
    stop.abort(errors.shuttingDown('the demo was stopped'));
  };
  process.on('SIGINT', onSigint);
  let report: Awaited<ReturnType<typeof runDemo>>;
  try {
    report = await runDemo(args, { output, stop: stop.signal });
  } finally {
    process.off('SIGINT', onSigint);
  }
  const { summary, checks, records } = report;
  if (args.json) output.out(`${JSON.stringify(summary, null, 2)}\n`);
  else output.out(`\n${formatSummary(summary, checks, styler(output.color))}`);

  for (const c of checks.filter((c) => !c.ok)) {
    output.err(`turnwarden demo: check failed (${c.guarantee}): ${c.label}: ${c.value}\n`);
  }
  const bad = records.filter((r) => r.verdict !== 'ok' && r.verdict !== 'cancelled');
  for (const r of bad.slice(0, MAX_LISTED_TURNS)) {
    output.err(`  ${turnLine(r)}${r.errorMessage === undefined ? '' : `: ${r.errorMessage}`}\n`);
  }
  if (bad.length > MAX_LISTED_TURNS) output.err(`  … and ${bad.length - MAX_LISTED_TURNS} more\n`);
  if (summary.stopped_early) return EXIT_INTERRUPTED;
  return summary.ok ? EXIT_OK : EXIT_FAILED;
}
