/**
 * Sends queued durably (issue 25): in cluster mode a send that meets a turn running on another
 * host waits in the store, not in one host's memory, so any host may accept it and whichever
 * host holds the workstream next runs it — in order, at most once, never lost with a host.
 *
 * A row is `waiting` until the lease holder takes it (`taken`, fenced by its live lease: P6),
 * then `done` with its outcome; a cancel, close or poisoned turn end `revoked` the waiting ones
 * (C7), the sender's signal `withdrawn` one. The turn a taken send starts writes its user row
 * under the commit key `queuedCommitKey(id)`: when its holder dies, the next one tells a send
 * whose turn began (done: the repair ends that turn) from one whose turn never began (waiting
 * again). The store keeps bodies and outcomes as the caller's JSON, uninterpreted.
 */
import { errors } from '@turnwarden/protocol';
import type Database from 'better-sqlite3';
import { tenantRange } from './leases.js';
import { checkInteger, checkKey, checkText } from './validate.js';

export type QueuedSendState = 'waiting' | 'taken' | 'done' | 'revoked' | 'withdrawn';

export interface QueuedSend {
  /** Ascending in the order the sends were queued, across the fleet. */
  readonly id: number;
  readonly workstreamId: string;
  readonly principal: string;
  /** What the send carries (the caller's JSON). */
  readonly body: string;
  /** The lease holder name of the host that queued it: the one to tell. */
  readonly origin: string;
  readonly state: QueuedSendState;
  /** The fencing token of the lease it was taken under. */
  readonly token?: number;
  /** The generation of the turn it started (taken). */
  readonly generation?: number;
  /** What its sender is answered (done, revoked; the caller's JSON). */
  readonly outcome?: string;
  readonly createdAt: number;
}

export interface EnqueueSendInput {
  readonly workstreamId: string;
  readonly principal: string;
  readonly body: string;
  readonly origin: string;
  /** At most this many sends wait on the workstream (QUEUE_FULL, retryable, beyond). */
  readonly max: number;
  /** QUEUE_FULL's `retryAfterMs`. */
  readonly retryAfterMs: number;
  /**
   * At most this many sends of the workstream's tenant (its key's prefix) wait on all its
   * workstreams together (QUEUE_FULL beyond), counted under a lock of the tenant's own.
   */
  readonly maxPerTenant?: number;
}

export interface TakeQueuedSendInput {
  readonly id: number;
  readonly workstreamId: string;
  /** The live lease it is taken under: its holder and token. */
  readonly holder: string;
  readonly token: number;
  /** The generation of the turn it starts. */
  readonly generation: number;
}

/** What a store offers for sends that wait durably (PostgreSQL; SQLite for one process's tests). */
export interface QueuedSends {
  /** Queues a send: QUEUE_FULL when `max` wait already; the workstream must exist and be open. */
  enqueueSend(input: EnqueueSendInput): Promise<QueuedSend>;
  /** The oldest waiting send of the workstream. */
  nextQueuedSend(workstreamId: string): Promise<QueuedSend | undefined>;
  /** How many sends wait on the workstream. */
  countQueuedSends(workstreamId: string): Promise<number>;
  /** Waiting → taken, only under the workstream's live lease `holder`/`token`; false otherwise. */
  takeQueuedSend(input: TakeQueuedSendInput): Promise<boolean>;
  /** Taken under `token` → done with `outcome`; false when it is no longer so (reclaimed). */
  finishQueuedSend(id: number, token: number, outcome: string): Promise<boolean>;
  /** Every waiting send of the workstream → revoked with `outcome` (C7); the rows revoked. */
  revokeQueuedSends(workstreamId: string, outcome: string, beforeId?: number): Promise<QueuedSend[]>;
  /**
   * Waiting → withdrawn: its sender gave up, or (with `outcome`) a holder refused it alone; false
   * when it was taken or answered first.
   */
  withdrawQueuedSend(id: number, outcome?: string): Promise<boolean>;
  /**
   * The sends a dead holder took, under `token` or an earlier one: whose turn began (its user
   * row is written) → done with `outcome`; the others → waiting again. Nothing while the
   * workstream's lease is live under `token` or an earlier one (its holder is not dead). The
   * rows changed. Every lease acquisition does the same for the tokens before its own: a holder
   * records its send's outcome before it releases its lease, so a send still taken then was
   * left by a holder that stopped.
   */
  reclaimQueuedSends(workstreamId: string, token: number, outcome: string): Promise<QueuedSend[]>;
  readQueuedSends(ids: readonly number[]): Promise<QueuedSend[]>;
  /** Forgets answered sends (their senders have read them). */
  dropQueuedSends(ids: readonly number[]): Promise<void>;
}

