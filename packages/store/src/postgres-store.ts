/**
 * `Store` over PostgreSQL (node-postgres), for several hosts sharing one database. Every write
 * is ONE transaction on a pooled connection that first locks the workstream row (`FOR UPDATE`)
 * — so the writers of one workstream, on any host, run one after another — and, for a fenced
 * write, the lease row right after it: the fencing token is checked against the lease as it is
 * in the transaction of the write (P6), never before it. Time is the injected clock or the
 * database's, read after those locks are held. Same semantics and typed errors as SqliteStore.
 */

import { randomUUID } from 'node:crypto';
import {
  errors,
  type HistoryReaderSpec,
  type HistoryRow,
  openToolCalls,
  type SessionSnapshotData,
  type TurnwardenError,
} from '@turnwarden/protocol';
import pg from 'pg';
import { type CheckedAppend, checkAppend, checkEntries, MAX_COMMIT_KEY_LENGTH } from './entries.js';
import { invalidConfig, invalidInput, workstreamClosed, workstreamNotFound } from './errors.js';
import { fenceRefusal, tenantActive, tenantRange } from './leases.js';
import { appendBatches } from './pg-append.js';
import { storeClosed, toPgStoreError } from './pg-errors.js';
import { isChannelName, PgListener } from './pg-listener.js';
import { applyPgMigrations, pgSchemaVersion } from './pg-migrations.js';
import {
  type PostgresStoreOptions,
  type ResolvedPostgresStoreOptions,
  resolvePostgresOptions,
} from './pg-options.js';
import {
  pgCount,
  pgDrop,
  pgEnqueue,
  pgFinish,
  pgNext,
  pgRead,
  pgReclaim,
  pgRevoke,
  pgTake,
  pgWithdraw,
  sendReclaim,
} from './pg-queued-sends.js';
import { compactRows, truncateRows } from './pg-rewrite.js';
import {
  LEASE_LOCK_SQL,
  type LeaseRow,
  LOCK_SQL,
  type Locked,
  type LockedRow,
  MESSAGE_COLUMNS,
  nowSql,
  TAIL_SQL,
  toLease,
  toLocked,
} from './pg-rows.js';
import { inTransaction, type PgTx, withClient } from './pg-tx.js';
import {
  checkEnqueue,
  checkIds,
  checkOutcome,
  checkTake,
  type EnqueueSendInput,
  LOST_OUTCOME,
  type QueuedSend,
  type QueuedSends,
  type TakeQueuedSendInput,
} from './queued-sends.js';
import { type MessageRow, toHistoryRow, toRecord, type WorkstreamRow } from './rows.js';
import type {
  AcquireLeaseOptions,
  AppendInput,
  AppendOutcome,
  CompactInput,
  CompactResult,
  CreateWorkstreamInput,
  HistoryPageQuery,
  Lease,
  SaveSessionInput,
  Store,
  StoreStats,
  TruncateInput,
  TruncateResult,
  WorkstreamDebt,
  WorkstreamFilter,
  WorkstreamRecord,
} from './types.js';
import {
  checkDoubleTexting,
  checkId,
  checkInteger,
  checkKey,
  checkKeys,
  checkObject,
  checkOwnKey,
  checkPage,
  checkSession,
  checkText,
  MAX_HOLDER_LENGTH,
} from './validate.js';

const INT8_OID = 20;
/** bigint columns (ms, seqs, tokens, counts) as numbers: every value stored is a safe integer. */
const TYPES: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === INT8_OID && format !== 'binary'
      ? (value: string) => Number(value)
      : pg.types.getTypeParser(oid, format)) as pg.CustomTypesConfig['getTypeParser'],
};
const MAX_PAYLOAD_LENGTH = 7_999;
/** The module other threads open a read-only view with (reader.ts). */
const READER_MODULE = new URL('./reader.js', import.meta.url).href;

export type { PostgresStoreOptions } from './pg-options.js';

export class PostgresStore implements Store, QueuedSends {
  readonly schema: string;
  readonly #options: ResolvedPostgresStoreOptions;
  readonly #pool: pg.Pool;
  readonly #listener: PgListener;
  #closed = false;

