import { ErrorCode, isTurnwardenError } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { abortDuring, testSignals } from './test-support/signals.js';
import { abortError, heartbeatFor, throwIfAborted, wait } from './wait.js';

describe('wait', () => {
  it('resolves after the delay', async () => {
    const start = performance.now();
    await wait(30);
    expect(performance.now() - start).toBeGreaterThanOrEqual(25);
  });

  it('rejects promptly with TURN_ABORTED when the signal is aborted', async () => {
    const { controller } = testSignals();
    const { error, lateMs } = await abortDuring(wait(60_000, controller.signal), controller, 20);
    expect(isTurnwardenError(error, ErrorCode.TURN_ABORTED)).toBe(true);
    expect(lateMs).toBeLessThan(500);
  });

  it('rejects at once when the signal is already aborted', async () => {
    const controller = new AbortController();
    controller.abort('watchdog');
    const start = performance.now();
    await expect(wait(60_000, controller.signal, 'nap')).rejects.toMatchObject({
      code: ErrorCode.TURN_ABORTED,
      message: 'nap aborted: watchdog',
    });
    expect(performance.now() - start).toBeLessThan(500);
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
  it('beats at the start and after every interval: 1 + ceil(ms / everyMs)', async () => {
    const ctx = testSignals();
    const start = performance.now();
    const beats = await heartbeatFor(100, 20, ctx);
    expect(beats).toBe(6);
    expect(ctx.beats()).toBe(6);
    expect(performance.now() - start).toBeGreaterThanOrEqual(90);
  });

  it('counts a shorter last interval', async () => {
    const ctx = testSignals();
    expect(await heartbeatFor(50, 20, ctx)).toBe(4);
    expect(ctx.beats()).toBe(4);
  });

  it('beats once for a zero duration', async () => {
    const ctx = testSignals();
    expect(await heartbeatFor(0, 20, ctx)).toBe(1);
  });

  it('rejects promptly with TURN_ABORTED when aborted, and stops beating', async () => {
    const ctx = testSignals();
    const { error, lateMs } = await abortDuring(heartbeatFor(60_000, 10, ctx), ctx.controller, 55);
    expect(isTurnwardenError(error, ErrorCode.TURN_ABORTED)).toBe(true);
    expect(lateMs).toBeLessThan(500);
    const beatsAtAbort = ctx.beats();
    expect(beatsAtAbort).toBeGreaterThanOrEqual(2);
    await wait(40);
    expect(ctx.beats()).toBe(beatsAtAbort);
  });
});