export function queuedSendsOf(store: object): QueuedSends | undefined {
  const s = store as Partial<QueuedSends>;
  return typeof s.enqueueSend === 'function' && typeof s.takeQueuedSend === 'function'
    ? (store as QueuedSends)
    : undefined;
}

/**
 * The outcome a send taken by a holder that stopped is answered with when its turn had begun
 * (`reclaimQueuedSends`, and every lease acquisition: see `acquireLease`).
 */
export const LOST_OUTCOME = '{"lost":true}';

/** The commit key of the user row a taken send's turn begins with. */
export const queuedCommitKey = (id: number): string => `q${id}:u`;

/** Ids per call of `readQueuedSends` / `dropQueuedSends`. */
const MAX_QUEUED_IDS = 1_000;
const MAX_BODY_LENGTH = 1_048_576;
const MAX_OUTCOME_LENGTH = 1_048_576;

/** The input checks both stores make (INVALID_INPUT, nothing written). */
export function checkEnqueue(i: EnqueueSendInput): EnqueueSendInput {
  checkKey('workstreamId', i.workstreamId);
  checkText('principal', i.principal, 512);
  checkText('body', i.body, MAX_BODY_LENGTH);
  checkText('origin', i.origin, 512);
  checkInteger('max', i.max, 1);
  checkInteger('retryAfterMs', i.retryAfterMs, 0);
  if (i.maxPerTenant !== undefined) checkInteger('maxPerTenant', i.maxPerTenant, 1);
  return i;
}

export function checkTake(i: TakeQueuedSendInput): TakeQueuedSendInput {
  checkInteger('id', i.id, 1);
  checkKey('workstreamId', i.workstreamId);
  checkText('holder', i.holder, 512);
  checkInteger('token', i.token, 1);
  checkInteger('generation', i.generation, 1);
  return i;
}

export function checkIds(ids: readonly number[]): number[] {
  if (!Array.isArray(ids) || ids.length > MAX_QUEUED_IDS) {
    throw errors.invalidInput(`ids must be an array of at most ${MAX_QUEUED_IDS}`, { field: 'ids' });
  }
  return ids.map((id, i) => checkInteger(`ids[${i}]`, id, 1));
}

export function checkOutcome(outcome: string): string {
  return checkText('outcome', outcome, MAX_OUTCOME_LENGTH);
}

export function queueFull(i: EnqueueSendInput, waiting: number) {
  return errors.queueFull(
    `${waiting} sends already wait on ${i.workstreamId} (limits.maxQueuedSends); retry when its turn ends`,
    { limit: i.max, retryAfterMs: i.retryAfterMs },
  );
}

/** QUEUE_FULL: the tenant's sends waiting on all its workstreams reached `maxPerTenant`. */
export function tenantQueueFull(i: EnqueueSendInput, tenantId: string, waiting: number) {
  return errors.queueFull(
    `${waiting} sends of tenant ${tenantId} already wait across its workstreams (limits.maxQueuedSendsPerTenant); retry when a turn ends`,
    { limit: i.maxPerTenant ?? 0, retryAfterMs: i.retryAfterMs },
  );
}

export interface QueuedSendRow {
  id: number | string;
  workstream_id: string;
  principal: string;
  body: string;
  origin: string;
  state: QueuedSendState;
  token: number | string | null;
  generation: number | string | null;
  outcome: string | null;
  created_at: number | string;
}

/** A row of either store (PostgreSQL's bigints arrive as strings). */
export function toQueuedSend(r: QueuedSendRow): QueuedSend {
  return {
    id: Number(r.id),
    workstreamId: r.workstream_id,
    principal: r.principal,
    body: r.body,
    origin: r.origin,
    state: r.state,
    ...(r.token === null ? {} : { token: Number(r.token) }),
    ...(r.generation === null ? {} : { generation: Number(r.generation) }),
    ...(r.outcome === null ? {} : { outcome: r.outcome }),
    createdAt: Number(r.created_at),
  };
}

/** The SQLite statements; each method runs inside the store's write or read transaction. */
export class QueuedSendTable {
  readonly #count;
  readonly #countTenant;
  readonly #insert;
  readonly #next;
  readonly #take;
  readonly #finish;
  readonly #revoke;
  readonly #withdraw;
  readonly #reclaimStarted;
  readonly #reclaimWaiting;
  readonly #byId;

