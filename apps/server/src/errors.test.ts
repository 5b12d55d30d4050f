/**
 * Every error code's HTTP status and body (the real-port tests cover the common ones through the
 * runtime; this covers the mapping itself, 503 included, through fastify's inject).
 */
import type { Duplex } from 'node:stream';
import { Writable } from 'node:stream';
import { ErrorCode, ID_RULE, TurnwardenError } from '@turnwarden/protocol';
import Fastify, { type FastifyError, type FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { handleError, refuseMalformed, refuseUnrouted } from './errors.js';

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

/** A pino logger whose lines are kept, parsed. */
function captured() {
  const lines: { level: number; msg: string; [key: string]: unknown }[] = [];
  const logger = pino(
    { level: 'trace' },
    new Writable({
      write(chunk, _encoding, done) {
        lines.push(JSON.parse(String(chunk)));
        done();
      },
    }),
  );
  return { logger, lines };
}

/** An app with the API's validation (zod) and error handler, and routes that refuse. */
async function validating(options: { bodyLimit?: number; logger?: pino.Logger } = {}) {
  const app = Fastify({
    ...(options.bodyLimit === undefined ? {} : { bodyLimit: options.bodyLimit }),
    ...(options.logger === undefined ? {} : { loggerInstance: options.logger }),
  }).withTypeProvider<ZodTypeProvider>();
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.setErrorHandler(handleError);
  app.post(
    '/messages',
    {
      schema: {
        body: z.strictObject({ content: z.string().min(1), tools: z.array(z.string()).optional() }),
        querystring: z.strictObject({ limit: z.coerce.number().int().min(1).optional() }),
      },
    },
    async () => ({ ok: true }),
  );
  app.get('/boom', async () => {
    throw new Error('secret internals');
  });
  return app;
}

describe('T5: refusals of bad input name the field, and are not retryable', () => {
  const post = async (payload: string, url = '/messages', type = 'application/json') => {
    const app = await validating();
    const res = await app.inject({ method: 'POST', url, headers: { 'content-type': type }, payload });
    await app.close();
    return { status: res.statusCode, body: res.json() };
  };

  it('a nested field is named by its dotted path; the message names where and what', async () => {
    expect(await post(JSON.stringify({ content: 'hi', tools: ['a', 1] }))).toEqual({
      status: 400,
      body: {
        error: {
          code: 'INVALID_INPUT',
          message: 'body: Invalid input: expected string, received number',
          retryable: false,
          details: { field: 'tools.1' },
        },
      },
    });
  });

  it('an unknown field is named by its key; a body that is no object is named body', async () => {
    const unknown = await post(JSON.stringify({ content: 'hi', extra: 1 }));
    expect([unknown.status, unknown.body.error.details]).toEqual([400, { field: 'extra' }]);
    const root = await post('123');
    expect([root.status, root.body.error.details, root.body.error.message]).toEqual([
      400,
      { field: 'body' },
      'body: Invalid input: expected object, received number',
    ]);
  });

  it('a bad query parameter is named, and the message says it was the querystring', async () => {
    const r = await post(JSON.stringify({ content: 'hi' }), '/messages?limit=0');
    expect([r.status, r.body.error.details, r.body.error.message.split(':')[0]]).toEqual([
      400,
      { field: 'limit' },
      'querystring',
    ]);
  });

  it('a body over bodyLimit is 400 INVALID_INPUT naming body', async () => {
    const app = await validating({ bodyLimit: 16 });
    const res = await app.inject({
      method: 'POST',
      url: '/messages',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ content: 'x'.repeat(64) }),
    });
    await app.close();
    expect([res.statusCode, res.json()]).toEqual([
      400,
      {
        error: {
          code: 'INVALID_INPUT',
          message: 'the request body is too large',
          retryable: false,
          details: { field: 'body' },
        },
      },
    ]);
  });

  it('a body of a media type the API does not read, or an empty JSON body, is 400 INVALID_INPUT naming body', async () => {
    for (const [type, payload] of [
      ['application/xml', '<a/>'],
      ['application/json', ''],
    ] as const) {
      const r = await post(payload, '/messages', type);
      expect([type, r.status, r.body.error.code, r.body.error.retryable, r.body.error.details]).toEqual([
        type,
        400,
        'INVALID_INPUT',
        false,
        { field: 'body' },
      ]);
      expect(r.body.error.message).toMatch(/media type|empty/i);
    }
  });

  it('an unexpected error is logged as "request failed" with the error, for an operator', async () => {
    const { logger, lines } = captured();
    const app = await validating({ logger });
    expect((await app.inject({ method: 'GET', url: '/boom' })).statusCode).toBe(500);
    await app.close();
    const failed = lines.filter((l) => l.msg === 'request failed');
    expect(failed).toEqual([
      expect.objectContaining({ level: 50, err: expect.objectContaining({ message: 'secret internals' }) }),
    ]);
  });
});

