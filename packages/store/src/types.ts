/**
 * The store's public face: an async interface, so that a PostgreSQL implementation can
 * replace the SQLite one without changing any caller.
 */
import type {
  DoubleTexting,
  HistoryReaderSpec,
  HistoryRow,
  JournalEntry,
  OpenToolCall,
  SessionSnapshotData,
  TurnwardenError,
} from '@turnwarden/protocol';

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
  /** The session machine's last durable snapshot; absent until the first claim (an idle session). */
  readonly session?: SessionSnapshotData;
  /** What a send does, by default, when the workstream is busy (issue 26); absent: `enqueue`. */
  readonly doubleTexting?: DoubleTexting;
}

export interface CreateWorkstreamInput {
  readonly id: string;
  readonly tenantId: string;
  /** The workstream's double-texting default (one of DOUBLE_TEXTING_POLICIES). */
  readonly doubleTexting?: DoubleTexting;
}

export interface WorkstreamFilter {
  readonly tenantId?: string;
  readonly status?: WorkstreamStatus;
  /** Keyset paging: only ids after this one (ids are ordered). */
  readonly afterId?: string;
  /** At most this many (1–10,000); default: all. */
  readonly limit?: number;
}

/** A batch of rows to make durable, all or nothing (shape-compatible with `JournalRequest`). */
export interface AppendInput {
  readonly workstreamId: string;
  /** Turn generation that writes the rows; at most the workstream's durable generation. */
  readonly generation: number;
  /** The writer's lease token (P6). When given, the write is refused unless it is the live lease. */
  readonly fencingToken?: number;
  readonly entries: readonly JournalEntry[];
  /** The session machine's snapshot after these rows, stored in the same transaction. */
  readonly session?: SessionSnapshotData;
}

