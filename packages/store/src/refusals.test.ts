/**
 * T5 across the whole store contract: every call refuses a bad argument with INVALID_INPUT
 * naming that argument's field — the same field on both stores — and writes nothing. On
 * PostgreSQL, a call whose connection fails is a retryable STORE_ERROR naming the operation
 * (`details.operation`), which is how an operator tells which call failed.
 */
import { describe, expect, it } from 'vitest';
import { openPostgresStore } from './postgres-store.js';
import { FakeClock, user } from './test-support/fixtures.js';
import { startPostgres } from './test-support/postgres.js';
import { freezableProxy } from './test-support/proxy.js';
import { forEachStore, type TestStore } from './test-support/stores.js';

const snapshot = { value: 'idle', status: 'active', context: {}, children: {} };
const summary = { commitKey: 's', message: { role: 'system', content: 'summary' } };

/** [the call, the field its refusal names]. */
const REFUSALS: [string, (s: TestStore) => Promise<unknown>, string][] = [
  ['createWorkstream: not an object', (s) => s.createWorkstream(null as never), 'input'],
  ['createWorkstream: id', (s) => s.createWorkstream({ id: 'a b', tenantId: 't' }), 'id'],
  ['getWorkstream: id', (s) => s.getWorkstream(''), 'id'],
  ['listWorkstreams: not an object', (s) => s.listWorkstreams(5 as never), 'filter'],
  ['listWorkstreams: unknown key', (s) => s.listWorkstreams({ nope: 1 } as never), 'filter.nope'],
  ['listWorkstreams: tenantId', (s) => s.listWorkstreams({ tenantId: 'a b' }), 'filter.tenantId'],
  ['listWorkstreams: afterId', (s) => s.listWorkstreams({ afterId: 'a b' }), 'filter.afterId'],
  ['listWorkstreams: limit', (s) => s.listWorkstreams({ limit: 0 }), 'filter.limit'],
  ['listWorkstreams: status', (s) => s.listWorkstreams({ status: 'gone' as never }), 'filter.status'],
  ['deleteWorkstream: id', (s) => s.deleteWorkstream('a b'), 'id'],
  ['deleteWorkstream: incarnation', (s) => s.deleteWorkstream('w', ''), 'incarnation'],
  ['closeWorkstream: id', (s) => s.closeWorkstream('a b'), 'id'],
  ['closeWorkstream: session', (s) => s.closeWorkstream('w', 5 as never), 'session'],
  ['nextGeneration: id', (s) => s.nextGeneration('a b'), 'id'],
  [
    'appendMessages: workstreamId',
    (s) => s.appendMessages({ workstreamId: 'a b', generation: 0, entries: [user('k')] }),
    'workstreamId',
  ],
  [
    'appendMessages: generation',
    (s) => s.appendMessages({ workstreamId: 'w', generation: -1, entries: [user('k')] }),
    'generation',
  ],
  [
    'appendMessages: fencingToken',
    (s) => s.appendMessages({ workstreamId: 'w', generation: 0, fencingToken: 0, entries: [user('k')] }),
    'fencingToken',
  ],
  [
    'appendMessages: session',
    (s) =>
      s.appendMessages({ workstreamId: 'w', generation: 0, entries: [user('k')], session: 'x' as never }),
    'session',
  ],
  ['appendMany: not an array', (s) => s.appendMany('x' as never), 'inputs'],
  ['saveSession: not an object', (s) => s.saveSession(undefined as never), 'input'],
  [
    'saveSession: unknown key',
    (s) => s.saveSession({ workstreamId: 'w', session: snapshot, x: 1 } as never),
    'input.x',
  ],
  [
    'saveSession: workstreamId',
    (s) => s.saveSession({ workstreamId: 'a b', session: snapshot }),
    'workstreamId',
  ],
  [
    'saveSession: fencingToken',
    (s) => s.saveSession({ workstreamId: 'w', fencingToken: 1.5, session: snapshot }),
    'fencingToken',
  ],
  ['saveSession: session', (s) => s.saveSession({ workstreamId: 'w', session: [] as never }), 'session'],
  ['compactHistory: not an object', (s) => s.compactHistory(7 as never), 'input'],
  [
    'compactHistory: unknown key',
    (s) => s.compactHistory({ workstreamId: 'w', generation: 0, throughSeq: 1, summary, y: 1 } as never),
    'input.y',
  ],
  [
    'compactHistory: workstreamId',
    (s) => s.compactHistory({ workstreamId: 'a b', generation: 0, throughSeq: 1, summary } as never),
    'workstreamId',
  ],
  [
    'compactHistory: generation',
    (s) => s.compactHistory({ workstreamId: 'w', generation: -1, throughSeq: 1, summary } as never),
    'generation',
  ],
  [
    'compactHistory: fencingToken',
    (s) =>
      s.compactHistory({
        workstreamId: 'w',
        generation: 0,
        fencingToken: 0,
        throughSeq: 1,
        summary,
      } as never),
    'fencingToken',
  ],
  [
    'compactHistory: throughSeq',
    (s) => s.compactHistory({ workstreamId: 'w', generation: 0, throughSeq: 0, summary } as never),
    'throughSeq',
  ],
  [
    'compactHistory: summary role',
    (s) => s.compactHistory({ workstreamId: 'w', generation: 0, throughSeq: 1, summary: user('s') } as never),
    'summary.message.role',
  ],
  ['truncateHistory: not an object', (s) => s.truncateHistory('x' as never), 'input'],
  [
    'truncateHistory: unknown key',
    (s) => s.truncateHistory({ workstreamId: 'w', generation: 0, fromSeq: 1, fromKey: 'k', z: 1 } as never),
    'input.z',
  ],
  [
    'truncateHistory: workstreamId',
    (s) => s.truncateHistory({ workstreamId: 'a b', generation: 0, fromSeq: 1, fromKey: 'k' }),
    'workstreamId',
  ],
  [
    'truncateHistory: generation',
    (s) => s.truncateHistory({ workstreamId: 'w', generation: 0.5, fromSeq: 1, fromKey: 'k' }),
    'generation',
  ],
  [
    'truncateHistory: fencingToken',
    (s) =>
      s.truncateHistory({ workstreamId: 'w', generation: 0, fencingToken: -2, fromSeq: 1, fromKey: 'k' }),
    'fencingToken',
  ],
  [
    'truncateHistory: fromSeq',
    (s) => s.truncateHistory({ workstreamId: 'w', generation: 0, fromSeq: 0, fromKey: 'k' }),
    'fromSeq',
  ],
  [
    'truncateHistory: fromKey',
    (s) => s.truncateHistory({ workstreamId: 'w', generation: 0, fromSeq: 1, fromKey: '' }),
    'fromKey',
  ],
  ['readHistory: workstreamId', (s) => s.readHistory('a b'), 'workstreamId'],
  [
    'readHistoryPage: workstreamId',
    (s) => s.readHistoryPage('a b', { afterSeq: 0, limit: 1 }),
    'workstreamId',
  ],
  [
    'readHistoryPage: page.afterSeq',
    (s) => s.readHistoryPage('w', { afterSeq: -1, limit: 1 }),
    'page.afterSeq',
  ],
  ['readHistoryPage: page.limit', (s) => s.readHistoryPage('w', { afterSeq: 0, limit: 0 }), 'page.limit'],
  ['readHistoryTail: workstreamId', (s) => s.readHistoryTail!('a b'), 'workstreamId'],
  ['readHistoryAfter: workstreamId', (s) => s.readHistoryAfter('a b', 0), 'workstreamId'],
  ['readHistoryAfter: afterSeq', (s) => s.readHistoryAfter('w', -1), 'afterSeq'],
  ['acquireLease: workstreamId', (s) => s.acquireLease('a b', 'h', 1_000), 'workstreamId'],
  ['acquireLease: holder', (s) => s.acquireLease('w', '', 1_000), 'holder'],
  ['acquireLease: ttlMs', (s) => s.acquireLease('w', 'h', 0), 'ttlMs'],
  ['acquireLease: replacing', (s) => s.acquireLease('w', 'h', 1_000, { replacing: '' }), 'replacing'],
  [
    'acquireLease: replacing not a prefix',
    (s) => s.acquireLease('w', 'h:1', 1_000, { replacing: 'x:' }),
    'replacing',
  ],
  ['refreshLease: workstreamId', (s) => s.refreshLease('a b', 'h', 1, 1_000), 'workstreamId'],
  ['refreshLease: holder', (s) => s.refreshLease('w', '', 1, 1_000), 'holder'],
  ['refreshLease: token', (s) => s.refreshLease('w', 'h', 0, 1_000), 'token'],
  ['refreshLease: ttlMs', (s) => s.refreshLease('w', 'h', 1, 0), 'ttlMs'],
  ['releaseLease: workstreamId', (s) => s.releaseLease('a b', 'h', 1), 'workstreamId'],
  ['releaseLease: holder', (s) => s.releaseLease('w', '', 1), 'holder'],
  ['releaseLease: token', (s) => s.releaseLease('w', 'h', 0), 'token'],
  ['getLease: workstreamId', (s) => s.getLease('a b'), 'workstreamId'],
];

