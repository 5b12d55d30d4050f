/**
 * The HTTP edges, through real sockets: what clients nobody on the project wrote found. Every id
 * the API accepts is addressable by every route (T5); every refusal — the router's, the HTTP
 * parser's, a console name that is no asset — is the documented error body; a refused oversize
 * body's answer reaches a client that writes its whole body before reading, within the drain's
 * bounds; and at `logLevel: 'trace'` a client error logs no token (T1).
 */
import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { checkServerConfig, type RunningServer, startServer } from './index.js';
import type { ServerConfigInput } from './server.js';
import { chunked, exchange, type RawOutcome, summary } from './test-support/raw-http.js';

const ALICE = 'alice-token-0123456789abcdef';
const LIMIT = 4096;

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.shutdown();
  server = undefined;
});

async function start(extra: Partial<ServerConfigInput> = {}, logger?: pino.Logger) {
  server = await startServer(
    checkServerConfig({
      port: 0,
      db: ':memory:',
      logLevel: 'silent',
      shutdownGraceMs: 2_000,
      bodyLimitBytes: LIMIT,
      tokens: [{ token: ALICE, tenantId: 'acme', principal: 'alice' }],
      runtime: { pool: { maxWorkers: 1, warmWorkers: 1 } },
      ...extra,
    }),
    logger === undefined ? {} : { logger },
  );
  return server;
}

const port = () => Number(new URL(server!.url).port);

