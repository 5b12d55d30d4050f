/**
 * storm — abort storms: 32 turns go silent at once while 4 turns keep making progress, in two
 * phases run one after the other on fresh runtimes:
 *   - stall: each silent turn awaits a promise that ignores its abort signal; the turn unwinds
 *     cooperatively and its worker is retired (it may still hold the leaked promise) and
 *     replaced;
 *   - wedge: each silent turn spins in `for (;;) {}`, so 32 threads compete with the supervisor
 *     for the 2 cores until grace expires and every one is terminated and replaced.
 * Figures per phase: false aborts of the heartbeating turns (target 0), the watchdog's poll
 * lateness against a timer in another process over the same window (a sibling process running
 * a setInterval(pollMs/2): it shares the machine but not the supervisor's thread, so it tells
 * the runtime's own lateness from the machine's), beside a raw setInterval on the same thread,
 * and the time from the storm's start until every silent turn is settled.
 */
import { Turnwarden } from '@turnwarden/supervisor';
import { SCRIPTED } from '../scripted.js';
import { epochNow } from './child.js';
import { type BenchContext, PRINCIPAL, script, TENANT } from './common.js';
import { type OtherTimer, startOtherTimer } from './other-timer.js';
import { type Row, row, type SectionResult, target } from './report.js';
import { quantile } from './stats.js';

type Kind = 'stall' | 'wedge';

const timeoutMs = 1_000;
const pollMs = 100;
const graceMs = 500;
/** The storm's poll lateness must come within this of the other process's timer (issue 24). */
const OTHER_PROCESS_SLACK_MS = 10;

async function storm(
  ctx: BenchContext,
  kind: Kind,
  silent: number,
  beats: number,
  other: OtherTimer,
): Promise<{ rows: Row[]; note: string }> {
  const tw = await Turnwarden.start({
    ...SCRIPTED,
    logger: ctx.logger,
    watchdog: { timeoutMs, pollMs, graceMs },
    lease: { ttlMs: 30_000, renewMs: 1_000 },
    pool: { maxWorkers: silent + beats + 2, warmWorkers: silent + beats },
  });
  // The watchdog's timer starts as start() ends (start waits for the warm pool): its lateness
  // covers from here to the end of the storm, and so does the other process's window.
  const from = epochNow();
  const lateness: number[] = [];
  let due = performance.now() + pollMs / 2;
  const raw = setInterval(() => {
    const now = performance.now();
    lateness.push(Math.max(0, now - due));
    due = Math.max(due, now) + pollMs / 2;
  }, pollMs / 2);
  try {
    const ids: string[] = [];
    for (let i = 0; i < silent + beats; i++) {
      ids.push(
        (
          await tw.createWorkstream({
            tenantId: TENANT,
            principal: PRINCIPAL,
            workstreamId: `storm-${kind}-${i}`,
          })
        ).workstreamId,
      );
    }
    const before = tw.stats();
    const t0 = performance.now();
    const turns = await Promise.all(
      ids.map((workstreamId, i) =>
        tw.send({
          tenantId: TENANT,
          principal: PRINCIPAL,
          workstreamId,
          content:
            i < silent
              ? // Each silent turn's own thread: a wedge spins in its session worker (the `wedge`
                // tool); a stall is the model call's, wherever it runs.
                script([
                  { text: `about to ${kind}` },
                  kind === 'stall' ? { stall: true } : { tools: [{ name: 'wedge', args: {} }] },
                ])
              : script([{ heartbeat: 4 * timeoutMs, everyMs: 50 }, { text: 'kept going' }]),
        }),
      ),
    );
    const settledAt: number[] = [];
    const results = await Promise.all(
      turns.map((t, i) =>
        t.done.then((r) => {
          settledAt[i] = performance.now() - t0;
          return r;
        }),
      ),
    );
    const silentIdle = Math.max(...settledAt.slice(0, silent));
    const falseAborts = results.slice(silent).filter((r) => r.status !== 'completed').length;
    const missed = results.slice(0, silent).filter((r) => r.abortReason !== 'watchdog').length;
    const terminated = results.slice(0, silent).filter((r) => r.workerTerminated).length;
    const stats = tw.stats();
    const otherSamples = await other.samples(from, epochNow());
    const wd = stats.watchdog;
    const otherP99 = quantile(otherSamples, 0.99);
    const bound = timeoutMs + pollMs + (kind === 'wedge' ? graceMs : 0) + 1_000;
    const rows = [
      row(`${kind}: false aborts (heartbeating turns)`, 'turns', falseAborts, {
        target: target('0', falseAborts === 0),
      }),
      row(`${kind}: poll lateness p99 vs a timer in another process`, 'ms', wd.pollLateness.p99, {
        baseline: otherP99,
        target: target(
          `≤ other process's p99 + ${OTHER_PROCESS_SLACK_MS} ms`,
          wd.pollLateness.p99 <= otherP99 + OTHER_PROCESS_SLACK_MS,
        ),
      }),
      row(`${kind}: poll lateness p99 vs a timer on the same thread`, 'ms', wd.pollLateness.p99, {
        baseline: quantile(lateness, 0.99),
        target: target('≤ 50 ms', wd.pollLateness.p99 <= 50),
      }),
      row(`${kind}: poll lateness max (baseline: other process)`, 'ms', wd.pollLateness.max, {
        baseline: otherSamples.length === 0 ? Number.NaN : Math.max(...otherSamples),
      }),
      row(`${kind}: storm start to every silent turn idle`, 'ms', silentIdle, {
        target: target(
          `≤ timeoutMs + pollMs${kind === 'wedge' ? ' + graceMs' : ''} + 1 s (${bound} ms)`,
          silentIdle <= bound,
        ),
      }),
    ];
    const note =
      `${kind}: ${silent} silent turns aborted by the watchdog (${missed} not), ${terminated} ended by terminate, ` +
      `${stats.pool.retired - before.pool.retired} workers retired, ${stats.pool.spawned - before.pool.spawned} spawned ` +
      `(at most pool.maxConcurrentSpawns starting at once), ${wd.polls - before.watchdog.polls} polls during the storm; ` +
      `${otherSamples.length} ticks of the other process's timer, ${lateness.length} of the same-thread timer. ` +
      "The watchdog's lateness covers its life, from the end of Turnwarden.start (which waits for the warm pool) to the end of the storm; both timers cover the same span.";
    return { rows, note };
  } finally {
    clearInterval(raw);
    await tw.shutdown();
  }
}

export async function benchStorm(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const silent = ctx.quick ? 16 : 32;
  const beats = 4;
  const other = await startOtherTimer(pollMs / 2);
  let stall: Awaited<ReturnType<typeof storm>>;
  let wedge: Awaited<ReturnType<typeof storm>>;
  try {
    stall = await storm(ctx, 'stall', silent, beats, other);
    wedge = await storm(ctx, 'wedge', silent, beats, other);
  } finally {
    await other.close();
  }
  return {
    name: 'storm',
    title: 'abort storm',
    ours: `the watchdog's polls, ${silent} silent + ${beats} heartbeating turns at once (timeoutMs ${timeoutMs}, pollMs ${pollMs}, graceMs ${graceMs})`,
    baseline:
      'a setInterval(pollMs/2) in another process (a sibling child), same window; and one on the same thread',
    rows: [...stall.rows, ...wedge.rows],
    notes: [
      stall.note,
      wedge.note,
      `stall: promises that ignore their signal; the turn unwinds cooperatively and its worker is retired. wedge: \`for (;;) {}\` in ${silent} threads on 2 cores until grace expires, then terminate.`,
    ],
  };
}
