/**
 * Schema migrations: an ordered list, versions 1, 2, 3… Each is applied in its own immediate
 * transaction together with its row in `schema_migrations`, so a failed migration leaves no
 * trace and a reopen applies only what is missing. Never edit an applied migration: add one.
 */

import { errors } from '@turnwarden/protocol';
import type Database from 'better-sqlite3';

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'workstreams, messages, turn leases',
    sql: `
      CREATE TABLE workstreams (
        id          TEXT PRIMARY KEY,
        tenant_id   TEXT NOT NULL,
        incarnation TEXT NOT NULL,
        generation  INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
        status      TEXT NOT NULL CHECK (status IN ('open', 'closed')),
        created_at  INTEGER NOT NULL,
        closed_at   INTEGER
      ) STRICT;
      CREATE INDEX workstreams_by_tenant ON workstreams (tenant_id, id);

      CREATE TABLE messages (
        workstream_id TEXT NOT NULL REFERENCES workstreams (id),
        seq           INTEGER NOT NULL CHECK (seq >= 1),
        commit_key    TEXT NOT NULL,
        generation    INTEGER NOT NULL CHECK (generation >= 0),
        role          TEXT NOT NULL CHECK (role IN ('user', 'system', 'assistant', 'tool')),
        body          TEXT NOT NULL,
        created_at    INTEGER NOT NULL,
        PRIMARY KEY (workstream_id, seq),
        UNIQUE (workstream_id, commit_key)
      ) STRICT;

      -- No foreign key on purpose: the row (and so the token sequence) must outlive any future
      -- delete of the workstream, so that a token is never reused by a successor incarnation.
      CREATE TABLE turn_leases (
        workstream_id TEXT PRIMARY KEY,
        holder        TEXT NOT NULL,
        token         INTEGER NOT NULL CHECK (token >= 1),
        acquired_at   INTEGER NOT NULL,
        expires_at    INTEGER NOT NULL,
        released      INTEGER NOT NULL DEFAULT 0 CHECK (released IN (0, 1))
      ) STRICT;
      CREATE INDEX turn_leases_by_expiry ON turn_leases (released, expires_at);
    `,
  },
  {
    version: 2,
    name: 'session machine snapshots',
    sql: `
      -- The session machine's persisted snapshot (JSON); NULL: never claimed, an idle session.
      ALTER TABLE workstreams ADD COLUMN session TEXT;
    `,
  },
  {
    version: 3,
    name: 'fencing token of each row',
    sql: `
      -- The writer's lease token (P6), NULL for a write under none: never decreases along seq.
      ALTER TABLE messages ADD COLUMN fencing_token INTEGER;
    `,
  },
  {
    version: 4,
    name: 'workstream keys per tenant',
    // A workstream is keyed by its tenant and its id (T2): <tenant_id>/<id>. Rows written before
    // carry the bare id: the rows of every workstream, its lease and the id its persisted session
    // names are rewritten. Lease rows of deleted workstreams keep their ids (no tenant is known
    // for them, and no key can equal an id). All hosts must run this version: an older one
    // writing bare ids would find no workstream.
    sql: `
      PRAGMA defer_foreign_keys = ON;
      UPDATE turn_leases
         SET workstream_id = (SELECT w.tenant_id || '/' || w.id FROM workstreams w WHERE w.id = turn_leases.workstream_id)
       WHERE workstream_id IN (SELECT id FROM workstreams WHERE instr(id, '/') = 0);
      UPDATE messages
         SET workstream_id = (SELECT w.tenant_id || '/' || w.id FROM workstreams w WHERE w.id = messages.workstream_id)
       WHERE instr(workstream_id, '/') = 0;
      UPDATE workstreams
         SET session = CASE WHEN session IS NULL THEN NULL
                            ELSE json_set(session, '$.context.workstreamId', tenant_id || '/' || id) END,
             id = tenant_id || '/' || id
       WHERE instr(id, '/') = 0;
    `,
  },
  {
    version: 5,
    name: 'sends queued durably',
    // Sends waiting behind a turn that may run on another host (issue 25, queued-sends.ts).
    sql: `
      CREATE TABLE queued_sends (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        workstream_id TEXT NOT NULL REFERENCES workstreams (id) ON DELETE CASCADE,
        principal     TEXT NOT NULL,
        body          TEXT NOT NULL,
        origin        TEXT NOT NULL,
        state         TEXT NOT NULL CHECK (state IN ('waiting', 'taken', 'done', 'revoked', 'withdrawn')),
        token         INTEGER,
        generation    INTEGER,
        outcome       TEXT,
        created_at    INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX queued_sends_by_state ON queued_sends (workstream_id, state, id);
    `,
  },
  {
    version: 6,
    name: 'double-texting default',
    // What a send does by default when its workstream is busy (issue 26); NULL: enqueue.
    sql: `
      ALTER TABLE workstreams ADD COLUMN double_texting TEXT
        CHECK (double_texting IN ('reject', 'enqueue', 'interrupt', 'rollback'));
    `,
  },
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** Applies the missing migrations; returns the versions applied now. */
export function applyMigrations(
  db: Database.Database,
  now: () => number,
  migrations: readonly Migration[] = MIGRATIONS,
): number[] {
  migrations.forEach((m, i) => {
    if (m.version !== i + 1) {
      throw errors.internal(`migration #${i} has version ${m.version}, expected ${i + 1}`);
    }
  });
  const tx = db.transaction((run: () => void) => run());
  tx.immediate(() => {
    db.exec(
      'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)',
    );
  });
  const found = schemaVersion(db);
  if (found > migrations.length) {
    throw errors.storeError(
      `database schema version ${found} is newer than this build supports (${migrations.length})`,
      { schemaVersion: found, supported: migrations.length },
    );
  }
  const applied: number[] = [];
  for (const m of migrations) {
    tx.immediate(() => {
      // Re-checked under the write lock: another connection may have applied it meanwhile.
      if (schemaVersion(db) >= m.version) return;
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)').run(m.version, now());
      applied.push(m.version);
    });
  }
  return applied;
}

export function schemaVersion(db: Database.Database): number {
  return (db.prepare('SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations').get() as { v: number })
    .v;
}
