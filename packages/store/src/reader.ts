/**
 * A read-only view of a store's history, opened by another thread than the one that writes:
 * the supervisor's shared model threads read a turn's context here, so a long history never
 * blocks the supervisor's thread. `Store.historyReader()` says which module and options; the
 * reading thread imports this module and calls `openHistoryReader(options)`.
 *
 * SQLite: a connection of its own, read-only, on the database file (WAL lets it read while the
 * supervisor writes; every read sees every commit before it). PostgreSQL: one connection in the
 * store's schema. Either way a read sees every row whose write was acknowledged before it began.
 *
 * **Kept between reads.** A model thread reads a workstream's context at every model step of
 * every turn; a 10,000-row history cost 62–128 ms of CPU per read (issue 24's claim figures). So
 * the reader keeps each workstream's rows and, on the next read, reads only the rows after the
 * last it has — after checking, in the same snapshot, that what it holds is still the history's
 * prefix: the same incarnation (a workstream deleted and created again under its id is another),
 * and the same first and last rows it holds, by seq, commit key and body. The history's seqs are
 * always 1..n, and the only operations that change rows already written are the rewrites, each
 * of which moves one of those two: a compaction replaces the first row with its summary and
 * renumbers the rest; a rewind removes a suffix, so the last row held is gone or, written again,
 * another. Anything else — the check failing, a row budget exceeded — reads the whole history,
 * as without the cache. The rows kept across workstreams are bounded (`cacheBytes`, least
 * recently read evicted first).
 */
import type { HistoryRow } from '@turnwarden/protocol';
import Database from 'better-sqlite3';
import pg from 'pg';
import { type MessageRow, toHistoryRow } from './rows.js';

export type HistoryReaderOptions =
  | { readonly kind: 'sqlite'; readonly path: string; readonly cacheBytes?: number }
  | {
      readonly kind: 'postgres';
      readonly connectionString: string;
      readonly schema: string;
      readonly applicationName?: string;
      readonly connectionTimeoutMs?: number;
      readonly statementTimeoutMs?: number;
      readonly cacheBytes?: number;
    };

export interface HistoryReader {
  /** The workstream's whole history, in seq order (empty when it does not exist). */
  readHistory(workstreamId: string): Promise<HistoryRow[]>;
  /** What the reads did so far: whole histories read, reads of only the rows after those kept. */
  stats(): ReaderStats;
  close(): Promise<void>;
}

export interface ReaderStats {
  /** Reads of a whole history (nothing kept, or what was kept no longer the history's prefix). */
  readonly full: number;
  /** Reads of only the rows after those kept. */
  readonly incremental: number;
  /** Rows read from the database in all. */
  readonly rowsRead: number;
  /** Rows kept now, across workstreams. */
  readonly rowsKept: number;
  /** Their size as the budget counts it (`cacheBytes`). */
  readonly bytesKept: number;
}

/**
 * What the rows kept across workstreams may weigh by default, counted as their stored bodies'
 * length plus a row's fixed share: about 64 histories of 10,000 short rows, per reader (one per
 * model thread).
 */
const DEFAULT_CACHE_BYTES = 32 * 1024 * 1024;
const ROW_OVERHEAD = 200;
const weight = (r: MessageRow) => r.body.length + r.commit_key.length + ROW_OVERHEAD;

const SELECT = 'SELECT * FROM messages WHERE workstream_id = $1 ORDER BY seq';
const SELECT_AFTER = 'SELECT * FROM messages WHERE workstream_id = $1 AND seq > $2 ORDER BY seq';
const SELECT_ENDS = 'SELECT seq, commit_key, body FROM messages WHERE workstream_id = $1 AND seq IN ($2, $3)';
const SELECT_INCARNATION = 'SELECT incarnation FROM workstreams WHERE id = $1';
const INT8_OID = 20;

interface End {
  readonly seq: number;
  readonly commit_key: string;
  readonly body: string;
}

/** One workstream's rows as last read, and what proves they are still its history's prefix. */
interface Kept {
  readonly incarnation: string;
  readonly rows: HistoryRow[];
  bytes: number;
  first: End;
  last: End;
}

/** The database calls a read needs, in one snapshot (`snapshot`). */
interface Queries {
  incarnation(workstreamId: string): Promise<string | undefined>;
  all(workstreamId: string): Promise<MessageRow[]>;
  after(workstreamId: string, seq: number): Promise<MessageRow[]>;
  ends(workstreamId: string, first: number, last: number): Promise<End[]>;
}

const endOf = (r: MessageRow): End => ({ seq: r.seq, commit_key: r.commit_key, body: r.body });
const same = (a: End | undefined, b: End) =>
  a !== undefined && a.seq === b.seq && a.commit_key === b.commit_key && a.body === b.body;

/** The rows kept per workstream, least recently read first; and the reads' figures. */
class RowCache {
  private readonly kept = new Map<string, Kept>();
  private rowsKept = 0;
  private bytesKept = 0;
  private full = 0;
  private incremental = 0;
  private rowsRead = 0;

  constructor(private readonly budget: number) {}

