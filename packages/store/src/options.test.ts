import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openSqliteStore } from './sqlite-store.js';
import { Sandbox } from './test-support/fixtures.js';

const sandbox = new Sandbox();
afterEach(() => sandbox.dispose());

describe('openSqliteStore options', () => {
  it.each([
    ['path', { path: '' }],
    ['path', { path: 42 }],
    ['path', {}],
    ['synchronous', { path: ':memory:', synchronous: 'OFF' }],
    ['busyTimeoutMs', { path: ':memory:', busyTimeoutMs: -1 }],
    ['busyTimeoutMs', { path: ':memory:', busyTimeoutMs: 1.5 }],
    ['busyTimeoutMs', { path: ':memory:', busyTimeoutMs: '5000' }],
    ['now', { path: ':memory:', now: 123 }],
    ['timeout', { path: ':memory:', timeout: 5 }],
  ])('refuses a bad %s with INVALID_CONFIG naming the field', (field, options) => {
    expect(() => openSqliteStore(options as never)).toThrow(
      expect.objectContaining({ code: 'INVALID_CONFIG', details: { field } }),
    );
  });

  it('refuses a non-object', () => {
    expect(() => openSqliteStore(undefined as never)).toThrow(
      expect.objectContaining({ code: 'INVALID_CONFIG' }),
    );
  });

  it('sets WAL, synchronous NORMAL, foreign keys and a 5 s busy timeout by default on a file', () => {
    const store = sandbox.open(join(sandbox.dir(), 'db.sqlite'));
    expect(store.pragmas()).toEqual({
      journalMode: 'wal',
      synchronous: 'NORMAL',
      foreignKeys: true,
      busyTimeoutMs: 5000,
    });
  });

  it('honours synchronous FULL and busyTimeoutMs', async () => {
    const store = openSqliteStore({
      path: join(sandbox.dir(), 'db.sqlite'),
      synchronous: 'FULL',
      busyTimeoutMs: 250,
    });
    try {
      expect(store.pragmas()).toMatchObject({ journalMode: 'wal', synchronous: 'FULL', busyTimeoutMs: 250 });
    } finally {
      await store.close();
    }
  });

  it('opens an in-memory store', async () => {
    const store = sandbox.memory();
    expect(store.pragmas()).toMatchObject({ journalMode: 'memory', foreignKeys: true });
    await store.createWorkstream({ id: 'w', tenantId: 't' });
    expect(await store.getWorkstream('w')).toMatchObject({ id: 'w' });
  });

  it('creates the missing parent directories of a file path', () => {
    const path = join(sandbox.dir(), 'a', 'b', 'db.sqlite');
    sandbox.open(path);
    expect(existsSync(path)).toBe(true);
  });

  it('runs each call at once and in call order', async () => {
    const store = sandbox.memory();
    const created = store.createWorkstream({ id: 'w', tenantId: 't' });
    const generation = store.nextGeneration('w');
    const read = store.getWorkstream('w');
    expect(await read).toMatchObject({ generation: 1 });
    expect(await created).toMatchObject({ generation: 0 });
    expect(await generation).toBe(1);
  });

  it('rejects calls after close with STORE_ERROR; close is idempotent', async () => {
    const store = sandbox.memory();
    await store.close();
    await store.close();
    await expect(store.getWorkstream('w')).rejects.toMatchObject({ code: 'STORE_ERROR' });
    expect(() => store.pragmas()).toThrow(expect.objectContaining({ code: 'STORE_ERROR' }));
  });

  it('refuses a write when the injected clock returns garbage, and writes nothing', async () => {
    let broken = false;
    const store = openSqliteStore({ path: ':memory:', now: () => (broken ? Number.NaN : 1) });
    try {
      broken = true;
      await expect(store.createWorkstream({ id: 'w', tenantId: 't' })).rejects.toMatchObject({
        code: 'INVALID_CONFIG',
        details: { field: 'now' },
      });
      broken = false;
      expect(await store.listWorkstreams()).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it('reports a path that cannot be opened as STORE_ERROR', () => {
    const dir = sandbox.dir();
    expect(() => openSqliteStore({ path: dir })).toThrow(expect.objectContaining({ code: 'STORE_ERROR' }));
  });
});
