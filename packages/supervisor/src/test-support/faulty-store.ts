import type { JournalEntry } from '@turnwarden/protocol';
import { errors } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';

/**
 * An in-memory store whose `appendMessages` rejects the next `n` batches matching a predicate
 * (nothing is written for a rejected batch, like a real failed transaction).
 */
export function faultyStore() {
  const inner = openSqliteStore({ path: ':memory:' });
  let rule: { n: number; match: (e: JournalEntry) => boolean; error: () => Error } | undefined;
  const calls: Parameters<Store['appendMessages']>[0][] = [];
  const store = new Proxy(inner, {
    get(target, key, receiver) {
      // No group commit: every append goes through the faults below, batch by batch.
      if (key === 'appendMany') return undefined;
      const value = Reflect.get(target, key, receiver) as unknown;
      if (key !== 'appendMessages' || typeof value !== 'function') {
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      }
      return (input: Parameters<Store['appendMessages']>[0]) => {
        calls.push(input);
        if (rule && rule.n > 0 && input.entries.some(rule.match)) {
          rule.n--;
          return Promise.reject(rule.error());
        }
        return inner.appendMessages(input);
      };
    },
  });
  return {
    store,
    /** Rejects the next `n` appends that contain a matching entry (a non-transient STORE_ERROR). */
    reject(n: number, match: (e: JournalEntry) => boolean) {
      rule = {
        n,
        match,
        error: () => errors.storeError('injected: the store rejected the write'),
      };
    },
    /** Rejects the next `n` matching appends with `error()` (a transient error, a conflict …). */
    rejectWith(n: number, match: (e: JournalEntry) => boolean, error: () => Error) {
      rule = { n, match, error };
    },
    /** How many appends containing a matching entry the store was asked for. */
    attempts(match: (e: JournalEntry) => boolean): number {
      return calls.filter((c) => c.entries.some(match)).length;
    },
  };
}

export const synthesized = (e: JournalEntry) => e.message.role === 'tool' && e.message.synthesized === true;
export const assistantRow = (e: JournalEntry) => e.message.role === 'assistant';
