/**
 * history — reading a long history on the supervisor's thread (issue 24, item 2). A workstream
 * of 10,000 rows (turns of a 200-character user row and an 800-character answer) in a SQLite
 * file store, read through `history()` a page at a time — every page of the history in turn,
 * `limit` 100 and 1,000, each page timed — against the whole history in one read (no `limit`:
 * what every read cost before paging). The SQLite store runs its calls synchronously on the
 * thread that makes them, so a read's wall time is the time that thread is blocked; the longest
 * gap between two turns of the event loop while the reads run says the same from outside.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JournalEntry } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { type HistoryPage, Turnwarden } from '@turnwarden/supervisor';
import { type BenchContext, PRINCIPAL, TENANT } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { max, median, quantile, yieldToLoop } from './stats.js';

const ROWS = 10_000;
const WS = 'long';
const ref = { tenantId: TENANT, principal: PRINCIPAL, workstreamId: WS } as const;
/** The bound for what a turn may block the supervisor's thread (claims): per page here. */
const BLOCK_MS = 5;

async function fill(store: Store): Promise<void> {
  await store.createWorkstream({ id: WS, tenantId: TENANT });
  await store.nextGeneration(WS);
  for (let turn = 0; turn < ROWS / 2; turn += 250) {
    const entries: JournalEntry[] = [];
    for (let i = turn; i < turn + 250; i++) {
      entries.push({ commitKey: `u${i}`, message: { role: 'user', content: `q${i} ${'u'.repeat(200)}` } });
      entries.push({ commitKey: `a${i}`, message: { role: 'assistant', content: 'a'.repeat(800) } });
    }
    await store.appendMessages({ workstreamId: WS, generation: 1, entries });
  }
}

/** The gaps between consecutive turns of the event loop (ms) while it runs. */
function loopGaps(): { stop: () => number[] } {
  const gaps: number[] = [];
  let last = performance.now();
  let running = true;
  const tick = () => {
    const now = performance.now();
    gaps.push(now - last);
    last = now;
    if (running) setImmediate(tick);
  };
  setImmediate(tick);
  return {
    stop: () => {
      running = false;
      return gaps;
    },
  };
}

/** Wall and CPU times (ms) of calls. */
interface Times {
  readonly wall: number[];
  readonly cpu: number[];
}

const times = (): Times => ({ wall: [], cpu: [] });

/**
 * One call's wall time and the process's CPU time meanwhile (no session worker runs, so that
 * is this thread's, plus the garbage collector's helpers): on a loaded machine the wall time
 * also counts the time the thread waited for a core, the CPU time does not.
 */
async function timed<T>(into: Times, call: () => Promise<T>): Promise<T> {
  await yieldToLoop();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const value = await call();
  into.wall.push(performance.now() - t0);
  const cpu = process.cpuUsage(cpu0);
  into.cpu.push((cpu.user + cpu.system) / 1000);
  return value;
}

/** Every page of the history, `limit` rows each, in turn, each timed into `into`. */
async function walk(tw: Turnwarden, limit: number, into: Times): Promise<void> {
  let cursor: string | undefined;
  let rows = 0;
  for (;;) {
    const input = { ...ref, limit, ...(cursor === undefined ? {} : { cursor }) };
    const page = await timed<HistoryPage>(into, () => tw.history(input));
    rows += page.rows.length;
    if (page.nextCursor === undefined) break;
    cursor = page.nextCursor;
  }
  if (rows !== ROWS) throw new Error(`the pages of ${limit} held ${rows} rows, not ${ROWS}`);
}

export async function benchHistory(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const dir = mkdtempSync(join(tmpdir(), 'turnwarden-bench-history-'));
  const store = openSqliteStore({ path: join(dir, 'history.db') });
  let tw: Turnwarden | undefined;
  try {
    await fill(store);
    tw = await Turnwarden.start({
      store,
      logger: ctx.logger,
      pluginModules: ['@turnwarden/session/scripted'],
      model: 'scripted',
      pool: { maxWorkers: 1, warmWorkers: 0 },
    });
    const passes = ctx.quick ? 2 : 5;
    await tw.history(ref); // warm: statements prepared, code compiled
    await walk(tw, 100, times());
    const whole = times();
    let probe = loopGaps();
    for (let i = 0; i < passes; i++) {
      const read = await timed(whole, () => tw!.history(ref));
      if (read.rows.length !== ROWS) throw new Error(`the whole history held ${read.rows.length} rows`);
    }
    const wholeGaps = probe.stop();
    const walks100: Times[] = [];
    const by1000 = times();
    probe = loopGaps();
    for (let i = 0; i < passes; i++) {
      const w = times();
      await walk(tw, 100, w);
      walks100.push(w);
      await walk(tw, 1_000, by1000);
    }
    const pagedGaps = probe.stop();
    const by100 = { wall: walks100.flatMap((w) => w.wall), cpu: walks100.flatMap((w) => w.cpu) };
    // Keyset paging: a page near the end costs what one near the start does.
    const first = walks100.flatMap((w) => w.cpu.slice(0, 10));
    const last = walks100.flatMap((w) => w.cpu.slice(-10));
    const cpu99 = quantile(by100.cpu, 0.99);
    return {
      name: 'history',
      title: 'reading a long history',
      ours: `history() a page at a time over a ${ROWS.toLocaleString('en-US')}-row workstream (SQLite file store), every page timed`,
      baseline: 'the whole history in one history() read (no limit), the same workstream',
      rows: [
        row('page of 100 rows: wall p50', 'ms', median(by100.wall), { baseline: median(whole.wall) }),
        row('page of 100 rows: CPU p50', 'ms', median(by100.cpu), { baseline: median(whole.cpu) }),
        row('page of 100 rows: CPU p99', 'ms', cpu99, {
          target: target(`≤ ${BLOCK_MS} ms`, cpu99 <= BLOCK_MS),
        }),
        row('page of 100 rows: wall p99', 'ms', quantile(by100.wall, 0.99)),
        row('page of 100 rows: wall max', 'ms', max(by100.wall)),
        row('page of 100 at the end (baseline: at the start), CPU p50', 'ms', median(last), {
          baseline: median(first),
        }),
        row('page of 1,000 rows: wall p50', 'ms', median(by1000.wall), { baseline: median(whole.wall) }),
        row('page of 1,000 rows: CPU p50', 'ms', median(by1000.cpu), { baseline: median(whole.cpu) }),
        row('all 100 pages of 100, wall summed', 'ms', sum(by100.wall) / passes, {
          baseline: median(whole.wall),
        }),
        row('longest event-loop gap: paged (whole) reads', 'ms', max(pagedGaps), {
          baseline: max(wholeGaps),
        }),
      ],
      notes: [
        `${passes} passes each; the baseline column is the whole-history read, except where the row names another.`,
        `whole-history read: wall p50 ${median(whole.wall).toFixed(1)} ms, max ${max(whole.wall).toFixed(1)} ms; CPU p50 ${median(whole.cpu).toFixed(1)} ms: what every read blocked before paging.`,
        'CPU time does not count the time the thread waited for a core on a loaded machine; wall time does.',
      ],
    };
  } finally {
    await tw?.shutdown();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

function sum(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}
