/**
 * Bounded waits for tests: each fails its test by assertion (naming what did not happen) after a
 * number of milliseconds, instead of leaning on the test timeout.
 */
import { readFileSync } from 'node:fs';
import type { ToolContext } from '@turnwarden/session';
import { expect } from 'vitest';

/** `p`'s outcome, or a failed assertion after `ms`. */
export async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      try {
        expect.fail(`${what}: not within ${ms} ms`);
      } catch (e) {
        reject(e);
      }
    }, ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The error `p` rejects with within `ms` (a failed assertion if it resolves, or is late). */
export async function rejection(p: Promise<unknown>, ms: number, what: string): Promise<Error> {
  const outcome = await within(
    p.then(
      (value) => ({ ok: true as const, value }),
      (error: unknown) => ({ ok: false as const, error }),
    ),
    ms,
    what,
  );
  if (outcome.ok) expect.fail(`${what}: resolved with ${JSON.stringify(outcome.value)}`);
  expect(outcome.error).toBeInstanceOf(Error);
  return outcome.error as Error;
}

/** How `p` settled within `ms` (its value, or its error's message), for one assertion on either. */
export async function settled<T>(
  p: Promise<T>,
  ms: number,
  what: string,
): Promise<{ readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string }> {
  return within(
    p.then(
      (value) => ({ ok: true as const, value }),
      (error: unknown) => ({
        ok: false as const,
        error: error instanceof Error ? error.message : String(error),
      }),
    ),
    ms,
    what,
  );
}

/** Resolves once `condition()` holds (checked every 10 ms), or fails the test after `ms`. */
export function until(condition: () => boolean, ms: number, what: string): Promise<void> {
  return within(
    new Promise<void>((resolve) => {
      const check = () => {
        if (condition()) resolve();
        else timer = setTimeout(check, 10);
      };
      let timer = setTimeout(check, 0);
      stops.push(() => clearTimeout(timer));
    }),
    ms,
    what,
  );
}

const stops: (() => void)[] = [];

/** Stops every pending `until` poll (call in afterEach). */
export function stopPolls(): void {
  for (const stop of stops.splice(0)) stop();
}

/** A tool context outside a turn: an abort controller and a heartbeat counter. */
export function toolContext(): ToolContext & {
  readonly stop: AbortController;
  readonly beats: () => number;
} {
  const stop = new AbortController();
  let beats = 0;
  return {
    signal: stop.signal,
    heartbeat: () => {
      beats++;
    },
    callId: 'call-1',
    workstreamId: 'ws-1',
    tenantId: 'tenant-a',
    stop,
    beats: () => beats,
  };
}

/** Whether a process runs (an exited process not yet reaped — a zombie — does not). */
export function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    // Linux: the state follows the parenthesized command name in /proc/<pid>/stat.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return true;
  }
}
