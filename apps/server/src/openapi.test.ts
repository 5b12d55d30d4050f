/**
 * The OpenAPI document against the server, with validators nobody on the project wrote:
 * swagger-parser checks `/openapi.json` is a valid OpenAPI document, then every route is
 * exercised over a real port — its success and each error status it declares — and every
 * answer must be declared for its route, with a body ajv finds valid against the declared
 * schema. Finally every declared status must have been answered, except the few listed with the
 * reason they cannot be produced here. So the document cannot drift from the server either way.
 */
import { readFileSync } from 'node:fs';
import SwaggerParser from '@apidevtools/swagger-parser';
import { Turnwarden } from '@turnwarden/supervisor';
import { Ajv } from 'ajv';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, Tokens } from './index.js';

const ALICE = 'alice-token-0123456789abcdef';
const BOB = 'bob-token-0123456789abcdefgh';

interface MediaType {
  readonly schema?: object;
}
interface Operation {
  readonly responses: Record<
    string,
    { readonly description: string; readonly content?: Record<string, MediaType> }
  >;
}
type Document = { readonly paths: Record<string, Record<string, Operation>> };

/** Declared, and not produced by this test: each with the reason. */
const NOT_EXERCISED: Record<string, string> = {
  '* 500': 'a fault of the server; errors.test.ts proves an unexpected error’s body',
  'DELETE /v1/workstreams/{workstreamId} 504':
    'a delete routed to another host that holds the lease and does not answer: needs several hosts on PostgreSQL',
  'POST /v1/workstreams/{workstreamId}/cancel 504':
    'a cancel routed to another host that holds the lease and does not answer: needs several hosts on PostgreSQL',
  'POST /v1/workstreams/{workstreamId}/cancel 409':
    'an idle repair refused LEASED_ELSEWHERE or FENCED: needs another process holding the workstream’s lease',
};

let tw: Turnwarden;
let app: FastifyInstance;
let base: string;
let doc: Document;
const ajv = new Ajv({ strict: false, allErrors: true });
/** `METHOD /path/{param} status` of every answer seen. */
const answered = new Set<string>();

beforeAll(async () => {
  const logger = pino({ level: 'silent' });
  tw = await Turnwarden.start({
    pluginModules: ['@turnwarden/session/scripted'],
    model: 'scripted',
    logger,
    store: { path: ':memory:' },
    pool: { maxWorkers: 1, warmWorkers: 1 },
    // One worker and no queue: a second workstream's send during a turn is 429 at once.
    admission: { maxWaiting: 0, maxWaitingPerTenant: 0 },
    watchdog: { timeoutMs: 5_000, pollMs: 25, graceMs: 300 },
  });
  app = await buildApp({
    tw,
    tokens: new Tokens([
      { token: ALICE, tenantId: 'acme', principal: 'alice' },
      { token: BOB, tenantId: 'acme', principal: 'bob' },
    ]),
    logger,
    bodyLimit: 4096,
  });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  doc = (await (await fetch(`${base}/openapi.json`)).json()) as Document;
});

afterAll(async () => {
  await app?.close();
  await tw?.shutdown();
});

/** The document's path for a route path (`:id` → `{id}`). */
const templateOf = (route: string) => route.replaceAll(/:(\w+)/g, '{$1}');

/**
 * One request to `route` (with its parameters filled in as `path`), checked against the
 * document: its status must be declared for the route and its body valid for that status.
 */
