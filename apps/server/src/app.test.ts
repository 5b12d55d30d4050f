/**
 * The app's own wiring, against a fake runtime (no workers, no store), fast: defaults, request
 * ids, the documented refusal bodies, metrics by route, readiness, the console's assets,
 * keep-alive periods, and what a client going away or the server closing releases (a send not
 * yet admitted is withdrawn; an event stream's subscription ends with its client, and with the
 * server; a drain in progress ends with the server).
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { Writable } from 'node:stream';
import type { Turnwarden, TurnwardenEvent } from '@turnwarden/supervisor';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildApp } from './app.js';
import { Tokens } from './auth.js';

const TOKEN = 'app-token-0123456789abcdefgh';
const AUTH = { authorization: `Bearer ${TOKEN}` };

const STATS = {
  turnsCompleted: 0,
  turnsInterrupted: 0,
  turnsFailed: 0,
  turnsAwaitingApproval: 0,
  approvalsApproved: 0,
  approvalsDenied: 0,
  approvalsTimedOut: 0,
  watchdogFired: 0,
  abortsCommitted: 0,
  abortsDeclined: 0,
  workersTerminated: 0,
  toolResultsSynthesized: 0,
  journalRefusedFenced: 0,
  activeTurns: 2,
  admission: { active: 0, waiting: 3, admittedAfterWait: 0, refusedFull: 0, waitMs: { p99: 0 } },
  journal: { pendingRows: 0, retrying: 0, conflicts: 0 },
  watchdog: { pollLateness: { p99: 0 } },
  events: { listeners: 0 },
  pool: { warm: 1, busy: 2, starting: 0, waiting: 0, shrunk: 0 },
  models: { threads: 1, running: 2, calls: 5, failed: 0, wedged: 0, crashed: 0 },
};

interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
}
function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** What the fake runtime was asked for an event stream, and how the test drives it. */
interface Subscription {
  readonly input: { lastEventId?: number; handoff?: string; signal: AbortSignal };
  /** Events the stream yields before it waits for its signal. */
  readonly events: TurnwardenEvent[];
}

/**
 * The runtime's calls the routes make. `events` yields what `streamEvents` holds, then ends
 * when its signal aborts (as the runtime's iterator does) — or at once with `endStreams`.
 */
function fakeRuntime() {
  const subscriptions: Subscription[] = [];
  const sends: { signal: AbortSignal }[] = [];
  const fake = {
    streamEvents: [] as TurnwardenEvent[],
    endStreams: false,
    /** Set to hold getWorkstream (and so the start of an event stream) until it resolves. */
    gate: undefined as Promise<void> | undefined,
    /** Set to hold send until it resolves (or its signal aborts). */
    admit: undefined as Promise<void> | undefined,
    subscriptions,
    sends,
  };
  const tw = {
    stats: () => STATS,
    createWorkstream: async (input: { tenantId: string; workstreamId?: string }) => ({
      workstreamId: input.workstreamId ?? 'w-fresh',
      tenantId: input.tenantId,
      incarnation: 'inc-1',
    }),
    getWorkstream: async (input: { tenantId: string; workstreamId: string }) => {
      await fake.gate;
      return { workstreamId: input.workstreamId, tenantId: input.tenantId, incarnation: 'inc-1' };
    },
    send: async (input: { workstreamId: string; signal: AbortSignal }) => {
      sends.push(input);
      if (fake.admit !== undefined) {
        await Promise.race([
          fake.admit,
          new Promise((_, reject) => input.signal.addEventListener('abort', () => reject(new Error('gone')))),
        ]);
      }
      return { workstreamId: input.workstreamId, generation: 1, done: new Promise(() => {}) };
    },
    events: (input: Subscription['input']) => {
      const subscription: Subscription = { input, events: [...fake.streamEvents] };
      subscriptions.push(subscription);
      const end = fake.endStreams;
      return (async function* () {
        yield* subscription.events;
        if (end) return;
        if (!input.signal.aborted) {
          await new Promise((resolve) => input.signal.addEventListener('abort', resolve));
        }
      })();
    },
  };
  return { tw: tw as unknown as Turnwarden, fake };
}

