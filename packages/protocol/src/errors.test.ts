import { describe, expect, it } from 'vitest';
import { ERROR_TABLE, ErrorCode } from './error-codes.js';
import { errors, fromWire, isTurnwardenError, TurnwardenError } from './errors.js';

describe('the error table', () => {
  it('names every code by itself, with a constructor of that code', () => {
    const codes = Object.keys(ERROR_TABLE);
    expect(Object.values(ErrorCode)).toEqual(codes);
    const made = Object.values(errors).map((make) => (make as (m: string) => TurnwardenError)('m').code);
    expect(made).toEqual(codes);
  });

  it("a constructor's error carries the message, details and cause given, retryable as the table says", () => {
    const cause = new Error('under');
    const e = errors.leasedElsewhere(
      'held',
      { workstreamId: 'w', holder: 'h2:x', expiresAt: 5, retryAfterMs: 3 },
      { cause },
    );
    expect(e).toBeInstanceOf(TurnwardenError);
    expect(e).toMatchObject({
      name: 'TurnwardenError',
      code: 'LEASED_ELSEWHERE',
      message: 'held',
      retryable: true,
      details: { workstreamId: 'w', holder: 'h2:x', expiresAt: 5, retryAfterMs: 3 },
      cause,
    });
    expect(errors.turnAborted('gone').retryable).toBe(false);
    expect(errors.turnAborted('gone').details).toBeUndefined();
    expect(errors.storeError('busy', undefined, { retryable: true }).retryable).toBe(true);
    for (const [code, spec] of Object.entries(ERROR_TABLE)) {
      expect(new TurnwardenError(code as ErrorCode, 'm').retryable, code).toBe(spec.retryable);
    }
  });

  it('retryable by default: capacity, a turn or lease held elsewhere, a full queue, a timeout', () => {
    const retryable = Object.entries(ERROR_TABLE)
      .filter(([, spec]) => spec.retryable)
      .map(([code]) => code);
    expect(retryable).toEqual([
      'TURN_IN_PROGRESS',
      'LEASED_ELSEWHERE',
      'QUEUE_FULL',
      'CAPACITY_EXHAUSTED',
      'TIMEOUT',
    ]);
  });

  it('an error survives the wire with its code and details', () => {
    const e = fromWire(errors.queueFull('full', { limit: 2, retryAfterMs: 100 }).toWire());
    expect(isTurnwardenError(e, ErrorCode.QUEUE_FULL)).toBe(true);
    expect(e.details).toEqual({ limit: 2, retryAfterMs: 100 });
    expect(e.retryable).toBe(true);
  });
});
