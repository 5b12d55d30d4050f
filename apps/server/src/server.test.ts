/**
 * The HTTP API on a real loopback port (not inject): every route, every error status, bearer
 * tenants (T1, T2), typed 400s that write nothing (T5), 429 with Retry-After (T4), and events
 * over SSE through a real socket — a reconnect with Last-Event-ID replays what was missed (E1),
 * or says replay_truncated, and a history read's handoff continues exactly (E2).
 */

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from './index.js';
import { checkServerConfig, loadServerConfig } from './server.js';

const ALICE = 'alice-token-0123456789abcdef';
const BOB = 'bob-token-0123456789abcdefgh';
const MALLORY = 'mallory-token-0123456789abc';

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.shutdown();
  server = undefined;
});

async function start(runtime: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) {
  server = await startServer(
    checkServerConfig({
      port: 0,
      db: ':memory:',
      logLevel: 'silent',
      shutdownGraceMs: 2_000,
      bodyLimitBytes: 4096,
      keepAliveMs: 200,
      tokens: [
        { token: ALICE, tenantId: 'acme', principal: 'alice' },
        { token: MALLORY, tenantId: 'acme', principal: 'mallory' },
        { token: BOB, tenantId: 'globex', principal: 'bob' },
      ],
      runtime: {
        // No test here is about the watchdog (the metrics test asserts it never fired): a
        // patient one, so a turn on a machine whose other core is busy is no false abort.
        watchdog: { timeoutMs: 10_000, pollMs: 25, graceMs: 2_000 },
        lease: { ttlMs: 3_000, renewMs: 100 },
        pool: { maxWorkers: 2, warmWorkers: 1 },
        ...runtime,
      },
      ...extra,
    }),
  );
  return server;
}

interface Reply {
  readonly status: number;
  readonly headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, asserted field by field
  readonly body: any;
}