  /** Use `openPostgresStore`, which also applies the migrations. */
  private constructor(options: ResolvedPostgresStoreOptions) {
    this.#options = options;
    this.schema = options.schema;
    const config: pg.ClientConfig = {
      connectionString: options.connectionString,
      // Every connection of the store, the listener's too, works in its schema.
      options: `-c search_path=${options.schema}`,
      application_name: options.applicationName,
      connectionTimeoutMillis: options.connectionTimeoutMs,
      types: TYPES,
      ...(options.statementTimeoutMs === undefined ? {} : { statement_timeout: options.statementTimeoutMs }),
      // A host stalled mid-transaction must not hold its lease rows' locks past its lease (P6, S7).
      idle_in_transaction_session_timeout: options.idleInTransactionTimeoutMs,
    };
    this.#pool = new pg.Pool({ ...config, max: options.maxConnections, pipeline: true });
    // An idle connection that fails (the server restarts) is dropped by the pool; without a
    // listener the 'error' event would crash the process.
    this.#pool.on('error', () => undefined);
    this.#listener = new PgListener(config);
  }

  /** Connects and applies the migrations. */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const store = new PostgresStore(resolvePostgresOptions(options));
    try {
      await store.#migrate();
    } catch (e) {
      await store.close().catch(() => undefined);
      throw store.#error(e, 'open');
    }
    return store;
  }

  async #migrate(): Promise<void> {
    await withClient(this.#pool, (client) => applyPgMigrations(client, this.schema, this.#clock()));
  }

  createWorkstream(input: CreateWorkstreamInput): Promise<WorkstreamRecord> {
    return this.#run('createWorkstream', async () => {
      const i = checkObject('input', input);
      checkKeys('input', i, ['id', 'tenantId', 'doubleTexting']);
      const id = checkKey('id', i.id);
      const tenantId = checkId('tenantId', i.tenantId);
      const doubleTexting = checkDoubleTexting('doubleTexting', i.doubleTexting);
      checkOwnKey(id, tenantId);
      try {
        const { rows } = await this.#pool.query<WorkstreamRow>(
          `INSERT INTO workstreams (id, tenant_id, incarnation, generation, status, created_at, double_texting)
           VALUES ($1, $2, $3, 0, 'open', ${nowSql(4)}, $5) RETURNING *`,
          [id, tenantId, randomUUID(), this.#clock(), doubleTexting ?? null],
        );
        return toRecord(rows[0]!);
      } catch (e) {
        // Two hosts creating one id at once: the loser meets the primary key.
        if ((e as { code?: unknown }).code === '23505') {
          throw errors.workstreamExists(`workstream ${id} already exists`, { workstreamId: id });
        }
        throw e;
      }
    });
  }

  getWorkstream(id: string): Promise<WorkstreamRecord | undefined> {
    return this.#run('getWorkstream', async () => {
      const { rows } = await this.#pool.query<WorkstreamRow>('SELECT * FROM workstreams WHERE id = $1', [
        checkKey('id', id),
      ]);
      return rows[0] === undefined ? undefined : toRecord(rows[0]);
    });
  }

  listWorkstreams(filter: WorkstreamFilter = {}): Promise<WorkstreamRecord[]> {
    return this.#run('listWorkstreams', async () => {
      const f = checkObject('filter', filter);
      checkKeys('filter', f, ['tenantId', 'status', 'afterId', 'limit']);
      if (f.status !== undefined && f.status !== 'open' && f.status !== 'closed') {
        throw invalidInput('filter.status', "must be 'open' or 'closed'");
      }
      const tenant = f.tenantId === undefined ? null : checkId('filter.tenantId', f.tenantId);
      const after = f.afterId === undefined ? null : checkKey('filter.afterId', f.afterId);
      const limit = f.limit === undefined ? null : Math.min(checkInteger('filter.limit', f.limit, 1), 10_000);
      const { rows } = await this.#pool.query<WorkstreamRow>(
        `SELECT * FROM workstreams
         WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR status = $2)
           AND ($3::text IS NULL OR id > $3)
         ORDER BY id LIMIT $4`,
        [tenant, f.status ?? null, after, limit],
      );
      return rows.map(toRecord);
    });
  }

  deleteWorkstream(id: string, incarnation?: string): Promise<boolean> {
    return this.#run('deleteWorkstream', async () => {
      checkKey('id', id);
      if (incarnation !== undefined) checkText('incarnation', incarnation, MAX_HOLDER_LENGTH);
      // One statement: the row lock waits for the workstream's writers; its messages go with it
      // (ON DELETE CASCADE); its lease row stays, so its tokens keep increasing (P6).
      const { rowCount } = await this.#pool.query(
        'DELETE FROM workstreams WHERE id = $1 AND ($2::text IS NULL OR incarnation = $2)',
        [id, incarnation ?? null],
      );
      return rowCount === 1;
    });
  }

  closeWorkstream(id: string, session?: SessionSnapshotData): Promise<WorkstreamRecord> {
    return this.#run('closeWorkstream', async () => {
      checkKey('id', id);
      const json = session === undefined ? null : checkSession('session', session);
      return this.#tx(async (tx) => {
        const lockP = tx.query<WorkstreamRow>('SELECT * FROM workstreams WHERE id = $1 FOR UPDATE', [id]);
        const tailP = tx.query<MessageRow>(TAIL_SQL, [id]);
        const nowP = tx.query<{ now: number }>(`SELECT ${nowSql(1)} AS now`, [this.#clock()]);
        const ws = (await lockP).rows[0];
        if (ws === undefined) throw workstreamNotFound(id);
        if (ws.status === 'closed') return toRecord(ws);
        const open = openToolCalls((await tailP).rows.map(toHistoryRow));
        if (open.length > 0) {
          throw errors.toolCleanupPending(
            `workstream ${id} has ${open.length} tool call(s) without results; repair before closing`,
            { workstreamId: id, openCalls: open.length },
          );
        }
        const { rows } = await tx.query<WorkstreamRow>(
          `UPDATE workstreams SET status = 'closed', closed_at = $2, session = COALESCE($3, session)
           WHERE id = $1 RETURNING *`,
          [id, (await nowP).rows[0]!.now, json],
        );
        return toRecord(rows[0]!);
      });
    });
  }

  nextGeneration(id: string): Promise<number> {
    return this.#run('nextGeneration', async () => {
      checkKey('id', id);
      const { rows } = await this.#pool.query<{ generation: number }>(
        "UPDATE workstreams SET generation = generation + 1 WHERE id = $1 AND status = 'open' RETURNING generation",
        [id],
      );
      if (rows[0] !== undefined) return rows[0].generation;
      // Nothing incremented: say why (a closed workstream stays closed; a missing one may appear, a race the caller loses either way).
      const found = await this.#pool.query('SELECT 1 FROM workstreams WHERE id = $1', [id]);
      throw found.rowCount === 0 ? workstreamNotFound(id) : workstreamClosed(id);
    });
  }

  appendMessages(input: AppendInput): Promise<number[]> {
    return this.#run('appendMessages', async () => {
      const checked = checkAppend(input);
      const [outcome] = await this.#tx((tx) => appendBatches(tx, [checked], this.#clock()));
      if (outcome === undefined) throw errors.internal('append without an outcome');
      if ('error' in outcome) throw outcome.error;
      return outcome.seqs;
    });
  }

  /**
   * Group commit: every batch in one transaction; a refused batch (fenced, a conflict, S1, bad
   * input, a missing or closed workstream) is reported in its slot and writes nothing, the
   * others commit together. A database failure rejects the whole call. See pg-append.ts.
   */
  appendMany(inputs: readonly AppendInput[]): Promise<AppendOutcome[]> {
    return this.#run('appendMany', async () => {
      if (!Array.isArray(inputs)) throw invalidInput('inputs', 'must be an array');
      const checked = inputs.map((input): CheckedAppend | { error: TurnwardenError } => {
        try {
          return checkAppend(input);
        } catch (e) {
          return { error: this.#error(e, 'appendMessages') };
        }
      });
      const valid = checked.filter((c): c is CheckedAppend => !('error' in c));
      const written =
        valid.length === 0 ? [] : await this.#tx((tx) => appendBatches(tx, valid, this.#clock()));
      let k = 0;
      return checked.map((c): AppendOutcome => ('error' in c ? c : written[k++]!));
    });
  }

  saveSession(input: SaveSessionInput): Promise<void> {
    return this.#run('saveSession', async () => {
      const i = checkObject('input', input);
      checkKeys('input', i, ['workstreamId', 'fencingToken', 'session']);
      const workstreamId = checkKey('workstreamId', i.workstreamId);
      const token =
        i.fencingToken === undefined ? undefined : checkInteger('fencingToken', i.fencingToken, 1);
      const session = checkSession('session', i.session);
      await this.#tx(async (tx) => {
        await this.#lockForWrite(tx, workstreamId, token);
        tx.send('UPDATE workstreams SET session = $2 WHERE id = $1', [workstreamId, session]);
      });
    });
  }

  compactHistory(input: CompactInput): Promise<CompactResult> {
    return this.#run('compactHistory', async () => {
      const i = checkObject('input', input);
      checkKeys('input', i, ['workstreamId', 'generation', 'fencingToken', 'throughSeq', 'summary']);
      const workstreamId = checkKey('workstreamId', i.workstreamId);
      const generation = checkInteger('generation', i.generation, 0);
      const token =
        i.fencingToken === undefined ? undefined : checkInteger('fencingToken', i.fencingToken, 1);
      const throughSeq = checkInteger('throughSeq', i.throughSeq, 1);
      const [summary] = checkEntries([i.summary]);
      if (summary?.message.role !== 'system') throw invalidInput('summary.message.role', 'must be system');
      return this.#tx(async (tx) => {
        const [now, rows] = await this.#lockAndReadAll(tx, workstreamId, token);
        return { removed: compactRows(tx, workstreamId, rows, { generation, throughSeq, summary, now }) };
      });
    });
  }

  truncateHistory(input: TruncateInput): Promise<TruncateResult> {
    return this.#run('truncateHistory', async () => {
      const i = checkObject('input', input);
      checkKeys('input', i, ['workstreamId', 'generation', 'fencingToken', 'fromSeq', 'fromKey']);
      const workstreamId = checkKey('workstreamId', i.workstreamId);
      checkInteger('generation', i.generation, 0);
      const token =
        i.fencingToken === undefined ? undefined : checkInteger('fencingToken', i.fencingToken, 1);
      const fromSeq = checkInteger('fromSeq', i.fromSeq, 1);
      const fromKey = checkText('fromKey', i.fromKey, MAX_COMMIT_KEY_LENGTH);
      return this.#tx(async (tx) => {
        const [, rows] = await this.#lockAndReadAll(tx, workstreamId, token);
        return { removed: truncateRows(tx, workstreamId, rows, fromSeq, fromKey) };
      });
    });
  }

  readHistory(workstreamId: string): Promise<HistoryRow[]> {
    return this.#run('readHistory', () => this.#history(checkKey('workstreamId', workstreamId), 0));
  }

  /**
   * At most `page.limit` rows after `page.afterSeq`: a range of the (workstream_id, seq) key,
   * joined to the workstream row so an unknown id is told from an empty page in one statement.
   */
  readHistoryPage(workstreamId: string, page: HistoryPageQuery): Promise<HistoryRow[]> {
    return this.#run('readHistoryPage', async () => {
      const id = checkKey('workstreamId', workstreamId);
      const { afterSeq, limit } = checkPage(page);
      const { rows } = await this.#pool.query<MessageRow & { ws: string | null }>(
        `SELECT w.id AS ws, m.* FROM workstreams w LEFT JOIN LATERAL (
           SELECT ${MESSAGE_COLUMNS} FROM messages
           WHERE workstream_id = w.id AND seq > $2 ORDER BY seq LIMIT $3) m ON true
         WHERE w.id = $1 ORDER BY m.seq`,
        [id, afterSeq, limit],
      );
      if (rows.length === 0) throw workstreamNotFound(id);
      return rows.filter((r) => r.seq != null).map(toHistoryRow);
    });
  }

  /** The rows from the last message that is not a tool result on (S1: where an open call can be). */
  readHistoryTail(workstreamId: string): Promise<HistoryRow[]> {
    return this.#run('readHistoryTail', async () => {
      const id = checkKey('workstreamId', workstreamId);
      const { rows } = await this.#pool.query<MessageRow & { ws: string | null }>(
        `SELECT w.id AS ws, t.* FROM workstreams w LEFT JOIN LATERAL (${TAIL_SQL}) t ON true
         WHERE w.id = $1 ORDER BY t.seq`,
        [id],
      );
      if (rows.length === 0) throw workstreamNotFound(id);
      return rows.filter((r) => r.seq != null).map(toHistoryRow);
    });
  }

  /** Other threads read the history through a connection of their own, in this schema. */
  historyReader(): HistoryReaderSpec {
    const o = this.#options;
    return {
      module: READER_MODULE,
      options: {
        kind: 'postgres',
        connectionString: o.connectionString,
        schema: o.schema,
        applicationName: `${o.applicationName}-reader`,
        connectionTimeoutMs: o.connectionTimeoutMs,
        ...(o.statementTimeoutMs === undefined ? {} : { statementTimeoutMs: o.statementTimeoutMs }),
      },
    };
  }

  /** The rows after `afterSeq`, in seq order (a follower catching up; not part of `Store`). */
  readHistoryAfter(workstreamId: string, afterSeq: number): Promise<HistoryRow[]> {
    return this.#run('readHistoryAfter', () =>
      this.#history(checkKey('workstreamId', workstreamId), checkInteger('afterSeq', afterSeq, 0)),
    );
  }

  acquireLease(
    workstreamId: string,
    holder: string,
    ttlMs: number,
    options: AcquireLeaseOptions = {},
  ): Promise<Lease | undefined> {
    return this.#run('acquireLease', async () => {
      checkKey('workstreamId', workstreamId);
      checkText('holder', holder, MAX_HOLDER_LENGTH);
      checkInteger('ttlMs', ttlMs, 1);
      const { replacing } = options;
      if (replacing !== undefined) {
        checkText('replacing', replacing, MAX_HOLDER_LENGTH);
        if (!holder.startsWith(replacing)) {
          throw errors.invalidInput('replacing must be a prefix of holder', { field: 'replacing' });
        }
      }
      const { tenantLimit } = options;
      if (tenantLimit !== undefined) checkInteger('tenantLimit', tenantLimit, 1);
      const range = tenantLimit === undefined ? undefined : tenantRange(workstreamId);
      return this.#tx(async (tx) => {
        // The workstream row lock serializes every acquirer of this id on every host; the lease
        // row lock is taken after it, in the order every transaction takes them.
        const { locked, now } = await this.#lock(tx, workstreamId, true);
        const current = locked.lease;
        if (
          current !== undefined &&
          !current.released &&
          now < current.expiresAt &&
          current.holder !== holder &&
          !(replacing !== undefined && current.holder.startsWith(replacing))
        ) {
          return undefined;
        }
        if (range !== undefined && tenantLimit !== undefined) {
          // Counted under a lock of the tenant's own, taken last (after this workstream's row
          // locks, which no holder of it waits for): hosts acquiring at once count in turn, and a
          // workstream whose row is held up (a long write, a paused host) holds up only itself.
          await tx.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [
            `turnwarden tenant ${range.tenantId}`,
          ]);
          const { rows } = await tx.query<{ n: string; soonest: string | null }>(
            `SELECT COUNT(*) AS n, MIN(expires_at) AS soonest FROM turn_leases
             WHERE workstream_id >= $1 AND workstream_id < $2 AND workstream_id <> $3 AND NOT released AND expires_at > $4`,
            [range.from, range.to, workstreamId, now],
          );
          const n = Number(rows[0]!.n);
          if (n >= tenantLimit)
            throw tenantActive(range.tenantId, tenantLimit, Number(rows[0]!.soonest ?? now) - now);
        }
        // The token is the stored one + 1, computed by the database on the locked row: never reused.
        const { rows } = await tx.query<LeaseRow>(
          `INSERT INTO turn_leases (workstream_id, holder, token, acquired_at, expires_at, released)
           VALUES ($1, $2, 1, $3, $4, false)
           ON CONFLICT (workstream_id) DO UPDATE SET holder = excluded.holder,
             token = turn_leases.token + 1, acquired_at = excluded.acquired_at,
             expires_at = excluded.expires_at, released = false
           RETURNING *`,
          [workstreamId, holder, now, now + ttlMs],
        );
        const acquired = toLease(rows[0]!);
        const lease =
          current === undefined || current.released || current.holder === holder
            ? acquired
            : { ...acquired, tookOverFrom: current.holder };
        // Sends an earlier holder took and did not answer: it stopped (queued-sends.ts). Under
        // the locks its appends take: its user row has committed, or it never will.
        sendReclaim(tx, workstreamId, lease.token - 1, LOST_OUTCOME);
        return lease;
      });
    });
  }

  refreshLease(workstreamId: string, holder: string, token: number, ttlMs: number): Promise<boolean> {
    return this.#run('refreshLease', async () => {
      checkKey('workstreamId', workstreamId);
      checkText('holder', holder, MAX_HOLDER_LENGTH);
      checkInteger('token', token, 1);
      checkInteger('ttlMs', ttlMs, 1);
      // One statement: the clock is read when the row is (re)checked under its lock, so a lease
      // that lapsed while this waited is not revived.
      const { rowCount } = await this.#pool.query(
        `UPDATE turn_leases SET expires_at = ${nowSql(5)} + $4
         WHERE workstream_id = $1 AND holder = $2 AND token = $3 AND NOT released AND expires_at > ${nowSql(5)}`,
        [workstreamId, holder, token, ttlMs, this.#clock()],
      );
      return rowCount === 1;
    });
  }

  releaseLease(workstreamId: string, holder: string, token: number): Promise<boolean> {
    return this.#run('releaseLease', async () => {
      checkKey('workstreamId', workstreamId);
      checkText('holder', holder, MAX_HOLDER_LENGTH);
      checkInteger('token', token, 1);
      const { rowCount } = await this.#pool.query(
        `UPDATE turn_leases SET released = true
         WHERE workstream_id = $1 AND holder = $2 AND token = $3 AND NOT released`,
        [workstreamId, holder, token],
      );
      return rowCount === 1;
    });
  }

  getLease(workstreamId: string): Promise<Lease | undefined> {
    return this.#run('getLease', async () => {
      const { rows } = await this.#pool.query<LeaseRow>(
        'SELECT * FROM turn_leases WHERE workstream_id = $1',
        [checkKey('workstreamId', workstreamId)],
      );
      return rows[0] === undefined ? undefined : toLease(rows[0]);
    });
  }

  expiredLeases(): Promise<Lease[]> {
    return this.#run('expiredLeases', async () => {
      const { rows } = await this.#pool.query<LeaseRow>(
        `SELECT * FROM turn_leases WHERE NOT released AND expires_at <= ${nowSql(1)} ORDER BY workstream_id`,
        [this.#clock()],
      );
      return rows.map(toLease);
    });
  }

  // ── sends queued durably (queued-sends.ts) ─────────────────────────────────

  enqueueSend(input: EnqueueSendInput): Promise<QueuedSend> {
    return this.#run('enqueueSend', async () => {
      const i = checkEnqueue(input);
      return this.#tx((tx) => pgEnqueue(tx, i, this.#clock()));
    });
  }

  nextQueuedSend(workstreamId: string): Promise<QueuedSend | undefined> {
    return this.#run('nextQueuedSend', () => pgNext(this.#pool, checkKey('workstreamId', workstreamId)));
  }

  countQueuedSends(workstreamId: string): Promise<number> {
    return this.#run('countQueuedSends', () => pgCount(this.#pool, checkKey('workstreamId', workstreamId)));
  }

  takeQueuedSend(input: TakeQueuedSendInput): Promise<boolean> {
    return this.#run('takeQueuedSend', () => pgTake(this.#pool, checkTake(input), this.#clock()));
  }

  finishQueuedSend(id: number, token: number, outcome: string): Promise<boolean> {
    return this.#run('finishQueuedSend', () =>
      pgFinish(this.#pool, checkInteger('id', id, 1), checkInteger('token', token, 1), checkOutcome(outcome)),
    );
  }

  revokeQueuedSends(workstreamId: string, outcome: string, beforeId?: number): Promise<QueuedSend[]> {
    return this.#run('revokeQueuedSends', () =>
      pgRevoke(
        this.#pool,
        checkKey('workstreamId', workstreamId),
        checkOutcome(outcome),
        beforeId === undefined ? undefined : checkInteger('beforeId', beforeId, 1),
      ),
    );
  }

  withdrawQueuedSend(id: number, outcome?: string): Promise<boolean> {
    return this.#run('withdrawQueuedSend', () =>
      pgWithdraw(this.#pool, checkInteger('id', id, 1), outcome === undefined ? null : checkOutcome(outcome)),
    );
  }

  reclaimQueuedSends(workstreamId: string, token: number, outcome: string): Promise<QueuedSend[]> {
    return this.#run('reclaimQueuedSends', async () => {
      const ws = checkKey('workstreamId', workstreamId);
      checkInteger('token', token, 1);
      checkOutcome(outcome);
      return this.#tx((tx) => pgReclaim(tx, ws, token, outcome, this.#clock()));
    });
  }

  readQueuedSends(ids: readonly number[]): Promise<QueuedSend[]> {
    return this.#run('readQueuedSends', () => pgRead(this.#pool, checkIds(ids)));
  }

  dropQueuedSends(ids: readonly number[]): Promise<void> {
    return this.#run('dropQueuedSends', () => pgDrop(this.#pool, checkIds(ids)));
  }

  listWorkstreamsWithOpenToolCalls(): Promise<WorkstreamDebt[]> {
    return this.#run('listWorkstreamsWithOpenToolCalls', async () => {
      // One statement, one snapshot: each open workstream whose last non-tool row is an
      // assistant's (only such a tail can hold an open call) with that tail.
      const { rows } = await this.#pool.query<WorkstreamRow & { tail: MessageRow[] }>(
        `SELECT w.*, t.tail FROM workstreams w
         CROSS JOIN LATERAL (
           SELECT seq FROM messages WHERE workstream_id = w.id AND role <> 'tool' ORDER BY seq DESC LIMIT 1
         ) last
         CROSS JOIN LATERAL (
           SELECT json_agg(json_build_object('workstream_id', m.workstream_id, 'seq', m.seq,
             'commit_key', m.commit_key, 'generation', m.generation, 'body', m.body,
             'created_at', m.created_at) ORDER BY m.seq) AS tail
           FROM messages m WHERE m.workstream_id = w.id AND m.seq >= last.seq
         ) t
         WHERE w.status = 'open'
           AND EXISTS (SELECT 1 FROM messages a WHERE a.workstream_id = w.id AND a.seq = last.seq AND a.role = 'assistant')
         ORDER BY w.id`,
      );
      return rows.flatMap((r) => {
        const openCalls = openToolCalls(r.tail.map(toHistoryRow));
        return openCalls.length === 0 ? [] : [{ workstream: toRecord(r), openCalls }];
      });
    });
  }

  stats(): Promise<StoreStats> {
    return this.#run('stats', async () => {
      const { rows } = await this.#pool.query<Omit<StoreStats, 'schemaVersion'>>(
        `SELECT (SELECT COUNT(*) FROM workstreams) AS workstreams,
           (SELECT COUNT(*) FROM workstreams WHERE status = 'open') AS "openWorkstreams",
           (SELECT COUNT(*) FROM messages) AS messages,
           (SELECT COUNT(*) FROM turn_leases WHERE NOT released AND expires_at > ${nowSql(1)}) AS "liveLeases"`,
        [this.#clock()],
      );
      return { schemaVersion: await pgSchemaVersion(this.#pool), ...rows[0]! };
    });
  }

  /** `pg_notify(channel, payload)`: delivered to every store LISTENing on it, on any host, after commit. */
  notify(channel: string, payload: string): Promise<void> {
    return this.#run('notify', async () => {
      if (!isChannelName(channel)) throw invalidInput('channel', 'must match [a-z_][a-z0-9_]{0,62}');
      if (typeof payload !== 'string' || Buffer.byteLength(payload) > MAX_PAYLOAD_LENGTH) {
        throw invalidInput('payload', `must be a string of at most ${MAX_PAYLOAD_LENGTH} bytes`);
      }
      await this.#pool.query('SELECT pg_notify($1, $2)', [channel, payload]);
    });
  }

  /**
   * LISTENs on `channel` over the store's one dedicated connection; resolves once in force, to
   * the unsubscribe. If that connection drops it is re-established with backoff and
   * `onReconnect` is called: notifications sent meanwhile are lost, so the caller resyncs.
   */
  listen(
    channel: string,
    onPayload: (payload: string) => void,
    onReconnect?: () => void,
  ): Promise<() => Promise<void>> {
    return this.#run('listen', async () => {
      if (!isChannelName(channel)) throw invalidInput('channel', 'must match [a-z_][a-z0-9_]{0,62}');
      if (typeof onPayload !== 'function') throw invalidInput('onPayload', 'must be a function');
      const unlisten = await this.#listener.listen(channel, onPayload, onReconnect);
      return () =>
        unlisten().catch((e: unknown) => {
          throw this.#error(e, 'unlisten');
        });
    });
  }

  /** Closes the pool and the listening connection; idempotent. Later calls reject with STORE_ERROR. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      await Promise.all([this.#listener.close(), this.#pool.end()]);
    } catch (e) {
      throw this.#error(e, 'close');
    }
  }

  /** The injected clock's value, or null: the database's clock is read in the statement. */
  #clock(): number | null {
    const now = this.#options.now;
    if (now === undefined) return null;
    const t = now();
    if (typeof t !== 'number' || !Number.isFinite(t))
      throw invalidConfig('now', 'returned a non-finite value');
    return Math.floor(t);
  }

  /**
   * Locks the workstream row and, when `withLease`, its lease row, then reads the clock — in a
   * statement that runs once the locks are held. Not found / closed: typed errors.
   */
  async #lock(tx: PgTx, id: string, withLease: boolean): Promise<{ locked: Locked; now: number }> {
    const lockP = tx.query<LockedRow>(LOCK_SQL, [[id]]);
    const leaseP = withLease ? tx.query<LeaseRow>(LEASE_LOCK_SQL, [[id]]) : undefined;
    const nowP = tx.query<{ now: number }>(`SELECT ${nowSql(1)} AS now`, [this.#clock()]);
    const locked = toLocked((await lockP).rows, leaseP === undefined ? [] : (await leaseP).rows).get(id);
    const now = (await nowP).rows[0]!.now;
    if (locked === undefined) throw workstreamNotFound(id);
    if (locked.status !== 'open') throw workstreamClosed(id);
    return { locked, now };
  }

  /** `#lock`, then the fence (P6) in the same transaction as the write that follows. */
  async #lockForWrite(tx: PgTx, id: string, token: number | undefined): Promise<number> {
    const { locked, now } = await this.#lock(tx, id, token !== undefined);
    if (token !== undefined) {
      const refusal = fenceRefusal(id, token, locked.lease, now);
      if (refusal !== undefined) throw refusal;
    }
    return now;
  }

  /**
   * `#lockForWrite`, and the whole history sent right behind its locks (pipelined), so it is
   * read as it is under them. Resolves to the clock and the rows.
   */
  async #lockAndReadAll(tx: PgTx, id: string, token: number | undefined): Promise<[number, HistoryRow[]]> {
    const nowP = this.#lockForWrite(tx, id, token); // sends its statements before its first await
    const rowsP = tx.query<MessageRow>(
      `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE workstream_id = $1 ORDER BY seq`,
      [id],
    );
    const now = await nowP;
    return [now, (await rowsP).rows.map(toHistoryRow)];
  }

  /** The workstream's rows after `afterSeq`; one statement, so one snapshot. */
  async #history(id: string, afterSeq: number): Promise<HistoryRow[]> {
    const { rows } = await this.#pool.query<Partial<MessageRow> & { ws: string }>(
      `SELECT w.id AS ws, m.workstream_id, m.seq, m.commit_key, m.generation, m.body, m.created_at, m.fencing_token
       FROM workstreams w LEFT JOIN messages m ON m.workstream_id = w.id AND m.seq > $2
       WHERE w.id = $1 ORDER BY m.seq`,
      [id, afterSeq],
    );
    if (rows.length === 0) throw workstreamNotFound(id);
    return rows.filter((r): r is MessageRow & { ws: string } => r.seq != null).map(toHistoryRow);
  }

  #tx<T>(fn: (tx: PgTx) => Promise<T>): Promise<T> {
    return inTransaction(this.#pool, fn);
  }

  #error(e: unknown, operation: string): TurnwardenError {
    return toPgStoreError(e, operation, this.#options.password);
  }

  /** Every public call: closed → STORE_ERROR; any throw → a typed rejection. */
  async #run<T>(operation: string, fn: () => Promise<T>): Promise<T> {
    if (this.#closed) throw storeClosed();
    try {
      return await fn();
    } catch (e) {
      throw this.#error(e, operation);
    }
  }
}

/** Connects to PostgreSQL and applies the migrations. Rejects with INVALID_CONFIG or STORE_ERROR. */
export async function openPostgresStore(options: PostgresStoreOptions): Promise<PostgresStore> {
  try {
    return await PostgresStore.open(options);
  } catch (e) {
    throw toPgStoreError(e, 'open', undefined);
  }
}