  constructor(private readonly db: Database.Database) {
    this.#count = db.prepare<[string], { n: number }>(
      "SELECT COUNT(*) AS n FROM queued_sends WHERE workstream_id = ? AND state = 'waiting'",
    );
    this.#countTenant = db.prepare<[string, string], { n: number }>(
      "SELECT COUNT(*) AS n FROM queued_sends WHERE workstream_id >= ? AND workstream_id < ? AND state = 'waiting'",
    );
    this.#insert = db.prepare<[string, string, string, string, number], QueuedSendRow>(
      `INSERT INTO queued_sends (workstream_id, principal, body, origin, state, created_at)
       VALUES (?, ?, ?, ?, 'waiting', ?) RETURNING *`,
    );
    this.#next = db.prepare<[string], QueuedSendRow>(
      "SELECT * FROM queued_sends WHERE workstream_id = ? AND state = 'waiting' ORDER BY id LIMIT 1",
    );
    this.#take = db.prepare<{
      id: number;
      ws: string;
      holder: string;
      token: number;
      generation: number;
      now: number;
    }>(
      `UPDATE queued_sends SET state = 'taken', token = @token, generation = @generation
       WHERE id = @id AND workstream_id = @ws AND state = 'waiting'
         AND EXISTS (SELECT 1 FROM turn_leases l WHERE l.workstream_id = @ws AND l.holder = @holder
                     AND l.token = @token AND l.released = 0 AND l.expires_at > @now)`,
    );
    this.#finish = db.prepare<[string, number, number]>(
      "UPDATE queued_sends SET state = 'done', outcome = ? WHERE id = ? AND token = ? AND state = 'taken'",
    );
    this.#revoke = db.prepare<[{ outcome: string; ws: string; before: number | null }], QueuedSendRow>(
      `UPDATE queued_sends SET state = 'revoked', outcome = @outcome
       WHERE workstream_id = @ws AND state = 'waiting' AND (@before IS NULL OR id < @before) RETURNING *`,
    );
    this.#withdraw = db.prepare<[string | null, number]>(
      "UPDATE queued_sends SET state = 'withdrawn', outcome = ? WHERE id = ? AND state = 'waiting'",
    );
    this.#reclaimStarted = db.prepare<[string, string, number], QueuedSendRow>(
      `UPDATE queued_sends SET state = 'done', outcome = ?
       WHERE workstream_id = ? AND state = 'taken' AND token <= ?
         AND EXISTS (SELECT 1 FROM messages m WHERE m.workstream_id = queued_sends.workstream_id
                     AND m.commit_key = 'q' || queued_sends.id || ':u')
       RETURNING *`,
    );
    this.#reclaimWaiting = db.prepare<[string, number], QueuedSendRow>(
      `UPDATE queued_sends SET state = 'waiting', token = NULL, generation = NULL
       WHERE workstream_id = ? AND state = 'taken' AND token <= ? RETURNING *`,
    );
    this.#byId = db.prepare<[number], QueuedSendRow>('SELECT * FROM queued_sends WHERE id = ?');
  }

  enqueue(i: EnqueueSendInput, now: number): QueuedSend {
    const waiting = this.#count.get(i.workstreamId)!.n;
    if (waiting >= i.max) throw queueFull(i, waiting);
    const range = i.maxPerTenant === undefined ? undefined : tenantRange(i.workstreamId);
    if (range !== undefined) {
      const n = this.#countTenant.get(range.from, range.to)!.n;
      if (n >= i.maxPerTenant!) throw tenantQueueFull(i, range.tenantId, n);
    }
    return toQueuedSend(this.#insert.get(i.workstreamId, i.principal, i.body, i.origin, now)!);
  }

  count(workstreamId: string): number {
    return this.#count.get(workstreamId)!.n;
  }

  next(workstreamId: string): QueuedSend | undefined {
    const r = this.#next.get(workstreamId);
    return r === undefined ? undefined : toQueuedSend(r);
  }

  take(i: TakeQueuedSendInput, now: number): boolean {
    const { id, workstreamId: ws, holder, token, generation } = i;
    return this.#take.run({ id, ws, holder, token, generation, now }).changes === 1;
  }

  finish(id: number, token: number, outcome: string): boolean {
    return this.#finish.run(outcome, id, token).changes === 1;
  }

  revoke(workstreamId: string, outcome: string, beforeId: number | undefined): QueuedSend[] {
    return this.#revoke.all({ outcome, ws: workstreamId, before: beforeId ?? null }).map(toQueuedSend);
  }

  withdraw(id: number, outcome: string | undefined): boolean {
    return this.#withdraw.run(outcome ?? null, id).changes === 1;
  }

  reclaim(workstreamId: string, token: number, outcome: string): QueuedSend[] {
    const done = this.#reclaimStarted.all(outcome, workstreamId, token);
    const waiting = this.#reclaimWaiting.all(workstreamId, token);
    return [...done, ...waiting].map(toQueuedSend);
  }

  read(ids: readonly number[]): QueuedSend[] {
    return ids.flatMap((id) => {
      const r = this.#byId.get(id);
      return r === undefined ? [] : [toQueuedSend(r)];
    });
  }

  drop(ids: readonly number[]): void {
    const del = this.db.prepare<[number]>(
      "DELETE FROM queued_sends WHERE id = ? AND state IN ('done', 'revoked', 'withdrawn')",
    );
    for (const id of ids) del.run(id);
  }
}
