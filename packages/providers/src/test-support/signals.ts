/** Signals for driving a provider outside a turn: an abort controller and a heartbeat counter. */
import { isTurnwardenError, type TurnwardenError } from '@turnwarden/protocol';
import type { TurnSignals } from '@turnwarden/session';
import { expect } from 'vitest';

export function signals(): TurnSignals & { readonly stop: AbortController; readonly beats: () => number } {
  const stop = new AbortController();
  let beats = 0;
  return {
    signal: stop.signal,
    heartbeat: () => {
      beats++;
    },
    stop,
    beats: () => beats,
  };
}

/** The typed error `p` rejects with; fails the test if it resolves or rejects with anything else. */
export async function failure(p: Promise<unknown>): Promise<TurnwardenError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!isTurnwardenError(e)) expect.fail(`expected a TurnwardenError, got ${String(e)}`);
  return e;
}
