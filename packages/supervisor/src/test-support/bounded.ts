/**
 * Bounded waiting for tests. A promise that never settles must fail its test by an assertion
 * that says what did not happen, not by the test runner's timeout.
 */
import { isTurnwardenError, type TurnwardenError } from '@turnwarden/protocol';
import { expect } from 'vitest';

/** Resolves with the promise's value, or fails the test if it has not settled within `ms`. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = Symbol('late');
  const deadline = new Promise<typeof late>((resolve) => {
    timer = setTimeout(() => resolve(late), ms);
  });
  try {
    const value = await Promise.race([promise, deadline]);
    if (value === late) expect.fail(`${what}: did not happen within ${ms} ms`);
    return value as T;
  } finally {
    clearTimeout(timer);
  }
}

/** The typed error `p` rejects with; fails the test if it resolves or rejects with anything else. */
export async function refusal(p: Promise<unknown>): Promise<TurnwardenError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!isTurnwardenError(e)) expect.fail(`expected a TurnwardenError, got ${String(e)}`);
  return e;
}