/** The server's `turnwarden_http_event_streams` gauge, read from its /metrics. */
async function openStreams(a: FastifyInstance): Promise<number> {
  const res = await a.inject({ method: 'GET', url: '/metrics' });
  const line = res.body.split('\n').find((l) => l.startsWith('turnwarden_http_event_streams '));
  if (line === undefined) throw new Error('no turnwarden_http_event_streams in /metrics');
  return Number(line.split(' ')[1]);
}

function captured() {
  const lines: { level: number; msg: string; reqId?: unknown; [key: string]: unknown }[] = [];
  const logger = pino(
    { level: 'info' },
    new Writable({
      write(chunk, _encoding, done) {
        lines.push(JSON.parse(String(chunk)));
        done();
      },
    }),
  );
  return { logger, lines };
}

const apps: FastifyInstance[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const app of apps.splice(0)) await app.close();
});

async function app(options: { version?: string; keepAliveMs?: number; drainTimeoutMs?: number } = {}) {
  const { tw, fake } = fakeRuntime();
  const { logger, lines } = captured();
  const built = await buildApp({
    tw,
    tokens: new Tokens([{ token: TOKEN, tenantId: 'acme', principal: 'alice' }]),
    logger,
    ...options,
  });
  apps.push(built);
  return { app: built, fake, lines };
}

/** The app on a loopback port; its URL. */
async function listening(built: FastifyInstance) {
  await built.listen({ host: '127.0.0.1', port: 0 });
  return `http://127.0.0.1:${(built.server.address() as AddressInfo).port}`;
}

/** A request on a connection of its own (no pool): aborting it closes the connection at once. */
function open(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string; signal?: AbortSignal } = {},
) {
  return new Promise<IncomingMessage>((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method: init.method ?? 'GET',
        headers: init.headers ?? {},
        agent: false,
        ...(init.signal === undefined ? {} : { signal: init.signal }),
      },
      resolve,
    );
    req.on('error', reject);
    req.end(init.body);
  });
}

const STREAM = { ...AUTH, accept: 'text/event-stream' };

/** `promise`, or a failure naming `what` after `ms` (a wait whose failure would be the test's timeout). */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The next request the server receives; `closed` once its response is closed (sent, or the client gone). */
function nextRequest(built: FastifyInstance) {
  return new Promise<{ closed: Promise<void> }>((resolve) =>
    built.server.once('request', (_req, res) => {
      resolve({ closed: new Promise<void>((done) => res.once('close', () => done())) });
    }),
  );
}

/** Until `test` holds, turn by turn of the event loop (bounded). */
const until = (test: () => boolean, what: string) =>
  within(
    (async () => {
      while (!test()) await new Promise((resolve) => setImmediate(resolve));
    })(),
    10_000,
    what,
  );

/** Once `signal` has aborted (bounded). */
const aborted = (signal: AbortSignal, what: string) =>
  within(
    new Promise((resolve) =>
      signal.aborted ? resolve(undefined) : signal.addEventListener('abort', resolve),
    ),
    10_000,
    what,
  );

const event = (id: number): TurnwardenEvent =>
  ({ id, type: 'turn_started', workstreamId: 'w1', generation: 1 }) as unknown as TurnwardenEvent;