async function request(
  method: string,
  route: string,
  path: string,
  opts: { token?: string | null; body?: unknown; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = { ...opts.headers };
  const token = opts.token === undefined ? ALICE : opts.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const stop = new AbortController();
  const res = await fetch(`${base}${path}`, {
    method,
    headers,
    signal: stop.signal,
    ...(opts.body === undefined ? {} : { body: JSON.stringify(opts.body) }),
  });
  const template = templateOf(route);
  const what = `${method} ${template} ${res.status}`;
  answered.add(what);
  const declared = doc.paths[template]?.[method.toLowerCase()]?.responses[String(res.status)];
  const type = res.headers.get('content-type')?.split(';')[0] ?? '';
  if (type === 'text/event-stream') {
    // A stream does not end: its head is what can be checked, then it is let go.
    stop.abort();
    expect(declared?.content?.[type], `${what} (${type}) is declared`).toBeDefined();
    return { status: res.status, body: undefined };
  }
  const text = await res.text();
  expect(declared, `${what} is declared (answered ${text.slice(0, 160)})`).toBeDefined();
  if (declared!.content === undefined) {
    expect(text, `${what} has no content`).toBe('');
    return { status: res.status, body: undefined };
  }
  const media = declared!.content[type];
  expect(media?.schema, `${what}: ${type} is declared`).toBeDefined();
  const body = JSON.parse(text) as unknown;
  const validate = ajv.compile(media!.schema!);
  validate(body);
  expect(
    validate.errors ?? [],
    `${what}: the body ${text.slice(0, 200)} against the declared schema`,
  ).toEqual([]);
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, asserted field by field
  return { status: res.status, body: body as any };
}

const script = (...steps: unknown[]) => JSON.stringify({ script: steps });
const HOLD = script({ heartbeat: 60_000, everyMs: 50 });

/** Waits (by polling the status route) until `id` is running a turn. */
async function running(id: string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const { body } = await request(
      'GET',
      '/v1/workstreams/:workstreamId/status',
      `/v1/workstreams/${id}/status`,
    );
    if (body.state === 'streaming') return;
    if (Date.now() > deadline) expect.fail(`${id}: no turn running within 10 s (state ${body.state})`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('the OpenAPI document against the server', () => {
  it('the served document is the checked-in docs/openapi.json, to the last description (a route, a schema or a text changed without regenerating fails here)', async () => {
    const checkedIn = JSON.parse(
      readFileSync(new URL('../../../docs/openapi.json', import.meta.url), 'utf8'),
    ) as unknown;
    expect(doc).toStrictEqual(checkedIn);
    // The routes are declared again inside this test, by an app of its own: what a route's
    // declaration holds is then this test's to prove (a mutation tool attributes the code a
    // `beforeAll` ran to no test).
    const own = await buildApp({ tw, tokens: new Tokens([]), logger: pino({ level: 'silent' }) });
    try {
      const served = (await own.inject({ method: 'GET', url: '/openapi.json' })).json() as unknown;
      expect(served).toStrictEqual(checkedIn);
    } finally {
      await own.close();
    }
  });

  it('/openapi.json is a valid OpenAPI 3.0 document (swagger-parser)', async () => {
    await expect(SwaggerParser.validate(structuredClone(doc) as never)).resolves.toMatchObject({
      openapi: expect.stringMatching(/^3\.0\./),
    });
  });

  it('every route’s answers — success and each declared error — are declared, with bodies valid against their schemas; every declared status is answered', async () => {
    const ws = '/v1/workstreams/:workstreamId';
    const r = (suffix: string) => `${ws}${suffix}`;
    const at = (id: string, suffix = '') => `/v1/workstreams/${id}${suffix}`;

    // ── create, list, get ──────────────────────────────────────────────────
    const created = await request('POST', '/v1/workstreams', '/v1/workstreams', {
      body: { workstreamId: 'w1' },
    });
    expect(created.status).toBe(201);
    expect((await request('POST', '/v1/workstreams', '/v1/workstreams')).status).toBe(201);
    for (const id of ['held', 'other', 'w2']) {
      await request('POST', '/v1/workstreams', '/v1/workstreams', { body: { workstreamId: id } });
    }
    expect(
      (await request('POST', '/v1/workstreams', '/v1/workstreams', { body: { workstreamId: 'w1' } })).body
        .error.code,
    ).toBe('WORKSTREAM_EXISTS');
    expect(
      (await request('POST', '/v1/workstreams', '/v1/workstreams', { body: { workstreamId: '../x' } }))
        .status,
    ).toBe(400);
    expect((await request('POST', '/v1/workstreams', '/v1/workstreams', { token: null })).status).toBe(401);
    expect((await request('GET', '/v1/workstreams', '/v1/workstreams?limit=2')).body.nextCursor).toEqual(
      expect.any(String),
    );
    expect((await request('GET', '/v1/workstreams', '/v1/workstreams?limit=0')).status).toBe(400);
    expect((await request('GET', '/v1/workstreams', '/v1/workstreams', { token: null })).status).toBe(401);
    expect((await request('GET', ws, at('w1'))).body.status).toBe('open');
    expect((await request('GET', ws, at('bad%20id'))).status).toBe(400);
    expect((await request('GET', ws, at('nothing-here'))).status).toBe(404);
    expect((await request('GET', ws, at('w1'), { token: null })).status).toBe(401);

    // ── messages: started, waited, refused ─────────────────────────────────
    const messages = r('/messages');
    expect(
      (await request('POST', messages, at('w1', '/messages'), { body: { content: script({ text: 'one' }) } }))
        .status,
    ).toBe(202);
    const waited = await request('POST', messages, at('w1', '/messages'), {
      body: { content: script({ text: 'two' }), wait: true },
    });
    expect([waited.status, waited.body.status]).toEqual([200, 'completed']);
    expect(
      (await request('POST', messages, at('w1', '/messages'), { body: { content: 'hi', extra: 1 } })).status,
    ).toBe(400);
    expect(
      (await request('POST', messages, at('nothing-here', '/messages'), { body: { content: 'hi' } })).status,
    ).toBe(404);
    expect(
      (await request('POST', messages, at('w1', '/messages'), { token: null, body: { content: 'hi' } }))
        .status,
    ).toBe(401);
    // A turn that runs until cancelled, waited for: its result is `interrupted` by `cancel`.
    const held = request('POST', messages, at('held', '/messages'), { body: { content: HOLD, wait: true } });
    await running('held');
    const interjection = await request('POST', messages, at('held', '/messages'), {
      token: BOB,
      body: { content: 'me too' },
    });
    expect([interjection.status, interjection.body.error.code]).toEqual([409, 'TURN_IN_PROGRESS']);
    const full = await request('POST', messages, at('other', '/messages'), { body: { content: 'hi' } });
    expect([full.status, full.body.error.code]).toEqual([429, 'CAPACITY_EXHAUSTED']);

    // ── status, close and rewind while the turn runs ───────────────────────
    const status = await request('GET', r('/status'), at('held', '/status'));
    expect(status.body).toMatchObject({ state: 'streaming', activeTurn: { generation: 1 } });
    const close = r('/close');
    expect((await request('POST', close, at('held', '/close'))).body.error.code).toBe('TURN_IN_PROGRESS');
    const timedOut = await request('POST', close, at('held', '/close'), { body: { waitMs: 50 } });
    expect([timedOut.status, timedOut.body.error.code]).toEqual([504, 'TIMEOUT']);
    const rewind = r('/rewind');
    expect(
      (await request('POST', rewind, at('held', '/rewind'), { body: { turns: 1 } })).body.error.code,
    ).toBe('TURN_IN_PROGRESS');

    // ── cancel ─────────────────────────────────────────────────────────────
    const cancel = r('/cancel');
    expect((await request('POST', cancel, at('held', '/cancel'))).body).toEqual({ cancelled: true });
    const ended = await held;
    expect([ended.status, ended.body.status, ended.body.abortReason]).toEqual([200, 'interrupted', 'cancel']);
    expect((await request('POST', cancel, at('bad%20id', '/cancel'))).status).toBe(400);
    expect((await request('POST', cancel, at('nothing-here', '/cancel'))).status).toBe(404);
    expect((await request('POST', cancel, at('held', '/cancel'), { token: null })).status).toBe(401);

    // ── status, history, rewind, compact on an idle workstream ─────────────
    expect((await request('GET', r('/status'), at('w1', '/status'))).body.persistence.state).toBe('healthy');
    expect((await request('GET', r('/status'), at('bad%20id', '/status'))).status).toBe(400);
    expect((await request('GET', r('/status'), at('nothing-here', '/status'))).status).toBe(404);
    expect((await request('GET', r('/status'), at('w1', '/status'), { token: null })).status).toBe(401);
    const history = r('/history');
    expect((await request('GET', history, at('w1', '/history'))).body.rows).toHaveLength(4);
    // A page at a time: a page with more after it answers nextCursor, the last one the handoff.
    const firstPage = await request('GET', history, at('w1', '/history?limit=3'));
    expect([firstPage.body.rows.length, firstPage.body.handoff, typeof firstPage.body.nextCursor]).toEqual([
      3,
      undefined,
      'string',
    ]);
    const lastPage = await request('GET', history, at('w1', `/history?cursor=${firstPage.body.nextCursor}`));
    expect([lastPage.body.rows.map((row: { seq: number }) => row.seq), lastPage.body.nextCursor]).toEqual([
      [4],
      undefined,
    ]);
    expect(lastPage.body.handoff).toEqual(expect.any(String));
    for (const [query, field] of [
      ['limit=0', 'limit'],
      ['limit=1001', 'limit'],
      ['limit=x', 'limit'],
      ['cursor=not-a-cursor', 'cursor'],
      ['offset=3', 'offset'],
    ]) {
      const refused = await request('GET', history, at('w1', `/history?${query}`));
      expect([query, refused.status, refused.body.error.details?.field]).toEqual([query, 400, field]);
    }
    expect((await request('GET', history, at('bad%20id', '/history'))).status).toBe(400);
    expect((await request('GET', history, at('nothing-here', '/history'))).status).toBe(404);
    expect((await request('GET', history, at('w1', '/history'), { token: null })).status).toBe(401);
    expect((await request('POST', rewind, at('w1', '/rewind'), { body: { turns: 1 } })).body).toEqual({
      removed: 2,
      lastSeq: 2,
    });
    expect((await request('POST', rewind, at('w1', '/rewind'), { body: { turns: 0 } })).status).toBe(400);
    expect(
      (await request('POST', rewind, at('nothing-here', '/rewind'), { body: { turns: 1 } })).status,
    ).toBe(404);
    expect(
      (await request('POST', rewind, at('w1', '/rewind'), { token: null, body: { turns: 1 } })).status,
    ).toBe(401);
    const compact = r('/compact');
    expect(
      (await request('POST', compact, at('w1', '/compact'), { body: { throughSeq: 2, summary: 'sum' } }))
        .body,
    ).toEqual({ removed: 2 });
    expect(
      (await request('POST', compact, at('w1', '/compact'), { body: { throughSeq: 0, summary: 's' } }))
        .status,
    ).toBe(400);
    expect(
      (
        await request('POST', compact, at('nothing-here', '/compact'), {
          body: { throughSeq: 1, summary: 's' },
        })
      ).status,
    ).toBe(404);
    expect(
      (
        await request('POST', compact, at('w1', '/compact'), {
          token: null,
          body: { throughSeq: 1, summary: 's' },
        })
      ).status,
    ).toBe(401);

    // A compaction through a tool call but not its result would break the history (S1).
    await request('POST', '/v1/workstreams', '/v1/workstreams', { body: { workstreamId: 'tools' } });
    const withTool = script({ tools: [{ name: 'sleep', args: { ms: 1 } }] }, { text: 'done' });
    expect(
      (await request('POST', messages, at('tools', '/messages'), { body: { content: withTool, wait: true } }))
        .body.status,
    ).toBe('completed');
    const split = await request('POST', compact, at('tools', '/compact'), {
      body: { throughSeq: 2, summary: 's' },
    });
    expect([split.status, split.body.error.code]).toEqual([409, 'STRUCTURE_VIOLATION']);
    expect((await request('GET', history, at('tools', '/history'))).body.rows).toHaveLength(4);

    // ── events ─────────────────────────────────────────────────────────────
    const events = r('/events');
    const sse = { accept: 'text/event-stream' };
    expect((await request('GET', events, at('w1', '/events'), { headers: sse })).status).toBe(200);
    expect(
      (await request('GET', events, at('w1', '/events'), { headers: { ...sse, 'last-event-id': 'x' } }))
        .status,
    ).toBe(400);
    expect((await request('GET', events, at('nothing-here', '/events'), { headers: sse })).status).toBe(404);
    expect((await request('GET', events, at('w1', '/events'), { token: null, headers: sse })).status).toBe(
      401,
    );
    const refusesSse = await request('GET', events, at('w1', '/events'), {
      headers: { accept: 'application/json' },
    });
    expect([refusesSse.status, refusesSse.body.error.details]).toEqual([406, { field: 'Accept' }]);

    // ── close, then what a closed workstream refuses ───────────────────────
    expect((await request('POST', close, at('w2', '/close'))).status).toBe(204);
    expect((await request('POST', close, at('w2', '/close'), { body: { waitMs: -1 } })).status).toBe(400);
    expect((await request('POST', close, at('nothing-here', '/close'))).status).toBe(404);
    expect((await request('POST', close, at('w2', '/close'), { token: null })).status).toBe(401);
    const closedCompact = await request('POST', compact, at('w2', '/compact'), {
      body: { throughSeq: 1, summary: 's' },
    });
    expect([closedCompact.status, closedCompact.body.error.code]).toEqual([409, 'WORKSTREAM_CLOSED']);

    // ── delete ─────────────────────────────────────────────────────────────
    expect((await request('DELETE', ws, at('w1'))).status).toBe(400);
    expect((await request('DELETE', ws, at('w1', '?incarnation=not-it'))).status).toBe(404);
    expect((await request('DELETE', ws, at('w1', '?incarnation=x'), { token: null })).status).toBe(401);
    expect((await request('DELETE', ws, at('w1', `?incarnation=${created.body.incarnation}`))).status).toBe(
      204,
    );

    // ── approve and deny: a call that waits (the send asks for it) ─────────
    const approve = r('/approve');
    const deny = r('/deny');
    await request('POST', '/v1/workstreams', '/v1/workstreams', { body: { workstreamId: 'appr' } });
    const ECHO = script({ tools: [{ name: 'echo', args: { text: 'ok?' } }] }, { text: 'done' });
    const wait = async () => {
      const res = await request('POST', messages, at('appr', '/messages'), {
        body: { content: ECHO, requireApproval: ['echo'], wait: true },
      });
      expect([res.status, res.body.status]).toEqual([200, 'awaiting_approval']);
      return res.body.approval.token as string;
    };
    for (const [route, suffix] of [
      [approve, '/approve'],
      [deny, '/deny'],
    ] as const) {
      const token = await wait();
      expect((await request('POST', route, at('appr', suffix), { body: { token: 5 } })).status).toBe(400);
      expect(
        (await request('POST', route, at('appr', suffix), { token: null, body: { token } })).status,
      ).toBe(401);
      expect((await request('POST', route, at('nothing-here', suffix), { body: { token } })).status).toBe(
        404,
      );
      const stale = await request('POST', route, at('appr', suffix), { body: { token: 'apr.nope' } });
      expect([stale.status, stale.body.error.code]).toEqual([409, 'APPROVAL_STALE']);
      // The one worker busy and no waiting room: the decision is 429, nothing changed.
      const busy = request('POST', messages, at('other', '/messages'), {
        body: { content: HOLD, wait: true },
      });
      await running('other');
      const full = await request('POST', route, at('appr', suffix), { body: { token } });
      expect([full.status, full.body.error.code]).toEqual([429, 'CAPACITY_EXHAUSTED']);
      await request('POST', cancel, at('other', '/cancel'));
      await busy;
      const decided = await request('POST', route, at('appr', suffix), { body: { token, wait: true } });
      expect([decided.status, decided.body.status, decided.body.result.status]).toEqual([
        200,
        'resumed',
        'completed',
      ]);
    }

    // ── the runtime shut down under the server: every route is 503 ─────────
    await tw.shutdown();
    const unavailable: [string, string, string, unknown?][] = [
      ['POST', '/v1/workstreams', '/v1/workstreams'],
      ['GET', '/v1/workstreams', '/v1/workstreams'],
      ['GET', ws, at('w2')],
      ['DELETE', ws, at('w2', '?incarnation=x')],
      ['POST', messages, at('w2', '/messages'), { content: 'hi' }],
      ['POST', cancel, at('w2', '/cancel')],
      ['POST', close, at('w2', '/close')],
      ['GET', r('/status'), at('w2', '/status')],
      ['GET', history, at('w2', '/history')],
      ['POST', compact, at('w2', '/compact'), { throughSeq: 1, summary: 's' }],
      ['POST', rewind, at('w2', '/rewind'), { turns: 1 }],
      ['POST', approve, at('w2', '/approve'), { token: 'apr.x' }],
      ['POST', deny, at('w2', '/deny'), { token: 'apr.x' }],
      ['GET', events, at('w2', '/events')],
    ];
    for (const [method, route, path, body] of unavailable) {
      const res = await request(method, route, path, body === undefined ? { headers: sse } : { body });
      expect([method, route, res.status]).toEqual([method, route, 503]);
    }

    // ── every declared status was answered (or is listed, with the reason) ──
    const unanswered: string[] = [];
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        for (const status of Object.keys(operation.responses)) {
          const what = `${method.toUpperCase()} ${path} ${status}`;
          if (
            answered.has(what) ||
            NOT_EXERCISED[what] !== undefined ||
            NOT_EXERCISED[`* ${status}`] !== undefined
          ) {
            continue;
          }
          unanswered.push(what);
        }
      }
    }
    expect(unanswered, 'declared, never answered').toEqual([]);
  }, 60_000);
});
