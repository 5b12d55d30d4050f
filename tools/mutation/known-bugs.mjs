#!/usr/bin/env node
/**
 * The mutation audit's bugs, reapplied one at a time: each entry is a minimal, realistic edit
 * of the source and the tests that must catch it. For each, the edit is applied, the packages
 * rebuilt when the edit lives in code other packages load from `dist` (workers, the clock),
 * the named tests run, and the edit reverted. A bug counts as caught only when at least one
 * test fails by an assertion — a test that merely times out does not count.
 *
 *   node tools/mutation/known-bugs.mjs [--only ID[,ID]] [--list]
 *
 * Exit code 0 when every bug is caught by an assertion, 1 otherwise, 2 when an edit no longer
 * applies (the code moved: update the entry).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const S = 'packages/supervisor/src';

/** @type {{ id: string, what: string, file: string, find: string, replace: string, tests: string[], filter?: string, build?: boolean }[]} */
export const BUGS = [
  {
    id: 'poll-period',
    what: 'the watchdog samples every pollMs instead of every pollMs / 2 (L1 upper bound)',
    file: `${S}/liveness/watchdog.ts`,
    find: 'this.intervalMs = Math.max(1, config.pollMs / 2);',
    replace: 'this.intervalMs = Math.max(1, config.pollMs);',
    tests: [`${S}/liveness/watchdog.test.ts`],
  },
  {
    id: 'unfenced-write',
    what: "the engine writes a turn's rows without the lease's fencing token (P6)",
    file: `${S}/journal/journal-gate.ts`,
    find: '    return this.append(req).then((seqs) => ({ seqs }));',
    replace:
      '    const { fencingToken: _token, ...unfenced } = req;\n    return this.append(unfenced).then((seqs) => ({ seqs }));',
    tests: [`${S}/turn/leases.test.ts`],
  },
  {
    id: 'failed-refresh-renews',
    what: 'a failed lease refresh counts as a renewal: the turn never ends as lease_lost (L3, P6)',
    file: `${S}/turn/renewal.ts`,
    find: '        if (ok) {',
    replace: '        if (ok || true) {',
    tests: [`${S}/turn/leases.test.ts`],
  },
  {
    id: 'repair-by-id',
    what: 'repair counts open calls by provider id instead of by occurrence (S1, S2)',
    file: `${S}/turn/repair.ts`,
    find: '  const open = openToolCalls(rows);',
    replace:
      "  const open = openToolCalls(rows).filter(\n    (o) => !rows.some((r) => r.message.role === 'tool' && r.message.toolCallId === o.call.id),\n  );",
    tests: [`${S}/structure.test.ts`],
  },
  {
    id: 'thrown-tool-none',
    what: 'a tool that throws after it started gets effect none instead of unknown (S2)',
    file: 'packages/session/src/tool-call.ts',
    find: "      effect: declaredEffect(e) ?? 'unknown',",
    replace: "      effect: declaredEffect(e) ?? 'none',",
    tests: ['packages/session/src/turn.test.ts'],
  },
  {
    id: 'no-arg-limit',
    what: 'the tool-argument size check removed (T6)',
    file: 'packages/session/src/tool-call.ts',
    find: "  if (Buffer.byteLength(call.arguments, 'utf8') > env.maxToolArgBytes) {",
    replace: '  if (false) {',
    tests: ['packages/session/src/turn.test.ts'],
  },
  {
    id: 'arg-limit-chars',
    what: 'the tool-argument size limit counted in characters instead of UTF-8 bytes (T6)',
    file: 'packages/session/src/tool-call.ts',
    find: "  if (Buffer.byteLength(call.arguments, 'utf8') > env.maxToolArgBytes) {",
    replace: '  if (call.arguments.length > env.maxToolArgBytes) {',
    tests: ['packages/session/src/turn.test.ts'],
  },
  {
    id: 'message-limit-chars',
    what: 'the message size limit counted in characters instead of UTF-8 bytes (T5)',
    file: `${S}/input.ts`,
    find: "  if (Buffer.byteLength(value, 'utf8') > maxBytes) throw",
    replace: '  if (value.length > maxBytes) throw',
    tests: [`${S}/lifecycle.test.ts`],
    filter: 'T5',
  },
  {
    id: 'compact-any-tenant',
    what: 'compact() without the tenant-ownership check (T2)',
    file: `${S}/runtime.ts`,
    find: '    await this.owned(tenantId, workstreamId);\n    return this.commands.compact(',
    replace: '    return this.commands.compact(',
    tests: [`${S}/lifecycle.test.ts`],
    filter: 'T2',
  },
  {
    id: 'touch-order',
    what: 'touch writes time and code after the Atomics.add that publishes them (L6)',
    file: 'packages/clock/src/stamp.ts',
    find: '    w[b + TIME] = Atomics.load(w, NOW);\n    w[b + CODE] = code;\n    const before = Atomics.add(w, b + ACT, 1);',
    replace:
      '    const before = Atomics.add(w, b + ACT, 1);\n    w[b + TIME] = Atomics.load(w, NOW);\n    w[b + CODE] = code;',
    tests: ['packages/clock/src/clock.test.ts'],
  },
  {
    id: 'deadline-from-activity',
    what: 'the per-turn deadline counted from the last activity instead of the turn start (L11)',
    file: `${S}/liveness/watchdog.ts`,
    find: 'if (turnDeadlineMs !== undefined && now - turn.startedAt >= turnDeadlineMs)',
    replace: 'if (turnDeadlineMs !== undefined && now - turn.lastChangeAt >= turnDeadlineMs)',
    tests: [`${S}/liveness/watchdog.test.ts`, `${S}/liveness/liveness.test.ts`],
  },
  {
    id: 'escalation-no-terminate',
    what: 'grace escalation never terminates the worker (L3)',
    file: `${S}/turn/turn.ts`,
    find: '      LogMessage.graceExpired,\n    );\n    void this.host.pool.terminate(this.worker);',
    replace: '      LogMessage.graceExpired,\n    );',
    tests: [`${S}/liveness/liveness.test.ts`],
    filter: 'L3: a wedged turn',
  },
  {
    id: 'retire-no-terminate',
    what: 'a retired worker is never terminated, so its slot is never freed (L3, T4)',
    file: `${S}/capacity/pool.ts`,
    find: '    this.loop.run(() => void h.worker.terminate());',
    replace: '    this.loop.run(() => undefined);',
    tests: [`${S}/liveness/liveness.test.ts`],
    filter: 'retired',
  },
  {
    id: 'wall-clock',
    what: "the activity clock's default time source is the wall clock (L10)",
    file: 'packages/clock/src/clock.ts',
    find: 'static create(slots: number, now: MonotonicMs = () => performance.now()): ActivityClock {',
    replace: 'static create(slots: number, now: MonotonicMs = () => Date.now()): ActivityClock {',
    tests: [`${S}/liveness/liveness.test.ts`],
    filter: 'L10',
    build: true,
  },
];

