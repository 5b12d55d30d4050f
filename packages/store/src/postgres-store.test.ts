/**
 * What only PostgreSQL has to show: several stores ("hosts") on one database — migrations
 * opened at once, leases raced, a fenced writer refused — the database clock, LISTEN/NOTIFY,
 * options and closing. The contract itself runs on both stores (messages, leases, …).
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { isTurnwardenError } from '@turnwarden/protocol';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Postgres, postgresSkipReason, startPostgres } from './pg-cluster.js';
import { applyPgMigrations, PG_MIGRATIONS, PG_SCHEMA_VERSION } from './pg-migrations.js';
import { openPostgresStore, type PostgresStore, type PostgresStoreOptions } from './postgres-store.js';
import {
  assistant,
  CARRIED_OVER,
  carriedOverToKeys,
  FakeClock,
  preKeyRows,
  user,
} from './test-support/fixtures.js';

const skip = postgresSkipReason();
if (skip !== undefined) process.stdout.write(`postgres-store.test.ts: skipped — ${skip}\n`);

describe.skipIf(skip !== undefined)('PostgresStore', () => {
  let server: Postgres;
  let schemas = 0;
  let schema: string;
  const opened: PostgresStore[] = [];

  beforeAll(async () => {
    const started = await startPostgres();
    if ('skip' in started) throw new Error(`PostgreSQL could not start: ${started.skip}`);
    server = started;
  });
  afterAll(() => server?.stop());
  afterEach(async () => {
    for (const s of opened.splice(0)) await s.close();
  });

  /** A store on this test's schema (a new one unless `same`); several are several hosts. */
  const open = async (options: Partial<PostgresStoreOptions> = {}, same = false) => {
    if (!same) {
      schemas += 1;
      schema = `p${schemas}_${randomBytes(3).toString('hex')}`;
    }
    const store = await openPostgresStore({ connectionString: server.url, schema, ...options });
    opened.push(store);
    return store;
  };
  const raw = async <R extends pg.QueryResultRow>(sql: string, values: unknown[] = []) => {
    const client = new pg.Client({ connectionString: server.url, options: `-c search_path=${schema}` });
    await client.connect();
    try {
      return (await client.query<R>(sql, values)).rows;
    } finally {
      await client.end();
    }
  };

  it('applies its migrations once: concurrent opens of one schema, and a reopen', async () => {
    const clock = new FakeClock();
    const [a, b, c] = await Promise.all([
      open({ now: clock.now }),
      open({ now: clock.now }, true),
      open({ now: clock.now }, true),
    ]);
    expect(await raw('SELECT version FROM schema_migrations ORDER BY version')).toEqual(
      Array.from({ length: PG_SCHEMA_VERSION }, (_, i) => ({ version: i + 1 })),
    );
    await a!.createWorkstream({ id: 'w', tenantId: 't' });
    expect((await b!.stats()).workstreams).toBe(1);
    expect((await c!.stats()).schemaVersion).toBe(PG_SCHEMA_VERSION);
    await a!.close();
    const again = await open({}, true);
    expect(await again.getWorkstream('w')).toMatchObject({ id: 'w' });
  });

  it('T2: carries a schema written before per-tenant keys over: rows, lease and session keyed <tenant>/<id>; a deleted workstream’s lease row kept', async () => {
    schemas += 1;
    schema = `p${schemas}_${randomBytes(3).toString('hex')}`;
    const client = new pg.Client({ connectionString: server.url, options: `-c search_path=${schema}` });
    await client.connect();
    try {
      await applyPgMigrations(client, schema, 1, PG_MIGRATIONS.slice(0, 1));
      await client.query(preKeyRows('true'));
    } finally {
      await client.end();
    }
    const store = await open({}, true);
    expect((await store.stats()).schemaVersion).toBe(PG_SCHEMA_VERSION);
    expect(await carriedOverToKeys(store)).toEqual(CARRIED_OVER);
    expect(await raw('SELECT workstream_id AS id FROM turn_leases ORDER BY 1')).toEqual([
      { id: 'gone' },
      { id: 't/w' },
    ]);
    const [row] = await raw<{ session: string }>("SELECT session FROM workstreams WHERE id = 't/w'");
    expect(JSON.parse(row!.session)).toEqual({ value: 'idle', context: { workstreamId: 't/w' } });
    // The rows still belong to their workstream: deleting it deletes them.
    expect(await store.deleteWorkstream('t/w')).toBe(true);
    expect(await raw('SELECT count(*)::int AS n FROM messages')).toEqual([{ n: 0 }]);
  });

  it('refuses a schema newer than it supports with STORE_ERROR', async () => {
    await open();
    await raw('INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)');
    await expect(open({}, true)).rejects.toMatchObject({
      code: 'STORE_ERROR',
      details: { schemaVersion: 99, supported: PG_SCHEMA_VERSION },
    });
  });

  it('P6: two hosts racing acquireLease 50 times: one live lease at a time, tokens unique and increasing', async () => {
    const clock = new FakeClock();
    const hostA = await open({ now: clock.now });
    const hostB = await open({ now: clock.now }, true);
    await hostA.createWorkstream({ id: 'w', tenantId: 't' });
    const tokens: number[] = [];
    for (let round = 0; round < 50; round++) {
      const results = await Promise.all([
        hostA.acquireLease('w', 'host-a', 1_000),
        hostB.acquireLease('w', 'host-b', 1_000),
        hostA.acquireLease('w', 'host-a2', 1_000),
        hostB.acquireLease('w', 'host-b2', 1_000),
      ]);
      const won = results.filter((l) => l !== undefined);
      expect(won).toHaveLength(1);
      tokens.push(won[0]!.token);
      expect(await hostB.getLease('w')).toEqual(won[0]);
      expect(await hostA.releaseLease('w', won[0]!.holder, won[0]!.token)).toBe(true);
    }
    expect(tokens).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
  });

  it('T4: hosts racing for leases of one tenant under tenantLimit never hold more than it, 30 rounds', async () => {
    const clock = new FakeClock();
    const hostA = await open({ now: clock.now });
    const hostB = await open({ now: clock.now }, true);
    const ids = ['t/a', 't/b', 't/c', 't/d'];
    for (const id of ids) await hostA.createWorkstream({ id, tenantId: 't' });
    for (let round = 0; round < 30; round++) {
      const results = await Promise.allSettled(
        ids.map((id, i) =>
          (i % 2 === 0 ? hostA : hostB).acquireLease(id, `host-${i}:1`, 1_000, { tenantLimit: 2 }),
        ),
      );
      const won = results.flatMap((r, i) =>
        r.status === 'fulfilled' && r.value !== undefined ? [ids[i]!] : [],
      );
      expect(won).toHaveLength(2);
      for (const r of results)
        if (r.status === 'rejected') expect(r.reason).toMatchObject({ code: 'CAPACITY_EXHAUSTED' });
      for (const id of won) {
        const lease = (await hostA.getLease(id))!;
        expect(await hostB.releaseLease(id, lease.holder, lease.token)).toBe(true);
      }
    }
  });

  it('T4: hosts queueing sends of one tenant at once never exceed maxPerTenant, 20 rounds', async () => {
    const clock = new FakeClock();
    const hostA = await open({ now: clock.now });
    const hostB = await open({ now: clock.now }, true);
    const ids = ['t/a', 't/b', 't/c', 't/d'];
    for (const id of ids) await hostA.createWorkstream({ id, tenantId: 't' });
    for (let round = 0; round < 20; round++) {
      const results = await Promise.allSettled(
        ids.map((workstreamId, i) =>
          (i % 2 === 0 ? hostA : hostB).enqueueSend({
            workstreamId,
            principal: 'p',
            body: '{}',
            origin: 'h',
            max: 8,
            retryAfterMs: 1,
            maxPerTenant: 2,
          }),
        ),
      );
      const queued = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.workstreamId] : []));
      expect(queued).toHaveLength(2);
      for (const id of queued) await hostA.revokeQueuedSends(id, '{}');
    }
  });

  it('P6: a superseded holder’s append writes nothing while the new holder’s append succeeds', async () => {
    const clock = new FakeClock();
    const hostA = await open({ now: clock.now });
    const hostB = await open({ now: clock.now }, true);
    await hostA.createWorkstream({ id: 'w', tenantId: 't' });
    const first = (await hostA.acquireLease('w', 'host-a', 1_000))!;
    expect(
      await hostA.appendMessages({
        workstreamId: 'w',
        generation: 0,
        fencingToken: first.token,
        entries: [user('a1')],
      }),
    ).toEqual([1]);
    clock.advance(1_000);
    const second = (await hostB.acquireLease('w', 'host-b', 1_000))!;
    const count = async () => (await raw<{ n: number }>('SELECT COUNT(*)::int AS n FROM messages'))[0]!.n;
    const [late, current] = await Promise.allSettled([
      hostA.appendMessages({
        workstreamId: 'w',
        generation: 0,
        fencingToken: first.token,
        entries: [user('a2')],
      }),
      hostB.appendMessages({
        workstreamId: 'w',
        generation: 0,
        fencingToken: second.token,
        entries: [user('b1')],
      }),
    ]);
    expect(late.status === 'rejected' && isTurnwardenError(late.reason, 'FENCED')).toBe(true);
    expect(late).toMatchObject({ reason: { details: { reason: 'superseded', currentToken: second.token } } });
    expect(current).toEqual({ status: 'fulfilled', value: [2] });
    expect(await count()).toBe(2);
    expect((await hostA.readHistory('w')).map((r) => r.commitKey)).toEqual(['a1', 'b1']);
  });

  it('createWorkstream racing on one id from two hosts: one wins, the others get WORKSTREAM_EXISTS', async () => {
    const hostA = await open();
    const hostB = await open({}, true);
    const results = await Promise.allSettled(
      Array.from({ length: 6 }, (_, i) =>
        (i % 2 === 0 ? hostA : hostB).createWorkstream({ id: 'w', tenantId: `t${i}` }),
      ),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of results.filter((x) => x.status === 'rejected')) {
      expect(r).toMatchObject({ reason: { code: 'WORKSTREAM_EXISTS' } });
    }
    expect(await hostA.listWorkstreams()).toHaveLength(1);
  });

  it('without `now` uses the database clock: timestamps near the server’s time, a short lease expires', async () => {
    const store = await open();
    const [{ ms }] = (await raw<{ ms: number }>(
      'SELECT floor(extract(epoch from clock_timestamp()) * 1000)::float8 AS ms',
    )) as [{ ms: number }];
    const ws = await store.createWorkstream({ id: 'w', tenantId: 't' });
    expect(Math.abs(ws.createdAt - ms)).toBeLessThan(5_000);
    const lease = (await store.acquireLease('w', 'h', 50))!;
    expect(lease.expiresAt - lease.acquiredAt).toBe(50);
    // Polls the database (no fixed sleep) until the lease lapses by its clock.
    while ((await store.expiredLeases()).length === 0) await new Promise((r) => setTimeout(r, 10));
    await expect(
      store.appendMessages({
        workstreamId: 'w',
        generation: 0,
        fencingToken: lease.token,
        entries: [user('u')],
      }),
    ).rejects.toMatchObject({ code: 'FENCED', details: { reason: 'expired' } });
    expect(await store.acquireLease('w', 'other', 60_000)).toMatchObject({ token: lease.token + 1 });
  });

  it('LISTEN/NOTIFY between two stores; unlisten stops delivery', async () => {
    const listener = await open();
    const notifier = await open({}, true);
    const got: string[] = [];
    let arrived: () => void = () => undefined;
    const unlisten = await listener.listen('turnwarden_events', (p) => {
      got.push(p);
      arrived();
    });
    const next = () =>
      new Promise<void>((r) => {
        arrived = r;
      });
    let wait = next();
    await notifier.notify('turnwarden_events', 'w:7');
    await wait;
    expect(got).toEqual(['w:7']);
    await unlisten();
    await notifier.notify('turnwarden_events', 'lost');
    await listener.listen('other_channel', () => undefined);
    wait = next();
    // A notification on another channel proves the first one would have arrived by now.
    const unlisten2 = await listener.listen('turnwarden_events', (p) => {
      got.push(`again:${p}`);
      arrived();
    });
    await notifier.notify('turnwarden_events', 'w:8');
    await wait;
    expect(got).toEqual(['w:7', 'again:w:8']);
    await unlisten2();
    await expect(listener.listen('Bad-Channel', () => undefined)).rejects.toMatchObject({
      code: 'INVALID_INPUT',
      details: { field: 'channel' },
    });
  });

  it('notify refuses a bad channel, a payload that is not a string or is over 7,999 bytes (UTF-8), sending nothing; 7,999 bytes go', async () => {
    const listener = await open();
    const notifier = await open({}, true);
    const got: string[] = [];
    let arrived: () => void = () => undefined;
    await listener.listen('ch', (p) => {
      got.push(p.length > 20 ? `${p.length} chars` : p);
      arrived();
    });
    const refused = async (channel: unknown, payload: unknown, field: string) =>
      expect(notifier.notify(channel as string, payload as string)).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        details: { field },
      });
    await refused('Bad-Channel', 'x', 'channel');
    await refused('ch', 42, 'payload');
    await refused('ch', undefined, 'payload');
    await refused('ch', 'x'.repeat(8_000), 'payload');
    // 4,000 two-byte characters: 8,000 bytes, though 4,000 characters.
    await refused('ch', 'é'.repeat(4_000), 'payload');
    // The largest payload goes, and is the first thing to arrive: nothing refused was sent.
    const wait = new Promise<void>((r) => {
      arrived = r;
    });
    await notifier.notify('ch', 'x'.repeat(7_999));
    await wait;
    expect(got).toEqual(['7999 chars']);
  });

  it('the listening connection reconnects after it drops, listens again and says so', async () => {
    const listener = await open({ applicationName: 'tw-listener' });
    const notifier = await open({}, true);
    let reconnected: () => void = () => undefined;
    const reconnectedP = new Promise<void>((r) => {
      reconnected = r;
    });
    let arrived: (p: string) => void = () => undefined;
    const arrivedP = new Promise<string>((r) => {
      arrived = r;
    });
    await listener.listen(
      'ch',
      (p) => arrived(p),
      () => reconnected(),
    );
    await raw(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND application_name = 'tw-listener'",
    );
    await reconnectedP;
    await notifier.notify('ch', 'after');
    expect(await arrivedP).toBe('after');
  });

  it('readHistoryAfter returns the rows after a seq, in order', async () => {
    const store = await open({ now: new FakeClock().now });
    await store.createWorkstream({ id: 'w', tenantId: 't' });
    await store.appendMessages({
      workstreamId: 'w',
      generation: 0,
      entries: [user('a'), user('b'), user('c')],
    });
    expect((await store.readHistoryAfter('w', 1)).map((r) => [r.seq, r.commitKey])).toEqual([
      [2, 'b'],
      [3, 'c'],
    ]);
    expect(await store.readHistoryAfter('w', 3)).toEqual([]);
    await expect(store.readHistoryAfter('nope', 0)).rejects.toMatchObject({ code: 'WORKSTREAM_NOT_FOUND' });
    await expect(store.readHistoryAfter('w', -1)).rejects.toMatchObject({ code: 'INVALID_INPUT' });
  });

  it('statementTimeoutMs: a statement blocked past it is cancelled by the server, and the call fails retryably, naming its operation', async () => {
    const store = await open({ statementTimeoutMs: 250 });
    await store.createWorkstream({ id: 'w', tenantId: 't' });
    // Another session holds the table: every statement on it waits behind the lock.
    const blocker = new pg.Client({ connectionString: server.url, options: `-c search_path=${schema}` });
    await blocker.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE workstreams IN ACCESS EXCLUSIVE MODE');
      const stillBlocked = new Promise<'still blocked'>((r) =>
        setTimeout(() => r('still blocked'), 10_000).unref(),
      );
      const outcome = await Promise.race([store.getWorkstream('w').catch((e: unknown) => e), stillBlocked]);
      expect(outcome).toMatchObject({
        code: 'STORE_ERROR',
        retryable: true,
        details: { operation: 'getWorkstream' },
      });
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
    }
    expect(await store.getWorkstream('w')).toMatchObject({ id: 'w' });
  });

  it("historyReader: other threads read through a connection of their own, named <applicationName>-reader, in the store's schema, with its timeouts", async () => {
    const store = await open({
      applicationName: 'tw-host',
      connectionTimeoutMs: 4_321,
      statementTimeoutMs: 1_234,
    });
    const spec = store.historyReader();
    expect(spec.options).toStrictEqual({
      kind: 'postgres',
      connectionString: server.url,
      schema,
      applicationName: 'tw-host-reader',
      connectionTimeoutMs: 4_321,
      statementTimeoutMs: 1_234,
    });
    // Without a statement timeout, the reader has none either (not a key set to undefined).
    expect((await open({}, true)).historyReader().options).not.toHaveProperty('statementTimeoutMs');
    await store.createWorkstream({ id: 'w', tenantId: 't' });
    await store.appendMessages({ workstreamId: 'w', generation: 0, entries: [user('a')] });
    const { openHistoryReader } = (await import(spec.module)) as typeof import('./reader.js');
    const reader = await openHistoryReader(spec.options as Parameters<typeof openHistoryReader>[0]);
    try {
      expect((await reader.readHistory('w')).map((r) => r.commitKey)).toEqual(['a']);
      const seen = await raw<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'tw-host-reader'",
      );
      expect(seen).toEqual([{ n: 1 }]);
    } finally {
      await reader.close();
    }
  });

  it('close() is idempotent; later calls reject with STORE_ERROR { closed: true }', async () => {
    const store = await open();
    await store.close();
    await store.close();
    await expect(store.getWorkstream('w')).rejects.toMatchObject({
      code: 'STORE_ERROR',
      details: { closed: true },
    });
    await expect(store.notify('ch', 'x')).rejects.toMatchObject({
      code: 'STORE_ERROR',
      details: { closed: true },
    });
  });

  it('P6 S7: a host stalled inside a transaction (its lease rows locked) is ended by the server after idleInTransactionTimeoutMs — another host takes the expired lease while it is still stalled, and the stalled write fails retryably, writing nothing', async () => {
    const b = await open({ now: () => Date.now() });
    await b.createWorkstream({ id: 'w', tenantId: 't' });
    const snapshot = (mark: string) => ({ value: 'idle', status: 'active', context: { mark }, children: {} });
    await b.saveSession({ workstreamId: 'w', session: snapshot('before') });
    const flags = new Int32Array(new SharedArrayBuffer(8));
    const worker = new Worker(new URL('./test-support/stalled-writer.mjs', import.meta.url), {
      workerData: {
        url: server.url,
        schema,
        idleInTransactionTimeoutMs: 300,
        maxStallMs: 20_000,
        flags: flags.buffer,
      },
    });
    const messages: { type: string; outcome?: Record<string, unknown> }[] = [];
    worker.on('message', (m) => void messages.push(m));
    // A worker that dies (a crash: an unhandled 'error' event) rejects here, rather than hang.
    const exited = once(worker, 'exit').then(([code]) => {
      throw new Error(`the stalled writer exited (${code})`);
    });
    exited.catch(() => undefined);
    const next = async (type: string) => {
      while (!messages.some((m) => m.type === type)) await Promise.race([once(worker, 'message'), exited]);
      return messages.find((m) => m.type === type)!;
    };
    try {
      await next('ready');
      // The stalled host holds the lease (a short one) and writes under it.
      const lease = (await b.acquireLease('w', 'host-a', 200))!;
      worker.postMessage({
        type: 'save',
        input: { workstreamId: 'w', fencingToken: lease.token, session: snapshot('stalled') },
      });
      // Stalled with its row locks sent, not committed.
      while (Atomics.load(flags, 0) === 0) await new Promise((r) => setTimeout(r, 10));
      while (Date.now() <= lease.expiresAt) await new Promise((r) => setTimeout(r, 20));
      // The lease expired: another host takes it — without waiting for the stalled one to resume.
      const taken = await Promise.race([
        b.acquireLease('w', 'host-b', 60_000),
        new Promise<'still locked'>((r) => setTimeout(() => r('still locked'), 5_000)),
      ]);
      const stalledMeanwhile = Atomics.load(flags, 1) === 0;
      Atomics.store(flags, 1, 1);
      Atomics.notify(flags, 1);
      expect(taken).toMatchObject({ holder: 'host-b', token: lease.token + 1 });
      expect(stalledMeanwhile).toBe(true);
      // The stalled write, resumed on a connection the server ended: failed, retryable, not written.
      const { outcome } = await next('saved');
      expect(outcome).toMatchObject({ ok: false, code: 'STORE_ERROR', retryable: true });
      expect((await b.getWorkstream('w'))?.session).toEqual(snapshot('before'));
    } finally {
      Atomics.store(flags, 1, 1);
      Atomics.notify(flags, 1);
      worker.postMessage({ type: 'close' });
      await next('closed').catch(() => undefined);
      await worker.terminate();
    }
  });

  it('a close with tool calls still open is refused TOOL_CLEANUP_PENDING, saying how many; a listen without a callback is refused', async () => {
    const store = await open();
    await store.createWorkstream({ id: 'w', tenantId: 't' });
    await store.appendMessages({
      workstreamId: 'w',
      generation: 0,
      entries: [user('u'), assistant('a', ['c1', 'c2'])],
    });
    await expect(store.closeWorkstream('w')).rejects.toMatchObject({
      code: 'TOOL_CLEANUP_PENDING',
      message: 'workstream w has 2 tool call(s) without results; repair before closing',
      details: { workstreamId: 'w', openCalls: 2 },
    });
    await expect(store.listen('ch', 'not a function' as never)).rejects.toMatchObject({
      code: 'INVALID_INPUT',
      details: { field: 'onPayload' },
    });
  });

  it('an injected clock that returns a non-finite value fails the call with INVALID_CONFIG naming now, writing nothing', async () => {
    let t: unknown = 1_000;
    const b = await open({ now: () => t as number });
    await b.createWorkstream({ id: 'w', tenantId: 't' });
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, '5']) {
      t = bad;
      await expect(b.acquireLease('w', 'h', 1_000), String(bad)).rejects.toMatchObject({
        code: 'INVALID_CONFIG',
        details: { field: 'now' },
      });
    }
    t = 2_000;
    expect(await b.getLease('w')).toBeUndefined();
  });

  it('validates its options with INVALID_CONFIG naming the field', async () => {
    for (const [options, field] of [
      [{ connectionString: '' }, 'connectionString'],
      [{ connectionString: 'mysql://x' }, 'connectionString'],
      [{ connectionString: 'postgres://h/db?options=-c%20x%3Dy' }, 'connectionString'],
      [{ connectionString: 'postgres://h/db', schema: 'Bad' }, 'schema'],
      [{ connectionString: 'postgres://h/db', maxConnections: 0 }, 'maxConnections'],
      [{ connectionString: 'postgres://h/db', now: 5 }, 'now'],
      [{ connectionString: 'postgres://h/db', statementTimeoutMs: -1 }, 'statementTimeoutMs'],
      [
        { connectionString: 'postgres://h/db', idleInTransactionTimeoutMs: 1.5 },
        'idleInTransactionTimeoutMs',
      ],
      [{ connectionString: 'postgres://h/db?idle_in_transaction_session_timeout=0' }, 'connectionString'],
      [{ connectionString: 'postgres://h/db', extra: 1 }, 'extra'],
    ] as const) {
      await expect(openPostgresStore(options as never)).rejects.toMatchObject({
        code: 'INVALID_CONFIG',
        details: { field },
      });
    }
  });

  it('a connection failure is a retryable STORE_ERROR that does not reveal the password', async () => {
    const e = await openPostgresStore({
      connectionString: 'postgres://postgres:s3cret-pw@127.0.0.1:1/db',
      connectionTimeoutMs: 2_000,
    }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toMatchObject({ code: 'STORE_ERROR', retryable: true });
    expect(
      JSON.stringify({ message: (e as Error).message, details: (e as { details: unknown }).details }),
    ).not.toContain('s3cret');
  });
});
