/**
 * The `turn_leases` table: one row per workstream, never deleted. The token grows by one on
 * every acquisition and is never reused, so a write carrying an older token is fenced (P6).
 * A lease is live while it is unreleased and `now < expiresAt`.
 */

import { errors, type LeaseRefusal, type TurnwardenError } from '@turnwarden/protocol';
import type Database from 'better-sqlite3';
import type { Lease } from './types.js';

interface LeaseRow {
  workstream_id: string;
  holder: string;
  token: number;
  acquired_at: number;
  expires_at: number;
  released: number;
}

function toLease(r: LeaseRow): Lease {
  return {
    workstreamId: r.workstream_id,
    holder: r.holder,
    token: r.token,
    acquiredAt: r.acquired_at,
    expiresAt: r.expires_at,
    released: r.released === 1,
  };
}

/** The key range of a tenant's workstreams: `<tenant>/` ≤ key < `<tenant>0` (`0` follows `/`). */
export function tenantRange(
  workstreamId: string,
): { readonly tenantId: string; readonly from: string; readonly to: string } | undefined {
  const at = workstreamId.indexOf('/');
  if (at <= 0) return undefined;
  const tenantId = workstreamId.slice(0, at);
  return { tenantId, from: `${tenantId}/`, to: `${tenantId}0` };
}

/** CAPACITY_EXHAUSTED: the tenant holds `limit` live leases across the hosts (AcquireLeaseOptions.tenantLimit). */
export function tenantActive(tenantId: string, limit: number, retryAfterMs: number): TurnwardenError {
  return errors.capacityExhausted(
    `tenant ${tenantId} runs ${limit} turns across the cluster's hosts already (admission.maxActivePerTenantInCluster)`,
    { reason: 'tenant_active', tenantId, retryAfterMs: Math.max(1, retryAfterMs) },
  );
}

/** Why a fenced write was refused (FENCED's `details.reason`). */
export type FenceReason = LeaseRefusal;

export class LeaseTable {
  readonly #get;
  readonly #upsert;
  readonly #refresh;
  readonly #release;
  readonly #expired;
  readonly #live;
  readonly #tenantLive;

  constructor(db: Database.Database) {
    this.#get = db.prepare<[string], LeaseRow>('SELECT * FROM turn_leases WHERE workstream_id = ?');
    this.#upsert = db.prepare<[{ ws: string; holder: string; token: number; now: number; expires: number }]>(
      `INSERT INTO turn_leases (workstream_id, holder, token, acquired_at, expires_at, released)
       VALUES (@ws, @holder, @token, @now, @expires, 0)
       ON CONFLICT (workstream_id) DO UPDATE SET holder = excluded.holder, token = excluded.token,
         acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, released = 0`,
    );
    this.#refresh = db.prepare<[{ ws: string; holder: string; token: number; now: number; expires: number }]>(
      `UPDATE turn_leases SET expires_at = @expires
       WHERE workstream_id = @ws AND holder = @holder AND token = @token AND released = 0 AND expires_at > @now`,
    );
    this.#release = db.prepare<[{ ws: string; holder: string; token: number }]>(
      `UPDATE turn_leases SET released = 1
       WHERE workstream_id = @ws AND holder = @holder AND token = @token AND released = 0`,
    );
    this.#expired = db.prepare<[number], LeaseRow>(
      'SELECT * FROM turn_leases WHERE released = 0 AND expires_at <= ? ORDER BY workstream_id',
    );
    this.#tenantLive = db.prepare<[string, string, string, number], { n: number; soonest: number | null }>(
      `SELECT COUNT(*) AS n, MIN(expires_at) AS soonest FROM turn_leases
       WHERE workstream_id >= ? AND workstream_id < ? AND workstream_id <> ? AND released = 0 AND expires_at > ?`,
    );
    this.#live = db.prepare<[number], { n: number }>(
      'SELECT COUNT(*) AS n FROM turn_leases WHERE released = 0 AND expires_at > ?',
    );
  }

  get(workstreamId: string): Lease | undefined {
    const row = this.#get.get(workstreamId);
    return row === undefined ? undefined : toLease(row);
  }

  /**
   * Call inside a write transaction. Undefined while another holder's lease is live, unless
   * that holder starts with `replacing` (an earlier process of the same host).
   */
  acquire(
    workstreamId: string,
    holder: string,
    ttlMs: number,
    now: number,
    replacing?: string,
  ): Lease | undefined {
    const current = this.get(workstreamId);
    if (
      current !== undefined &&
      !current.released &&
      now < current.expiresAt &&
      current.holder !== holder &&
      !(replacing !== undefined && current.holder.startsWith(replacing))
    ) {
      return undefined;
    }
    const token = (current?.token ?? 0) + 1;
    this.#upsert.run({ ws: workstreamId, holder, token, now, expires: now + ttlMs });
    const lease = this.get(workstreamId)!;
    return current === undefined || current.released || current.holder === holder
      ? lease
      : { ...lease, tookOverFrom: current.holder };
  }

  /** Throws CAPACITY_EXHAUSTED when the tenant of `workstreamId` holds `limit` other live leases. */
  assertTenantRoom(workstreamId: string, limit: number, now: number): void {
    const range = tenantRange(workstreamId);
    if (range === undefined) return;
    const { n, soonest } = this.#tenantLive.get(range.from, range.to, workstreamId, now)!;
    if (n >= limit) throw tenantActive(range.tenantId, limit, (soonest ?? now) - now);
  }

  /** Only the live lease of this holder and token; an expired one must be re-acquired. */
  refresh(workstreamId: string, holder: string, token: number, ttlMs: number, now: number): boolean {
    return this.#refresh.run({ ws: workstreamId, holder, token, now, expires: now + ttlMs }).changes === 1;
  }

  /** Releases an unreleased lease of this holder and token, expired or not. */
  release(workstreamId: string, holder: string, token: number): boolean {
    return this.#release.run({ ws: workstreamId, holder, token }).changes === 1;
  }

  expired(now: number): Lease[] {
    return this.#expired.all(now).map(toLease);
  }

  countLive(now: number): number {
    return this.#live.get(now)!.n;
  }

  /** Throws FENCED unless `token` is the workstream's live lease (P6). */
  assertFence(workstreamId: string, token: number, now: number): void {
    const refusal = fenceRefusal(workstreamId, token, this.get(workstreamId), now);
    if (refusal !== undefined) throw refusal;
  }
}

/**
 * FENCED unless `token` is the live lease `lease` at `now` (P6); every store calls it with the
 * lease row it read in the transaction of the write.
 */
export function fenceRefusal(
  workstreamId: string,
  token: number,
  lease: Pick<Lease, 'token' | 'released' | 'expiresAt'> | undefined,
  now: number,
): TurnwardenError | undefined {
  let reason: FenceReason | undefined;
  if (lease === undefined) reason = 'no_lease';
  else if (token < lease.token) reason = 'superseded';
  else if (token > lease.token) reason = 'unknown_token';
  else if (lease.released) reason = 'released';
  else if (now >= lease.expiresAt) reason = 'expired';
  if (reason === undefined) return undefined;
  return errors.fenced(
    `write to workstream ${workstreamId} with fencing token ${token} refused: ${reason.replace('_', ' ')}`,
    { workstreamId, fencingToken: token, reason, currentToken: lease?.token ?? null },
  );
}
