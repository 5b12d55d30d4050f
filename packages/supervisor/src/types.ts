import type {
  AbandonReason,
  DoubleTexting,
  HistoryRow,
  PersistenceState,
  SessionState,
  TurnStatus,
  WireError,
  WorkstreamStatusName,
} from '@turnwarden/protocol';

export interface WorkstreamInfo {
  readonly workstreamId: string;
  readonly tenantId: string;
  /** Minted at each creation of the id (D1); `deleteWorkstream` names it. */
  readonly incarnation: string;
  /** What a send does, unless it says, when the workstream is busy (M1–M4); absent: `enqueue`. */
  readonly doubleTexting?: DoubleTexting;
}

/** A workstream as `getWorkstream` and `listWorkstreams` describe it. */
export interface WorkstreamDetails extends WorkstreamInfo {
  readonly status: WorkstreamStatusName;
  /** Turns claimed so far. */
  readonly generation: number;
  readonly createdAt: number;
  readonly closedAt?: number;
}

/**
 * Who makes a call (T1): every call names its tenant and the principal acting for it. A
 * principal sees and acts on its own tenant's workstreams only (T2); its name is written on the
 * user rows it sends and on the log lines of what it changes.
 */
export interface Caller {
  readonly tenantId: string;
  /** The user or service acting, as the host authenticated it: 1–128 of A–Z a–z 0–9 . _ : - */
  readonly principal: string;
}

export interface ListWorkstreamsInput extends Caller {
  /** `open` or `closed`; default both. */
  readonly status?: WorkstreamStatusName;
  /** Page size, 1–1000; default 100. */
  readonly limit?: number;
  /** The previous page's `nextCursor`. */
  readonly cursor?: string;
}

export interface WorkstreamPage {
  readonly items: readonly WorkstreamDetails[];
  /** Present when there may be more: pass it as `cursor`. */
  readonly nextCursor?: string;
}

export interface DeleteInput extends WorkstreamRef {
  /** The incarnation to delete (D1): a workstream created again under the id is left alone. */
  readonly incarnation: string;
}

/** Names one workstream of the caller's tenant: the argument of status, history, cancel and close. */
export interface WorkstreamRef extends Caller {
  readonly workstreamId: string;
}

/** `close()`'s argument: a workstream and, for a soft close, how long to wait for its turn. */
export interface CloseInput extends WorkstreamRef {
  /**
   * 0 (default): refuse at once while a turn runs. More (at most 3,600,000, an hour): latch the
   * workstream (no new turn) and wait up to this many ms for the running turn to end, then close
   * (C1); on timeout the latch is rolled back and the call fails with TIMEOUT, the workstream
   * still usable (C2). Soft closes at once share the latch — it holds while any of them waits —
   * and the close: the workstream is closed once and each of them resolves.
   */
  readonly waitMs?: number;
}

export interface SendInput extends WorkstreamRef {
  /** The user's message: non-empty, not only whitespace, at most `limits.maxMessageBytes` UTF-8 bytes. */
  readonly content: string;
  /**
   * The tools this turn may use, by name (default: every registered tool). The model is
   * offered only these; a call to any other is answered as an unknown tool (T6). Each name must
   * be registered, or the send is refused with INVALID_INPUT (field `tools`).
   */
  readonly tools?: readonly string[];
  /**
   * Calls of this turn that wait for a person's `approve` or `deny` before they run (issue 26),
   * by tool name (`'all'`: every call) — besides the runtime's `approvals.tools` and the tools
   * that say so themselves. Each name must be registered (INVALID_INPUT, field `requireApproval`).
   */
  readonly requireApproval?: readonly string[] | 'all';
  /**
   * What the send does when the workstream is busy — a turn running on any host, sends waiting,
   * a call waiting for approval (issue 26; default: the workstream's, else `enqueue`):
   * - `reject`: refused with TURN_IN_PROGRESS (APPROVAL_PENDING while a call waits), nothing written (M1);
   * - `enqueue`: it waits behind the running turn and the sends before it (M2);
   * - `interrupt`: the running turn is force-cancelled — its history repaired, a waiting call
   *   denied, the sends made before this one revoked — and this one's turn is the next (M3);
   * - `rollback`: as `interrupt`, and the cancelled turn's rows are removed by a history rewrite
   *   (listeners are sent `history_resync`) before this one's turn starts (M4).
   * Only the running turn's own principal may interrupt it (T3: TURN_IN_PROGRESS).
   */
  readonly doubleTexting?: DoubleTexting;
  /**
   * Aborting it cancels the turn, as `cancel()` does: before the claim — waiting for a worker or
   * behind a running turn — the send is refused with TURN_ABORTED and nothing is written; after
   * it, the turn is force-cancelled.
   */
  readonly signal?: AbortSignal;
  /**
   * The longest the send waits for a session worker when none is free for its tenant (T4), in
   * ms; then it is refused with CAPACITY_EXHAUSTED (`details.retryAfterMs`). 0: never wait; at
   * most 3,600,000 (an hour). Default `admission.maxWaitMs`. Time spent queued behind the workstream's own running turn
   * is not counted.
   */
  readonly maxWaitMs?: number;
}

