/**
 * The throwaway PostgreSQL helper the PostgreSQL store's tests will run on (issue 13): a
 * cluster starts on a free port, takes a connection and a write, and is gone after `stop()`.
 * Skipped, saying why, where no PostgreSQL is installed.
 */
import { existsSync } from 'node:fs';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { startPostgres } from './test-support/postgres.js';

// A cluster of its own: this test stops it and checks that nothing is left.
const started = await startPostgres({ own: true });
if ('skip' in started) process.stdout.write(`postgres-helper.test.ts: skipped — ${started.skip}\n`);

describe.skipIf('skip' in started)('a throwaway PostgreSQL cluster', () => {
  it('serves a database on a free port and leaves nothing behind', async () => {
    const server = started as Exclude<typeof started, { skip: string }>;
    const client = new pg.Client({ connectionString: server.url });
    try {
      await client.connect();
      await client.query('CREATE TABLE t (v int)');
      await client.query('INSERT INTO t VALUES (42)');
      const { rows } = await client.query<{ v: number }>('SELECT v FROM t');
      expect(rows).toEqual([{ v: 42 }]);
      const { rows: version } = await client.query<{ server_version: string }>('SHOW server_version');
      expect(version[0]?.server_version).toMatch(/^\d+/);
    } finally {
      await client.end();
      server.stop();
    }
    expect(existsSync(server.dir)).toBe(false);
    const again = new pg.Client({ connectionString: server.url, connectionTimeoutMillis: 2_000 });
    await expect(again.connect()).rejects.toThrow();
  });
});
