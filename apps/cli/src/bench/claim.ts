/**
 * claim — what a turn's claim costs the supervisor's thread on a long history (issue 24): a
 * workstream of 10,000 rows (quick: 2,000) on a SQLite file, one short turn at a time. Ours: the
 * default placement, shared model threads — the claim reads only the history's tail (where an open
 * call could be) and the model thread reads the context through its own connection. Baseline:
 * `models.placement: 'session'`, where the claim reads the whole history on the supervisor's
 * thread and copies it to the worker (what every claim did before). Figure: the longest the
 * supervisor's event loop was blocked during each turn (`monitorEventLoopDelay`, 1 ms
 * resolution), and the same for a short workstream, in the same runtime.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { HistoryMessage } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { Turnwarden } from '@turnwarden/supervisor';
import { SCRIPTED } from '../scripted.js';
import type { BenchContext } from './common.js';
import { PRINCIPAL, TENANT } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { median } from './stats.js';

const TARGET_MS = 5;

/** A file store with a `long` workstream of `rows` rows and a `short` one of 2. */
async function seed(path: string, rows: number): Promise<void> {
  const store = openSqliteStore({ path });
  try {
    for (const [id, n] of [
      ['long', rows],
      ['short', 2],
    ] as const) {
      await store.createWorkstream({ id, tenantId: TENANT });
      const lease = await store.acquireLease(id, 'bench-seed', 60_000);
      if (lease === undefined) throw new Error('the seed could not take the lease');
      for (let from = 0; from < n; from += 500) {
        const entries = [];
        for (let i = from; i < Math.min(n, from + 500); i++) {
          const message: HistoryMessage =
            i % 2 === 0
              ? { role: 'user', content: `question ${i}: ${'lorem ipsum '.repeat(8)}`, principal: PRINCIPAL }
              : { role: 'assistant', content: `answer ${i}: ${'dolor sit amet '.repeat(12)}` };
          entries.push({ commitKey: `seed:${i}`, message });
        }
        await store.appendMessages({ workstreamId: id, generation: 0, fencingToken: lease.token, entries });
      }
      await store.releaseLease(id, 'bench-seed', lease.token);
    }
  } finally {
    await store.close();
  }
}

/** The longest event-loop block (ms) during each of `turns` turns on `workstreamId`. */
async function blocks(tw: Turnwarden, workstreamId: string, turns: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < turns; i++) {
    const h = monitorEventLoopDelay({ resolution: 1 });
    h.enable();
    const turn = await tw.send({ tenantId: TENANT, principal: PRINCIPAL, workstreamId, content: `hi ${i}` });
    const done = await turn.done;
    h.disable();
    if (done.status !== 'completed') throw new Error(`a turn ended ${done.status}`);
    // The histogram's max is the longest a 1 ms timer waited, in ns: the longest block, plus the
    // timer's own resolution.
    out.push(Math.max(0, h.max / 1e6 - 1));
  }
  return out;
}

async function measure(
  path: string,
  placement: 'shared' | 'session',
  turns: number,
  ctx: BenchContext,
): Promise<{ long: number[]; short: number[] }> {
  const tw = await Turnwarden.start({
    ...SCRIPTED,
    logger: ctx.logger,
    store: { path },
    models: { placement },
    pool: { maxWorkers: 2, warmWorkers: 1 },
  });
  try {
    // One turn of each first: the runtime's own warm-up (JIT) is not what is measured.
    await blocks(tw, 'short', 1);
    await blocks(tw, 'long', 1);
    const long = await blocks(tw, 'long', turns);
    const short = await blocks(tw, 'short', turns);
    return { long, short };
  } finally {
    await tw.shutdown();
  }
}

export async function benchClaim(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const rows = ctx.quick ? 2_000 : 10_000;
  const turns = ctx.quick ? 5 : 10;
  const dir = await mkdtemp(join(tmpdir(), 'turnwarden-bench-claim-'));
  try {
    const shared = join(dir, 'shared.db');
    const session = join(dir, 'session.db');
    await seed(shared, rows);
    await seed(session, rows);
    const ours = await measure(shared, 'shared', turns, ctx);
    const base = await measure(session, 'session', turns, ctx);
    const worst = Math.max(...ours.long);
    return {
      name: 'claim',
      title: 'a claim on a long history',
      ours: `shared model threads (default): ${turns} turns on a ${rows.toLocaleString('en-US')}-row workstream, one at a time, SQLite file`,
      baseline: `models.placement 'session': the claim reads the whole history on the supervisor's thread and sends it to the worker`,
      rows: [
        row(
          `longest main-thread block per turn, ${rows.toLocaleString('en-US')} rows (median)`,
          'ms',
          median(ours.long),
          {
            baseline: median(base.long),
          },
        ),
        row(`longest main-thread block per turn, ${rows.toLocaleString('en-US')} rows (max)`, 'ms', worst, {
          baseline: Math.max(...base.long),
          target: target(`≤ ${TARGET_MS} ms`, worst <= TARGET_MS),
        }),
        row('longest main-thread block per turn, 2 rows (median)', 'ms', median(ours.short), {
          baseline: median(base.short),
        }),
      ],
      notes: [
        'the block is the longest a 1 ms timer on the supervisor’s thread waited during the turn (monitorEventLoopDelay max − 1 ms): whatever ran synchronously there — the claim’s reads, the writes, the events',
        'with shared model threads the context is read by the model thread through its own read-only connection; the claim reads the rows from the last non-tool message on (readHistoryTail)',
      ],
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
