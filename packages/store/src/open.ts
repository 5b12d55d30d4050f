/** Opening a SQLite database: parent directory, pragmas, migrations. */
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { errors } from '@turnwarden/protocol';
import Database from 'better-sqlite3';
import { applyMigrations } from './migrations.js';
import type { ResolvedSqliteStoreOptions } from './options.js';

export function openDatabase(options: ResolvedSqliteStoreOptions, now: () => number): Database.Database {
  if (!options.memory) mkdirSync(dirname(resolve(options.path)), { recursive: true });
  const db = new Database(options.path, { timeout: options.busyTimeoutMs });
  try {
    db.pragma(`busy_timeout = ${options.busyTimeoutMs}`);
    if (!options.memory) {
      const mode = db.pragma('journal_mode = WAL', { simple: true });
      if (mode !== 'wal') {
        throw errors.storeError(`could not enable WAL on ${options.path} (got ${mode})`);
      }
    }
    db.pragma(`synchronous = ${options.synchronous}`);
    db.pragma('foreign_keys = ON');
    applyMigrations(db, now);
    return db;
  } catch (e) {
    db.close();
    throw e;
  }
}
