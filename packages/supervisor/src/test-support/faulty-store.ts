import type { JournalEntry } from '@turnwarden/protocol';
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';

/**
 * An in-memory store whose `appendMessages` rejects the next `n` batches matching a predicate
 * (nothing is written for a rejected batch, like a real failed transaction).
 */
export function faultyStore() {
  const inner = openSqliteStore({ path: ':memory:' });
  let rule: { n: number; match: (e: JournalEntry) => boolean } | undefined;
  const store = new Proxy(inner, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (key !== 'appendMessages' || typeof value !== 'function') {
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      }
      return (input: Parameters<Store['appendMessages']>[0]) => {
        if (rule && rule.n > 0 && input.entries.some(rule.match)) {
          rule.n--;
          return Promise.reject(
            new TurnwardenError(ErrorCode.STORE_ERROR, 'injected: the store rejected the write'),
          );
        }
        return inner.appendMessages(input);
      };
    },
  });
  return {
    store,
    /** Rejects the next `n` appends that contain a matching entry. */
    reject(n: number, match: (e: JournalEntry) => boolean) {
      rule = { n, match };
    },
  };
}

export const synthesized = (e: JournalEntry) => e.message.role === 'tool' && e.message.synthesized === true;
export const assistantRow = (e: JournalEntry) => e.message.role === 'assistant';