/** A session machine snapshot to make durable on its own (a transition that writes no row). */
export interface SaveSessionInput {
  readonly workstreamId: string;
  /** The writer's lease token (P6). When given, the write is refused unless it is the live lease. */
  readonly fencingToken?: number;
  readonly session: SessionSnapshotData;
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

/**
 * A history rewind: the rows from `fromSeq` on are dropped — the last turns, cut where one
 * begins. The cut names its first row by seq and commit key, so a retry of a rewind that was
 * applied (its acknowledgement lost) drops nothing more: it finds the history already ending
 * at `fromSeq - 1` and reports 0. A history that changed otherwise is a COMMIT_CONFLICT.
 */
export interface TruncateInput {
  readonly workstreamId: string;
  readonly generation: number;
  /** The writer's lease token (P6). */
  readonly fencingToken?: number;
  readonly fromSeq: number;
  readonly fromKey: string;
}

export interface TruncateResult {
  /** Rows dropped (0 when this rewind was already applied). */
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
  /**
   * Set only on the lease an acquisition returns when it took over another holder's unreleased
   * lease (expired, or an earlier process's, replaced): that holder — which stopped without
   * handing the workstream over, so what it had not yet told others (events) may be lost.
   */
  readonly tookOverFrom?: string;
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
 * What the turn engine needs: one workstream's generation, history, session snapshot and lease.
 *
 * Every refusal is a `TurnwardenError` (INVALID_INPUT, WORKSTREAM_NOT_FOUND, WORKSTREAM_CLOSED,
 * TOOL_CLEANUP_PENDING, COMMIT_CONFLICT, STRUCTURE_VIOLATION, FENCED); an unexpected failure of
 * the database is STORE_ERROR. What any implementation — synchronous like SQLite or asynchronous
 * like PostgreSQL — must guarantee, because the engine relies on it:
 *
 * - **Fencing (P6).** A write that carries a fencing token is applied only if that token is the
 *   workstream's live lease when the write is applied — checked in the same transaction as the
 *   write, never before it — and is otherwise refused with FENCED, writing nothing.
 * - **All or nothing.** Each call is one transaction: a refused or failed call writes nothing.
 * - **Settled means durable.** A write's promise resolves only once the write is durable, and
 *   rejects only when nothing was written — or, after a lost acknowledgement, when the caller
 *   cannot know: a retry with the same commit keys is then idempotent (P1).
 * - **No ordering is assumed between calls in flight.** The engine issues at most one write per
 *   workstream at a time and waits for it to settle before the next (journal rows, snapshots,
 *   repairs, rewrites), so acceptance order is durable order (P2) whatever the store does with
 *   concurrent calls; it reads history for a repair only after every admitted write settled.
 */
export interface TurnStore {
  getWorkstream(id: string): Promise<WorkstreamRecord | undefined>;
  /** Atomically increments and returns the durable turn generation of an open workstream. */
  nextGeneration(id: string): Promise<number>;
  /**
   * Appends rows in order, all or nothing, and returns their seqs. Idempotent on
   * (workstream, commitKey): a retry with the same message returns the existing seq; a
   * different message under the same key is a COMMIT_CONFLICT (P1). With `session`, the session
   * snapshot is stored in the same transaction.
   */
  appendMessages(input: AppendInput): Promise<number[]>;
  /**
   * Optional group commit: several batches (of different workstreams, or one after another of
   * the same) in one transaction, each all-or-nothing on its own: a refused batch is reported
   * in its slot and rolled back alone; the others commit together. The journal uses it to make
   * rows that arrive together durable at the cost of one commit; without it, batch by batch.
   */
  appendMany?(inputs: readonly AppendInput[]): Promise<AppendOutcome[]>;
  /** Stores the session machine's snapshot (a transition that writes no row). */
  saveSession(input: SaveSessionInput): Promise<void>;
  /** History rewrite (L8); refused if the cut would split a tool call from its results (S1). */
  compactHistory(input: CompactInput): Promise<CompactResult>;
  /** History rewind (C6): drops the rows from a cut on; refused if the kept rows would leave a call open (S1). */
  truncateHistory(input: TruncateInput): Promise<TruncateResult>;
  /** The whole history in seq order. */
  readHistory(workstreamId: string): Promise<HistoryRow[]>;
  /**
   * One page of the history: at most `limit` rows (1–10,000) with a seq above `afterSeq`, in seq
   * order — keyset paging on (workstream, seq), so a page costs what its rows cost, however long
   * the history. Page by seq, not by position: a rewrite between two pages (a compaction
   * renumbers, a rewind drops the last rows and later ones take their seqs) is not seen by the
   * next page, which reads the history as it is then. An unknown workstream is
   * WORKSTREAM_NOT_FOUND (an empty page is a history with nothing after `afterSeq`); a page out
   * of its bounds is INVALID_INPUT, and nothing is read.
   */
  readHistoryPage(workstreamId: string, page: HistoryPageQuery): Promise<HistoryRow[]>;
  /**
   * Optional: the rows from the last message that is not a tool result on — all that an open
   * call can be found in (S1), however long the history. A claim reads this instead of the whole
   * history when the context is read elsewhere (the shared model threads); without it, the
   * whole history.
   */
  readHistoryTail?(workstreamId: string): Promise<HistoryRow[]>;
  /**
   * Optional: how another thread opens its own read-only view of this store's history (the
   * shared model threads read a turn's context there, not on the supervisor's thread).
   * Undefined when no other thread can (an in-memory database).
   */
  historyReader?(): HistoryReaderSpec | undefined;
  /**
   * Takes the turn lease unless another holder has a live one. Every success gets a new
   * token (previous + 1, from 1), which fences every earlier token. With `replacing`, a live
   * lease whose holder starts with that prefix — an earlier process of the same host, which
   * a host id promises is dead — is taken over at once; `holder` must start with it too.
   */
  acquireLease(
    workstreamId: string,
    holder: string,
    ttlMs: number,
    options?: AcquireLeaseOptions,
  ): Promise<Lease | undefined>;
  /** Extends a live lease to `now + ttlMs`; false if not the live lease of this holder and token. */
  refreshLease(workstreamId: string, holder: string, token: number, ttlMs: number): Promise<boolean>;
  /** Releases the lease if holder and token match and it is not released yet. */
  releaseLease(workstreamId: string, holder: string, token: number): Promise<boolean>;
  getLease(workstreamId: string): Promise<Lease | undefined>;
}

/** Where a page of `readHistoryPage` starts and how many rows it holds at most. */
export interface HistoryPageQuery {
  /** The seq the page starts after: 0 for the first page, then the previous page's last seq. */
  readonly afterSeq: number;
  /** At most this many rows, 1–10,000. */
  readonly limit: number;
}

/** One batch's outcome in a group commit: its seqs, or the error that refused it alone. */
export type AppendOutcome = { readonly seqs: number[] } | { readonly error: TurnwardenError };

export interface AcquireLeaseOptions {
  /** A holder prefix (`<hostId>:`) whose live leases belong to a dead earlier process of this host. */
  readonly replacing?: string;
  /**
   * At most this many live leases of the workstream's tenant (its key's `<tenant>/` prefix) on
   * every host together, this one included: beyond, CAPACITY_EXHAUSTED (`reason: 'tenant_active'`,
   * `retryAfterMs` the least time until one of them ends unless renewed), nothing written.
   * Counted under a lock of the tenant's own, so hosts acquiring at once never exceed it.
   */
  readonly tenantLimit?: number;
}

/** Workstream administration, recovery scans and the connection itself. Same error rules. */
export interface AdminStore {
  /** Creates an open workstream with a fresh incarnation. Refuses an existing id (open or closed). */
  createWorkstream(input: CreateWorkstreamInput): Promise<WorkstreamRecord>;
  /** Ordered by id. */
  listWorkstreams(filter?: WorkstreamFilter): Promise<WorkstreamRecord[]>;
  /**
   * Closes a workstream (terminal; idempotent), storing its final session snapshot when given.
   * Refused with TOOL_CLEANUP_PENDING while its history ends with unanswered tool calls: a
   * closed workstream can no longer be repaired.
   */
  closeWorkstream(id: string, session?: SessionSnapshotData): Promise<WorkstreamRecord>;
  /**
   * Deletes a workstream and its history (open or closed); the id can be created again. With
   * `incarnation`, only that incarnation is deleted: a later one under the same id is left
   * alone. Resolves false when there was nothing to delete. Its turn lease row is kept, so the
   * fencing tokens of the id keep increasing across incarnations (P6): a writer of the deleted
   * one is refused — WORKSTREAM_NOT_FOUND while the id is free, FENCED once a successor holds
   * a lease.
   */
  deleteWorkstream(id: string, incarnation?: string): Promise<boolean>;
  /** Unreleased leases whose expiry has passed (S7). Ordered by workstream id. */
  expiredLeases(): Promise<Lease[]>;
  /** Open workstreams whose history ends with unanswered tool call occurrences (S7). */
  listWorkstreamsWithOpenToolCalls(): Promise<WorkstreamDebt[]>;
  stats(): Promise<StoreStats>;
  /** Closes the connection; idempotent. Later calls reject with STORE_ERROR. */
  close(): Promise<void>;
}

/** Durable truth for workstreams, their history, their session snapshots and their turn leases. */
export interface Store extends TurnStore, AdminStore {}