/** A request head, with Alice's token unless `token` is false. */
function head(method: string, path: string, headers: Record<string, string | number> = {}, token = true) {
  const lines = [`${method} ${path} HTTP/1.1`, 'Host: 127.0.0.1'];
  if (token) lines.push(`Authorization: Bearer ${ALICE}`);
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

async function call(method: string, path: string, body?: unknown) {
  const res = await fetch(`${server!.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${ALICE}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
}

/**
 * `promise`, or an assertion failure naming `what` once `ms` have passed: for a wait whose
 * failure would otherwise be the test's timeout. The bound is many times what an answer on
 * loopback takes on a busy machine.
 */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('late')), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } catch (e) {
    if ((e as Error).message === 'late') expect.fail(`${what}: not within ${ms} ms`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

const answer = (outcome: RawOutcome) => {
  if ('failed' in outcome) expect.fail(`no answer: ${outcome.failed}`);
  return outcome.answer;
};

/** The documented error body: exactly these keys, of these types. */
function expectErrorBody(body: unknown, code: string, field?: string) {
  expect(body).toEqual({
    error: {
      code,
      message: expect.any(String),
      retryable: expect.any(Boolean),
      ...(field === undefined ? {} : { details: expect.objectContaining({ field }) }),
    },
  });
}

describe('the HTTP edges, over real sockets', () => {
  it('T5: a 128-character id is addressable by every route: create, get, send, status, history, events, close, delete', async () => {
    await start();
    const id = `${'a'.repeat(120)}-1234567`;
    expect(id).toHaveLength(128);
    const created = await call('POST', '/v1/workstreams', { workstreamId: id });
    expect(created.status).toBe(201);
    expect((await call('GET', `/v1/workstreams/${id}`)).status).toBe(200);
    const sent = await call('POST', `/v1/workstreams/${id}/messages`, {
      content: JSON.stringify({ script: [{ text: 'hi' }] }),
      wait: true,
    });
    expect([sent.status, sent.body.status]).toEqual([200, 'completed']);
    expect((await call('GET', `/v1/workstreams/${id}/status`)).body.state).toBe('idle');
    expect((await call('GET', `/v1/workstreams/${id}/history`)).body.rows).toHaveLength(2);
    const stop = new AbortController();
    const events = await fetch(`${server!.url}/v1/workstreams/${id}/events`, {
      headers: { authorization: `Bearer ${ALICE}`, accept: 'text/event-stream' },
      signal: stop.signal,
    });
    expect([events.status, events.headers.get('content-type')]).toEqual([200, 'text/event-stream']);
    stop.abort();
    expect((await call('POST', `/v1/workstreams/${id}/close`)).status).toBe(204);
    const deleted = await call('DELETE', `/v1/workstreams/${id}?incarnation=${created.body.incarnation}`);
    expect(deleted.status).toBe(204);
    expect((await call('GET', `/v1/workstreams/${id}`)).status).toBe(404);
  });

  it('T5: an id over 128 characters is 400 INVALID_INPUT naming workstreamId, in a body and in every path', async () => {
    await start();
    const long = 'b'.repeat(129);
    const created = await call('POST', '/v1/workstreams', { workstreamId: long });
    expect(created.status).toBe(400);
    expectErrorBody(created.body, 'INVALID_INPUT', 'workstreamId');
    for (const path of [
      `/v1/workstreams/${long}`,
      `/v1/workstreams/${long}/status`,
      `/v1/workstreams/${long}/history`,
      `/v1/workstreams/${long}/events`,
      `/v1/workstreams/${'c'.repeat(5000)}/status`,
    ]) {
      const refused = answer(await exchange(port(), [head('GET', path)]));
      expect([path.slice(0, 40), refused.status]).toEqual([path.slice(0, 40), 400]);
      expectErrorBody(refused.body, 'INVALID_INPUT', 'workstreamId');
    }
    const send = answer(
      await exchange(port(), [
        head('POST', `/v1/workstreams/${long}/messages`, {
          'content-type': 'application/json',
          'content-length': 16,
        }),
        '{"content":"hi"}',
      ]),
    );
    expect(send.status).toBe(400);
    expectErrorBody(send.body, 'INVALID_INPUT', 'workstreamId');
    expect((await call('GET', '/v1/workstreams')).body.items).toEqual([]);
  });

  it('a path that is not valid percent-encoding is 400 INVALID_INPUT naming workstreamId, not the router’s own body', async () => {
    await start();
    for (const path of [
      '/v1/workstreams/%FF',
      '/v1/workstreams/%G0/status',
      '/v1/workstreams/%ED%A0%80/history',
      '/v1/workstreams/ok%E2%82/events',
    ]) {
      const refused = answer(await exchange(port(), [head('GET', path)]));
      expect([path, refused.status]).toEqual([path, 400]);
      expectErrorBody(refused.body, 'INVALID_INPUT', 'workstreamId');
    }
    // Not a workstream route: no such file.
    const asset = answer(await exchange(port(), [head('GET', '/console/%FF', {}, false)]));
    expect(asset.status).toBe(404);
    expectErrorBody(asset.body, 'NOT_FOUND');
  });

  it('requests the HTTP parser refuses are answered in the documented body: 400 for malformed HTTP, 431 for oversized headers', async () => {
    await start();
    const cases: [string, string, number, string][] = [
      ['not HTTP', 'HELLO THERE\r\n\r\n', 400, 'request'],
      [
        'a control character in a header',
        head('GET', '/v1/workstreams', { 'x-bad': 'a\u0001b' }),
        400,
        'request',
      ],
      ['a bad content-length', head('POST', '/v1/workstreams', { 'content-length': 'many' }), 400, 'request'],
      [
        'headers over 16 KiB',
        head('GET', '/v1/workstreams', { 'x-big': 'x'.repeat(20_000) }),
        431,
        'headers',
      ],
    ];
    for (const [what, request, status, field] of cases) {
      const refused = answer(await exchange(port(), [request]));
      expect([what, refused.status, refused.headers['content-type']]).toEqual([
        what,
        status,
        'application/json; charset=utf-8',
      ]);
      expectErrorBody(refused.body, 'INVALID_INPUT', field);
    }
  });

  it('a request node times out (its headers too slow) is 408 TIMEOUT in the documented body', async () => {
    await start();
    const accepted = new Promise<Socket>((resolve) => server!.app.server.once('connection', resolve));
    const client = connect(port(), '127.0.0.1');
    client.write('GET /v1/workstreams HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    const socket = await accepted;
    const received: Buffer[] = [];
    client.on('data', (chunk: Buffer) => received.push(chunk));
    const closed = new Promise((resolve) => client.on('close', resolve));
    // What node's connection check does once `headersTimeout` has passed (60 s by default).
    server!.app.server.emit(
      'clientError',
      Object.assign(new Error('timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }),
      socket,
    );
    await closed;
    const text = Buffer.concat(received).toString('utf8');
    expect(text.split('\r\n')[0]).toBe('HTTP/1.1 408 Request Timeout');
    expectErrorBody(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)), 'TIMEOUT');
  });

  it('T5: an oversize body’s 400 reaches a client that writes the whole body before it reads — content-length and chunked, every time', async () => {
    await start();
    const path = '/v1/workstreams';
    const json = { 'content-type': 'application/json' };
    const shapes: [string, () => (string | Buffer)[]][] = [
      [
        'limit + 1',
        () => [head('POST', path, { ...json, 'content-length': LIMIT + 1 }), Buffer.alloc(LIMIT + 1, 'a')],
      ],
      [
        '5 MiB',
        () => [head('POST', path, { ...json, 'content-length': 5 << 20 }), Buffer.alloc(5 << 20, 'a')],
      ],
      [
        '320 KiB chunked',
        () => [head('POST', path, { ...json, 'transfer-encoding': 'chunked' }), ...chunked(320 << 10)],
      ],
      [
        '5 MiB chunked',
        () => [head('POST', path, { ...json, 'transfer-encoding': 'chunked' }), ...chunked(5 << 20)],
      ],
      [
        '5 MiB, no token',
        () => [head('POST', path, { ...json, 'content-length': 5 << 20 }, false), Buffer.alloc(5 << 20, 'a')],
      ],
      [
        '5 MiB to an id the router refuses',
        () => [
          head('POST', '/v1/workstreams/%FF/messages', { ...json, 'content-length': 5 << 20 }),
          Buffer.alloc(5 << 20, 'a'),
        ],
      ],
    ];
    const answers: Record<string, string> = {
      '5 MiB, no token': '401 UNAUTHORIZED',
      '5 MiB to an id the router refuses': '400 INVALID_INPUT workstreamId',
    };
    const seen: Record<string, Record<string, number>> = {};
    const expected: Record<string, Record<string, number>> = {};
    for (const [what, request] of shapes) {
      seen[what] = {};
      for (let attempt = 0; attempt < 12; attempt++) {
        const outcome = summary(await exchange(port(), request()));
        seen[what][outcome] = (seen[what][outcome] ?? 0) + 1;
      }
      expected[what] = { [answers[what] ?? '400 INVALID_INPUT body']: 12 };
    }
    expect(seen).toEqual(expected);
    expect((await call('GET', '/v1/workstreams')).body.items).toEqual([]);
  }, 60_000);

  it('a refused body is read at most drainLimitBytes further, then the connection closes — over bodyLimit, without a token, or to a path the router refuses', async () => {
    await start({ drainLimitBytes: 64 * 1024 });
    const sockets: Socket[] = [];
    server!.app.server.on('connection', (socket: Socket) => sockets.push(socket));
    const chunkedJson = { 'content-type': 'application/json', 'transfer-encoding': 'chunked' };
    const read: Record<string, number> = {};
    for (const [what, request] of [
      ['over bodyLimit', head('POST', '/v1/workstreams', chunkedJson)],
      ['no token', head('POST', '/v1/workstreams', chunkedJson, false)],
      ['a bad id', head('POST', '/v1/workstreams/%FF/messages', chunkedJson)],
    ] as const) {
      // 8 MiB offered; the client may see a reset once the server gives up, and that is the point.
      await exchange(port(), [request, ...chunked(8 << 20)]);
      const socket = sockets.at(-1)!;
      read[what] = await new Promise<number>((resolve) => {
        if (socket.destroyed) resolve(socket.bytesRead);
        else socket.once('close', () => resolve(socket.bytesRead));
      });
    }
    expect(sockets).toHaveLength(3);
    // The bound and what the kernel hands over in a read or two: far from the 8 MiB offered.
    const far = (bytes: number) => bytes > 64 * 1024 && bytes < 1 << 20;
    expect(Object.entries(read).filter(([, bytes]) => !far(bytes))).toEqual([]);
  });

  it('a refused body whose Content-Length is over drainLimitBytes is not read: the 400 goes out at once, with Connection: close', async () => {
    // Were it read, the answer would wait for a body that never comes, for ten minutes.
    await start({ drainLimitBytes: 64 * 1024, drainTimeoutMs: 600_000 });
    const declared = exchange(port(), [
      head('POST', '/v1/workstreams', { 'content-type': 'application/json', 'content-length': 8 << 20 }),
    ]);
    const refused = answer(await within(declared, 10_000, 'the answer to an 8 MiB body declared, not sent'));
    expect([refused.status, refused.headers.connection]).toEqual([400, 'close']);
    expectErrorBody(refused.body, 'INVALID_INPUT', 'body');
  });

  it('a refused body that stops arriving is given up after drainTimeoutMs: the 400 is sent with Connection: close', async () => {
    await start({ drainTimeoutMs: 100 });
    // A quarter of the body declared, then nothing more.
    const stalled = exchange(port(), [
      head('POST', '/v1/workstreams', { 'content-type': 'application/json', 'content-length': LIMIT * 4 }),
      Buffer.alloc(LIMIT + 1, 'a'),
    ]);
    const refused = answer(await within(stalled, 10_000, 'the answer to a stalled oversize body'));
    expect([refused.status, refused.headers.connection]).toEqual([400, 'close']);
    expectErrorBody(refused.body, 'INVALID_INPUT', 'body');
  });

  it('under fastify’s inject (no socket, no `complete`), a request whose body was read is answered at once', async () => {
    // Were the read body taken for an unread one, the answer would wait out the drain's ten minutes.
    await start({ drainTimeoutMs: 600_000 });
    const injected = server!.app.inject({
      method: 'POST',
      url: '/v1/workstreams',
      headers: { authorization: `Bearer ${ALICE}` },
      payload: { workstreamId: 'injected' },
    });
    expect((await within(injected, 10_000, 'the answer to an injected POST')).statusCode).toBe(201);
  });

  it('T1: at logLevel trace a client error logs a line an operator can grep, without the raw request or its token', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    });
    await start({ logLevel: 'trace' }, pino({ level: 'trace' }, sink));
    const secret = ALICE;
    const requests = [
      head('GET', '/v1/workstreams', { 'x-bad': 'a\u0001b' }),
      head('GET', '/v1/workstreams', { 'x-big': 'x'.repeat(20_000) }),
      head('GET', '/v1/workstreams/%FF'),
      head('GET', '/v1/workstreams'),
    ];
    for (const request of requests) answer(await exchange(port(), [request]));
    // The token as text, and as the bytes a serialized Buffer (the raw packet) shows.
    const bytes = [...Buffer.from(secret)].join(',');
    const leaks = lines
      .filter((line) => line.includes(secret) || line.includes(bytes) || line.includes('rawPacket'))
      .map((line) => (JSON.parse(line) as { msg: string }).msg);
    expect(leaks, 'log lines that carry the token or the raw request').toEqual([]);
    const refused = lines
      .map((line) => JSON.parse(line) as { msg: string; code?: string; status?: number })
      .filter((entry) => entry.msg === 'client error: malformed request refused')
      .map((entry) => [entry.code, entry.status]);
    expect(refused).toEqual([
      ['HPE_INVALID_HEADER_TOKEN', 400],
      ['HPE_HEADER_OVERFLOW', 431],
    ]);
  });

  it('an event stream’s headers reach the client at once on a quiet workstream, not at the first keep-alive', async () => {
    await start({ keepAliveMs: 600_000 });
    await call('POST', '/v1/workstreams', { workstreamId: 'quiet' });
    const stop = new AbortController();
    // Nothing is emitted for ten minutes; the headers must not wait for it.
    const opened = fetch(`${server!.url}/v1/workstreams/quiet/events`, {
      headers: { authorization: `Bearer ${ALICE}`, accept: 'text/event-stream' },
      signal: stop.signal,
    });
    try {
      const res = await within(opened, 10_000, 'the stream’s headers, before any event or keep-alive');
      expect(res.status).toBe(200);
    } finally {
      stop.abort();
    }
  });

  it('the console serves its three files; any other name — prototype keys, traversal, NUL — is 404 in the documented body', async () => {
    await start();
    for (const file of ['index.html', 'console.js', 'console.css']) {
      const res = await fetch(`${server!.url}/console/${file}`);
      expect([file, res.status]).toEqual([file, 200]);
    }
    for (const name of [
      'constructor',
      '__proto__',
      'toString',
      'hasOwnProperty',
      'valueOf',
      '..%2Fpackage.json',
      '..%2F..%2Fpackage.json',
      'index.html%00',
      '%2e%2e',
    ]) {
      const refused = answer(await exchange(port(), [head('GET', `/console/${name}`, {}, false)]));
      expect([name, refused.status]).toEqual([name, 404]);
      expectErrorBody(refused.body, 'NOT_FOUND');
    }
  });
});
