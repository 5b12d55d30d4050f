/**
 * `inTransaction` (pg-tx.ts) on its own, against the throwaway cluster, on a pool of ONE
 * connection — so a transaction left open on it would be the next caller's: a throw rolls back
 * and hands the next caller a clean connection; a statement sent and not awaited that fails
 * fails the whole transaction, before or after the caller's own work returned. Skipped, saying
 * why, where no PostgreSQL is installed.
 */

import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inTransaction } from './pg-tx.js';
import { postgresBin, startPostgres } from './test-support/postgres.js';

const started = await startPostgres();
if ('skip' in started) process.stdout.write(`pg-tx.test.ts: skipped — ${started.skip}\n`);

describe.skipIf('skip' in started)('inTransaction', () => {
  const url = 'skip' in started ? '' : started.url;
  const table = `tx_${randomBytes(4).toString('hex')}`;
  let pool: pg.Pool;

  beforeAll(async () => {
    // As the store makes its pool: pipelined (a statement goes out without waiting for the last).
    pool = new pg.Pool({ connectionString: url, max: 1, pipeline: true });
    await pool.query(`CREATE TABLE ${table} (v int PRIMARY KEY)`);
  });
  afterAll(async () => {
    await pool?.query(`DROP TABLE IF EXISTS ${table}`);
    await pool?.end();
    if (!('skip' in started)) started.stop();
  });

  const values = async () =>
    (await pool.query<{ v: number }>(`SELECT v FROM ${table} ORDER BY v`)).rows.map((r) => r.v);

  it('commits what it sent, awaited or not, and returns the result', async () => {
    const result = await inTransaction(pool, async (tx) => {
      tx.send(`INSERT INTO ${table} VALUES (1)`);
      await tx.query(`INSERT INTO ${table} VALUES (2)`);
      tx.send(`INSERT INTO ${table} VALUES (3)`);
      return 'done';
    });
    expect(result).toBe('done');
    expect(await values()).toEqual([1, 2, 3]);
    await pool.query(`DELETE FROM ${table}`);
  });

  it('a throw rolls back everything sent, and the one connection goes back clean: the next transaction commits only its own', async () => {
    const boom = new Error('the caller failed');
    await expect(
      inTransaction(pool, async (tx) => {
        tx.send(`INSERT INTO ${table} VALUES (10)`);
        await tx.query(`INSERT INTO ${table} VALUES (11)`);
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await values()).toEqual([]);
    await inTransaction(pool, async (tx) => {
      tx.send(`INSERT INTO ${table} VALUES (12)`);
    });
    // Had the failed transaction been left open on the connection, 10 and 11 would be committed now.
    expect(await values()).toEqual([12]);
    const { rows } = await pool.query<{ status: string }>('SELECT 1 AS status');
    expect(rows).toHaveLength(1);
    await pool.query(`DELETE FROM ${table}`);
  });

  it('a statement sent and not awaited that fails fails the transaction with its error, and nothing of it is committed', async () => {
    await pool.query(`INSERT INTO ${table} VALUES (20)`);
    const failed = inTransaction(pool, async (tx) => {
      tx.send(`INSERT INTO ${table} VALUES (21)`);
      tx.send(`INSERT INTO ${table} VALUES (20)`); // a duplicate key: fails at the server
      tx.send(`INSERT INTO ${table} VALUES (22)`);
      return 'the caller thinks it is done';
    });
    await expect(failed).rejects.toMatchObject({ code: '23505' });
    expect(await values()).toEqual([20]);
    // And the connection is clean for the next caller.
    await inTransaction(pool, async (tx) => {
      tx.send(`INSERT INTO ${table} VALUES (23)`);
    });
    expect(await values()).toEqual([20, 23]);
    await pool.query(`DELETE FROM ${table}`);
  });

  it('settle() throws the first failure of what was sent', async () => {
    await expect(
      inTransaction(pool, async (tx) => {
        tx.send('SELECT 1');
        tx.send('SELECT * FROM no_such_table_here');
        await tx.settle();
        return 'not reached';
      }),
    ).rejects.toMatchObject({ code: '42P01' });
    expect(await values()).toEqual([]);
  });

  it("a connection the server ends while its host is stalled mid-transaction: the transaction rejects, the connection's error event does not escape (the host does not crash), nothing commits, and the next transaction has a new connection", async () => {
    let pid = 0;
    const failed = inTransaction(pool, async (tx) => {
      tx.send(`INSERT INTO ${table} VALUES (30)`);
      pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      // The host stalls (its event loop blocked, as paused) while the server ends its session:
      // it sees nothing of the end until it writes again.
      const psql = join(postgresBin()!, 'psql');
      execFileSync(psql, ['-d', url, '-Atc', `SELECT pg_terminate_backend(${pid})`]);
      const alive = () =>
        execFileSync(psql, ['-d', url, '-Atc', `SELECT count(*) FROM pg_stat_activity WHERE pid = ${pid}`])
          .toString()
          .trim() !== '0';
      while (alive());
      await tx.query('SELECT 1');
    });
    await expect(failed).rejects.toThrow();
    expect(await values()).toEqual([]);
    const next = await inTransaction(
      pool,
      async (tx) => (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid,
    );
    expect(next).not.toBe(pid);
  });

  it('a connection goes back to the pool with the listeners it had: each transaction removes the error listener it added', async () => {
    let client: pg.PoolClient | undefined;
    const onAcquire = (c: pg.PoolClient) => {
      client = c;
    };
    pool.on('acquire', onAcquire);
    try {
      await inTransaction(pool, async (tx) => void (await tx.query('SELECT 1')));
      const before = client!.listenerCount('error');
      for (let i = 0; i < 12; i++) {
        await inTransaction(pool, async (tx) => void (await tx.query('SELECT 1')));
        await inTransaction(pool, async () => {
          throw new Error('the caller failed');
        }).catch(() => undefined);
      }
      expect(client!.listenerCount('error')).toBe(before);
    } finally {
      pool.off('acquire', onAcquire);
    }
  });
});
