/**
 * The PostgreSQL statements of the durable send queue (queued-sends.ts): each one statement, or
 * one transaction under the workstream row's lock where a bound is counted.
 */
import { workstreamClosed, workstreamNotFound } from './errors.js';
import { tenantRange } from './leases.js';
import { LOCK_SQL, nowSql } from './pg-rows.js';
import type { PgTx } from './pg-tx.js';
import {
  type EnqueueSendInput,
  type QueuedSend,
  type QueuedSendRow,
  queueFull,
  type TakeQueuedSendInput,
  tenantQueueFull,
  toQueuedSend,
} from './queued-sends.js';

/** Minimal query surface: a pool or a transaction. */
interface Queryable {
  query<R extends object>(
    text: string,
    values?: readonly unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

/** Counted and inserted under the workstream row's lock: every enqueuer of the id, on any host, in turn. */
export async function pgEnqueue(tx: PgTx, i: EnqueueSendInput, now: number | null): Promise<QueuedSend> {
  // A tenant's bound is counted under a lock of the tenant's own, taken before the row lock.
  const range = i.maxPerTenant === undefined ? undefined : tenantRange(i.workstreamId);
  if (range !== undefined)
    void tx.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [
      `turnwarden queue ${range.tenantId}`,
    ]);
  // The count is a statement of its own, sent behind the lock: its snapshot is taken once the lock
  // is held, so it sees every send queued by a transaction that held it before.
  const lockP = tx.query<{ status: string }>('SELECT status FROM workstreams WHERE id = $1 FOR UPDATE', [
    i.workstreamId,
  ]);
  const countP = tx.query<{ n: string }>(
    "SELECT COUNT(*) AS n FROM queued_sends WHERE workstream_id = $1 AND state = 'waiting'",
    [i.workstreamId],
  );
  const row = (await lockP).rows[0];
  if (row === undefined) throw workstreamNotFound(i.workstreamId);
  if (row.status !== 'open') throw workstreamClosed(i.workstreamId);
  const waiting = Number((await countP).rows[0]!.n);
  if (waiting >= i.max) throw queueFull(i, waiting);
  if (range !== undefined) {
    const { rows } = await tx.query<{ n: string }>(
      "SELECT COUNT(*) AS n FROM queued_sends WHERE workstream_id >= $1 AND workstream_id < $2 AND state = 'waiting'",
      [range.from, range.to],
    );
    const n = Number(rows[0]!.n);
    if (n >= i.maxPerTenant!) throw tenantQueueFull(i, range.tenantId, n);
  }
  const { rows } = await tx.query<QueuedSendRow>(
    `INSERT INTO queued_sends (workstream_id, principal, body, origin, state, created_at)
     VALUES ($1, $2, $3, $4, 'waiting', ${nowSql(5)}) RETURNING *`,
    [i.workstreamId, i.principal, i.body, i.origin, now],
  );
  return toQueuedSend(rows[0]!);
}

export async function pgCount(db: Queryable, workstreamId: string): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    "SELECT COUNT(*) AS n FROM queued_sends WHERE workstream_id = $1 AND state = 'waiting'",
    [workstreamId],
  );
  return Number(rows[0]!.n);
}

export async function pgNext(db: Queryable, workstreamId: string): Promise<QueuedSend | undefined> {
  const { rows } = await db.query<QueuedSendRow>(
    "SELECT * FROM queued_sends WHERE workstream_id = $1 AND state = 'waiting' ORDER BY id LIMIT 1",
    [workstreamId],
  );
  return rows[0] === undefined ? undefined : toQueuedSend(rows[0]);
}

