import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { applyMigrations, MIGRATIONS, type Migration, SCHEMA_VERSION } from './migrations.js';
import { openSqliteStore } from './sqlite-store.js';
import {
  CARRIED_OVER,
  carriedOverToKeys,
  FakeClock,
  preKeyRows,
  Sandbox,
  user,
} from './test-support/fixtures.js';

const sandbox = new Sandbox();
afterEach(() => sandbox.dispose());

function migrationRows(path: string): { version: number; applied_at: number }[] {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare('SELECT version, applied_at FROM schema_migrations ORDER BY version').all() as {
      version: number;
      applied_at: number;
    }[];
  } finally {
    db.close();
  }
}

describe('migrations', () => {
  it('are numbered 1, 2, 3… and SCHEMA_VERSION is the last', () => {
    expect(MIGRATIONS.map((m) => m.version)).toEqual(MIGRATIONS.map((_, i) => i + 1));
    expect(SCHEMA_VERSION).toBe(MIGRATIONS.length);
  });

  it('are idempotent on reopen of a file database: nothing re-applied, data kept', async () => {
    const path = join(sandbox.dir(), 'db.sqlite');
    const clock = new FakeClock(5_000);
    const first = openSqliteStore({ path, now: clock.now });
    await first.createWorkstream({ id: 'w', tenantId: 't' });
    await first.appendMessages({ workstreamId: 'w', generation: 0, entries: [user('k1')] });
    await first.close();
    const before = migrationRows(path);
    expect(before).toEqual(MIGRATIONS.map((m) => ({ version: m.version, applied_at: 5_000 })));

    clock.advance(60_000);
    for (let i = 0; i < 2; i++) {
      const again = openSqliteStore({ path, now: clock.now });
      expect((await again.stats()).schemaVersion).toBe(SCHEMA_VERSION);
      expect((await again.readHistory('w')).map((r) => r.commitKey)).toEqual(['k1']);
      await again.close();
    }
    expect(migrationRows(path)).toEqual(before);
  });

  it('T2: carry a database written before per-tenant keys over: rows, lease and session keyed <tenant>/<id>; a deleted workstream’s lease row kept', async () => {
    const path = join(sandbox.dir(), 'old.sqlite');
    const old = new Database(path);
    applyMigrations(old, () => 1, MIGRATIONS.slice(0, 3));
    old.exec(preKeyRows('1'));
    old.close();

    const store = openSqliteStore({ path });
    expect((await store.stats()).schemaVersion).toBe(SCHEMA_VERSION);
    expect(await carriedOverToKeys(store)).toEqual(CARRIED_OVER);
    await store.close();

    const db = new Database(path, { readonly: true });
    try {
      const leases = db.prepare('SELECT workstream_id AS id FROM turn_leases ORDER BY 1').all();
      expect(leases).toEqual([{ id: 'gone' }, { id: 't/w' }]);
      const session = db.prepare("SELECT session FROM workstreams WHERE id = 't/w'").get() as {
        session: string;
      };
      expect(JSON.parse(session.session)).toEqual({ value: 'idle', context: { workstreamId: 't/w' } });
      expect(db.pragma('foreign_key_check')).toEqual([]);
    } finally {
      db.close();
    }
  });

  it('apply each migration in its own transaction: a failure leaves no trace of it', () => {
    const db = new Database(':memory:');
    try {
      const good: Migration = { version: 1, name: 'a', sql: 'CREATE TABLE a (x INTEGER) STRICT;' };
      const bad: Migration = {
        version: 2,
        name: 'b',
        sql: 'CREATE TABLE b (x INTEGER) STRICT; INSERT INTO missing VALUES (1);',
      };
      expect(() => applyMigrations(db, () => 1, [good, bad])).toThrow(/missing/);
      const tables = () =>
        (
          db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as {
            name: string;
          }[]
        )
          .map((r) => r.name)
          .filter((n) => n !== 'schema_migrations');
      expect(tables()).toEqual(['a']);
      expect(db.prepare('SELECT version FROM schema_migrations').pluck().all()).toEqual([1]);

      const fixed: Migration = { version: 2, name: 'b', sql: 'CREATE TABLE b (x INTEGER) STRICT;' };
      expect(applyMigrations(db, () => 2, [good, fixed])).toEqual([2]);
      expect(tables()).toEqual(['a', 'b']);
      expect(applyMigrations(db, () => 3, [good, fixed])).toEqual([]);
    } finally {
      db.close();
    }
  });

  it('refuse a mis-numbered migration list', () => {
    const db = new Database(':memory:');
    try {
      expect(() => applyMigrations(db, () => 1, [{ version: 2, name: 'x', sql: '' }])).toThrow(
        expect.objectContaining({ code: 'INTERNAL' }),
      );
    } finally {
      db.close();
    }
  });

  it('refuse a database written by a newer schema', async () => {
    const path = join(sandbox.dir(), 'db.sqlite');
    await openSqliteStore({ path }).close();
    const db = new Database(path);
    db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, 0)').run(SCHEMA_VERSION + 1);
    db.close();
    expect(() => openSqliteStore({ path })).toThrow(
      expect.objectContaining({
        code: 'STORE_ERROR',
        details: expect.objectContaining({ supported: SCHEMA_VERSION }),
      }),
    );
  });
});
