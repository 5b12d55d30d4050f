/**
 * isolation — reclaiming a wedged tool (issue 11). Ours: the tool is thread-isolated
 * (`isolatedTool`): a force cancel terminates its pool thread, the session worker unwinds and is
 * kept; measured from the cancel to the next turn's start on the same workstream. Baseline: the
 * same tool wedging the session worker itself (the scripted plugin's `wedge`): the cancel waits
 * out graceMs, terminates the worker and the next turn needs its replacement.
 */
import { fileURLToPath } from 'node:url';
import { Turnwarden } from '@turnwarden/supervisor';
import { SCRIPTED } from '../scripted.js';
import { type BenchContext, PRINCIPAL, script, TENANT } from './common.js';
import { row, type SectionResult } from './report.js';
import { median, quantile } from './stats.js';

const GRACE_MS = 50;

async function reclaim(ctx: BenchContext, isolated: boolean, turns: number) {
  const tw = await Turnwarden.start({
    ...SCRIPTED,
    pluginModules: [
      ...SCRIPTED.pluginModules,
      fileURLToPath(new URL('./isolated-plugin.js', import.meta.url)),
    ],
    logger: ctx.logger,
    watchdog: { timeoutMs: 60_000, pollMs: 500, graceMs: GRACE_MS },
    pool: { maxWorkers: 1, warmWorkers: 1 },
  });
  const caller = { tenantId: TENANT, principal: PRINCIPAL };
  const times: number[] = [];
  let terminated = 0;
  try {
    const { workstreamId } = await tw.createWorkstream({ ...caller, workstreamId: 'reclaim' });
    const wedge = script([
      { tools: [{ name: isolated ? 'iso_spin' : 'wedge', args: {} }] },
      { text: 'never' },
    ]);
    let toolStarted: () => void = () => {};
    await tw.subscribe({
      ...caller,
      workstreamId,
      listener: (e) => {
        if (e.type === 'tool_started') toolStarted();
      },
    });
    for (let i = 0; i < turns; i++) {
      const started = new Promise<void>((resolve) => {
        toolStarted = resolve;
      });
      const turn = await tw.send({ ...caller, workstreamId, content: wedge });
      await started;
      // Let the wedge take hold.
      await new Promise((resolve) => setTimeout(resolve, 20));
      const t0 = performance.now();
      await tw.cancel({ ...caller, workstreamId });
      const result = await turn.done;
      if (result.workerTerminated) terminated++;
      const next = await tw.send({ ...caller, workstreamId, content: script([{ text: 'next' }]) });
      times.push(performance.now() - t0);
      await next.done;
    }
  } finally {
    await tw.shutdown();
  }
  return { times, terminated };
}

export async function benchIsolation(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const turns = ctx.quick ? 3 : 8;
  const ours = await reclaim(ctx, true, turns);
  const base = await reclaim(ctx, false, turns);
  return {
    name: 'isolation',
    title: 'reclaiming a wedged tool: an isolated pool thread against the session worker',
    ours: 'a thread-isolated tool spinning in its pool thread: force cancel → the next turn started on the same workstream (the pool thread terminated, the session worker kept)',
    baseline: `the same wedge inside the session worker (the scripted plugin's wedge tool): force cancel → graceMs (${GRACE_MS}) → the worker terminated → the next turn started on its replacement`,
    rows: [
      row('cancel → next turn started, p50', 'ms', median(ours.times), { baseline: median(base.times) }),
      row('cancel → next turn started, p90', 'ms', quantile(ours.times, 0.9), {
        baseline: quantile(base.times, 0.9),
      }),
    ],
    notes: [
      `session workers terminated: ours ${ours.terminated} of ${turns} turns, baseline ${base.terminated} of ${turns}`,
      'one worker (pool.maxWorkers 1): the baseline’s next turn waits for the replacement to spawn; with warm spares the spawn is hidden but the terminated thread is still lost',
    ],
  };
}
