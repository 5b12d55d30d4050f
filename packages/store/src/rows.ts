/**
 * Table rows as both stores read them (SQLite and PostgreSQL share the column names) and their
 * mapping to records.
 */
import type { DoubleTexting, HistoryMessage, HistoryRow, SessionSnapshotData } from '@turnwarden/protocol';
import type { WorkstreamRecord, WorkstreamStatus } from './types.js';

export interface WorkstreamRow {
  id: string;
  tenant_id: string;
  incarnation: string;
  generation: number;
  status: WorkstreamStatus;
  created_at: number;
  closed_at: number | null;
  session: string | null;
  /** Migration 6 (PostgreSQL 4): the workstream's double-texting default, if it has one. */
  double_texting: DoubleTexting | null;
}

export function toRecord(r: WorkstreamRow): WorkstreamRecord {
  return {
    id: r.id,
    tenantId: r.tenant_id,
    incarnation: r.incarnation,
    generation: r.generation,
    status: r.status,
    createdAt: r.created_at,
    ...(r.closed_at === null ? {} : { closedAt: r.closed_at }),
    ...(r.session === null ? {} : { session: JSON.parse(r.session) as SessionSnapshotData }),
    ...(r.double_texting == null ? {} : { doubleTexting: r.double_texting }),
  };
}

export interface MessageRow {
  workstream_id: string;
  seq: number;
  commit_key: string;
  generation: number;
  body: string;
  created_at: number;
  fencing_token: number | null;
}

export function toHistoryRow(r: MessageRow): HistoryRow {
  return {
    workstreamId: r.workstream_id,
    seq: r.seq,
    commitKey: r.commit_key,
    generation: r.generation,
    message: JSON.parse(r.body) as HistoryMessage,
    createdAt: r.created_at,
    ...(r.fencing_token == null ? {} : { fencingToken: r.fencing_token }),
  };
}
