import type { Store } from '@turnwarden/store';

/**
 * A Store whose `method` (default `compactHistory`) waits at a gate before it runs, so a test
 * can hold a history rewrite in flight; every call is recorded in order. With `armed: false`
 * the method passes until `arm()` is called.
 */
export function gatedStore(
  inner: Store,
  /** A `Store` method, or another the store offers (`enqueueSend`). */
  method: keyof Store | (string & {}) = 'compactHistory',
  { armed = true } = {},
) {
  const calls: string[] = [];
  let gating = armed;
  const arm = () => {
    gating = true;
  };
  let open!: () => void;
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  let entered!: () => void;
  const atGate = new Promise<void>((resolve) => {
    entered = resolve;
  });
  const store = new Proxy(inner, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        calls.push(String(key));
        if (key === method && gating) {
          entered();
          return gate.then(async () => {
            const r = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
            calls.push(`${method}:done`);
            return r;
          });
        }
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store, calls, open, atGate, arm };
}
