import type { Store } from '@turnwarden/store';

type Original = (...args: unknown[]) => unknown;

/**
 * `inner` with some methods replaced for a test: each replacement is called with the original
 * method (bound to `inner`) and the call's arguments; every other method is `inner`'s.
 */
export function interceptStore(
  inner: Store,
  overrides: { readonly [K in keyof Store]?: (original: Original, ...args: unknown[]) => unknown },
): Store {
  return new Proxy(inner, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof value !== 'function') return value;
      const original: Original = (...args) => (value as Original).apply(target, args);
      const override = overrides[key as keyof Store];
      return override === undefined ? original : (...args: unknown[]) => override(original, ...args);
    },
  });
}
