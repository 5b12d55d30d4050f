/**
 * One transaction on a pooled connection, pipelined to keep round trips low: BEGIN goes out
 * with the first statements, and the final writes go out together with COMMIT. On a pipelined
 * connection node-postgres sends a query at once instead of waiting for the previous answer,
 * and PostgreSQL still runs the statements one after another, in order — so a statement sent
 * behind a `FOR UPDATE` runs after those locks are held, on a new READ COMMITTED snapshot.
 */
import type pg from 'pg';

export class PgTx {
  readonly #client: pg.PoolClient;
  readonly #pending: Promise<unknown>[] = [];

  constructor(client: pg.PoolClient) {
    this.#client = client;
  }

  /** Sends a statement now; the caller awaits it. */
  query<R extends pg.QueryResultRow>(text: string, values?: readonly unknown[]): Promise<pg.QueryResult<R>> {
    const result = this.#client.query<R>(text, values as unknown[] | undefined);
    // Also awaited by `settle`: a failure is never an unhandled rejection.
    this.#pending.push(result.catch(() => undefined));
    return result;
  }

  /** Sends a statement now whose result nobody needs before COMMIT; its failure fails the transaction. */
  send(text: string, values?: readonly unknown[]): void {
    this.#pending.push(this.#client.query(text, values as unknown[] | undefined));
  }

  /** Waits for everything sent; throws the first failure. */
  async settle(): Promise<void> {
    const outcomes = await Promise.allSettled(this.#pending.splice(0));
    for (const o of outcomes) if (o.status === 'rejected') throw o.reason;
  }
}

/**
 * Runs `fn` on a connection of its own from the pool, then returns it — or discards it when it
 * failed. A checked-out connection has no 'error' listener of the pool's: one that dies under
 * its user (the server ends it, the socket breaks) would be an unhandled 'error' event, and
 * crash the host. Here it is recorded; the queries in flight reject on their own. `fn` may
 * also mark the connection as not to be reused (`health.discard`).
 */
export async function withClient<T>(
  pool: pg.Pool,
  fn: (client: pg.PoolClient, health: Health) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  let failure: Error | undefined;
  const discard = (e: Error) => {
    failure ??= e;
  };
  client.on('error', discard);
  try {
    return await fn(client, { failure: () => failure, discard });
  } finally {
    client.off('error', discard);
    client.release(failure ?? undefined);
  }
}

/** Whether a checked-out connection failed; `discard` keeps it from going back to the pool. */
export interface Health {
  failure(): Error | undefined;
  discard(e: Error): void;
}

/**
 * Runs `fn` in a transaction: BEGIN, `fn`'s statements, COMMIT — the statements `fn` sent but
 * did not await are sent before COMMIT and checked after it. A throw rolls back; a connection
 * that failed is discarded, not returned to the pool.
 */
export function inTransaction<T>(pool: pg.Pool, fn: (tx: PgTx) => Promise<T>): Promise<T> {
  return withClient(pool, async (client, health) => {
    const tx = new PgTx(client);
    tx.send('BEGIN');
    try {
      const result = await fn(tx);
      const commit = client.query('COMMIT');
      commit.catch(() => undefined); // awaited below unless `settle` throws first
      await tx.settle();
      // A COMMIT of a transaction that failed answers ROLLBACK; `settle` threw that failure.
      const { command } = await commit;
      if (command !== 'COMMIT') throw new Error(`transaction ended with ${command}, not COMMIT`);
      return result;
    } catch (e) {
      await tx.settle().catch(() => undefined);
      // On a connection that died there is nothing to roll back: the server already did.
      if (health.failure() === undefined && client.getTransactionStatus() !== 'I') {
        await client.query('ROLLBACK').catch((rollback: unknown) => {
          health.discard(rollback instanceof Error ? rollback : new Error(String(rollback)));
        });
      }
      throw e;
    }
  });
}
