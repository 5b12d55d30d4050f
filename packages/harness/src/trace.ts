/** A trace replays one run exactly: the scenario, its mutation, and every choice made. */
import type { Mutation } from '@turnwarden/protocol';
import type { SchedulerKind } from './schedulers.js';

export interface Trace {
  readonly scenario: string;
  readonly scheduler: SchedulerKind;
  readonly seed: number;
  readonly mutation?: Mutation;
  /** The run's store delayed every write (see `HarnessRuntime.start`). */
  readonly delayedWrites?: boolean;
  readonly choices: readonly string[];
}

export function encodeTrace(trace: Trace): string {
  return Buffer.from(JSON.stringify(trace), 'utf8').toString('base64url');
}

export function decodeTrace(text: string): Trace {
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(text.trim(), 'base64url').toString('utf8'));
  } catch {
    throw new Error('not a turnwarden trace (expected the base64url string a failing run printed)');
  }
  const t = value as Partial<Trace>;
  if (typeof t.scenario !== 'string' || !Array.isArray(t.choices) || typeof t.seed !== 'number') {
    throw new Error('not a turnwarden trace: missing scenario, seed or choices');
  }
  return t as Trace;
}
