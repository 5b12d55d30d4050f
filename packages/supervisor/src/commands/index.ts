/**
 * The command interface the public facade (runtime.ts) calls, after its input (T5) and tenancy
 * (T1, T2) checks. Each operation is one part's (this folder's files, claim.ts, turn/); the
 * engine (engine.ts) builds the parts and answers for them.
 */
import type { DoubleTexting, SessionSnapshotData } from '@turnwarden/protocol';
import type { WorkstreamRecord } from '@turnwarden/store';
import type { RuntimeStats } from '../stats.js';
import type { Earlier, Listener, StartAt, TurnwardenEvent } from '../streams/events.js';
import type { LifecycleListener } from '../streams/lifecycle-feed.js';
import type { ClaimInput } from '../turn/claim.js';
import type {
  ClaimedTurn,
  HistoryPage,
  HistoryRead,
  RewindResult,
  WorkstreamInfo,
  WorkstreamStatus,
} from '../types.js';
import type { Decided, DecisionInput } from './approvals.js';
import type { Tombstone } from './deletes.js';
import type { Summary } from './rewrites.js';
import type { Announced, SendClaim } from './send-queue.js';
import type { ListQuery, PageQuery } from './workstreams.js';

export interface Commands {
  /** Shutdown began: every call is refused from here (SHUTTING_DOWN). */
  readonly closing: boolean;

  // C7: calls are captured or announced as the host makes them, before any await.
  capture(workstreamId: string): SendClaim;
  announce(workstreamId: string): Announced;
  /** A captured call that will not send (refused before it reached its part). */
  settled(claim: SendClaim): void;

  createWorkstream(
    id: string,
    tenantId: string,
    principal: string,
    doubleTexting: DoubleTexting | undefined,
  ): Promise<WorkstreamInfo>;
  listWorkstreams(query: ListQuery): Promise<{ readonly rows: WorkstreamRecord[]; readonly last?: string }>;
  /** The tombstone of a delete under way or left ambiguous (D2): the workstream is hidden. */
  tombstone(workstreamId: string): Tombstone | undefined;
  deleteWorkstream(
    workstreamId: string,
    tenantId: string,
    incarnation: string,
    fence: Announced,
  ): Promise<void>;
  /** D3: tombstones the store proves gone retire. */
  probeTombstones(): Promise<void>;
  /** D5: a tenant's workstream lifecycle feed. */
  subscribeWorkstreams(tenantId: string, listener: LifecycleListener): () => void;
  /** The whole history and its handoff (E2). */
  history(workstreamId: string): Promise<HistoryRead>;
  /** A page of it: `nextCursor`, or on the last page the handoff (E2). */
  historyPage(workstreamId: string, query: PageQuery): Promise<HistoryPage>;
  status(
    workstreamId: string,
    durable: SessionSnapshotData | undefined,
  ): Pick<
    WorkstreamStatus,
    'state' | 'cleanupPending' | 'persistence' | 'queuedSends' | 'activeTurn' | 'awaitingApproval'
  >;
  /** Cluster mode: how many sends wait on the workstream in the store's queue (any host's); else undefined. */
  queuedDurably(workstreamId: string): Promise<number> | undefined;
  /** Closes; true when this call closed it, false when it joined another soft close (C1). */
  close(workstreamId: string, tenantId: string, waitMs: number, fence: Announced): Promise<boolean>;

  /** Registers a listener on a workstream's events from `from` (E1, E2); returns its removal. */
  listen(workstreamId: string, listener: Listener, from: StartAt, earlier?: Earlier): () => void;
  /**
   * Cluster mode, before a listener registers after an event id or a handoff position that this
   * host's ring does not reach: the relay replays what it keeps (cluster.ts). Undefined: nothing to wait for.
   */
  catchUp(workstreamId: string, from: StartAt): Promise<Earlier | undefined> | undefined;
  /** D6: a listener that registered after the workstream closed is closed at once (events.ts). */
  closeLate(listener: Listener, notice: () => TurnwardenEvent | undefined, off: () => void): boolean;
  /** The stream position now (the id of its last event). */
  position(workstreamId: string): number;
  /** How many unread events an iterator holds before `stream_overflow` (E3). */
  readonly listenerBuffer: number;

  /** The tools the workers' plugins provide (known once a worker has started). */
  tools(): readonly string[] | undefined;
  /**
   * A send, as its double-texting policy (M1–M4) says when the workstream is busy; `stored` is
   * the durable session snapshot the ownership check read (what runs or waits on another host).
   */
  send(
    claim: SendClaim,
    input: ClaimInput,
    signal: AbortSignal | undefined,
    maxWaitMs: number | undefined,
    doubleTexting: DoubleTexting,
    stored: SessionSnapshotData | undefined,
  ): Promise<ClaimedTurn>;
  cancel(workstreamId: string, fence: Announced): Promise<boolean>;
  /** Approves or denies the call a workstream's session waits for (commands/approvals.ts). */
  decide(claim: SendClaim, input: DecisionInput): Promise<Decided>;
  /** A decision the host just made (before its checks): a wait's timeout lets it go first. */
  decisionMade(workstreamId: string, decision: Promise<unknown>): void;
  /** Force-cancels the turn whose `done` this is, not a later one (C4). */
  cancelTurn(workstreamId: string, done: Promise<unknown>): void;
  compact(workstreamId: string, throughSeq: number, summary: Summary): Promise<{ removed: number }>;
  rewind(claim: SendClaim, turns: number, ifLastSeq: number | undefined): Promise<RewindResult>;

  stats(): RuntimeStats;
}