  async read(q: Queries, workstreamId: string): Promise<HistoryRow[]> {
    const incarnation = await q.incarnation(workstreamId);
    const kept = this.take(workstreamId);
    if (incarnation === undefined) return [];
    if (kept !== undefined && kept.incarnation === incarnation) {
      const ends = await q.ends(workstreamId, kept.first.seq, kept.last.seq);
      const first = ends.find((e) => e.seq === kept.first.seq);
      const last = ends.find((e) => e.seq === kept.last.seq);
      if (same(first, kept.first) && same(last, kept.last)) {
        const tail = await q.after(workstreamId, kept.last.seq);
        this.incremental++;
        this.rowsRead += tail.length;
        for (const r of tail) {
          kept.rows.push(toHistoryRow(r));
          kept.bytes += weight(r);
        }
        if (tail.length > 0) kept.last = endOf(tail[tail.length - 1]!);
        return this.keep(workstreamId, kept);
      }
    }
    const all = await q.all(workstreamId);
    this.full++;
    this.rowsRead += all.length;
    const rows = all.map(toHistoryRow);
    if (all.length === 0) return rows;
    let bytes = 0;
    for (const r of all) bytes += weight(r);
    return this.keep(workstreamId, {
      incarnation,
      rows,
      bytes,
      first: endOf(all[0]!),
      last: endOf(all[all.length - 1]!),
    });
  }

  stats(): ReaderStats {
    return {
      full: this.full,
      incremental: this.incremental,
      rowsRead: this.rowsRead,
      rowsKept: this.rowsKept,
      bytesKept: this.bytesKept,
    };
  }

  /** Removes the workstream's rows (kept again, as the most recent, by `keep`). */
  private take(workstreamId: string): Kept | undefined {
    const kept = this.kept.get(workstreamId);
    if (kept === undefined) return undefined;
    this.kept.delete(workstreamId);
    this.rowsKept -= kept.rows.length;
    this.bytesKept -= kept.bytes;
    return kept;
  }

  /** Keeps the rows as the most recently read, evicting the least recent over the budget; returns a copy. */
  private keep(workstreamId: string, kept: Kept): HistoryRow[] {
    const copy = kept.rows.slice();
    // A history longer than the whole budget is evicted at once, below.
    this.kept.set(workstreamId, kept);
    this.rowsKept += kept.rows.length;
    this.bytesKept += kept.bytes;
    for (const [id, old] of this.kept) {
      if (this.bytesKept <= this.budget) break;
      this.kept.delete(id);
      this.rowsKept -= old.rows.length;
      this.bytesKept -= old.bytes;
    }
    return copy;
  }
}

/**
 * Runs reads one after another: a read's queries share one transaction on one connection, and a
 * model thread asks for several contexts at once.
 */
function serially(): <T>(read: () => Promise<T>) => Promise<T> {
  let last: Promise<unknown> = Promise.resolve();
  return (read) => {
    const next = last.then(read, read);
    last = next.catch(() => undefined);
    return next;
  };
}

export async function openHistoryReader(options: HistoryReaderOptions): Promise<HistoryReader> {
  const cache = new RowCache(options.cacheBytes ?? DEFAULT_CACHE_BYTES);
  const serial = serially();
  if (options.kind === 'sqlite') {
    const db = new Database(options.path, { readonly: true, fileMustExist: true });
    const sqlite = (sql: string) => sql.replace(/\$\d/g, '?');
    const all = db.prepare<[string], MessageRow>(sqlite(SELECT));
    const after = db.prepare<[string, number], MessageRow>(sqlite(SELECT_AFTER));
    const ends = db.prepare<[string, number, number], End>(sqlite(SELECT_ENDS));
    const incarnation = db.prepare<[string], { incarnation: string }>(sqlite(SELECT_INCARNATION));
    const queries: Queries = {
      incarnation: async (id) => incarnation.get(id)?.incarnation,
      all: async (id) => all.all(id),
      after: async (id, seq) => after.all(id, seq),
      ends: async (id, first, last) => ends.all(id, first, last),
    };
    // One read transaction: every query of a read sees the same snapshot (the writer is another connection).
    const begin = db.prepare('BEGIN');
    const end = db.prepare('COMMIT');
    return {
      readHistory: (workstreamId) =>
        serial(async () => {
          begin.run();
          try {
            return await cache.read(queries, workstreamId);
          } finally {
            end.run();
          }
        }),
      stats: () => cache.stats(),
      close: async () => {
        db.close();
      },
    };
  }
  const client = new pg.Client({
    connectionString: options.connectionString,
    options: `-c search_path=${options.schema} -c default_transaction_read_only=on`,
    application_name: options.applicationName ?? 'turnwarden-reader',
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 10_000,
    ...(options.statementTimeoutMs === undefined ? {} : { statement_timeout: options.statementTimeoutMs }),
    types: {
      getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
        oid === INT8_OID && format !== 'binary'
          ? (value: string) => Number(value)
          : pg.types.getTypeParser(oid, format)) as pg.CustomTypesConfig['getTypeParser'],
    },
  });
  client.on('error', () => undefined);
  await client.connect();
  const rows = async <R extends object>(sql: string, values: unknown[]) =>
    (await client.query<R>(sql, values)).rows;
  const queries: Queries = {
    incarnation: async (id) =>
      (await rows<{ incarnation: string }>(SELECT_INCARNATION, [id]))[0]?.incarnation,
    all: (id) => rows<MessageRow>(SELECT, [id]),
    after: (id, seq) => rows<MessageRow>(SELECT_AFTER, [id, seq]),
    ends: (id, first, last) => rows<End>(SELECT_ENDS, [id, first, last]),
  };
  return {
    readHistory: (workstreamId) =>
      serial(async () => {
        // One snapshot for the read's queries (a read-only connection).
        await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
        try {
          return await cache.read(queries, workstreamId);
        } finally {
          await client.query('COMMIT').catch(() => undefined);
        }
      }),
    stats: () => cache.stats(),
    close: () => client.end(),
  };
}