forEachStore((backend) => {
  describe('T5: every call names the field it refuses', () => {
    it.each(REFUSALS)('%s', async (_, call, field) => {
      const store = await backend.open(new FakeClock());
      await store.createWorkstream({ id: 'w', tenantId: 't' });
      const before = await store.stats();
      await expect(call(store)).rejects.toMatchObject({ code: 'INVALID_INPUT', details: { field } });
      expect(await store.stats()).toEqual(before);
      expect(await store.readHistory('w')).toEqual([]);
      expect(await store.getLease('w')).toBeUndefined();
    });
  });
});

const started = await startPostgres();
describe.skipIf('skip' in started)('PostgreSQL: a call whose connection fails names its operation', () => {
  const url = 'skip' in started ? '' : started.url;

  it('each call is a retryable STORE_ERROR with details.operation', async () => {
    const proxy = await freezableProxy(url);
    const schema = `refusals_${process.pid}`;
    const store = await openPostgresStore({
      connectionString: proxy.url,
      schema,
      connectionTimeoutMs: 2_000,
    });
    try {
      proxy.close();
      const calls: [string, () => Promise<unknown>][] = [
        ['createWorkstream', () => store.createWorkstream({ id: 'w', tenantId: 't' })],
        ['getWorkstream', () => store.getWorkstream('w')],
        ['listWorkstreams', () => store.listWorkstreams()],
        ['deleteWorkstream', () => store.deleteWorkstream('w')],
        ['closeWorkstream', () => store.closeWorkstream('w')],
        ['nextGeneration', () => store.nextGeneration('w')],
        [
          'appendMessages',
          () => store.appendMessages({ workstreamId: 'w', generation: 0, entries: [user('k')] }),
        ],
        ['appendMany', () => store.appendMany([{ workstreamId: 'w', generation: 0, entries: [user('k')] }])],
        ['saveSession', () => store.saveSession({ workstreamId: 'w', session: snapshot })],
        [
          'compactHistory',
          () => store.compactHistory({ workstreamId: 'w', generation: 0, throughSeq: 1, summary } as never),
        ],
        [
          'truncateHistory',
          () => store.truncateHistory({ workstreamId: 'w', generation: 0, fromSeq: 1, fromKey: 'k' }),
        ],
        ['readHistory', () => store.readHistory('w')],
        ['readHistoryPage', () => store.readHistoryPage('w', { afterSeq: 0, limit: 10 })],
        ['readHistoryTail', () => store.readHistoryTail('w')],
        ['readHistoryAfter', () => store.readHistoryAfter('w', 0)],
        ['acquireLease', () => store.acquireLease('w', 'h', 1_000)],
        ['refreshLease', () => store.refreshLease('w', 'h', 1, 1_000)],
        ['releaseLease', () => store.releaseLease('w', 'h', 1)],
        ['getLease', () => store.getLease('w')],
        ['expiredLeases', () => store.expiredLeases()],
        ['listWorkstreamsWithOpenToolCalls', () => store.listWorkstreamsWithOpenToolCalls?.()],
        ['stats', () => store.stats()],
        ['notify', () => store.notify('tw_chan', 'x')],
      ];
      for (const [operation, call] of calls) {
        await expect(call(), operation).rejects.toMatchObject({
          code: 'STORE_ERROR',
          retryable: true,
          details: { operation },
        });
      }
    } finally {
      await store.close().catch(() => undefined);
      proxy.close();
    }
  });
});