/** One statement: the lease is read as the update runs, so a lapsed or released lease takes nothing. */
export async function pgTake(db: Queryable, i: TakeQueuedSendInput, now: number | null): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE queued_sends SET state = 'taken', token = $4, generation = $5
     WHERE id = $1 AND workstream_id = $2 AND state = 'waiting'
       AND EXISTS (SELECT 1 FROM turn_leases l WHERE l.workstream_id = $2 AND l.holder = $3
                   AND l.token = $4 AND NOT l.released AND l.expires_at > ${nowSql(6)})`,
    [i.id, i.workstreamId, i.holder, i.token, i.generation, now],
  );
  return rowCount === 1;
}

export async function pgFinish(db: Queryable, id: number, token: number, outcome: string): Promise<boolean> {
  const { rowCount } = await db.query(
    "UPDATE queued_sends SET state = 'done', outcome = $3 WHERE id = $1 AND token = $2 AND state = 'taken'",
    [id, token, outcome],
  );
  return rowCount === 1;
}

export async function pgRevoke(
  db: Queryable,
  workstreamId: string,
  outcome: string,
  beforeId: number | undefined,
): Promise<QueuedSend[]> {
  const { rows } = await db.query<QueuedSendRow>(
    `UPDATE queued_sends SET state = 'revoked', outcome = $2
     WHERE workstream_id = $1 AND state = 'waiting' AND ($3::bigint IS NULL OR id < $3) RETURNING *`,
    [workstreamId, outcome, beforeId ?? null],
  );
  return rows.map(toQueuedSend).sort((a, b) => a.id - b.id);
}

export async function pgWithdraw(db: Queryable, id: number, outcome: string | null): Promise<boolean> {
  const { rowCount } = await db.query(
    "UPDATE queued_sends SET state = 'withdrawn', outcome = $2 WHERE id = $1 AND state = 'waiting'",
    [id, outcome],
  );
  return rowCount === 1;
}

/**
 * In one transaction, under the workstream's and its lease's row locks (an append of the holder
 * that took them holds the same: it has committed, or it never will): nothing while the lease
 * is live under `token` or before; else the started ones answered, the rest waiting again.
 */
export async function pgReclaim(
  tx: PgTx,
  workstreamId: string,
  token: number,
  outcome: string,
  now: number | null,
): Promise<QueuedSend[]> {
  void tx.query(LOCK_SQL, [[workstreamId]]);
  const { rows: leases } = await tx.query<{ token: string; released: boolean; live: boolean }>(
    `SELECT token, released, expires_at > ${nowSql(2)} AS live FROM turn_leases WHERE workstream_id = $1 FOR UPDATE`,
    [workstreamId, now],
  );
  const lease = leases[0];
  if (lease !== undefined && !lease.released && lease.live && Number(lease.token) <= token) return [];
  return reclaimRows(tx, workstreamId, token, outcome);
}

const RECLAIM_STARTED = `UPDATE queued_sends q SET state = 'done', outcome = $3
     WHERE q.workstream_id = $1 AND q.state = 'taken' AND q.token <= $2
       AND EXISTS (SELECT 1 FROM messages m WHERE m.workstream_id = q.workstream_id
                   AND m.commit_key = 'q' || q.id || ':u')`;
const RECLAIM_WAITING = `UPDATE queued_sends SET state = 'waiting', token = NULL, generation = NULL
     WHERE workstream_id = $1 AND state = 'taken' AND token <= $2`;

/**
 * A reclaim sent without waiting for its answers (a lease acquisition's: nobody to tell, the
 * senders re-read their rows): it runs before the transaction commits, and fails it if it fails.
 */
export function sendReclaim(tx: PgTx, workstreamId: string, token: number, outcome: string): void {
  tx.send(RECLAIM_STARTED, [workstreamId, token, outcome]);
  tx.send(RECLAIM_WAITING, [workstreamId, token]);
}

/** The updates of a reclaim (the caller holds the locks). */
async function reclaimRows(
  tx: PgTx,
  workstreamId: string,
  token: number,
  outcome: string,
): Promise<QueuedSend[]> {
  const done = await tx.query<QueuedSendRow>(`${RECLAIM_STARTED} RETURNING *`, [
    workstreamId,
    token,
    outcome,
  ]);
  const waiting = await tx.query<QueuedSendRow>(`${RECLAIM_WAITING} RETURNING *`, [workstreamId, token]);
  return [...done.rows, ...waiting.rows].map(toQueuedSend);
}

export async function pgRead(db: Queryable, ids: readonly number[]): Promise<QueuedSend[]> {
  if (ids.length === 0) return [];
  const { rows } = await db.query<QueuedSendRow>(
    'SELECT * FROM queued_sends WHERE id = ANY($1::bigint[]) ORDER BY id',
    [ids],
  );
  return rows.map(toQueuedSend);
}

export async function pgDrop(db: Queryable, ids: readonly number[]): Promise<void> {
  if (ids.length === 0) return;
  await db.query(
    "DELETE FROM queued_sends WHERE id = ANY($1::bigint[]) AND state IN ('done', 'revoked', 'withdrawn')",
    [ids],
  );
}
