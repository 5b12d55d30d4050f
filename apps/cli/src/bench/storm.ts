/**
 * storm — an abort storm: 32 turns stall at once (promises that ignore their abort signal, so
 * every one is aborted by the watchdog and its worker retired and replaced) while 4 turns keep
 * making progress. Figures: false aborts of the heartbeating turns (target 0), the watchdog's
 * poll lateness against a raw setInterval on the same thread over the same window, and the
 * time from the storm's start until every turn is settled.
 */
import { Turnwarden } from '@turnwarden/supervisor';
import { type BenchContext, script, TENANT } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { quantile } from './stats.js';

export async function benchStorm(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const stalls = ctx.quick ? 16 : 32;
  const beats = 4;
  const timeoutMs = 1_000;
  const pollMs = 100;
  const tw = await Turnwarden.start({
    logger: ctx.logger,
    watchdog: { timeoutMs, pollMs, graceMs: 500 },
    lease: { ttlMs: 30_000, renewMs: 1_000 },
    pool: { maxWorkers: stalls + beats + 2, warmWorkers: stalls + beats },
  });
  const lateness: number[] = [];
  let due = performance.now() + pollMs / 2;
  const raw = setInterval(() => {
    const now = performance.now();
    lateness.push(Math.max(0, now - due));
    due = Math.max(due, now) + pollMs / 2;
  }, pollMs / 2);
  try {
    const ids: string[] = [];
    for (let i = 0; i < stalls + beats; i++) {
      ids.push((await tw.createWorkstream({ tenantId: TENANT, workstreamId: `storm-${i}` })).workstreamId);
    }
    const polled = tw.stats().watchdog.polls;
    const t0 = performance.now();
    const turns = await Promise.all(
      ids.map((workstreamId, i) =>
        tw.send({
          tenantId: TENANT,
          workstreamId,
          content:
            i < stalls
              ? script([{ text: 'about to stall' }, { stall: true }])
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
    const stallsIdle = Math.max(...settledAt.slice(0, stalls));
    const falseAborts = results.slice(stalls).filter((r) => r.status !== 'completed').length;
    const missed = results.slice(0, stalls).filter((r) => r.abortReason !== 'watchdog').length;
    const wd = tw.stats().watchdog;
    const stats = tw.stats();
    return {
      name: 'storm',
      title: 'abort storm',
      ours: `the watchdog's polls, ${stalls} stalled + ${beats} heartbeating turns at once`,
      baseline: 'a raw setInterval(pollMs/2) on the same thread, same window',
      rows: [
        row('false aborts (heartbeating turns)', 'turns', falseAborts, {
          target: target('0', falseAborts === 0),
        }),
        row('poll lateness p99', 'ms', wd.pollLateness.p99, {
          baseline: quantile(lateness, 0.99),
          target: target('≤ 50 ms', wd.pollLateness.p99 <= 50),
        }),
        row('poll lateness max', 'ms', wd.pollLateness.max, { baseline: Math.max(...lateness) }),
        row('storm start to every stalled turn idle', 'ms', stallsIdle, {
          target: target(
            `≤ timeoutMs + pollMs + 1 s (${timeoutMs + pollMs + 1_000} ms)`,
            stallsIdle <= timeoutMs + pollMs + 1_000,
          ),
        }),
      ],
      notes: [
        `${stalls} stalls aborted by the watchdog (${missed} not), ${stats.pool.retired} workers retired and replaced (at most 2 starting at once), ${wd.polls - polled} polls.`,
        'A stall is a promise that ignores its signal: the turn unwinds cooperatively, its worker is retired (it may still hold the leaked promise) and a new one is spawned. A storm of synchronous wedges instead occupies both cores until grace expires; see `wedge`.',
      ],
    };
  } finally {
    clearInterval(raw);
    await tw.shutdown();
  }
}
