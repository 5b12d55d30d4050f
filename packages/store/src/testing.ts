/**
 * Store doubles for tests and the interleaving harness (`@turnwarden/store/testing`), not for
 * production.
 *
 * `delayedStore` makes any store behave like a remote, asynchronous one: every write waits a
 * random time (seeded, so a run can be repeated) before it runs, and writes issued together
 * complete in any order. The engine must not rely on a write running, or finishing, when it was
 * called — only on what the `TurnStore` contract states.
 *
 * `faultyStore` (faults.ts) makes appends fail the way real stores fail: rejected, transient,
 * acknowledgement lost, a synchronous throw, slow.
 *
 * `startPostgres` (pg-cluster.ts) starts a throwaway PostgreSQL cluster for tests, demos and
 * benchmarks, or says why it cannot.
 */
import type { Store } from './types.js';

export type { FaultRule, FaultyStore, StoreFault } from './faults.js';
export { faultyStore } from './faults.js';
export type { Postgres, StartPostgresOptions } from './pg-cluster.js';
export {
  freePort,
  postgresBin,
  postgresSkipReason,
  slowPostgresSkipReason,
  startPostgres,
} from './pg-cluster.js';

const WRITES: ReadonlySet<string> = new Set([
  'createWorkstream',
  'closeWorkstream',
  'deleteWorkstream',
  'nextGeneration',
  'appendMessages',
  'appendMany',
  'saveSession',
  'compactHistory',
  'truncateHistory',
  'acquireLease',
  'refreshLease',
  'releaseLease',
]);

export interface DelayOptions {
  /** Longest delay before a write runs (ms); default 5. */
  readonly maxDelayMs?: number;
  /** Seed of the delays (mulberry32); default 1. */
  readonly seed?: number;
}

export interface DelayedStore {
  readonly store: Store;
  /** Writes issued so far. */
  readonly writes: () => number;
}

export function delayedStore(inner: Store, options: DelayOptions = {}): DelayedStore {
  const max = options.maxDelayMs ?? 5;
  let state = (options.seed ?? 1) >>> 0;
  const random = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  let writes = 0;
  const store = new Proxy(inner, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof value !== 'function') return value;
      const fn = value as (...args: unknown[]) => Promise<unknown>;
      if (typeof key !== 'string' || !WRITES.has(key)) return fn.bind(target);
      return (...args: unknown[]) => {
        writes++;
        const ms = random() * max;
        return new Promise((resolve) => setTimeout(resolve, ms)).then(() => fn.apply(target, args));
      };
    },
  });
  return { store, writes: () => writes };
}
