/**
 * wedge — a turn that blocks its thread in `for (;;) {}` (L3): turn_aborted → idle, which
 * includes graceMs, the terminate, the repair and the lease release. Baseline: a raw
 * `worker.terminate()` of a plain Worker spinning in the same loop (terminate → exit).
 */
import { Worker } from 'node:worker_threads';
import { Turnwarden } from '@turnwarden/supervisor';
import { SCRIPTED } from '../scripted.js';
import { type BenchContext, PRINCIPAL, script, TENANT, TurnTimeline, within } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { STALL_CONFIG, slowest } from './stall.js';
import { max, quantile, sleep } from './stats.js';

/** Spawns a spinning eval worker and measures terminate() → exit, in ms. */
async function rawTerminate(): Promise<number> {
  const worker = new Worker('require("node:worker_threads").parentPort.postMessage(1); for (;;) {}', {
    eval: true,
  });
  await new Promise<void>((resolve, reject) => {
    worker.once('message', () => resolve());
    worker.once('error', reject);
  });
  await sleep(20);
  const exited = new Promise<number>((resolve) => worker.once('exit', () => resolve(performance.now())));
  const t0 = performance.now();
  await worker.terminate();
  return (await exited) - t0;
}

export async function benchWedge(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const turns = ctx.quick ? 4 : 8;
  const { timeoutMs, pollMs, graceMs } = STALL_CONFIG;
  const tw = await Turnwarden.start({
    ...SCRIPTED,
    store: { path: ':memory:' },
    logger: ctx.logger,
    watchdog: { timeoutMs, pollMs, graceMs },
    pool: { maxWorkers: 4, warmWorkers: 2 },
  });
  const toIdle: number[] = [];
  const raw: number[] = [];
  const anomalies: string[] = [];
  try {
    const ws = await tw.createWorkstream({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: 'wedge-0' });
    const timeline = await TurnTimeline.follow(tw, ws.workstreamId);
    // The turn's own thread wedges: the `wedge` tool spins in its session worker (a model call
    // that spins would wedge a shared model thread instead, with the model placement shared).
    const content = script([{ text: 'a' }, { tools: [{ name: 'wedge', args: {} }] }]);
    try {
      // One at a time: a wedged worker burns a whole core of this 2-core machine.
      for (let i = 0; i < turns; i++) {
        const handle = await tw.send({
          tenantId: TENANT,
          principal: PRINCIPAL,
          workstreamId: ws.workstreamId,
          content,
        });
        const result = await within(handle.done, timeoutMs + pollMs + graceMs + 5_000);
        if (result === undefined) {
          anomalies.push(`turn ${handle.generation} did not settle; cancelled`);
          await tw.cancel({ tenantId: TENANT, principal: PRINCIPAL, workstreamId: ws.workstreamId });
          continue;
        }
        if (result.status !== 'interrupted' || !result.workerTerminated) {
          anomalies.push(
            `turn ${handle.generation}: ${result.status}, workerTerminated=${result.workerTerminated}`,
          );
        }
        const t = timeline.get(handle.generation);
        if (t.aborted !== undefined && t.idle !== undefined) toIdle.push(t.idle - t.aborted);
        else anomalies.push(`turn ${handle.generation}: missing turn_aborted or idle event`);
        // Interleave the baseline every other turn.
        if (i % 2 === 1) raw.push(await rawTerminate());
      }
    } finally {
      timeline.close();
    }
  } finally {
    await tw.shutdown();
  }
  const minusGrace = toIdle.map((x) => x - graceMs);
  const p99 = quantile(toIdle, 0.99);
  const rawP50 = quantile(raw, 0.5);
  return {
    name: 'wedge',
    title: `wedged turn recovery (L3), graceMs ${graceMs}`,
    ours: `turn_aborted → idle for ${toIdle.length} turns wedged in for (;;) {} (grace, terminate, exit, repair, lease release)`,
    baseline: `raw worker.terminate() → exit of a plain Worker spinning in for (;;) {} (${raw.length} runs)`,
    rows: [
      row('abort → idle p50', 'ms', quantile(toIdle, 0.5)),
      row('abort → idle p99', 'ms', p99, {
        target: target(`≤ graceMs + 50 = ${graceMs + 50} ms`, p99 <= graceMs + 50),
      }),
      row('abort → idle max', 'ms', max(toIdle)),
      row('abort → idle − graceMs p50', 'ms', quantile(minusGrace, 0.5), { baseline: rawP50 }),
      row('abort → idle − graceMs p99', 'ms', quantile(minusGrace, 0.99), { baseline: quantile(raw, 0.99) }),
    ],
    notes: [
      'turns run one at a time; after each, the pool replaces the terminated worker in the background',
      `with fewer than 100 samples, p99 (nearest rank) is the largest sample; slowest: ${slowest(toIdle)} ms`,
      ...anomalies.slice(0, 10),
    ],
  };
}
