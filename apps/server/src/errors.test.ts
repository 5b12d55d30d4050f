/**
 * Every error code's HTTP status and body (the real-port tests cover the common ones through the
 * runtime; this covers the mapping itself, 503 included, through fastify's inject).
 */
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { handleError } from './errors.js';

async function statusOf(error: Error) {
  const app = Fastify();
  app.setErrorHandler(handleError);
  app.get('/', async () => {
    throw error;
  });
  const res = await app.inject({ method: 'GET', url: '/' });
  await app.close();
  return { status: res.statusCode, retryAfter: res.headers['retry-after'], body: res.json() };
}

describe('errors over HTTP', () => {
  it.each([
    [ErrorCode.INVALID_INPUT, 400],
    [ErrorCode.INVALID_SCRIPT, 400],
    [ErrorCode.WORKSTREAM_NOT_FOUND, 404],
    [ErrorCode.WORKSTREAM_EXISTS, 409],
    [ErrorCode.WORKSTREAM_CLOSED, 409],
    [ErrorCode.TURN_IN_PROGRESS, 409],
    [ErrorCode.LEASED_ELSEWHERE, 409],
    [ErrorCode.TOOL_CLEANUP_PENDING, 409],
    [ErrorCode.COMMIT_CONFLICT, 409],
    [ErrorCode.STRUCTURE_VIOLATION, 409],
    [ErrorCode.SEND_REVOKED, 409],
    [ErrorCode.FENCED, 409],
    [ErrorCode.TURN_ABORTED, 409],
    [ErrorCode.QUEUE_FULL, 429],
    [ErrorCode.CAPACITY_EXHAUSTED, 429],
    [ErrorCode.SHUTTING_DOWN, 503],
    [ErrorCode.STORE_ERROR, 503],
    [ErrorCode.TIMEOUT, 504],
    [ErrorCode.INTERNAL, 500],
  ])('%s is HTTP %i with a typed body', async (code, status) => {
    const r = await statusOf(new TurnwardenError(code, `a ${code}`, { details: { field: 'x' } }));
    expect(r.status).toBe(status);
    expect(r.body).toEqual({
      error: { code, message: `a ${code}`, retryable: expect.any(Boolean), details: { field: 'x' } },
    });
  });

  it('429 carries Retry-After from the retry hint (rounded up to seconds, at least 1)', async () => {
    const hinted = await statusOf(
      new TurnwardenError(ErrorCode.CAPACITY_EXHAUSTED, 'full', { details: { retryAfterMs: 2_300 } }),
    );
    expect(hinted.retryAfter).toBe('3');
    expect((await statusOf(new TurnwardenError(ErrorCode.QUEUE_FULL, 'full'))).retryAfter).toBe('1');
  });

  it('a retryable 409 with a retry hint carries Retry-After too (a lease held elsewhere until it expires); one without, none', async () => {
    const leased = await statusOf(
      new TurnwardenError(ErrorCode.LEASED_ELSEWHERE, 'held', { details: { retryAfterMs: 1_200 } }),
    );
    expect([leased.status, leased.retryAfter]).toEqual([409, '2']);
    const busy = await statusOf(new TurnwardenError(ErrorCode.TURN_IN_PROGRESS, 'busy'));
    expect([busy.status, busy.retryAfter]).toEqual([409, undefined]);
  });

  it('an unexpected error is 500 INTERNAL and says nothing of its insides', async () => {
    const r = await statusOf(new Error('secret internals'));
    expect(r.status).toBe(500);
    expect(r.body).toEqual({ error: { code: 'INTERNAL', message: 'internal error', retryable: false } });
  });
});