describe('the router’s refusals (refuseUnrouted)', () => {
  async function routed(url: string, logger?: pino.Logger) {
    const app = Fastify({
      routerOptions: { maxParamLength: 8 },
      frameworkErrors: refuseUnrouted,
      ...(logger === undefined ? {} : { loggerInstance: logger }),
    });
    app.get('/v1/workstreams/:workstreamId', async () => 'ok');
    app.get('/console/:file', async () => 'ok');
    // A framework error of another kind: what the router would hand over for a fault of its own.
    app.get('/other', async (request, reply) =>
      refuseUnrouted(
        Object.assign(new Error('inside'), { code: 'FST_ERR_OTHER' }) as FastifyError,
        request,
        reply,
      ),
    );
    const res = await app.inject({ method: 'GET', url });
    await app.close();
    return { status: res.statusCode, body: res.json() };
  }

  it('T5: a workstream id that is not percent-encoded UTF-8, or too long, is 400 naming workstreamId and saying which', async () => {
    const invalid = (message: string) => ({
      status: 400,
      body: {
        error: { code: 'INVALID_INPUT', message, retryable: false, details: { field: 'workstreamId' } },
      },
    });
    expect(await routed('/v1/workstreams/%FF')).toEqual(
      invalid('workstreamId: is not valid percent-encoded UTF-8'),
    );
    expect(await routed('/v1/workstreams/abcdefghijk')).toEqual(invalid(`workstreamId: ${ID_RULE}`));
  });

  it('elsewhere, such a path is 404 NOT_FOUND naming the route', async () => {
    expect(await routed('/console/%FF')).toEqual({
      status: 404,
      body: { error: { code: 'NOT_FOUND', message: 'no route GET /console/%FF', retryable: false } },
    });
  });

  it('any other framework error is 500 INTERNAL, logged as "request failed"', async () => {
    const { logger, lines } = captured();
    expect(await routed('/other', logger)).toEqual({
      status: 500,
      body: { error: { code: 'INTERNAL', message: 'internal error', retryable: false } },
    });
    expect(lines.filter((l) => l.msg === 'request failed')).toEqual([
      expect.objectContaining({ level: 50, err: expect.objectContaining({ message: 'inside' }) }),
    ]);
  });
});

describe('the HTTP parser’s refusals (refuseMalformed)', () => {
  /** A socket that records what is written to it, and a host whose log lines are kept. */
  function refuse(code: string | undefined, socketState: { destroyed?: boolean; writable?: boolean } = {}) {
    const written: string[] = [];
    const socket = {
      destroyed: socketState.destroyed ?? false,
      writable: socketState.writable ?? true,
      write(text: string) {
        written.push(text);
        return true;
      },
      destroy() {
        this.destroyed = true;
      },
    };
    const logs: { obj: unknown; msg: string }[] = [];
    const host = { log: { debug: (obj: unknown, msg: string) => logs.push({ obj, msg }) } };
    const err = Object.assign(new Error('parse'), code === undefined ? {} : { code });
    refuseMalformed.call(host as unknown as FastifyInstance, err, socket as unknown as Duplex);
    const text = written.join('');
    const at = text.indexOf('\r\n\r\n');
    return {
      written,
      statusLine: text.split('\r\n')[0],
      body: at < 0 ? undefined : JSON.parse(text.slice(at + 4)),
      destroyed: socket.destroyed,
      logs,
    };
  }

  it('headers too large: 431 naming headers; too slow: 408 TIMEOUT, retryable; otherwise 400 naming the request and the parser’s reason', () => {
    const big = refuse('HPE_HEADER_OVERFLOW');
    expect([big.statusLine, big.body, big.destroyed]).toEqual([
      'HTTP/1.1 431 Request Header Fields Too Large',
      {
        error: {
          code: 'INVALID_INPUT',
          message: 'the request headers are too large',
          retryable: false,
          details: { field: 'headers' },
        },
      },
      true,
    ]);
    const slow = refuse('ERR_HTTP_REQUEST_TIMEOUT');
    expect([slow.statusLine, slow.body]).toEqual([
      'HTTP/1.1 408 Request Timeout',
      { error: { code: 'TIMEOUT', message: 'the request did not arrive in time', retryable: true } },
    ]);
    const bad = refuse('HPE_INVALID_METHOD');
    expect([bad.statusLine, bad.body]).toEqual([
      'HTTP/1.1 400 Bad Request',
      {
        error: {
          code: 'INVALID_INPUT',
          message: 'the request is not valid HTTP/1.1',
          retryable: false,
          details: { field: 'request', reason: 'HPE_INVALID_METHOD' },
        },
      },
    ]);
    expect(refuse(undefined).body.error.details).toEqual({ field: 'request' });
    expect(bad.logs).toEqual([
      { obj: { code: 'HPE_INVALID_METHOD', status: 400 }, msg: 'client error: malformed request refused' },
    ]);
  });

  it('a connection reset, or a socket already gone, is not answered, nor logged', () => {
    for (const gone of [refuse('ECONNRESET'), refuse('HPE_INVALID_METHOD', { destroyed: true })]) {
      expect([gone.written, gone.logs]).toEqual([[], []]);
    }
    expect(refuse('ECONNRESET').destroyed).toBe(false);
  });

  it('a socket that can no longer be written is closed without a write', () => {
    const ended = refuse('HPE_INVALID_METHOD', { writable: false });
    expect([ended.written, ended.destroyed, ended.logs.length]).toEqual([[], true, 1]);
  });
});
