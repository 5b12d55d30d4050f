/**
 * PostgreSQL schema migrations: an ordered list, versions 1, 2, 3…, of their own (the SQLite
 * list is another). Opening applies what is missing in ONE transaction that first takes a
 * transaction-scoped advisory lock on the schema, so stores opening at once on several hosts
 * apply each migration once and none sees a half-made schema. Never edit an applied
 * migration: add one.
 */
import { errors } from '@turnwarden/protocol';
import type pg from 'pg';
import type { Migration } from './migrations.js';

export const PG_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'workstreams, messages, turn leases, session snapshots',
    // Ids sort bytewise (COLLATE "C") as in SQLite, whatever the database's locale: keyset
    // paging and lock ordering depend on one order. Bodies are text, not jsonb: P1 compares
    // the stored JSON byte for byte.
    sql: `
      CREATE TABLE workstreams (
        id          text COLLATE "C" PRIMARY KEY,
        tenant_id   text COLLATE "C" NOT NULL,
        incarnation text NOT NULL,
        generation  bigint NOT NULL DEFAULT 0 CHECK (generation >= 0),
        status      text NOT NULL CHECK (status IN ('open', 'closed')),
        created_at  bigint NOT NULL,
        closed_at   bigint,
        session     text
      );
      CREATE INDEX workstreams_by_tenant ON workstreams (tenant_id, id);

      CREATE TABLE messages (
        workstream_id text COLLATE "C" NOT NULL REFERENCES workstreams (id) ON DELETE CASCADE,
        seq           bigint NOT NULL CHECK (seq >= 1),
        commit_key    text NOT NULL,
        generation    bigint NOT NULL CHECK (generation >= 0),
        role          text NOT NULL CHECK (role IN ('user', 'system', 'assistant', 'tool')),
        body          text NOT NULL,
        created_at    bigint NOT NULL,
        -- The writer's lease token (P6), NULL for a write under none: never decreases along seq.
        fencing_token bigint,
        PRIMARY KEY (workstream_id, seq),
        UNIQUE (workstream_id, commit_key)
      );

      -- No foreign key on purpose: the row (and so the token sequence) outlives a delete of the
      -- workstream, so that a token is never reused by a successor incarnation (P6).
      CREATE TABLE turn_leases (
        workstream_id text COLLATE "C" PRIMARY KEY,
        holder        text NOT NULL,
        token         bigint NOT NULL CHECK (token >= 1),
        acquired_at   bigint NOT NULL,
        expires_at    bigint NOT NULL,
        released      boolean NOT NULL DEFAULT false
      );
      CREATE INDEX turn_leases_by_expiry ON turn_leases (released, expires_at);
    `,
  },
  {
    version: 2,
    name: 'workstream keys per tenant',
    // As SQLite's migration 4 (migrations.ts): every workstream keyed <tenant_id>/<id> (T2), its
    // rows, its lease and its persisted session's id rewritten; a deleted workstream's lease row
    // keeps its id. All hosts must run this version.
    sql: `
      ALTER TABLE messages DROP CONSTRAINT messages_workstream_id_fkey;
      UPDATE turn_leases l SET workstream_id = w.tenant_id || '/' || w.id
        FROM workstreams w WHERE w.id = l.workstream_id AND position('/' in w.id) = 0;
      UPDATE messages m SET workstream_id = w.tenant_id || '/' || w.id
        FROM workstreams w WHERE w.id = m.workstream_id AND position('/' in w.id) = 0;
      UPDATE workstreams
         SET session = CASE WHEN session IS NULL THEN NULL
                            ELSE jsonb_set(session::jsonb, '{context,workstreamId}', to_jsonb(tenant_id || '/' || id))::text END,
             id = tenant_id || '/' || id
       WHERE position('/' in id) = 0;
      ALTER TABLE messages ADD CONSTRAINT messages_workstream_id_fkey
        FOREIGN KEY (workstream_id) REFERENCES workstreams (id) ON DELETE CASCADE;
    `,
  },
  {
    version: 3,
    name: 'sends queued durably',
    // As SQLite's migration 5: sends waiting behind a turn that may run on another host.
    sql: `
      CREATE TABLE queued_sends (
        id            bigserial PRIMARY KEY,
        workstream_id text COLLATE "C" NOT NULL REFERENCES workstreams (id) ON DELETE CASCADE,
        principal     text NOT NULL,
        body          text NOT NULL,
        origin        text NOT NULL,
        state         text NOT NULL CHECK (state IN ('waiting', 'taken', 'done', 'revoked', 'withdrawn')),
        token         bigint,
        generation    bigint,
        outcome       text,
        created_at    bigint NOT NULL
      );
      CREATE INDEX queued_sends_by_state ON queued_sends (workstream_id, state, id);
    `,
  },
  {
    version: 4,
    name: 'double-texting default',
    // As SQLite's migration 6: what a send does by default when its workstream is busy.
    sql: `
      ALTER TABLE workstreams ADD COLUMN double_texting text
        CHECK (double_texting IN ('reject', 'enqueue', 'interrupt', 'rollback'));
    `,
  },
];

export const PG_SCHEMA_VERSION = PG_MIGRATIONS.length;

/**
 * Creates the schema if missing and applies the missing migrations, all in one transaction
 * under an advisory lock keyed on the schema. `client` has `search_path` set to `schema`.
 * Returns the versions applied now. STORE_ERROR for a schema newer than `migrations`.
 */
export async function applyPgMigrations(
  client: pg.ClientBase,
  schema: string,
  now: number | null,
  migrations: readonly Migration[] = PG_MIGRATIONS,
): Promise<number[]> {
  migrations.forEach((m, i) => {
    if (m.version !== i + 1) {
      throw errors.internal(`migration #${i} has version ${m.version}, expected ${i + 1}`);
    }
  });
  await client.query('BEGIN');
  try {
    await client.query("SELECT pg_advisory_xact_lock(hashtextextended('turnwarden.migrations.' || $1, 0))", [
      schema,
    ]);
    // The name is validated as [a-z_][a-z0-9_]*: it needs no quoting.
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await client.query(
      'CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at bigint NOT NULL)',
    );
    const found = await pgSchemaVersion(client);
    if (found > migrations.length) {
      throw errors.storeError(
        `database schema version ${found} is newer than this build supports (${migrations.length})`,
        { schemaVersion: found, supported: migrations.length },
      );
    }
    const applied: number[] = [];
    for (const m of migrations) {
      if (m.version <= found) continue;
      await client.query(m.sql);
      await client.query(
        `INSERT INTO schema_migrations (version, applied_at)
         VALUES ($1, COALESCE($2::bigint, floor(extract(epoch from clock_timestamp()) * 1000)::bigint))`,
        [m.version, now],
      );
      applied.push(m.version);
    }
    await client.query('COMMIT');
    return applied;
  } catch (e) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw e;
  }
}

export async function pgSchemaVersion(client: pg.ClientBase | pg.Pool): Promise<number> {
  const { rows } = await client.query<{ v: number }>(
    'SELECT COALESCE(MAX(version), 0)::integer AS v FROM schema_migrations',
  );
  return rows[0]?.v ?? 0;
}
