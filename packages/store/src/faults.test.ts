/** faultyStore: each fault fails the way a real store does, batch by batch, for appendMessages and appendMany. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { faultyStore } from './faults.js';
import type { SqliteStore } from './sqlite-store.js';
import { FakeClock, Sandbox, user } from './test-support/fixtures.js';

const sandbox = new Sandbox();
let inner: SqliteStore;

beforeEach(async () => {
  inner = sandbox.memory(new FakeClock());
  for (const id of ['a', 'b']) {
    await inner.createWorkstream({ id, tenantId: 't' });
    await inner.nextGeneration(id);
  }
});
afterEach(() => sandbox.dispose());

const marked = (marker: string) => (e: { message: { content?: unknown } }) =>
  typeof e.message.content === 'string' && e.message.content.includes(marker);
const keys = async (id: string) => (await inner.readHistory(id)).map((r) => r.commitKey);
const batch = (ws: string, key: string, content = key) => ({
  workstreamId: ws,
  generation: 1,
  entries: [user(key, content)],
});

describe('faultyStore', () => {
  it('reject and transient fail without writing; transient is retryable; rules run out after `times`', async () => {
    const f = faultyStore(inner);
    f.inject({ match: marked('!reject'), fault: 'reject' });
    f.inject({ match: marked('!busy'), fault: 'transient', times: 2 });
    await expect(f.store.appendMessages(batch('a', 'a1', '!reject'))).rejects.toMatchObject({
      code: 'STORE_ERROR',
      retryable: false,
    });
    await expect(f.store.appendMessages(batch('b', 'b1', '!busy'))).rejects.toMatchObject({
      retryable: true,
    });
    await expect(f.store.appendMessages(batch('b', 'b1', '!busy'))).rejects.toMatchObject({
      retryable: true,
    });
    expect(await keys('a')).toEqual([]);
    expect(await keys('b')).toEqual([]);
    expect(await f.store.appendMessages(batch('b', 'b1', '!busy'))).toEqual([1]);
    expect(await f.store.appendMessages(batch('a', 'a1', '!reject'))).toEqual([1]);
    expect(f.applied).toMatchObject({ reject: 1, transient: 2 });
  });

  it('lose-ack writes the rows, then fails retryably; the retry finds them (P1)', async () => {
    const f = faultyStore(inner);
    f.inject({ match: marked('!lose'), fault: 'lose-ack' });
    await expect(f.store.appendMessages(batch('a', 'a1', '!lose'))).rejects.toMatchObject({
      retryable: true,
    });
    expect(await keys('a')).toEqual(['a1']);
    expect(await f.store.appendMessages(batch('a', 'a1', '!lose'))).toEqual([1]);
  });

  it('throw is synchronous, for appendMessages and appendMany alike', async () => {
    const f = faultyStore(inner);
    f.inject({ match: marked('!throw'), fault: 'throw', times: 2 });
    expect(() => f.store.appendMessages(batch('a', 'a1', '!throw'))).toThrow(/the store threw/);
    expect(() => f.store.appendMany!([batch('b', 'b1'), batch('a', 'a1', '!throw')])).toThrow(
      /the store threw/,
    );
    expect(await keys('b')).toEqual([]);
  });

  it('in a group commit a faulted batch fails in its slot and the others are written; a delay delays the group', async () => {
    const f = faultyStore(inner);
    f.inject({ match: marked('!reject'), fault: 'reject' });
    f.inject({ match: marked('!lose'), fault: 'lose-ack' });
    f.inject({ match: marked('!slow'), fault: { delayMs: 30 } });
    const t0 = performance.now();
    const out = await f.store.appendMany!([
      batch('a', 'a1', '!reject'),
      batch('b', 'b1', '!lose'),
      batch('a', 'a2', '!slow'),
    ]);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(25);
    expect(
      out.map((o) => ('seqs' in o ? o.seqs : `${o.error.code}${o.error.retryable ? ' (retryable)' : ''}`)),
    ).toEqual(['STORE_ERROR', 'STORE_ERROR (retryable)', [1]]);
    expect(await keys('a')).toEqual(['a2']);
    expect(await keys('b')).toEqual(['b1']);
    expect(f.applied).toEqual({ reject: 1, transient: 0, 'lose-ack': 1, throw: 0, delay: 1 });
  });
});
