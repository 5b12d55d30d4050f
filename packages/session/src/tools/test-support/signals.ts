import { afterEach, beforeEach, vi } from 'vitest';
/** Test helpers: a TurnSignals / ToolContext that counts heartbeats, and a stream collector. */
import type { ToolContext } from '../../contracts.js';

export interface TestSignals extends ToolContext {
  readonly controller: AbortController;
  /** Number of heartbeat() calls so far. */
  beats(): number;
}

export function testSignals(): TestSignals {
  const controller = new AbortController();
  let beats = 0;
  return {
    controller,
    signal: controller.signal,
    heartbeat: () => {
      beats += 1;
    },
    beats: () => beats,
    callId: 'call-test',
    workstreamId: 'ws-test',
    tenantId: 'tenant-test',
  };
}

/** Collects every item of an async iterable. */
export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

/**
 * With fake timers on: lets `afterMs` pass, aborts `controller`, and reports how `promise`
 * settled at that same instant — no time passes after the abort, so "prompt" means prompt.
 * Fails if the promise settled before the abort or resolved instead of rejecting.
 */
export async function abortAt(
  promise: Promise<unknown>,
  controller: AbortController,
  afterMs: number,
): Promise<{ error: unknown; prompt: boolean }> {
  const state: { settled: boolean; resolved: boolean; error?: unknown } = { settled: false, resolved: false };
  promise.then(
    () => Object.assign(state, { settled: true, resolved: true }),
    (error: unknown) => Object.assign(state, { settled: true, error }),
  );
  await vi.advanceTimersByTimeAsync(afterMs);
  if (state.settled) throw new Error(`expected the promise to be pending at ${afterMs} ms`);
  controller.abort('cancel');
  await vi.advanceTimersByTimeAsync(0);
  if (state.resolved) throw new Error('expected the promise to reject on abort');
  return { error: state.error, prompt: state.settled };
}

/** Fake timers for a describe block (setTimeout and setInterval only; promises stay real). */
export function useFakeTimers(): void {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });
}