/** `createWorkstream`'s argument: the caller, and optionally the id and its double-texting default. */
export interface CreateWorkstreamInput extends Caller {
  /** Default: a fresh `ws-<uuid>`. */
  readonly workstreamId?: string;
  /** What its sends do when it is busy, unless a send says (M1–M4); default `enqueue`. */
  readonly doubleTexting?: DoubleTexting;
}

export interface CompactInput extends WorkstreamRef {
  /** Rows 1..throughSeq are replaced by one system row holding `summary`. */
  readonly throughSeq: number;
  readonly summary: string;
  /** The summary row's commit key (default: a fresh one). */
  readonly commitKey?: string;
}

/** Where a subscription starts; at most one of the two (default: live). */
export interface SubscribeInput extends WorkstreamRef {
  /** The last event id the client saw: what it missed is replayed, or `replay_truncated` (E1). */
  readonly lastEventId?: number;
  /** A `history()` read's token: the stream continues exactly after its rows, or `history_resync` (E2). */
  readonly handoff?: string;
}

/**
 * `history()`'s argument. Without `limit` or `cursor`: the whole history in one read. With them,
 * a page at a time: each page but the last answers `nextCursor`, the last the `handoff` (E2).
 */
export interface HistoryInput extends WorkstreamRef {
  /**
   * At most this many rows, 1–1000 (each page is read on the supervisor's thread in one go).
   * Default: with `cursor`, the limit of the page that returned it; without, no limit — the
   * whole history, as a read without paging always was.
   */
  readonly limit?: number;
  /** The previous page's `nextCursor`: this page continues after its rows. Opaque. */
  readonly cursor?: string;
}

/**
 * A history read that reached the end of the history (E2): the whole history, or the last page
 * of a read a page at a time.
 */
export interface HistoryRead {
  /**
   * The durable history, in order (seq 1, 2, …) — or, read a page at a time, this page's rows:
   * the rows after the previous page's, in order.
   */
  readonly rows: HistoryRow[];
  /**
   * Subscribe with it to continue exactly after these rows — after all the pages' rows: it holds
   * the stream position taken before the first page, so whatever changed the history while the
   * pages were read reaches the listener (rows announced, a rewrite's `history_resync`). Opaque.
   */
  readonly handoff: string;
  /** Never on the last page: there is no more. */
  readonly nextCursor?: undefined;
}

/** A page of the history with more after it: read on with `nextCursor`; the last page has the handoff. */
export interface HistoryMore {
  /** This page's rows, in order. */
  readonly rows: HistoryRow[];
  /** Pass it as `cursor` for the next page. Opaque. */
  readonly nextCursor: string;
  /** Never before the last page: a listener registered here would miss the pages not read yet (E2). */
  readonly handoff?: undefined;
}

/** What `history()` answers with `limit` or `cursor`: a page with more after it, or the last. */
export type HistoryPage = HistoryRead | HistoryMore;

export interface RewindInput extends WorkstreamRef {
  /** How many of the last turns to drop (each begins with a user message), from 1. */
  readonly turns: number;
  /**
   * The seq of the history's last row as the caller saw it. When given, a history that has
   * changed since (another turn, another rewind — a retried call whose answer was lost) is
   * refused with COMMIT_CONFLICT instead of dropping turns the caller never saw.
   */
  readonly ifLastSeq?: number;
}

export interface RewindResult {
  /** Rows dropped. */
  readonly removed: number;
  /** The seq of the history's last row afterwards (0: empty). */
  readonly lastSeq: number;
}