describe('the app, against a fake runtime', () => {
  it('bodies up to 1 MiB are read by default', async () => {
    const { app: a } = await app();
    const res = await a.inject({
      method: 'POST',
      url: '/v1/workstreams/w1/messages',
      headers: AUTH,
      payload: { content: 'x'.repeat(512 * 1024) },
    });
    expect(res.statusCode).toBe(202);
  });

  it('every log line of a request carries its own request id, a UUID', async () => {
    const { app: a, lines } = await app();
    await a.inject({ method: 'GET', url: '/healthz' });
    await a.inject({ method: 'GET', url: '/healthz' });
    const ids = lines.filter((l) => l.msg === 'incoming request').map((l) => l.reqId);
    expect(ids).toHaveLength(2);
    for (const id of ids)
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(ids[0]).not.toBe(ids[1]);
    const completed = lines.filter((l) => l.msg === 'request completed').map((l) => l.reqId);
    expect(completed).toEqual(ids);
  });

  it('T1: no token is 401 UNAUTHORIZED in the documented body, with WWW-Authenticate', async () => {
    const { app: a } = await app();
    const res = await a.inject({ method: 'GET', url: '/v1/workstreams' });
    expect([res.statusCode, res.headers['www-authenticate'], res.json()]).toEqual([
      401,
      'Bearer',
      { error: { code: 'UNAUTHORIZED', message: 'a valid bearer token is required', retryable: false } },
    ]);
  });

  it('an unknown route is 404 NOT_FOUND naming it; a refused path whose (empty) body was read keeps its connection', async () => {
    const { app: a } = await app();
    const none = await a.inject({ method: 'GET', url: '/nothing/here' });
    expect([none.statusCode, none.json()]).toEqual([
      404,
      { error: { code: 'NOT_FOUND', message: 'no route GET /nothing/here', retryable: false } },
    ]);
    const bad = await a.inject({ method: 'GET', url: '/v1/workstreams/%FF', headers: AUTH });
    expect(bad.statusCode).toBe(400);
    expect(bad.headers.connection).not.toBe('close');
  });

  it('/healthz reports the version given, 0.1.0 by default; so does the OpenAPI document', async () => {
    const given = (await app({ version: '9.8.7' })).app;
    expect((await given.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({
      status: 'ok',
      version: '9.8.7',
    });
    expect((await given.inject({ method: 'GET', url: '/openapi.json' })).json().info.version).toBe('9.8.7');
    const plain = (await app()).app;
    expect((await plain.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({
      status: 'ok',
      version: '0.1.0',
    });
  });

  it('/readyz is ready with the runtime’s active turns and waiting sends', async () => {
    const { app: a } = await app();
    expect((await a.inject({ method: 'GET', url: '/readyz' })).json()).toEqual({
      ready: true,
      activeTurns: 2,
      waiting: 3,
    });
  });

  it('the request histogram is labelled by route pattern; a request no route matched, by "unknown"', async () => {
    const { app: a } = await app();
    await a.inject({ method: 'GET', url: '/healthz' });
    await a.inject({ method: 'GET', url: '/v1/workstreams/w1', headers: AUTH });
    await a.inject({ method: 'GET', url: '/no/such/route' });
    const text = (await a.inject({ method: 'GET', url: '/metrics' })).body;
    const count = (labels: string) =>
      text
        .split('\n')
        .find((l) => l.startsWith(`turnwarden_http_request_duration_ms_count{${labels}}`))
        ?.split(' ')[1];
    expect(count('route="/healthz",method="GET",status="200"')).toBe('1');
    expect(count('route="/v1/workstreams/:workstreamId",method="GET",status="200"')).toBe('1');
    expect(count('route="unknown",method="GET",status="404"')).toBe('1');
    // The pool's and the model threads' figures, read from stats() at the scrape.
    for (const line of [
      'turnwarden_pool_workers 3',
      'turnwarden_model_threads 1',
      'turnwarden_model_calls_running 2',
    ]) {
      expect(text.split('\n'), line).toContain(line);
    }
  });

  it('the API documentation is served at /docs', async () => {
    const { app: a } = await app();
    const res = await a.inject({ method: 'GET', url: '/docs' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toContain('swagger');
  });

  it('the console: / redirects to it; its three files with their types; another name is 404 in the documented body', async () => {
    const { app: a } = await app();
    const root = await a.inject({ method: 'GET', url: '/' });
    expect([root.statusCode, root.headers.location]).toEqual([302, '/console']);
    const page = await a.inject({ method: 'GET', url: '/console' });
    expect([page.statusCode, page.headers['content-type']]).toEqual([200, 'text/html; charset=utf-8']);
    expect(page.body).toContain('<html');
    for (const [file, type] of [
      ['index.html', 'text/html; charset=utf-8'],
      ['console.js', 'text/javascript; charset=utf-8'],
      ['console.css', 'text/css; charset=utf-8'],
    ]) {
      const res = await a.inject({ method: 'GET', url: `/console/${file}` });
      expect([file, res.statusCode, res.headers['content-type']]).toEqual([file, 200, type]);
    }
    const none = await a.inject({ method: 'GET', url: '/console/nope.js' });
    expect([none.statusCode, none.json()]).toEqual([
      404,
      { error: { code: 'NOT_FOUND', message: 'no such asset', retryable: false } },
    ]);
  });
});

describe('the drain of a refused body, against a fake runtime', () => {
  it('the server’s close ends a drain in progress: the refusal goes out with Connection: close and the close completes', async () => {
    const { app: a } = await app({ drainTimeoutMs: 600_000 });
    const url = new URL(await listening(a));
    const arrived = new Promise<IncomingMessage>((resolve) => a.server.once('request', resolve));
    // No token, and a quarter of the body declared: the 401 waits for the rest, for ten minutes.
    const client = connect(Number(url.port), url.hostname);
    const received: Buffer[] = [];
    client.on('data', (chunk: Buffer) => received.push(chunk));
    const ended = new Promise((resolve) => client.on('close', resolve));
    client.write(
      'POST /v1/workstreams HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"a":',
    );
    const req = await within(arrived, 10_000, 'the request');
    // The drain reads what is left of the body: it has started once something listens for it.
    await until(() => req.listenerCount('data') > 0, 'the drain');
    await within(a.close(), 10_000, 'the server’s close with a drain in progress');
    await within(ended, 10_000, 'the connection closed');
    const text = Buffer.concat(received).toString('utf8');
    expect(text.split('\r\n')[0]).toBe('HTTP/1.1 401 Unauthorized');
    expect(text.toLowerCase()).toContain('\r\nconnection: close\r\n');
  });
});

describe('event streams, against a fake runtime', () => {
  it('a client that will not take text/event-stream is 406 INVALID_INPUT naming Accept', async () => {
    const { app: a, fake } = await app();
    const res = await a.inject({
      method: 'GET',
      url: '/v1/workstreams/w1/events',
      headers: { ...AUTH, accept: 'application/json' },
    });
    expect([res.statusCode, res.json()]).toEqual([
      406,
      {
        error: {
          code: 'INVALID_INPUT',
          message: 'this route answers text/event-stream only',
          retryable: false,
          details: { field: 'Accept' },
        },
      },
    ]);
    expect(fake.subscriptions).toEqual([]);
  });

  it('E1: a Last-Event-ID that is not an event id is 400 INVALID_INPUT naming it; nothing is subscribed', async () => {
    const { app: a, fake } = await app();
    for (const header of ['abc', '12abc', 'abc12', '-1', '']) {
      const res = await a.inject({
        method: 'GET',
        url: '/v1/workstreams/w1/events',
        headers: { ...AUTH, accept: 'text/event-stream', 'last-event-id': header },
      });
      expect([header, res.statusCode, res.json()]).toEqual([
        header,
        400,
        {
          error: {
            code: 'INVALID_INPUT',
            message: 'Last-Event-ID must be an event id',
            retryable: false,
            details: { field: 'Last-Event-ID' },
          },
        },
      ]);
    }
    expect(fake.subscriptions).toEqual([]);
  });

  it('E1 E2: the stream starts where the client says — after Last-Event-ID, after a handoff, or live — and frames each event', async () => {
    const { app: a, fake } = await app();
    fake.streamEvents = [event(6), event(7)];
    fake.endStreams = true;
    const open = (headers: Record<string, string>, query = '') =>
      a.inject({
        method: 'GET',
        url: `/v1/workstreams/w1/events${query}`,
        headers: { ...AUTH, accept: 'text/event-stream', ...headers },
      });
    const resumed = await open({ 'last-event-id': '5' });
    expect(resumed.statusCode).toBe(200);
    expect(resumed.body).toContain('id: 6\nevent: turn_started\ndata: {"id":6,');
    expect(resumed.body).toContain('id: 7\n');
    await open({}, '?handoff=tok-1');
    await open({});
    const from = fake.subscriptions.map((s) => [s.input.lastEventId, s.input.handoff]);
    expect(from).toEqual([
      [5, undefined],
      [undefined, 'tok-1'],
      [undefined, undefined],
    ]);
  });

  it('when the client goes away, its subscription is stopped and the server forgets the stream (the open-streams gauge)', async () => {
    const { app: a, fake } = await app();
    const url = await listening(a);
    expect(await openStreams(a)).toBe(0);
    const stop = new AbortController();
    const res = await open(`${url}/v1/workstreams/w1/events`, { headers: STREAM, signal: stop.signal });
    expect(res.statusCode).toBe(200);
    const { signal } = fake.subscriptions[0]!.input;
    expect(signal.aborted).toBe(false);
    expect(await openStreams(a)).toBe(1);
    stop.abort();
    await aborted(signal, 'the subscription of a client gone');
    // The stream's controller goes in the same step as its abort.
    expect(await openStreams(a)).toBe(0);
  });

  it('a client gone before its stream started: the subscription made for it is stopped all the same', async () => {
    const { app: a, fake } = await app();
    const url = await listening(a);
    const gate = deferred<void>();
    fake.gate = gate.promise;
    const served = nextRequest(a);
    const stop = new AbortController();
    const opened = open(`${url}/v1/workstreams/w1/events`, { headers: STREAM, signal: stop.signal }).catch(
      () => undefined,
    );
    // The request is in and the workstream not yet known: the client goes, then it is known.
    const { closed } = await within(served, 10_000, 'the request');
    stop.abort();
    await within(closed, 10_000, 'the server seeing the client gone');
    gate.resolve();
    await opened;
    await until(() => fake.subscriptions.length === 1, 'the subscription');
    await aborted(
      fake.subscriptions[0]!.input.signal,
      'the subscription of a client gone before its stream started',
    );
    // Nothing of it stays behind on the server (its close came before the stream registered
    // one): the controller goes in the same step as its abort.
    expect(await openStreams(a)).toBe(0);
  });

  it('open streams end when the server closes, their subscriptions stopped (clients reconnect elsewhere)', async () => {
    const { app: a, fake } = await app();
    const url = await listening(a);
    const res = await open(`${url}/v1/workstreams/w1/events`, { headers: STREAM });
    expect(res.statusCode).toBe(200);
    const body = new Promise((resolve) => res.on('end', resolve));
    res.resume();
    await within(a.close(), 10_000, 'the server’s close with a stream open');
    await within(body, 10_000, 'the end of the stream');
    expect(fake.subscriptions.map((s) => s.input.signal.aborted)).toEqual([true]);
  });

  it('keep-alive comments every keepAliveMs, 15 s by default', async () => {
    for (const [keepAliveMs, period] of [
      [undefined, 15_000],
      [2_000, 2_000],
    ] as const) {
      const { app: a } = await app(keepAliveMs === undefined ? {} : { keepAliveMs });
      const url = await listening(a);
      vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
      const stop = new AbortController();
      const res = await open(`${url}/v1/workstreams/w1/events`, { headers: STREAM, signal: stop.signal });
      const first = new Promise<string>((resolve) =>
        res.once('data', (chunk: Buffer) => resolve(String(chunk))),
      );
      vi.advanceTimersByTime(period);
      const text = await within(first, 10_000, `a keep-alive after ${period} ms`);
      expect([keepAliveMs, text]).toEqual([keepAliveMs, ': heartbeat\n\n']);
      vi.useRealTimers();
      stop.abort();
    }
  });
});

describe('sends, against a fake runtime', () => {
  it('a client that goes away before its send is admitted withdraws it; once admitted, a disconnect leaves the turn', async () => {
    const { app: a, fake } = await app();
    const url = await listening(a);
    const admit = deferred<void>();
    fake.admit = admit.promise;
    const post = (signal: AbortSignal, wait: boolean) =>
      open(`${url}/v1/workstreams/w1/messages`, {
        method: 'POST',
        headers: { ...AUTH, 'content-type': 'application/json' },
        body: JSON.stringify({ content: 'hi', wait }),
        signal,
      }).catch(() => undefined);
    // Waiting to be admitted: the client goes, and the send is withdrawn.
    const early = new AbortController();
    const withdrawn = post(early.signal, false);
    await until(() => fake.sends.length === 1, 'the first send');
    early.abort();
    await withdrawn;
    await aborted(fake.sends[0]!.signal, 'the withdrawal of a send whose client went away');
    // Admitted, its answer waiting for the turn to end (which never ends here): the client goes,
    // and the turn is left running.
    admit.resolve();
    const served = nextRequest(a);
    const late = new AbortController();
    const waiting = post(late.signal, true);
    const { closed } = await within(served, 10_000, 'the second send');
    await until(() => fake.sends.length === 2, 'the second send');
    late.abort();
    await waiting;
    await within(closed, 10_000, 'the server seeing the client gone');
    expect(fake.sends[1]!.signal.aborted).toBe(false);
  });
});
