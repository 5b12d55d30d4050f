/**
 * stall — stall-detection lateness with the real runtime (L1), and cooperative abort-to-idle.
 *
 * Each turn streams one token and then awaits a promise that never settles. Lateness =
 * (watchdog_fired arrival) − (last token arrival) − timeoutMs, all on the host's listener with
 * performance.now(). Baseline: the naive detector, one host-side setTimeout(timeoutMs) re-armed
 * on every token of the same turns — it shows the event loop's own slack in this run.
 */
import { Turnwarden } from '@turnwarden/supervisor';
import { SCRIPTED } from '../scripted.js';
import { type BenchContext, PRINCIPAL, script, TENANT, TurnTimeline, within } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { max, quantile } from './stats.js';

/** The three largest samples, for the notes. */
export function slowest(xs: readonly number[]): string {
  return [...xs]
    .sort((a, b) => b - a)
    .slice(0, 3)
    .map((x) => x.toFixed(1))
    .join(', ');
}

export const STALL_CONFIG = { timeoutMs: 200, pollMs: 20, graceMs: 200 } as const;
const LANES = 4;

export async function benchStall(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const total = ctx.quick ? 12 : 40;
  const { timeoutMs, pollMs, graceMs } = STALL_CONFIG;
  const tw = await Turnwarden.start({
    ...SCRIPTED,
    store: { path: ':memory:' },
    logger: ctx.logger,
    watchdog: { timeoutMs, pollMs, graceMs },
    pool: { maxWorkers: LANES, warmWorkers: LANES },
  });
  const lateness: number[] = [];
  const naive: number[] = [];
  const abortToIdle: number[] = [];
  const anomalies: string[] = [];
  try {
    const content = script([{ text: 'a' }, { stall: true }]);
    const lane = async (index: number, turns: number) => {
      const ws = await tw.createWorkstream({
        tenantId: TENANT,
        principal: PRINCIPAL,
        workstreamId: `stall-${index}`,
      });
      // The naive detector: re-armed on every token, fires timeoutMs after the last one.
      let naiveTimer: NodeJS.Timeout | undefined;
      let naiveFiredAt: number | undefined;
      const timeline = await TurnTimeline.follow(tw, ws.workstreamId, () => {
        clearTimeout(naiveTimer);
        naiveFiredAt = undefined;
        naiveTimer = setTimeout(() => {
          naiveFiredAt = performance.now();
        }, timeoutMs);
      });
      try {
        for (let i = 0; i < turns; i++) {
          naiveFiredAt = undefined;
          const handle = await tw.send({
            tenantId: TENANT,
            principal: PRINCIPAL,
            workstreamId: ws.workstreamId,
            content,
          });
          const result = await within(handle.done, timeoutMs + pollMs + graceMs + 5_000);
          if (result === undefined) {
            anomalies.push(`turn ${ws.workstreamId}#${handle.generation} did not settle; cancelled`);
            await tw.cancel({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: ws.workstreamId });
            continue;
          }
          if (result.status !== 'interrupted' || result.abortReason !== 'watchdog') {
            anomalies.push(`turn ${handle.generation}: ${result.status}/${result.abortReason ?? '-'}`);
          }
          const t = timeline.get(handle.generation);
          if (t.lastToken !== undefined && t.fired !== undefined)
            lateness.push(t.fired - t.lastToken - timeoutMs);
          else anomalies.push(`turn ${handle.generation}: no token or no watchdog_fired event`);
          if (t.lastToken !== undefined && naiveFiredAt !== undefined) {
            naive.push(naiveFiredAt - t.lastToken - timeoutMs);
          }
          if (t.aborted !== undefined && t.idle !== undefined) abortToIdle.push(t.idle - t.aborted);
          if (result.workerTerminated)
            anomalies.push(`turn ${handle.generation}: worker was terminated (not cooperative)`);
        }
      } finally {
        clearTimeout(naiveTimer);
        timeline.close();
      }
    };
    const per = Math.ceil(total / LANES);
    await Promise.all(Array.from({ length: LANES }, (_, i) => lane(i, Math.min(per, total - i * per))));
  } finally {
    await tw.shutdown();
  }
  const p99 = quantile(lateness, 0.99);
  const bound = pollMs + 5;
  return {
    name: 'stall',
    title: `stall detection (L1), real runtime: timeoutMs ${timeoutMs}, pollMs ${pollMs}, graceMs ${graceMs}`,
    ours: `watchdog: fired − last token − timeoutMs over ${lateness.length} stalled turns, ${LANES} at a time`,
    baseline: 'naive host-side setTimeout(timeoutMs) re-armed on every token of the same turns',
    rows: [
      row('detection lateness p50', 'ms', quantile(lateness, 0.5), { baseline: quantile(naive, 0.5) }),
      row('detection lateness p99', 'ms', p99, {
        baseline: quantile(naive, 0.99),
        target: target(`≤ pollMs + 5 = ${bound} ms`, p99 <= bound),
      }),
      row('detection lateness max', 'ms', max(lateness), { baseline: max(naive) }),
      row('cooperative abort → idle p50', 'ms', quantile(abortToIdle, 0.5)),
      row('cooperative abort → idle p99', 'ms', quantile(abortToIdle, 0.99)),
    ],
    notes: [
      `by design the watchdog samples every pollMs/2 = ${pollMs / 2} ms and fires at the first sample ≥ timeoutMs after it saw the last change, so lateness lies in [0, pollMs] plus scheduling slack`,
      'times are event arrivals on the host thread; the token is stamped in the worker slightly before it arrives, so lateness is a small under-estimate',
      'abort → idle: turn_aborted → idle; the stalled await is abandoned by the turn loop, no thread is terminated',
      `slowest samples: lateness ${slowest(lateness)} ms; abort → idle ${slowest(abortToIdle)} ms`,
      ...anomalies.slice(0, 10),
    ],
  };
}
