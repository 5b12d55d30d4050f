/**
 * Waiting and heartbeats on fake timers: every assertion is about what has happened at an
 * exact instant, never about how long a real sleep took.
 */
import { ErrorCode, isTurnwardenError } from '@turnwarden/protocol';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { testSignals } from './test-support/signals.js';
import { abortError, heartbeatFor, throwIfAborted, wait } from './wait.js';

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Tracks a promise's settlement without awaiting it. */
function track<T>(p: Promise<T>) {
  const state: { settled: boolean; value?: T; error?: unknown } = { settled: false };
  p.then(
    (value) => Object.assign(state, { settled: true, value }),
    (error: unknown) => Object.assign(state, { settled: true, error }),
  );
  return state;
}

describe('wait', () => {
  it('resolves at the delay, not before', async () => {
    const t = track(wait(30));
    await vi.advanceTimersByTimeAsync(29);
    expect(t.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(t).toEqual({ settled: true, value: undefined });
  });

  it('rejects with TURN_ABORTED the moment the signal is aborted, and clears its timer', async () => {
    const { controller } = testSignals();
    const t = track(wait(60_000, controller.signal));
    await vi.advanceTimersByTimeAsync(20);
    expect(t.settled).toBe(false);
    controller.abort('cancel');
    await vi.advanceTimersByTimeAsync(0); // no time passes: only the abort
    expect(t.settled).toBe(true);
    expect(isTurnwardenError(t.error, ErrorCode.TURN_ABORTED)).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('rejects at once when the signal is already aborted, starting no timer', async () => {
    const controller = new AbortController();
    controller.abort('watchdog');
    await expect(wait(60_000, controller.signal, 'nap')).rejects.toMatchObject({
      code: ErrorCode.TURN_ABORTED,
      message: 'nap aborted: watchdog',
    });
    expect(vi.getTimerCount()).toBe(0);
  });

  it('without a signal, nothing interrupts it', async () => {
    const t = track(wait(50));
    await vi.advanceTimersByTimeAsync(49);
    expect(t.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(t.settled).toBe(true);
  });
});

describe('abortError / throwIfAborted', () => {
  it('keeps the signal reason as the cause and in the message', () => {
    const controller = new AbortController();
    const reason = new Error('deadline passed');
    controller.abort(reason);
    const error = abortError(controller.signal, 'tool');
    expect(error.code).toBe(ErrorCode.TURN_ABORTED);
    expect(error.message).toBe('tool aborted: deadline passed');
    expect(error.cause).toBe(reason);
  });

  it('throws only once aborted', () => {
    const controller = new AbortController();
    expect(() => throwIfAborted(controller.signal)).not.toThrow();
    controller.abort();
    expect(() => throwIfAborted(controller.signal)).toThrow(
      expect.objectContaining({ code: 'TURN_ABORTED' }),
    );
  });
});

describe('heartbeatFor', () => {
  it('beats at the start and after every interval: 1 + ceil(ms / everyMs), on schedule', async () => {
    const ctx = testSignals();
    const t = track(heartbeatFor(100, 20, ctx));
    expect(ctx.beats()).toBe(1); // at the start, synchronously
    const seen: number[] = [];
    for (let i = 0; i < 5; i++) {
      await vi.advanceTimersByTimeAsync(19);
      seen.push(ctx.beats());
      await vi.advanceTimersByTimeAsync(1);
      seen.push(ctx.beats());
    }
    expect(seen).toEqual([1, 2, 2, 3, 3, 4, 4, 5, 5, 6]);
    expect(t).toEqual({ settled: true, value: 6 });
  });

  it('counts a shorter last interval', async () => {
    const ctx = testSignals();
    const t = track(heartbeatFor(50, 20, ctx));
    await vi.advanceTimersByTimeAsync(49);
    expect(t.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(t).toEqual({ settled: true, value: 4 });
    expect(ctx.beats()).toBe(4);
  });

  it('beats once for a zero duration', async () => {
    const ctx = testSignals();
    expect(await heartbeatFor(0, 20, ctx)).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('rejects with TURN_ABORTED at the abort and never beats again', async () => {
    const ctx = testSignals();
    const t = track(heartbeatFor(60_000, 10, ctx));
    await vi.advanceTimersByTimeAsync(55);
    expect(ctx.beats()).toBe(6);
    ctx.controller.abort('cancel');
    await vi.advanceTimersByTimeAsync(0);
    expect(t.settled).toBe(true);
    expect(isTurnwardenError(t.error, ErrorCode.TURN_ABORTED)).toBe(true);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(ctx.beats()).toBe(6);
    expect(vi.getTimerCount()).toBe(0);
  });
});
