/**
 * A timer in another process (timer-child.ts), the baseline for the watchdog's poll lateness:
 * start it before a window, note the window's bounds with `epochNow()`, then ask for the
 * lateness samples of the ticks that ran inside it.
 */
import { fileURLToPath } from 'node:url';
import { type Helper, startHelper } from './child.js';
import type { TimerChildConfig } from './timer-child.js';

const childFile = fileURLToPath(new URL('./timer-child.js', import.meta.url));

export interface OtherTimer {
  readonly intervalMs: number;
  /** Lateness (ms) of every tick that ran in [from, to] (epoch ms). */
  samples(from: number, to: number): Promise<number[]>;
  close(): Promise<void>;
}

export async function startOtherTimer(intervalMs: number): Promise<OtherTimer> {
  const cfg: TimerChildConfig = { intervalMs };
  const helper: Helper<{ intervalMs: number }> = await startHelper(
    'the other-process timer',
    childFile,
    cfg,
    20_000,
  );
  return {
    intervalMs,
    samples: async (from, to) => (await helper.request<{ samples: number[] }>({ from, to }, 10_000)).samples,
    close: () => helper.close(),
  };
}
