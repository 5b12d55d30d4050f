/**
 * scale — N concurrently streaming sessions on the runtime beside the same N turns as plain
 * async functions on one thread (the in-process baseline), an empty Worker's rss and a timer in
 * another process, all in the same run: the short form of `turnwarden scale` (issue 24, item 5;
 * the implementation and what each figure means: ../scale/). N = 100 (quick: 40), the scripted
 * model; the longer curve, and the OpenAI-compatible provider over HTTP, are `turnwarden scale`'s.
 */
import { defaultBoundMs, SCALE_DEFAULTS } from '../scale/args.js';
import { runScale } from '../scale/run.js';
import { DEFAULT_WORKLOAD } from '../scale/workload.js';
import type { BenchContext } from './common.js';
import type { Row, SectionResult } from './report.js';

const SCALE_SECTION_N = { full: 100, quick: 40 } as const;

export async function benchScale(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const n = ctx.quick ? SCALE_SECTION_N.quick : SCALE_SECTION_N.full;
  const result = await runScale({
    ns: [n],
    providers: ['scripted'],
    workload: DEFAULT_WORKLOAD,
    timeoutMs: SCALE_DEFAULTS.timeoutMs,
    pollMs: SCALE_DEFAULTS.pollMs,
    boundMs: defaultBoundMs(DEFAULT_WORKLOAD),
    emptyWorkers: ctx.quick ? SCALE_DEFAULTS.quickEmptyWorkers : SCALE_DEFAULTS.emptyWorkers,
  });
  const run = result.runs[0];
  if (!run) throw new Error('the scale run produced nothing');
  const rows: Row[] = [...run.section.rows];
  const error = run.section.error ?? result.emptyWorkerError;
  return {
    name: 'scale',
    title: `streaming sessions at scale (${run.section.title})`,
    ours: run.section.ours,
    baseline: run.section.baseline,
    rows,
    notes: [
      ...run.section.notes,
      'the longer curve (N = 250, 500, 1000) and the HTTP provider: turnwarden scale --n 250,500,1000 --provider both',
    ],
    ...(error === undefined ? {} : { error }),
  };
}
