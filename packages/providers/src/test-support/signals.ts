/** Signals for driving a provider outside a turn: an abort controller and a heartbeat counter. */
import type { TurnSignals } from '@turnwarden/session';

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