const TIMEOUT = /Test timed out|Hook timed out|timed out in \d+ms/;

function build() {
  execFileSync('bash', ['tools/pnpm.sh', 'exec', 'turbo', 'run', 'build', '--output-logs=errors-only'], {
    cwd: root,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

/** Runs the tests; returns the failed tests and whether any failed by an assertion. */
function runTests(bug) {
  const dir = mkdtempSync(join(tmpdir(), 'tw-known-bugs-'));
  const report = join(dir, 'report.json');
  try {
    const args = [
      'vitest',
      'run',
      ...bug.tests,
      '--reporter=json',
      `--outputFile=${report}`,
      '--hookTimeout=5000',
    ];
    if (bug.filter) args.push('-t', bug.filter);
    spawnSync('npx', args, { cwd: root, stdio: 'ignore', timeout: 300_000 });
    const r = JSON.parse(readFileSync(report, 'utf8'));
    const failed = r.testResults.flatMap((f) => f.assertionResults.filter((a) => a.status === 'failed'));
    const byAssertion = failed.filter((a) => !a.failureMessages.every((m) => TIMEOUT.test(m)));
    return { failed: failed.map((a) => a.title), byAssertion: byAssertion.map((a) => a.title) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const say = (line) => process.stdout.write(`${line}\n`);

function main() {
  const argv = process.argv.slice(2);
  if (argv.includes('--list')) {
    for (const b of BUGS) say(`${b.id.padEnd(24)} ${b.what}`);
    return 0;
  }
  const i = argv.indexOf('--only');
  const only = i >= 0 ? new Set(argv[i + 1]?.split(',')) : undefined;
  const bugs = BUGS.filter((b) => !only || only.has(b.id));
  let missed = 0;
  let stale = 0;
  for (const bug of bugs) {
    const path = join(root, bug.file);
    const original = readFileSync(path, 'utf8');
    const hits = original.split(bug.find).length - 1;
    if (hits !== 1) {
      say(`? ${bug.id}: the edit no longer applies to ${bug.file} (found ${hits}×) — update the entry`);
      stale++;
      continue;
    }
    writeFileSync(path, original.replace(bug.find, bug.replace));
    let result;
    try {
      if (bug.build) build();
      result = runTests(bug);
    } finally {
      writeFileSync(path, original);
      if (bug.build) build();
    }
    if (result.byAssertion.length > 0) {
      say(`✓ ${bug.id}: caught by ${result.byAssertion.length} assertion(s) — ${result.byAssertion[0]}`);
    } else {
      missed++;
      const how = result.failed.length > 0 ? `only by timeouts (${result.failed.join('; ')})` : 'by no test';
      say(`✗ ${bug.id}: ${bug.what} — caught ${how}`);
    }
  }
  say(`known bugs: ${bugs.length - missed - stale} caught by an assertion, ${missed} missed, ${stale} stale`);
  return stale > 0 ? 2 : missed > 0 ? 1 : 0;
}

// Run only as a command, so the list can be imported without applying the edits.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.exitCode = main();
