/**
 * A read-only view of a store's history, opened by another thread than the one that writes:
 * the supervisor's shared model threads read a turn's context here, so a long history never
 * blocks the supervisor's thread. `Store.historyReader()` says which module and options; the
 * reading thread imports this module and calls `openHistoryReader(options)`.
 *
 * SQLite: a connection of its own, read-only, on the database file (WAL lets it read while the
 * supervisor writes; every read sees every commit before it). PostgreSQL: one connection in the
 * store's schema. Either way a read sees every row whose write was acknowledged before it began.
 */
import type { HistoryRow } from '@turnwarden/protocol';
import Database from 'better-sqlite3';
import pg from 'pg';
import { type MessageRow, toHistoryRow } from './rows.js';

export type HistoryReaderOptions =
  | { readonly kind: 'sqlite'; readonly path: string }
  | {
      readonly kind: 'postgres';
      readonly connectionString: string;
      readonly schema: string;
      readonly applicationName?: string;
      readonly connectionTimeoutMs?: number;
      readonly statementTimeoutMs?: number;
    };

export interface HistoryReader {
  /** The workstream's whole history, in seq order (empty when it does not exist). */
  readHistory(workstreamId: string): Promise<HistoryRow[]>;
  close(): Promise<void>;
}

const SELECT = 'SELECT * FROM messages WHERE workstream_id = $1 ORDER BY seq';
const INT8_OID = 20;

export async function openHistoryReader(options: HistoryReaderOptions): Promise<HistoryReader> {
  if (options.kind === 'sqlite') {
    const db = new Database(options.path, { readonly: true, fileMustExist: true });
    const all = db.prepare<[string], MessageRow>(SELECT.replace('$1', '?'));
    return {
      readHistory: async (workstreamId) => all.all(workstreamId).map(toHistoryRow),
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
  return {
    readHistory: async (workstreamId) =>
      (await client.query<MessageRow>(SELECT, [workstreamId])).rows.map(toHistoryRow),
    close: () => client.end(),
  };
}
