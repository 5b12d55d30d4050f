/**
 * `Store` over better-sqlite3. Every call runs synchronously, at once and in call order, and
 * hands back an already settled promise; every write is one `.immediate()` transaction, so a
 * refusal or a failure leaves nothing behind. Use one instance per thread.
 */

import { resolve as resolvePath } from 'node:path';
import {
  errors,
  type HistoryReaderSpec,
  type HistoryRow,
  isTurnwardenError,
  openToolCalls,
  type SessionSnapshotData,
  type TurnwardenError,
} from '@turnwarden/protocol';
import type Database from 'better-sqlite3';
import { type CheckedAppend, checkAppend, checkEntries, MAX_COMMIT_KEY_LENGTH } from './entries.js';
import { invalidConfig, invalidInput, toStoreError } from './errors.js';
import { LeaseTable } from './leases.js';
import { MessageTable } from './messages.js';
import { schemaVersion } from './migrations.js';
import { openDatabase } from './open.js';
import { resolveOptions, type SqliteStoreOptions } from './options.js';
import {
  checkEnqueue,
  checkIds,
  checkOutcome,
  checkTake,
  type EnqueueSendInput,
  LOST_OUTCOME,
  type QueuedSend,
  type QueuedSends,
  QueuedSendTable,
  type TakeQueuedSendInput,
} from './queued-sends.js';
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
import { WorkstreamTable } from './workstreams.js';

/** The module other threads open a read-only view with (reader.ts). */
const READER_MODULE = new URL('./reader.js', import.meta.url).href;

/** The connection settings in force, for diagnostics and tests. */
export interface SqlitePragmas {
  readonly journalMode: string;
  readonly synchronous: 'OFF' | 'NORMAL' | 'FULL' | 'EXTRA';
  readonly foreignKeys: boolean;
  readonly busyTimeoutMs: number;
}

export class SqliteStore implements Store, QueuedSends {
  readonly path: string;
  readonly #memory: boolean;
  readonly #db: Database.Database;
  readonly #clock: () => number;
  readonly #tx: Database.Transaction<(fn: () => unknown) => unknown>;
  readonly #workstreams: WorkstreamTable;
  readonly #messages: MessageTable;
  readonly #leases: LeaseTable;
  readonly #queued: QueuedSendTable;

