/** Rows of the PostgreSQL tables, their mapping to records, and shared SQL fragments. */
import type { Lease, WorkstreamStatus } from './types.js';

/**
 * Wall-clock ms: parameter `$n` (the injected clock's value) or, when it is NULL, the
 * database's clock at the moment the expression is evaluated — so several hosts agree on
 * lease expiry whatever their own clocks say.
 */
export function nowSql(n: number): string {
  return `COALESCE($${n}::bigint, floor(extract(epoch from clock_timestamp()) * 1000)::bigint)`;
}

export interface LeaseRow {
  workstream_id: string;
  holder: string;
  token: number;
  acquired_at: number;
  expires_at: number;
  released: boolean;
}

export function toLease(r: LeaseRow): Lease {
  return {
    workstreamId: r.workstream_id,
    holder: r.holder,
    token: r.token,
    acquiredAt: r.acquired_at,
    expiresAt: r.expires_at,
    released: r.released,
  };
}

export const MESSAGE_COLUMNS = 'workstream_id, seq, commit_key, generation, body, created_at, fencing_token';

/** The rows of workstream `$1` from its last non-tool row on: all that S1 needs (see messages.ts). */
export const TAIL_SQL = `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE workstream_id = $1 AND seq >= COALESCE(
    (SELECT seq FROM messages WHERE workstream_id = $1 AND role <> 'tool' ORDER BY seq DESC LIMIT 1), 1)
  ORDER BY seq`;

/**
 * Locks the workstream rows `$1` in id order. Every transaction that takes several locks takes
 * the workstream rows first, then the lease rows (LEASE_LOCK_SQL), each in id order, so
 * writers on several hosts never deadlock.
 */
export const LOCK_SQL =
  'SELECT id, status, generation FROM workstreams WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE';

/**
 * Locks the lease rows `$1` in id order. A statement of its own, sent after LOCK_SQL: its
 * snapshot is taken once the workstream locks are held, so it sees every lease written by a
 * transaction that held them before (a lease row inserted meanwhile included — a subquery of
 * the locking statement would not).
 */
export const LEASE_LOCK_SQL =
  'SELECT * FROM turn_leases WHERE workstream_id = ANY($1::text[]) ORDER BY workstream_id FOR UPDATE';

export interface LockedRow {
  id: string;
  status: WorkstreamStatus;
  generation: number;
}

/** A locked workstream and, when it was asked for and exists, its lease. */
export interface Locked {
  readonly status: WorkstreamStatus;
  readonly generation: number;
  readonly lease: Lease | undefined;
}

export function toLocked(rows: readonly LockedRow[], leases: readonly LeaseRow[]): Map<string, Locked> {
  const byId = new Map(leases.map((l) => [l.workstream_id, toLease(l)]));
  return new Map(
    rows.map((r) => [r.id, { status: r.status, generation: r.generation, lease: byId.get(r.id) }] as const),
  );
}
