/**
 * admission — fair admission under a two-tenant flood (T4). A flooding tenant keeps
 * `FLOOD_CLIENTS` sends in flight on the host's `WORKERS` workers (each client sends again as
 * soon as its turn ends); a quiet tenant's `QUIET_CLIENTS` clients send now and then. Each
 * send's wait — from the call to the turn's start — is measured per tenant, through the runtime
 * (round-robin admission; then again with the flooder capped at WORKERS − 1 workers), against
 * the same workload through a plain FIFO semaphore over the same number of slots, whose "turns"
 * are timers of the runtime's measured turn length: what a host gets from a pool with one queue.
 */
import { Turnwarden } from '@turnwarden/supervisor';
import { SCRIPTED } from '../scripted.js';
import type { BenchContext } from './common.js';
import { script } from './common.js';
import { row, type SectionResult, target } from './report.js';
import { median, quantile } from './stats.js';

const WORKERS = 4;
const FLOOD_CLIENTS = 24;
const QUIET_CLIENTS = 2;
const TURN_MS = 40;
const QUIET_THINK_MS = 60;

interface Waits {
  readonly flood: number[];
  readonly quiet: number[];
  /** Mean time a turn held its worker (send resolved → done). */
  readonly turnMs: number;
}

type Client = (tenant: 'flood' | 'quiet', index: number) => Promise<void>;

/** Runs the two tenants' clients together; each loops send → done until its deadline. */
async function drive(client: Client): Promise<void> {
  const clients: Promise<void>[] = [];
  for (let i = 0; i < FLOOD_CLIENTS; i++) clients.push(client('flood', i));
  for (let i = 0; i < QUIET_CLIENTS; i++) clients.push(client('quiet', i));
  await Promise.all(clients);
}

async function ours(ctx: BenchContext, ms: number, floodCap?: number): Promise<Waits> {
  const tw = await Turnwarden.start({
    ...SCRIPTED,
    logger: ctx.logger,
    pool: { maxWorkers: WORKERS, warmWorkers: WORKERS },
    watchdog: { timeoutMs: 10_000, pollMs: 500 },
    admission: {
      maxWaitMs: 120_000,
      ...(floodCap === undefined ? {} : { maxActivePerTenant: floodCap }),
    },
  });
  const waits: Waits = { flood: [], quiet: [], turnMs: 0 };
  const held: number[] = [];
  const content = script([{ sleep: TURN_MS }, { text: 'ok' }]);
  const end = performance.now() + ms;
  try {
    await drive(async (tenant, index) => {
      const caller = { tenantId: tenant, principal: `${tenant}-user` };
      const workstreamId = `${tenant}-${index}`;
      await tw.createWorkstream({ ...caller, workstreamId });
      while (performance.now() < end) {
        const t0 = performance.now();
        const handle = await tw.send({ ...caller, workstreamId, content });
        const t1 = performance.now();
        waits[tenant].push(t1 - t0);
        const result = await handle.done;
        if (result.status !== 'completed') throw new Error(`a bench turn ended ${result.status}`);
        held.push(performance.now() - t1);
        if (tenant === 'quiet') await new Promise((resolve) => setTimeout(resolve, QUIET_THINK_MS));
      }
    });
  } finally {
    await tw.shutdown();
  }
  return { ...waits, turnMs: held.reduce((a, b) => a + b, 0) / Math.max(1, held.length) };
}

/** The same clients through one FIFO semaphore of WORKERS slots; a turn is a timer of `turnMs`. */
async function fifo(ms: number, turnMs: number): Promise<Waits> {
  let free = WORKERS;
  const queue: (() => void)[] = [];
  const acquire = (): Promise<void> => {
    if (free > 0) {
      free--;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      queue.push(resolve);
    });
  };
  const release = () => {
    const next = queue.shift();
    if (next) next();
    else free++;
  };
  const waits: Waits = { flood: [], quiet: [], turnMs };
  const end = performance.now() + ms;
  await drive(async (tenant) => {
    while (performance.now() < end) {
      const t0 = performance.now();
      await acquire();
      waits[tenant].push(performance.now() - t0);
      await new Promise((resolve) => setTimeout(resolve, turnMs));
      release();
      if (tenant === 'quiet') await new Promise((resolve) => setTimeout(resolve, QUIET_THINK_MS));
    }
  });
  return waits;
}

export async function benchAdmission(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const ms = ctx.quick ? 1_500 : 5_000;
  const rr = await ours(ctx, ms);
  const capped = await ours(ctx, ms, WORKERS - 1);
  const base = await fifo(ms, rr.turnMs);
  const p99 = (xs: number[]) => quantile(xs, 0.99);
  const bound = 2 * rr.turnMs;
  return {
    name: 'admission',
    title: `admission wait under a two-tenant flood (${WORKERS} workers)`,
    ours: `the runtime's fair admission queue: ${FLOOD_CLIENTS} flood clients and ${QUIET_CLIENTS} quiet ones (${QUIET_THINK_MS} ms between turns) sending ${TURN_MS} ms turns for ${ms / 1000} s`,
    baseline: `the same clients through one FIFO semaphore of ${WORKERS} slots, turns as timers of the runtime's measured turn length (${rr.turnMs.toFixed(0)} ms)`,
    rows: [
      row('quiet tenant: admission wait p99', 'ms', p99(rr.quiet), {
        baseline: p99(base.quiet),
        target: target(`≤ 2 turns (${bound.toFixed(0)} ms)`, p99(rr.quiet) <= bound),
      }),
      row('quiet tenant: admission wait p50', 'ms', median(rr.quiet), { baseline: median(base.quiet) }),
      row('flood tenant: admission wait p99', 'ms', p99(rr.flood), { baseline: p99(base.flood) }),
      row('flood tenant: admission wait p50', 'ms', median(rr.flood), { baseline: median(base.flood) }),
      row(
        `quiet tenant: wait p99, flood capped at ${WORKERS - 1} workers (admission.maxActivePerTenant)`,
        'ms',
        p99(capped.quiet),
        { baseline: p99(base.quiet) },
      ),
      row(`flood tenant: wait p99, capped at ${WORKERS - 1} workers`, 'ms', p99(capped.flood), {
        baseline: p99(base.flood),
      }),
    ],
    notes: [
      `turns admitted: quiet ${rr.quiet.length}, flood ${rr.flood.length} (FIFO: quiet ${base.quiet.length}, flood ${base.flood.length}); capped run: quiet ${capped.quiet.length}, flood ${capped.flood.length}`,
      "the bound (docs/guarantees.md, T4): with one other tenant waiting, a tenant's next send is admitted within one of its turns' end — so its wait is at most about one turn; the target allows two",
      "ours includes the claim itself (the user row and the session snapshot written, the worker dispatched) in each wait; the baseline's waits are the semaphore's alone",
    ],
  };
}