export interface TurnResult {
  readonly workstreamId: string;
  readonly generation: number;
  readonly status: TurnStatus;
  readonly finalText?: string;
  readonly abortReason?: AbandonReason;
  readonly error?: WireError;
  /** Results written by recovery for calls that could not complete (S2). */
  readonly synthesized: number;
  /** True when the worker had to be terminated (L3) or died (T7). */
  readonly workerTerminated: boolean;
  /**
   * The `hostId` of the host that ran the turn, when it has one (cluster mode): a send queued
   * durably may run on another host than the one it was sent to.
   */
  readonly host?: string;
  /** `awaiting_approval`: the call that waits, and the token that decides it (`approve`, `deny`). */
  readonly approval?: ApprovalRequest;
}

/** A call waiting for a person's approval (the `approval_requested` event says the same). */
export interface ApprovalRequest {
  /** Decides it, for this workstream only: `approve({ …, token })` or `deny({ …, token })`. */
  readonly token: string;
  /** The occurrence among the assistant message's calls. */
  readonly callIndex: number;
  readonly callId: string;
  readonly name: string;
  /** The arguments the model gave (JSON object text). */
  readonly arguments: string;
  /** When the wait ends unanswered and the call is denied (epoch ms). */
  readonly expiresAt: number;
}

/** `approve()`'s argument: the wait's token, and the call's arguments when a person edited them. */
export interface ApproveInput extends WorkstreamRef {
  readonly token: string;
  /** The arguments the call runs with instead of the model's (within `limits.maxToolArgBytes` as JSON). */
  readonly arguments?: Readonly<Record<string, unknown>>;
}

/** `deny()`'s argument: the wait's token and why (the call's result says it; at most 4 KB). */
export interface DenyInput extends WorkstreamRef {
  readonly token: string;
  readonly reason?: string;
}

/** A call the host's approval policy (`TurnwardenOptions.approvalPolicy`) is asked about. */
export interface ApprovalCall {
  readonly tenantId: string;
  /** As its tenant names it. */
  readonly workstreamId: string;
  /** The tool. */
  readonly name: string;
  /** The model's arguments (JSON text), and parsed when they are a JSON object. */
  readonly arguments: string;
  readonly args?: Readonly<Record<string, unknown>>;
}

/** True: a person must approve the call before it runs. Throwing counts as true (fail closed). */
export type ApprovalPolicyFn = (call: ApprovalCall) => boolean | Promise<boolean>;

/** What `approve` and `deny` answer. */
export type DecisionResult =
  /** The decision resumed the turn: its handle (the turn goes on from the call). */
  | { readonly status: 'resumed'; readonly turn: TurnHandle }
  /** The same decision was taken already (by this token): nothing changed. */
  | { readonly status: 'already_decided' };

/**
 * A claimed turn, before the facade adds `cancel` (engine side). One that runs on another host
 * (a send queued durably) brings its own `cancel`.
 */
export type ClaimedTurn = Omit<TurnHandle, 'cancel'> & { readonly cancel?: () => void };

export interface TurnHandle {
  readonly workstreamId: string;
  readonly generation: number;
  /** Settles when the workstream is idle again (never rejects). */
  readonly done: Promise<TurnResult>;
  /**
   * Force-cancels this turn (not a later one): resolves with its result once the workstream
   * is idle. A turn that already ended is left alone and its result returned.
   */
  cancel(): Promise<TurnResult>;
}

/**
 * P3: the journal of a workstream. `pending`: rows admitted and not yet durable; `retrying`: the
 * store refused the head batch with a transient error and it is retried at `nextRetryAt` (epoch
 * ms; the rows behind it wait); `conflict`: a commit key already holds another row — never
 * retried, cleared by the next successful write.
 */
export interface PersistenceStatus {
  readonly state: PersistenceState;
  readonly pendingRows: number;
  readonly attempts?: number;
  readonly nextRetryAt?: number;
  readonly error?: WireError;
}

export interface WorkstreamStatus {
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly state: SessionState;
  readonly generation: number;
  /** Structural debt could not be repaired: claims are refused until repaired (S3). */
  readonly cleanupPending: boolean;
  /** The journal's persistence status (P3). */
  readonly persistence: PersistenceStatus;
  /** Sends waiting behind the running turn (`limits.maxQueuedSends` at most). */
  readonly queuedSends: number;
  readonly activeTurn?: {
    readonly generation: number;
    readonly idleMs: number;
    readonly lastActivity: string;
    readonly abortReason?: AbandonReason;
  };
  /** The session waits for the approval of a call (`state` is `tool-debt`): the token that decides it. */
  readonly awaitingApproval?: {
    readonly token: string;
    readonly callIndex: number;
    readonly expiresAt: number;
  };
}
