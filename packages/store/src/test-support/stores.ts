/**
 * The store contract tests run on every store: SQLite (in memory, or a file when a test needs
 * two connections to one database) and PostgreSQL (one throwaway cluster per test file,
 * started in beforeAll; a fresh schema per database, so tests never see each other's rows).
 * Both get the test's FakeClock. Where PostgreSQL cannot run, its variant is skipped visibly:
 * `describe.skipIf` and a line saying why.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { HistoryRow } from '@turnwarden/protocol';
import { afterAll, afterEach, beforeAll, describe } from 'vitest';
import { type Postgres, postgresSkipReason, startPostgres } from '../pg-cluster.js';
import { openPostgresStore } from '../postgres-store.js';
import type { QueuedSends } from '../queued-sends.js';
import { openSqliteStore } from '../sqlite-store.js';
import type { Store } from '../types.js';
import type { FakeClock } from './fixtures.js';
import { Sandbox } from './fixtures.js';

/** What both stores offer, `Store` and the follower's read. */
export type TestStore = Store &
  QueuedSends & {
    appendMany: NonNullable<Store['appendMany']>;
    readHistoryAfter(workstreamId: string, afterSeq: number): Promise<HistoryRow[]>;
  };

/** One database: every `open` is another connection (another "host") to it. */
export interface TestDatabase {
  open(clock: FakeClock): Promise<TestStore>;
}

export interface StoreBackend {
  readonly name: 'sqlite' | 'postgres';
  /** A store on a fresh database of its own. */
  open(clock: FakeClock): Promise<TestStore>;
  /** A fresh database that several stores can open. */
  database(): TestDatabase;
}

let schemas = 0;

/**
 * Declares `suite` once per store: `describe('sqlite', …)`, `describe('postgres', …)`. Stores
 * opened through the backend are closed after each test.
 */
export function forEachStore(suite: (backend: StoreBackend) => void): void {
  const opened: TestStore[] = [];
  const sandbox = new Sandbox();
  const track = async (store: Promise<TestStore>) => {
    const s = await store;
    opened.push(s);
    return s;
  };
  afterEach(async () => {
    for (const s of opened.splice(0)) await s.close();
    await sandbox.dispose();
  });

  const sqliteDatabase = (path: string): TestDatabase => ({
    open: (clock) => track(Promise.resolve(openSqliteStore({ path, now: clock.now }))),
  });
  describe('sqlite', () => {
    suite({
      name: 'sqlite',
      open: (clock) => sqliteDatabase(':memory:').open(clock),
      database: () => sqliteDatabase(join(sandbox.dir(), 'db.sqlite')),
    });
  });

  const skip = postgresSkipReason();
  if (skip !== undefined) process.stdout.write(`postgres store tests: skipped — ${skip}\n`);
  describe.skipIf(skip !== undefined)('postgres', () => {
    let server: Postgres | undefined;
    beforeAll(async () => {
      const started = await startPostgres();
      if ('skip' in started) throw new Error(`PostgreSQL could not start: ${started.skip}`);
      server = started;
    });
    afterAll(() => server?.stop());
    const pgDatabase = (): TestDatabase => {
      schemas += 1;
      const schema = `t${process.pid}_${schemas}_${randomBytes(3).toString('hex')}`;
      return {
        open: (clock) =>
          track(
            openPostgresStore({ connectionString: server!.url, schema, now: clock.now, maxConnections: 4 }),
          ),
      };
    };
    suite({ name: 'postgres', open: (clock) => pgDatabase().open(clock), database: pgDatabase });
  });
}
