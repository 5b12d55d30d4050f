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
  };
}

/** Collects every item of an async iterable. */
export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

/**
 * Aborts `controller` after `afterMs`, then awaits `promise` and returns its rejection and how
 * long after the abort it settled. Fails if the promise resolves.
 */
export async function abortDuring(
  promise: Promise<unknown>,
  controller: AbortController,
  afterMs: number,
): Promise<{ error: unknown; lateMs: number }> {
  let abortedAt = 0;
  const timer = setTimeout(() => {
    abortedAt = performance.now();
    controller.abort('cancel');
  }, afterMs);
  try {
    await promise;
  } catch (error) {
    return { error, lateMs: performance.now() - abortedAt };
  } finally {
    clearTimeout(timer);
  }
  throw new Error('expected the promise to reject');
}
