/**
 * A SQLite store on a settable clock that records lease refreshes, can hand the lease to an
 * intruder, and can hold one append until something has happened — so lease tests wait for
 * events, not for time.
 */
import type { JournalEntry } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';

export function leaseStore() {
  const clock = { ms: 1_000_000 };
  const inner = openSqliteStore({ path: ':memory:', now: () => clock.ms });
  const refreshes: { readonly ok: boolean }[] = [];
  let refreshWaiters: { n: number; resolve: () => void }[] = [];
  const holds: { match: (e: JournalEntry) => boolean; before: () => Promise<unknown> }[] = [];
  let historyReads = 0;
  let onRead = () => {};

  const store: Store = new Proxy(inner, {
    get(target, key, receiver) {
      // No group commit: every append passes the holds below, batch by batch.
      if (key === 'appendMany') return undefined;
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof value !== 'function') return value;
      if (key === 'refreshLease') {
        return async (...args: Parameters<Store['refreshLease']>) => {
          const ok = await target.refreshLease(...args);
          refreshes.push({ ok });
          const ready = refreshWaiters.filter((w) => w.n <= refreshes.length);
          refreshWaiters = refreshWaiters.filter((w) => w.n > refreshes.length);
          for (const w of ready) w.resolve();
          return ok;
        };
      }
      if (key === 'readHistory') {
        return (...args: Parameters<Store['readHistory']>) => {
          historyReads++;
          onRead();
          return target.readHistory(...args);
        };
      }
      if (key === 'appendMessages') {
        return async (input: Parameters<Store['appendMessages']>[0]) => {
          const i = holds.findIndex((h) => input.entries.some(h.match));
          if (i >= 0) await holds.splice(i, 1)[0]!.before();
          return target.appendMessages(input);
        };
      }
      return (value as (...a: unknown[]) => unknown).bind(target);
    },
  });

  return {
    store,
    /** Every lease refresh so far, in order. */
    refreshes,
    /** Resolves once `n` more refreshes (from now) have completed. */
    refreshed(n: number): Promise<void> {
      const target = refreshes.length + n;
      return new Promise((resolve) => refreshWaiters.push({ n: target, resolve }));
    },
    /** Resolves at the next history read through the store (or after `ms`, with false). */
    nextRead(ms: number): Promise<boolean> {
      return new Promise((resolve) => {
        const timer = setTimeout(() => resolve(false), ms);
        onRead = () => {
          clearTimeout(timer);
          onRead = () => {};
          resolve(true);
        };
      });
    },
    historyReads: () => historyReads,
    /** Runs `before` ahead of the first append containing a matching entry (once). */
    beforeAppend(match: (e: JournalEntry) => boolean, before: () => Promise<unknown>): void {
      holds.push({ match, before });
    },
    /** The live lease expires (by the store's clock) and an intruder acquires it: a new token. */
    async steal(workstreamId: string) {
      clock.ms += 3_600_000;
      const lease = await inner.acquireLease(workstreamId, 'intruder', 3_600_000);
      if (!lease) throw new Error('the intruder could not take the lease');
      return lease;
    },
    readHistory: (workstreamId: string) => inner.readHistory(workstreamId),
    getLease: (workstreamId: string) => inner.getLease(workstreamId),
  };
}