async function call(
  method: string,
  path: string,
  opts: { token?: string; body?: unknown; raw?: string } = {},
): Promise<Reply> {
  const headers: Record<string, string> = {};
  if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
  if (opts.body !== undefined || opts.raw !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${server!.url}${path}`, {
    method,
    headers,
    ...(opts.raw !== undefined
      ? { body: opts.raw }
      : opts.body !== undefined
        ? { body: JSON.stringify(opts.body) }
        : {}),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text === '' ? undefined : JSON.parse(text) };
}

const script = (...steps: unknown[]) => JSON.stringify({ script: steps });

/** An SSE client over fetch: the frames it has received, and a way to stop it. */
function follow(path: string, token: string, lastEventId?: number) {
  // biome-ignore lint/suspicious/noExplicitAny: events of every type, asserted field by field
  const frames: { id: number; event: string; data: any }[] = [];
  const stop = new AbortController();
  const waiters: (() => void)[] = [];
  const done = (async () => {
    const res = await fetch(`${server!.url}${path}`, {
      headers: {
        authorization: `Bearer ${token}`,
        accept: 'text/event-stream',
        ...(lastEventId === undefined ? {} : { 'last-event-id': String(lastEventId) }),
      },
      signal: stop.signal,
    });
    if (res.status !== 200) return res.status;
    const decoder = new TextDecoder();
    let buf = '';
    try {
      for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += decoder.decode(bytes, { stream: true });
        let end = buf.indexOf('\n\n');
        while (end >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const field = (name: string) =>
            block
              .split('\n')
              .find((l) => l.startsWith(`${name}: `))
              ?.slice(name.length + 2);
          const data = field('data');
          if (data !== undefined) {
            frames.push({
              id: Number(field('id')),
              event: field('event') ?? 'message',
              data: JSON.parse(data),
            });
            for (const w of waiters.splice(0)) w();
          }
          end = buf.indexOf('\n\n');
        }
      }
    } catch {
      // stopped
    }
    return 200;
  })();
  const until = async (test: () => boolean, what: string) => {
    const deadline = Date.now() + 10_000;
    while (!test()) {
      if (Date.now() > deadline) expect.fail(`${what}: not within 10 s`);
      await new Promise<void>((resolve) => {
        waiters.push(resolve);
        setTimeout(resolve, 100);
      });
    }
  };
  return { frames, stop: () => stop.abort(), done, until };
}

describe('the HTTP API on a real port', () => {
  it('shutdown: /readyz answers 503 through readinessDelayMs while every other route is still served, then the listener closes', async () => {
    let delayed: number | undefined;
    let endDelay!: () => void;
    server = await startServer(
      checkServerConfig({
        port: 0,
        db: ':memory:',
        logLevel: 'silent',
        readinessDelayMs: 30_000,
        tokens: [{ token: ALICE, tenantId: 'acme', principal: 'alice' }],
        runtime: { pool: { maxWorkers: 1, warmWorkers: 0 } },
      }),
      {
        readinessDelay: (ms) => {
          delayed = ms;
          return new Promise<void>((resolve) => (endDelay = resolve));
        },
      },
    );
    const { url } = server;
    expect((await call('GET', '/readyz')).status).toBe(200);
    const stopping = server.shutdown();
    expect(delayed).toBe(30_000);
    const ready = await call('GET', '/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body).toEqual({ ready: false, reason: 'shutting down' });
    // Still served: a load balancer takes the host out on /readyz, not on refused connections.
    expect((await call('GET', '/healthz')).status).toBe(200);
    expect((await call('GET', '/v1/workstreams', { token: ALICE })).status).toBe(200);
    endDelay();
    await stopping;
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
    server = undefined;
  });

  it('T1: 401 without a token or with an unknown one; health, readiness and metrics need none', async () => {
    await start();
    expect((await call('GET', '/v1/workstreams')).status).toBe(401);
    const bad = await call('GET', '/v1/workstreams', { token: 'no-such-token-000000000' });
    expect(bad.status).toBe(401);
    expect(bad.body.error.code).toBe('UNAUTHORIZED');
    expect(bad.headers.get('www-authenticate')).toBe('Bearer');
    expect((await call('GET', '/healthz')).body).toMatchObject({ status: 'ok' });
    expect((await call('GET', '/readyz')).body).toMatchObject({ ready: true });
    const metrics = await fetch(`${server!.url}/metrics`);
    const text = await metrics.text();
    for (const name of [
      'turnwarden_turns_total{status="completed"} 0',
      'turnwarden_turns_total{status="awaiting_approval"} 0',
      'turnwarden_approvals_total{decision="timed_out"} 0',
      'turnwarden_watchdog_fired_total 0',
      'turnwarden_aborts_committed_total 0',
      'turnwarden_aborts_declined_total 0',
      'turnwarden_workers_terminated_total 0',
      'turnwarden_tool_results_synthesized_total 0',
      'turnwarden_admission_waiting 0',
      'turnwarden_cluster_failovers_total 0',
      'turnwarden_cluster_relay_gaps_total 0',
      'turnwarden_admission_wait_p99_ms 0',
      'turnwarden_journal_retrying 0',
      'turnwarden_watchdog_poll_lateness_p99_ms',
      'turnwarden_pool_claims_waiting 0',
      'turnwarden_pool_shrunk_total 0',
      'turnwarden_model_calls_running 0',
      'turnwarden_model_threads_replaced_total 0',
      'turnwarden_watchdog_verdicts_total{verdict="starved"} 0',
      'turnwarden_watchdog_verdicts_total{verdict="wedged"} 0',
      'turnwarden_main_thread_wait_ratio ',
      'turnwarden_main_thread_busy_ratio ',
    ]) {
      expect(text, name).toContain(name);
    }
  });

  it('every route: create, list, get, send (started, or waited), status, history, compact, rewind, cancel, close, delete', async () => {
    await start();
    const created = await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'w1' } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      workstreamId: 'w1',
      tenantId: 'acme',
      incarnation: expect.any(String),
    });
    expect((await call('POST', '/v1/workstreams', { token: ALICE })).status).toBe(201);
    const list = await call('GET', '/v1/workstreams?limit=1', { token: ALICE });
    expect(list.body.items).toHaveLength(1);
    expect(list.body.nextCursor).toEqual(expect.any(String));
    expect((await call('GET', '/v1/workstreams/w1', { token: ALICE })).body).toMatchObject({
      status: 'open',
      generation: 0,
    });

    const started = await call('POST', '/v1/workstreams/w1/messages', {
      token: ALICE,
      body: { content: script({ text: 'one' }) },
    });
    expect(started.status).toBe(202);
    expect(started.body).toEqual({ workstreamId: 'w1', generation: 1 });
    const waited = await call('POST', '/v1/workstreams/w1/messages', {
      token: ALICE,
      body: { content: script({ text: 'two' }), wait: true },
    });
    expect(waited.status).toBe(200);
    expect(waited.body).toMatchObject({ status: 'completed', finalText: 'two', generation: 2 });
    expect((await call('GET', '/v1/workstreams/w1/status', { token: ALICE })).body).toMatchObject({
      state: 'idle',
      generation: 2,
    });
    const history = await call('GET', '/v1/workstreams/w1/history', { token: ALICE });
    expect(history.body.rows.map((r: { message: { role: string } }) => r.message.role)).toEqual([
      'user',
      'assistant',
      'user',
      'assistant',
    ]);
    expect(history.body.rows[0].message.principal).toBe('alice');
    expect(history.body.handoff).toEqual(expect.any(String));
    expect(
      (await call('POST', '/v1/workstreams/w1/rewind', { token: ALICE, body: { turns: 1 } })).body,
    ).toEqual({ removed: 2, lastSeq: 2 });
    expect(
      (
        await call('POST', '/v1/workstreams/w1/compact', {
          token: ALICE,
          body: { throughSeq: 2, summary: 'sum' },
        })
      ).body,
    ).toEqual({ removed: 2 });
    expect((await call('POST', '/v1/workstreams/w1/cancel', { token: ALICE })).body).toEqual({
      cancelled: false,
    });
    expect((await call('POST', '/v1/workstreams/w1/close', { token: ALICE })).status).toBe(204);
    expect((await call('GET', '/v1/workstreams/w1', { token: ALICE })).body.status).toBe('closed');
    const deleted = await call('DELETE', `/v1/workstreams/w1?incarnation=${created.body.incarnation}`, {
      token: ALICE,
    });
    expect(deleted.status).toBe(204);
    expect((await call('GET', '/v1/workstreams/w1', { token: ALICE })).status).toBe(404);
  });

  it('T2: another tenant’s workstream is 404, exactly as one that does not exist, on every route; nothing of it changes', async () => {
    await start();
    await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'secret' } });
    const routes: [string, string, unknown?][] = [
      ['GET', '/v1/workstreams/X'],
      ['GET', '/v1/workstreams/X/status'],
      ['GET', '/v1/workstreams/X/history'],
      ['POST', '/v1/workstreams/X/messages', { content: 'hi' }],
      ['POST', '/v1/workstreams/X/cancel'],
      ['POST', '/v1/workstreams/X/close'],
      ['POST', '/v1/workstreams/X/compact', { throughSeq: 1, summary: 's' }],
      ['POST', '/v1/workstreams/X/rewind', { turns: 1 }],
      ['POST', '/v1/workstreams/X/approve', { token: 'apr.1.0.00000000-0000-0000-0000-000000000000' }],
      ['POST', '/v1/workstreams/X/deny', { token: 'apr.1.0.00000000-0000-0000-0000-000000000000' }],
      ['DELETE', '/v1/workstreams/X?incarnation=any'],
    ];
    for (const [method, path, body] of routes) {
      const theirs = await call(method, path.replace('X', 'secret'), {
        token: BOB,
        ...(body === undefined ? {} : { body }),
      });
      const none = await call(method, path.replace('X', 'nothing-here'), {
        token: BOB,
        ...(body === undefined ? {} : { body }),
      });
      expect([method, path, theirs.status], 'another tenant’s workstream').toEqual([method, path, 404]);
      expect(theirs.body.error.code).toBe(none.body.error.code);
      expect(theirs.body.error.message.replace('secret', 'ID')).toBe(
        none.body.error.message.replace('nothing-here', 'ID'),
      );
    }
    expect((await call('GET', '/v1/workstreams', { token: BOB })).body.items).toEqual([]);
    await expect(follow('/v1/workstreams/secret/events', BOB).done).resolves.toBe(404);
    expect((await call('GET', '/v1/workstreams/secret', { token: ALICE })).body).toMatchObject({
      status: 'open',
      generation: 0,
    });
  });

  it('T2: two tenants create the same workstream id: each its own — created, sent to, read, closed — and no answer names the other’s', async () => {
    await start();
    const made = [
      await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'shared' } }),
      await call('POST', '/v1/workstreams', { token: BOB, body: { workstreamId: 'shared' } }),
    ];
    expect(made.map((r) => [r.status, r.body.workstreamId, r.body.tenantId])).toEqual([
      [201, 'shared', 'acme'],
      [201, 'shared', 'globex'],
    ]);
    const said = async (token: string, text: string) =>
      (
        await call('POST', '/v1/workstreams/shared/messages', {
          token,
          body: { content: script({ text }), wait: true },
        })
      ).body;
    expect(await said(ALICE, 'for acme')).toMatchObject({ workstreamId: 'shared', finalText: 'for acme' });
    expect(await said(BOB, 'for globex')).toMatchObject({ workstreamId: 'shared', finalText: 'for globex' });
    const texts = async (token: string) =>
      (await call('GET', '/v1/workstreams/shared/history', { token })).body.rows.map(
        (r: { workstreamId: string; message: { content: string } }) => [r.workstreamId, r.message.content],
      );
    expect((await texts(ALICE)).at(-1)).toEqual(['shared', 'for acme']);
    expect((await texts(BOB)).at(-1)).toEqual(['shared', 'for globex']);
    // Bob's close leaves Alice's open; his refusal afterwards names the id he gave.
    expect((await call('POST', '/v1/workstreams/shared/close', { token: BOB })).status).toBe(204);
    const refused = await call('POST', '/v1/workstreams/shared/messages', {
      token: BOB,
      body: { content: 'hi' },
    });
    expect([refused.status, refused.body.error.code, refused.body.error.message]).toEqual([
      409,
      'WORKSTREAM_CLOSED',
      'workstream shared is closed',
    ]);
    expect((await call('GET', '/v1/workstreams/shared', { token: ALICE })).body.status).toBe('open');
    expect(JSON.stringify([made, refused.body])).not.toMatch(/(acme|globex)\/shared/);
  });

  it('A1 A2 A3: over HTTP — a waited send ends awaiting_approval with the call and its token, status shows the wait, a send meanwhile is 409 APPROVAL_PENDING; approve with edited arguments resumes the turn; again: already_decided; deny after: 409 APPROVAL_DECIDED; a bad token: 409 APPROVAL_STALE', async () => {
    await start({ approvals: { tools: ['echo'] } });
    await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'w1' } });
    const waited = await call('POST', '/v1/workstreams/w1/messages', {
      token: ALICE,
      body: {
        content: script({ tools: [{ name: 'echo', args: { text: 'model' } }] }, { text: 'fine' }),
        wait: true,
      },
    });
    expect(waited.status).toBe(200);
    expect(waited.body).toMatchObject({
      status: 'awaiting_approval',
      approval: { token: expect.stringMatching(/^apr\./), name: 'echo', callIndex: 0 },
    });
    const { token } = waited.body.approval;
    expect((await call('GET', '/v1/workstreams/w1/status', { token: ALICE })).body).toMatchObject({
      state: 'tool-debt',
      cleanupPending: false,
      awaitingApproval: { token, callIndex: 0 },
    });
    const pending = await call('POST', '/v1/workstreams/w1/messages', {
      token: ALICE,
      body: { content: 'hi' },
    });
    expect([pending.status, pending.body.error.code]).toEqual([409, 'APPROVAL_PENDING']);
    const stale = await call('POST', '/v1/workstreams/w1/approve', {
      token: ALICE,
      body: { token: 'apr.x' },
    });
    expect([stale.status, stale.body.error.code, stale.body.error.details.reason]).toEqual([
      409,
      'APPROVAL_STALE',
      'malformed',
    ]);
    const approved = await call('POST', '/v1/workstreams/w1/approve', {
      token: ALICE,
      body: { token, arguments: { text: 'edited' }, wait: true },
    });
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({
      status: 'resumed',
      generation: 1,
      result: { status: 'completed', finalText: 'fine' },
    });
    const rows = (await call('GET', '/v1/workstreams/w1/history', { token: ALICE })).body.rows;
    expect(rows.map((r: { message: { role: string } }) => r.message.role)).toEqual([
      'user',
      'assistant',
      'tool',
      'assistant',
    ]);
    expect(rows[2].message).toMatchObject({ content: 'edited', effect: 'applied' });
    expect(
      (await call('POST', '/v1/workstreams/w1/approve', { token: ALICE, body: { token } })).body,
    ).toEqual({
      status: 'already_decided',
    });
    const denied = await call('POST', '/v1/workstreams/w1/deny', {
      token: ALICE,
      body: { token, reason: 'no' },
    });
    expect([denied.status, denied.body.error.code]).toEqual([409, 'APPROVAL_DECIDED']);
  });

  it('T5: bad bodies, unknown fields, bad ids and oversize bodies are 400 INVALID_INPUT naming the field; nothing is written', async () => {
    await start();
    await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'w1' } });
    const cases: [string, string, { body?: unknown; raw?: string }, string][] = [
      ['POST', '/v1/workstreams/w1/messages', { body: { content: 'hi', extra: 1 } }, 'extra'],
      ['POST', '/v1/workstreams/w1/messages', { body: { content: 42 } }, 'content'],
      ['POST', '/v1/workstreams/w1/messages', { body: { content: '   ' } }, 'content'],
      ['POST', '/v1/workstreams/w1/messages', { raw: '{"content": ' }, 'body'],
      ['POST', '/v1/workstreams/w1/messages', { body: { content: 'x'.repeat(5000) } }, 'body'],
      ['POST', '/v1/workstreams', { body: { workstreamId: '../etc' } }, 'workstreamId'],
      ['GET', '/v1/workstreams/bad%20id/status', {}, 'workstreamId'],
      ['GET', '/v1/workstreams?limit=0', {}, 'limit'],
    ];
    for (const [method, path, opts, field] of cases) {
      const r = await call(method, path, { token: ALICE, ...opts });
      expect([
        path,
        JSON.stringify(opts).slice(0, 40),
        r.status,
        r.body.error.code,
        r.body.error.details?.field,
      ]).toEqual([path, JSON.stringify(opts).slice(0, 40), 400, 'INVALID_INPUT', field]);
    }
    expect((await call('GET', '/v1/workstreams/w1/history', { token: ALICE })).body.rows).toEqual([]);
    expect((await call('GET', '/v1/workstreams', { token: ALICE })).body.items).toHaveLength(1);
  });

  it('T3 T4: another principal’s message during a turn is 409; over capacity a send that cannot wait is 429 with Retry-After', async () => {
    await start({
      pool: { maxWorkers: 1, warmWorkers: 1 },
      admission: { maxWaiting: 0, maxWaitingPerTenant: 0 },
    });
    await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'busy' } });
    await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'other' } });
    const hold = script({ heartbeat: 60_000, everyMs: 50 });
    expect(
      (await call('POST', '/v1/workstreams/busy/messages', { token: ALICE, body: { content: hold } })).status,
    ).toBe(202);
    const interjection = await call('POST', '/v1/workstreams/busy/messages', {
      token: MALLORY,
      body: { content: 'me too' },
    });
    expect(interjection.status).toBe(409);
    expect(interjection.body.error).toMatchObject({ code: 'TURN_IN_PROGRESS', retryable: true });
    const full = await call('POST', '/v1/workstreams/other/messages', {
      token: ALICE,
      body: { content: 'hi' },
    });
    expect(full.status).toBe(429);
    expect(full.body.error).toMatchObject({ code: 'CAPACITY_EXHAUSTED', retryable: true });
    expect(Number(full.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect((await call('GET', '/v1/workstreams/other/history', { token: ALICE })).body.rows).toEqual([]);
    await call('POST', '/v1/workstreams/busy/cancel', { token: ALICE });
    await call('POST', '/v1/workstreams/busy/close', { token: ALICE });
    const closed = await call('POST', '/v1/workstreams/busy/messages', {
      token: ALICE,
      body: { content: 'hi' },
    });
    expect([closed.status, closed.body.error.code]).toEqual([409, 'WORKSTREAM_CLOSED']);
  });

  it('M1 M4: double texting over HTTP: a workstream created with reject says so and answers a second message 409; a send with rollback cancels the running turn, removes its rows and runs', async () => {
    await start();
    const created = await call('POST', '/v1/workstreams', {
      token: ALICE,
      body: { workstreamId: 'dt', doubleTexting: 'reject' },
    });
    expect([created.status, created.body.doubleTexting]).toEqual([201, 'reject']);
    expect((await call('GET', '/v1/workstreams/dt', { token: ALICE })).body.doubleTexting).toBe('reject');
    const hold = script({ heartbeat: 60_000, everyMs: 50 });
    expect(
      (await call('POST', '/v1/workstreams/dt/messages', { token: ALICE, body: { content: hold } })).status,
    ).toBe(202);
    const second = await call('POST', '/v1/workstreams/dt/messages', {
      token: ALICE,
      body: { content: 'me too' },
    });
    expect([second.status, second.body.error.code, second.body.error.details]).toEqual([
      409,
      'TURN_IN_PROGRESS',
      { workstreamId: 'dt', doubleTexting: 'reject' },
    ]);
    const instead = await call('POST', '/v1/workstreams/dt/messages', {
      token: ALICE,
      body: { content: script({ text: 'instead' }), doubleTexting: 'rollback', wait: true },
    });
    expect([instead.status, instead.body.status, instead.body.finalText]).toEqual([
      200,
      'completed',
      'instead',
    ]);
    const rows = (await call('GET', '/v1/workstreams/dt/history', { token: ALICE })).body.rows as {
      message: { role: string };
    }[];
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant']);
    const bad = await call('POST', '/v1/workstreams/dt/messages', {
      token: ALICE,
      body: { content: 'x', doubleTexting: 'shout' },
    });
    expect([bad.status, bad.body.error.code]).toEqual([400, 'INVALID_INPUT']);
  });

  it('E1: events over SSE through a real socket; a reconnect with Last-Event-ID replays what was missed, or says replay_truncated', async () => {
    await start({ events: { replayLimit: 16 } });
    await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'w1' } });
    const first = follow('/v1/workstreams/w1/events', ALICE);
    await call('POST', '/v1/workstreams/w1/messages', {
      token: ALICE,
      body: { content: script({ text: 'hello' }), wait: true },
    });
    await first.until(() => first.frames.some((f) => f.event === 'idle'), 'the first turn’s idle');
    first.stop();
    const seen = first.frames.at(-1)!.id;
    expect(first.frames.every((f, i) => i === 0 || f.id > first.frames[i - 1]!.id)).toBe(true);
    // Missed while disconnected: a second turn (which another client follows live).
    const live = follow('/v1/workstreams/w1/events', ALICE);
    await call('POST', '/v1/workstreams/w1/messages', {
      token: ALICE,
      body: { content: script({ text: 'again' }), wait: true },
    });
    await live.until(() => live.frames.some((f) => f.event === 'idle'), 'the second turn live');
    live.stop();
    const resumed = follow('/v1/workstreams/w1/events', ALICE, seen);
    await resumed.until(() => resumed.frames.some((f) => f.event === 'idle'), 'the missed turn replayed');
    resumed.stop();
    // Exactly what was missed: the second turn's events, under their ids, nothing before.
    expect(resumed.frames.map((f) => f.id)).toEqual(live.frames.map((f) => f.id));
    expect(resumed.frames[0]!.id).toBeGreaterThan(seen);
    expect(resumed.frames.map((f) => f.event)).toContain('turn_started');
    // Too far back: the ring (16 events) no longer holds it.
    const stale = follow('/v1/workstreams/w1/events', ALICE, first.frames[0]!.id - 1);
    await stale.until(() => stale.frames.length > 0, 'the stale reconnect answered');
    stale.stop();
    expect(stale.frames[0]!.event).toBe('replay_truncated');
  });

  it('E2: a history read’s handoff token continues the stream exactly after its rows, over HTTP', async () => {
    await start();
    await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'w1' } });
    await call('POST', '/v1/workstreams/w1/messages', {
      token: ALICE,
      body: { content: script({ text: 'before' }), wait: true },
    });
    const { body } = await call('GET', '/v1/workstreams/w1/history', { token: ALICE });
    const stream = follow(`/v1/workstreams/w1/events?handoff=${encodeURIComponent(body.handoff)}`, ALICE);
    await call('POST', '/v1/workstreams/w1/messages', {
      token: ALICE,
      body: { content: script({ text: 'after' }), wait: true },
    });
    await stream.until(() => stream.frames.some((f) => f.event === 'idle'), 'the next turn followed');
    stream.stop();
    const rows = stream.frames.filter((f) => f.event === 'message').map((f) => f.data.data.seq);
    expect(rows).toEqual([3, 4]); // the two rows of the turn after the read, none of those read
  });

  it('E3: a client that does not read its stream is closed with stream_overflow; memory stays bounded', async () => {
    await start({
      pluginModules: [new URL('./test-support/ticker.mjs', import.meta.url).href],
      model: 'ticker',
      events: { listenerBuffer: 64 },
    });
    await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'w1' } });
    // Open the stream and read nothing while a turn of 150,000 events (about 30 MB of frames, more than any socket buffers) goes by.
    const res = await fetch(`${server!.url}/v1/workstreams/w1/events`, {
      headers: { authorization: `Bearer ${ALICE}`, accept: 'text/event-stream' },
    });
    expect(res.status).toBe(200);
    const turn = await call('POST', '/v1/workstreams/w1/messages', {
      token: ALICE,
      body: { content: '150000', wait: true },
    });
    expect(turn.body.status).toBe('completed');
    // Now read: what the socket held, then stream_overflow, then the end of the stream.
    const text = await res.text();
    const events = text
      .split('\n')
      .filter((l) => l.startsWith('event: '))
      .map((l) => l.slice(7));
    expect(events.at(-1)).toBe('stream_overflow');
    expect(events.length).toBeLessThan(150_000);
    expect(events).not.toContain('idle');
  }, 60_000);

  it('a client that disconnects while waiting for its turn leaves the turn running (cancel is its own route)', async () => {
    await start();
    await call('POST', '/v1/workstreams', { token: ALICE, body: { workstreamId: 'w1' } });
    const gone = new AbortController();
    const waiting = fetch(`${server!.url}/v1/workstreams/w1/messages`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ALICE}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        content: script({ heartbeat: 600, everyMs: 50 }, { text: 'finished' }),
        wait: true,
      }),
      signal: gone.signal,
    }).catch(() => undefined);
    const deadline = Date.now() + 10_000;
    while ((await call('GET', '/v1/workstreams/w1/status', { token: ALICE })).body.state === 'idle') {
      if (Date.now() > deadline) expect.fail('the turn did not start');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    gone.abort();
    await waiting;
    while ((await call('GET', '/v1/workstreams/w1/status', { token: ALICE })).body.state !== 'idle') {
      if (Date.now() > deadline) expect.fail('the turn did not end');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const rows = (await call('GET', '/v1/workstreams/w1/history', { token: ALICE })).body.rows;
    expect(rows.at(-1).message).toMatchObject({ role: 'assistant', content: 'finished' });
  }, 30_000);

  it('a config file that is not JSON is refused without quoting it (it may hold a token)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tw-config-'));
    const file = join(dir, 'config.json');
    writeFileSync(file, '{"tokens": [{"token": supersecret-token-value');
    try {
      expect(() => loadServerConfig({ config: file }, {})).toThrow(/is not valid JSON/);
      try {
        loadServerConfig({ config: file }, {});
      } catch (e) {
        expect((e as Error).message).not.toContain('supersecret');
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