  constructor(options: SqliteStoreOptions) {
    const resolved = resolveOptions(options);
    this.path = resolved.path;
    this.#memory = resolved.memory;
    this.#clock = () => {
      const t = resolved.now();
      if (typeof t !== 'number' || !Number.isFinite(t))
        throw invalidConfig('now', 'returned a non-finite value');
      return Math.floor(t);
    };
    try {
      this.#db = openDatabase(resolved, this.#clock);
    } catch (e) {
      throw toStoreError(e, 'open');
    }
    this.#tx = this.#db.transaction((fn: () => unknown) => fn());
    this.#workstreams = new WorkstreamTable(this.#db);
    this.#messages = new MessageTable(this.#db);
    this.#leases = new LeaseTable(this.#db);
    this.#queued = new QueuedSendTable(this.#db);
  }

  createWorkstream(input: CreateWorkstreamInput): Promise<WorkstreamRecord> {
    return this.#run('createWorkstream', () => {
      const i = checkObject('input', input);
      checkKeys('input', i, ['id', 'tenantId', 'doubleTexting']);
      const id = checkKey('id', i.id);
      const tenantId = checkId('tenantId', i.tenantId);
      const doubleTexting = checkDoubleTexting('doubleTexting', i.doubleTexting);
      checkOwnKey(id, tenantId);
      return this.#write(() => {
        if (this.#workstreams.get(id) !== undefined) {
          throw errors.workstreamExists(`workstream ${id} already exists`, { workstreamId: id });
        }
        return this.#workstreams.insert(id, tenantId, this.#clock(), doubleTexting);
      });
    });
  }

  getWorkstream(id: string): Promise<WorkstreamRecord | undefined> {
    return this.#run('getWorkstream', () => this.#workstreams.get(checkKey('id', id)));
  }

  listWorkstreams(filter: WorkstreamFilter = {}): Promise<WorkstreamRecord[]> {
    return this.#run('listWorkstreams', () => {
      const f = checkObject('filter', filter);
      checkKeys('filter', f, ['tenantId', 'status', 'afterId', 'limit']);
      if (f.status !== undefined && f.status !== 'open' && f.status !== 'closed') {
        throw invalidInput('filter.status', "must be 'open' or 'closed'");
      }
      return this.#workstreams.list({
        ...(f.tenantId === undefined ? {} : { tenantId: checkId('filter.tenantId', f.tenantId) }),
        ...(f.status === undefined ? {} : { status: f.status }),
        ...(f.afterId === undefined ? {} : { afterId: checkKey('filter.afterId', f.afterId) }),
        ...(f.limit === undefined
          ? {}
          : { limit: Math.min(checkInteger('filter.limit', f.limit, 1), 10_000) }),
      });
    });
  }

  deleteWorkstream(id: string, incarnation?: string): Promise<boolean> {
    return this.#run('deleteWorkstream', () => {
      checkKey('id', id);
      if (incarnation !== undefined) checkText('incarnation', incarnation, MAX_HOLDER_LENGTH);
      return this.#write(() => {
        const ws = this.#workstreams.get(id);
        if (ws === undefined || (incarnation !== undefined && ws.incarnation !== incarnation)) return false;
        this.#messages.deleteAll(id);
        this.#workstreams.delete(id);
        return true;
      });
    });
  }

  closeWorkstream(id: string, session?: SessionSnapshotData): Promise<WorkstreamRecord> {
    return this.#run('closeWorkstream', () => {
      checkKey('id', id);
      const json = session === undefined ? undefined : checkSession('session', session);
      return this.#write(() => {
        const ws = this.#workstreams.require(id);
        if (ws.status === 'closed') return ws;
        const open = openToolCalls(this.#messages.tail(id));
        if (open.length > 0) {
          throw errors.toolCleanupPending(
            `workstream ${id} has ${open.length} tool call(s) without results; repair before closing`,
            { workstreamId: id, openCalls: open.length },
          );
        }
        this.#workstreams.close(id, this.#clock());
        if (json !== undefined) this.#workstreams.saveSession(id, json);
        return this.#workstreams.require(id);
      });
    });
  }

  nextGeneration(id: string): Promise<number> {
    return this.#run('nextGeneration', () => {
      checkKey('id', id);
      return this.#write(() => {
        this.#workstreams.requireOpen(id);
        return this.#workstreams.bumpGeneration(id);
      });
    });
  }

  appendMessages(input: AppendInput): Promise<number[]> {
    return this.#run('appendMessages', () => {
      const checked = checkAppend(input);
      return this.#write(() => this.#append(checked));
    });
  }

  /**
   * Group commit: every batch in one immediate transaction. A batch that is refused — fenced, a
   * conflict, bad input — is rolled back alone and reported in its slot while the others commit
   * together: the group is first written without savepoints (the common case: nothing refused)
   * and, if a batch is refused, written again with a savepoint per batch.
   */
  appendMany(inputs: readonly AppendInput[]): Promise<AppendOutcome[]> {
    return this.#run('appendMany', () => {
      if (!Array.isArray(inputs)) throw invalidInput('inputs', 'must be an array');
      const checked = inputs.map((input): CheckedAppend | { error: TurnwardenError } => {
        try {
          return checkAppend(input);
        } catch (e) {
          return { error: toStoreError(e, 'appendMessages') };
        }
      });
      const valid = checked.filter((c): c is CheckedAppend => !('error' in c));
      try {
        // Fast path: every batch in one transaction, no savepoints. A batch that is refused
        // throws and rolls the whole transaction back; the group is then written again below.
        const written = this.#write(() => valid.map((c) => this.#append(c)));
        let k = 0;
        return checked.map((c): AppendOutcome => ('error' in c ? c : { seqs: written[k++]! }));
      } catch (e) {
        // A store failure (I/O, busy) fails the whole group; a refusal of one batch does not.
        if (!isTurnwardenError(e)) throw e;
      }
      // Each batch in a savepoint of its own (a nested better-sqlite3 transaction): a refused
      // batch is rolled back alone and reported in its slot; the others commit together.
      return this.#write(() =>
        checked.map((c): AppendOutcome => {
          if ('error' in c) return c;
          try {
            return { seqs: this.#tx(() => this.#append(c)) as number[] };
          } catch (e) {
            return { error: toStoreError(e, 'appendMessages') };
          }
        }),
      );
    });
  }

  #append(c: CheckedAppend): number[] {
    const ws = this.#workstreams.requireOpen(c.workstreamId);
    const now = this.#clock();
    if (c.token !== undefined) this.#leases.assertFence(c.workstreamId, c.token, now);
    if (c.generation > ws.generation) {
      throw invalidInput(
        'generation',
        `${c.generation} was never issued (durable generation ${ws.generation})`,
      );
    }
    const seqs = this.#messages.append(c.workstreamId, c.generation, c.entries, now, c.token ?? null);
    if (c.session !== undefined) this.#workstreams.saveSession(c.workstreamId, c.session);
    return seqs;
  }

  saveSession(input: SaveSessionInput): Promise<void> {
    return this.#run('saveSession', () => {
      const i = checkObject('input', input);
      checkKeys('input', i, ['workstreamId', 'fencingToken', 'session']);
      const workstreamId = checkKey('workstreamId', i.workstreamId);
      const token =
        i.fencingToken === undefined ? undefined : checkInteger('fencingToken', i.fencingToken, 1);
      const session = checkSession('session', i.session);
      this.#write(() => {
        this.#workstreams.requireOpen(workstreamId);
        if (token !== undefined) this.#leases.assertFence(workstreamId, token, this.#clock());
        this.#workstreams.saveSession(workstreamId, session);
      });
    });
  }

  compactHistory(input: CompactInput): Promise<CompactResult> {
    return this.#run('compactHistory', () => {
      const i = checkObject('input', input);
      checkKeys('input', i, ['workstreamId', 'generation', 'fencingToken', 'throughSeq', 'summary']);
      const workstreamId = checkKey('workstreamId', i.workstreamId);
      const generation = checkInteger('generation', i.generation, 0);
      const token =
        i.fencingToken === undefined ? undefined : checkInteger('fencingToken', i.fencingToken, 1);
      const throughSeq = checkInteger('throughSeq', i.throughSeq, 1);
      const [summary] = checkEntries([i.summary]);
      if (summary?.message.role !== 'system') throw invalidInput('summary.message.role', 'must be system');
      return this.#write(() => {
        this.#workstreams.requireOpen(workstreamId);
        const now = this.#clock();
        if (token !== undefined) this.#leases.assertFence(workstreamId, token, now);
        return { removed: this.#messages.compact(workstreamId, generation, throughSeq, summary, now) };
      });
    });
  }

  truncateHistory(input: TruncateInput): Promise<TruncateResult> {
    return this.#run('truncateHistory', () => {
      const i = checkObject('input', input);
      checkKeys('input', i, ['workstreamId', 'generation', 'fencingToken', 'fromSeq', 'fromKey']);
      const workstreamId = checkKey('workstreamId', i.workstreamId);
      checkInteger('generation', i.generation, 0);
      const token =
        i.fencingToken === undefined ? undefined : checkInteger('fencingToken', i.fencingToken, 1);
      const fromSeq = checkInteger('fromSeq', i.fromSeq, 1);
      const fromKey = checkText('fromKey', i.fromKey, MAX_COMMIT_KEY_LENGTH);
      return this.#write(() => {
        this.#workstreams.requireOpen(workstreamId);
        if (token !== undefined) this.#leases.assertFence(workstreamId, token, this.#clock());
        return { removed: this.#messages.truncate(workstreamId, fromSeq, fromKey) };
      });
    });
  }

  readHistory(workstreamId: string): Promise<HistoryRow[]> {
    return this.#run('readHistory', () => {
      checkKey('workstreamId', workstreamId);
      return this.#read(() => {
        this.#workstreams.require(workstreamId);
        return this.#messages.all(workstreamId);
      });
    });
  }

  /** At most `page.limit` rows after `page.afterSeq`: a range of the (workstream_id, seq) key. */
  readHistoryPage(workstreamId: string, page: HistoryPageQuery): Promise<HistoryRow[]> {
    return this.#run('readHistoryPage', () => {
      checkKey('workstreamId', workstreamId);
      const { afterSeq, limit } = checkPage(page);
      return this.#read(() => {
        this.#workstreams.require(workstreamId);
        return this.#messages.page(workstreamId, afterSeq, limit);
      });
    });
  }

  /** The rows from the last message that is not a tool result on (S1: where an open call can be). */
  readHistoryTail(workstreamId: string): Promise<HistoryRow[]> {
    return this.#run('readHistoryTail', () => {
      checkKey('workstreamId', workstreamId);
      return this.#read(() => {
        this.#workstreams.require(workstreamId);
        return this.#messages.tail(workstreamId);
      });
    });
  }

  /** A file database is read by other threads through their own read-only connection. */
  historyReader(): HistoryReaderSpec | undefined {
    if (this.#memory) return undefined;
    return { module: READER_MODULE, options: { kind: 'sqlite', path: resolvePath(this.path) } };
  }

  /** The rows after `afterSeq`, in seq order (a follower catching up; not part of `Store`). */
  readHistoryAfter(workstreamId: string, afterSeq: number): Promise<HistoryRow[]> {
    return this.#run('readHistoryAfter', () => {
      checkKey('workstreamId', workstreamId);
      checkInteger('afterSeq', afterSeq, 0);
      return this.#read(() => {
        this.#workstreams.require(workstreamId);
        return this.#messages.after(workstreamId, afterSeq);
      });
    });
  }

  acquireLease(
    workstreamId: string,
    holder: string,
    ttlMs: number,
    options: AcquireLeaseOptions = {},
  ): Promise<Lease | undefined> {
    return this.#run('acquireLease', () => {
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
      return this.#write(() => {
        this.#workstreams.requireOpen(workstreamId);
        const now = this.#clock();
        const current = this.#leases.get(workstreamId);
        const heldElsewhere =
          current !== undefined &&
          !current.released &&
          now < current.expiresAt &&
          current.holder !== holder &&
          !(replacing !== undefined && current.holder.startsWith(replacing));
        // One writer at a time (the immediate transaction): the count cannot be overtaken.
        if (!heldElsewhere && tenantLimit !== undefined)
          this.#leases.assertTenantRoom(workstreamId, tenantLimit, now);
        const lease = this.#leases.acquire(workstreamId, holder, ttlMs, now, replacing);
        // Sends an earlier holder took and did not answer: it stopped (queued-sends.ts).
        if (lease !== undefined) this.#queued.reclaim(workstreamId, lease.token - 1, LOST_OUTCOME);
        return lease;
      });
    });
  }

  refreshLease(workstreamId: string, holder: string, token: number, ttlMs: number): Promise<boolean> {
    return this.#run('refreshLease', () => {
      checkKey('workstreamId', workstreamId);
      checkText('holder', holder, MAX_HOLDER_LENGTH);
      checkInteger('token', token, 1);
      checkInteger('ttlMs', ttlMs, 1);
      return this.#write(() => this.#leases.refresh(workstreamId, holder, token, ttlMs, this.#clock()));
    });
  }

  releaseLease(workstreamId: string, holder: string, token: number): Promise<boolean> {
    return this.#run('releaseLease', () => {
      checkKey('workstreamId', workstreamId);
      checkText('holder', holder, MAX_HOLDER_LENGTH);
      checkInteger('token', token, 1);
      return this.#write(() => this.#leases.release(workstreamId, holder, token));
    });
  }

  getLease(workstreamId: string): Promise<Lease | undefined> {
    return this.#run('getLease', () => this.#leases.get(checkKey('workstreamId', workstreamId)));
  }

  expiredLeases(): Promise<Lease[]> {
    return this.#run('expiredLeases', () => this.#leases.expired(this.#clock()));
  }

  // ── sends queued durably (queued-sends.ts) ─────────────────────────────────

  enqueueSend(input: EnqueueSendInput): Promise<QueuedSend> {
    return this.#run('enqueueSend', () => {
      const i = checkEnqueue(input);
      return this.#write(() => {
        this.#workstreams.requireOpen(i.workstreamId);
        return this.#queued.enqueue(i, this.#clock());
      });
    });
  }

  nextQueuedSend(workstreamId: string): Promise<QueuedSend | undefined> {
    return this.#run('nextQueuedSend', () => this.#queued.next(checkKey('workstreamId', workstreamId)));
  }

  countQueuedSends(workstreamId: string): Promise<number> {
    return this.#run('countQueuedSends', () => this.#queued.count(checkKey('workstreamId', workstreamId)));
  }

  takeQueuedSend(input: TakeQueuedSendInput): Promise<boolean> {
    return this.#run('takeQueuedSend', () => {
      const i = checkTake(input);
      return this.#write(() => this.#queued.take(i, this.#clock()));
    });
  }

  finishQueuedSend(id: number, token: number, outcome: string): Promise<boolean> {
    return this.#run('finishQueuedSend', () => {
      checkInteger('id', id, 1);
      checkInteger('token', token, 1);
      checkOutcome(outcome);
      return this.#write(() => this.#queued.finish(id, token, outcome));
    });
  }

  revokeQueuedSends(workstreamId: string, outcome: string, beforeId?: number): Promise<QueuedSend[]> {
    return this.#run('revokeQueuedSends', () => {
      checkKey('workstreamId', workstreamId);
      checkOutcome(outcome);
      if (beforeId !== undefined) checkInteger('beforeId', beforeId, 1);
      return this.#write(() => this.#queued.revoke(workstreamId, outcome, beforeId));
    });
  }

  withdrawQueuedSend(id: number, outcome?: string): Promise<boolean> {
    return this.#run('withdrawQueuedSend', () => {
      checkInteger('id', id, 1);
      if (outcome !== undefined) checkOutcome(outcome);
      return this.#write(() => this.#queued.withdraw(id, outcome));
    });
  }

  reclaimQueuedSends(workstreamId: string, token: number, outcome: string): Promise<QueuedSend[]> {
    return this.#run('reclaimQueuedSends', () => {
      checkKey('workstreamId', workstreamId);
      checkInteger('token', token, 1);
      checkOutcome(outcome);
      return this.#write(() => {
        const lease = this.#leases.get(workstreamId);
        const now = this.#clock();
        if (lease !== undefined && !lease.released && lease.expiresAt > now && lease.token <= token)
          return [];
        return this.#queued.reclaim(workstreamId, token, outcome);
      });
    });
  }

  readQueuedSends(ids: readonly number[]): Promise<QueuedSend[]> {
    return this.#run('readQueuedSends', () => {
      const checked = checkIds(ids);
      return this.#read(() => this.#queued.read(checked));
    });
  }

  dropQueuedSends(ids: readonly number[]): Promise<void> {
    return this.#run('dropQueuedSends', () => {
      const checked = checkIds(ids);
      this.#write(() => this.#queued.drop(checked));
    });
  }

  listWorkstreamsWithOpenToolCalls(): Promise<WorkstreamDebt[]> {
    return this.#run('listWorkstreamsWithOpenToolCalls', () =>
      this.#read(() =>
        this.#workstreams.list({ status: 'open' }).flatMap((workstream) => {
          const openCalls = openToolCalls(this.#messages.tail(workstream.id));
          return openCalls.length === 0 ? [] : [{ workstream, openCalls }];
        }),
      ),
    );
  }

  stats(): Promise<StoreStats> {
    return this.#run('stats', () =>
      this.#read(() => {
        const count = (sql: string) => (this.#db.prepare(sql).get() as { n: number }).n;
        return {
          schemaVersion: schemaVersion(this.#db),
          workstreams: count('SELECT COUNT(*) AS n FROM workstreams'),
          openWorkstreams: count("SELECT COUNT(*) AS n FROM workstreams WHERE status = 'open'"),
          messages: count('SELECT COUNT(*) AS n FROM messages'),
          liveLeases: this.#leases.countLive(this.#clock()),
        };
      }),
    );
  }

  /** The pragmas in force on this connection (diagnostics; not part of `Store`). */
  pragmas(): SqlitePragmas {
    this.#assertOpen();
    const levels = ['OFF', 'NORMAL', 'FULL', 'EXTRA'] as const;
    const level = this.#db.pragma('synchronous', { simple: true }) as number;
    return {
      journalMode: this.#db.pragma('journal_mode', { simple: true }) as string,
      synchronous: levels[level] ?? 'OFF',
      foreignKeys: this.#db.pragma('foreign_keys', { simple: true }) === 1,
      busyTimeoutMs: this.#db.pragma('busy_timeout', { simple: true }) as number,
    };
  }

  close(): Promise<void> {
    try {
      if (this.#db.open) this.#db.close();
      return Promise.resolve();
    } catch (e) {
      return Promise.reject(toStoreError(e, 'close'));
    }
  }

  #assertOpen(): void {
    if (!this.#db.open) {
      throw errors.storeError(`store ${this.path} is closed`, { closed: true });
    }
  }

  /** Runs now; a throw becomes a rejected promise carrying a typed error. */
  #run<T>(operation: string, fn: () => T): Promise<T> {
    try {
      this.#assertOpen();
      return Promise.resolve(fn());
    } catch (e) {
      return Promise.reject(toStoreError(e, operation));
    }
  }

  #write<T>(fn: () => T): T {
    return this.#tx.immediate(fn) as T;
  }

  /** Several reads from one snapshot. */
  #read<T>(fn: () => T): T {
    return this.#tx.deferred(fn) as T;
  }
}

/** Opens (creating if needed) and migrates a SQLite store. Throws INVALID_CONFIG or STORE_ERROR. */
export function openSqliteStore(options: SqliteStoreOptions): SqliteStore {
  return new SqliteStore(options);
}
