/** PostgreSQL failures as typed errors: which are retryable, and the password never shown. */
import { describe, expect, it } from 'vitest';
import { toPgStoreError } from './pg-errors.js';

const withCode = (code: string, message = 'failed') => Object.assign(new Error(message), { code });

describe('toPgStoreError', () => {
  it('marks retryable what a retry can succeed after: serialization, deadlock, shutdown, timeouts, an ended session, a lost connection', () => {
    for (const code of [
      '40001',
      '40P01',
      '57P01',
      '57P02',
      '57P03',
      '53300',
      '55P03',
      '57014',
      '25P03',
      '57P05',
    ]) {
      expect(toPgStoreError(withCode(code), 'op', undefined), code).toMatchObject({
        code: 'STORE_ERROR',
        retryable: true,
        details: { operation: 'op', sqlState: code },
      });
    }
    for (const code of ['08006', '08003', 'ECONNRESET', 'EPIPE', 'ECONNREFUSED']) {
      expect(toPgStoreError(withCode(code), 'op', undefined).retryable, code).toBe(true);
    }
    expect(toPgStoreError(new Error('Connection terminated unexpectedly'), 'op', undefined).retryable).toBe(
      true,
    );
  });

  it('does not mark retryable what would fail again: a constraint, a syntax error, an unknown failure', () => {
    for (const code of ['23505', '42601', '42P01', '22P02']) {
      expect(toPgStoreError(withCode(code), 'op', undefined).retryable, code).toBe(false);
    }
    expect(toPgStoreError(new Error('something else'), 'op', undefined).retryable).toBe(false);
  });

  it('redacts the password from the message and keeps no cause that carries it', () => {
    const e = toPgStoreError(new Error('auth failed for s3cret'), 'open', 's3cret');
    expect(e.message).toBe('store open failed: auth failed for ***');
    expect(e.cause).toBeUndefined();
    expect(toPgStoreError(new Error('plain'), 'open', 's3cret').cause).toBeInstanceOf(Error);
  });
});
