/**
 * The store's public face: an async interface, so that a PostgreSQL implementation can
 * replace the SQLite one without changing any caller.
 */
import type { HistoryRow, JournalEntry, OpenToolCall } from '@turnwarden/protocol';

export type WorkstreamStatus = 'open' | 'closed';

export interface WorkstreamRecord {
  readonly id: string;
  readonly tenantId: string;
  /** Random token minted at each creation of this id (D1). */
  readonly incarnation: string;
  /** Durable turn generation: 0 until the first `nextGeneration`. */
  readonly generation: number;
  readonly status: WorkstreamStatus;
  /** Wall-clock ms (the store's `now`). */
  readonly createdAt: number;
  /** Set once closed. */
  readonly closedAt?: number;
}

export interface CreateWorkstreamInput {
  readonly id: string;
  readonly tenantId: string;
}

export interface WorkstreamFilter {
  readonly tenantId?: string;
  readonly status?: WorkstreamStatus;
}

/** A batch of rows to make durable, all or nothing (shape-compatible with `JournalRequest`). */
export interface AppendInput {
  readonly workstreamId: string;
  /** Turn generation that writes the rows; at most the workstream's durable generation. */
  readonly generation: number;
  /** The writer's lease token (P6). When given, the write is refused unless it is the live lease. */
  readonly fencingToken?: number;
  readonly entries: readonly JournalEntry[];
}

/**
 * A history rewrite (compaction): rows 1..throughSeq are replaced by one `system` summary row;
 * later rows keep their order and commit keys and are renumbered from 2. All or nothing.
 */
export interface CompactInput {
  readonly workstreamId: string;
  readonly generation: number;
  /** The writer's lease token (P6). */
  readonly fencingToken?: number;
  readonly throughSeq: number;
  readonly summary: JournalEntry;
}

export interface CompactResult {
  /** Rows the summary replaced (0 when this compaction was already applied: idempotent on the key). */
  readonly removed: number;
}

/** The turn lease of one workstream, as last written. */
export interface Lease {
  readonly workstreamId: string;
  /** Who acquired it last (kept after release). */
  readonly holder: string;
  /** Fencing token: +1 on every acquisition, never reused, kept after release. */
  readonly token: number;
  readonly acquiredAt: number;
  /** The lease is live while `now < expiresAt` and it is not released. */
  readonly expiresAt: number;
  readonly released: boolean;
}

/** An open workstream whose durable history ends with tool calls that have no result (S7). */
export interface WorkstreamDebt {
  readonly workstream: WorkstreamRecord;
  readonly openCalls: readonly OpenToolCall[];
}

export interface StoreStats {
  readonly schemaVersion: number;
  readonly workstreams: number;
  readonly openWorkstreams: number;
  readonly messages: number;
  /** Leases that are unreleased and unexpired now. */
  readonly liveLeases: number;
}

/**
 * Durable truth for workstreams, their history and their turn leases. Every refusal is a
 * `TurnwardenError` (INVALID_INPUT, WORKSTREAM_NOT_FOUND, WORKSTREAM_EXISTS, WORKSTREAM_CLOSED,
 * TOOL_CLEANUP_PENDING, COMMIT_CONFLICT, STRUCTURE_VIOLATION, FENCED); an unexpected failure of
 * the database is STORE_ERROR. A refused call writes nothing.
 */
export interface Store {
  /** Creates an open workstream with a fresh incarnation. Refuses an existing id (open or closed). */
  createWorkstream(input: CreateWorkstreamInput): Promise<WorkstreamRecord>;
  getWorkstream(id: string): Promise<WorkstreamRecord | undefined>;
  /** Ordered by id. */
  listWorkstreams(filter?: WorkstreamFilter): Promise<WorkstreamRecord[]>;
  /**
   * Closes a workstream (terminal; idempotent). Refused with TOOL_CLEANUP_PENDING while its
   * history ends with unanswered tool calls: a closed workstream can no longer be repaired.
   */
  closeWorkstream(id: string): Promise<WorkstreamRecord>;
  /** Atomically increments and returns the durable turn generation of an open workstream. */
  nextGeneration(id: string): Promise<number>;
  /**
   * Appends rows in order, all or nothing, and returns their seqs. Idempotent on
   * (workstream, commitKey): a retry with the same message returns the existing seq; a
   * different message under the same key is a COMMIT_CONFLICT (P1).
   */
  appendMessages(input: AppendInput): Promise<number[]>;
  /** History rewrite (L8); refused if the cut would split a tool call from its results (S1). */
  compactHistory(input: CompactInput): Promise<CompactResult>;
  /** The whole history in seq order. */
  readHistory(workstreamId: string): Promise<HistoryRow[]>;
  /**
   * Takes the turn lease unless another holder has a live one. Every success gets a new
   * token (previous + 1, from 1), which fences every earlier token.
   */
  acquireLease(workstreamId: string, holder: string, ttlMs: number): Promise<Lease | undefined>;
  /** Extends a live lease to `now + ttlMs`; false if not the live lease of this holder and token. */
  refreshLease(workstreamId: string, holder: string, token: number, ttlMs: number): Promise<boolean>;
  /** Releases the lease if holder and token match and it is not released yet. */
  releaseLease(workstreamId: string, holder: string, token: number): Promise<boolean>;
  getLease(workstreamId: string): Promise<Lease | undefined>;
  /** Unreleased leases whose expiry has passed (S7). Ordered by workstream id. */
  expiredLeases(): Promise<Lease[]>;
  /** Open workstreams whose history ends with unanswered tool call occurrences (S7). */
  listWorkstreamsWithOpenToolCalls(): Promise<WorkstreamDebt[]>;
  stats(): Promise<StoreStats>;
  /** Closes the connection; idempotent. Later calls reject with STORE_ERROR. */
  close(): Promise<void>;
}
