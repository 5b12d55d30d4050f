/**
 * The types of a turn (turn.ts): its phases, the reasons it is abandoned for, what its abort
 * records, how it ends, what it needs of the supervisor and what a claim hands it.
 */
import type { ActivityClock } from '@turnwarden/clock';
import type {
  AbandonReason,
  AbortReason,
  HistoryMessage,
  SessionSnapshotData,
  TurnResume,
  UserMessage,
  WireError,
} from '@turnwarden/protocol';
import type { Lease, TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { Permit } from '../capacity/admission.js';
import type { WorkerHandle, WorkerPool } from '../capacity/pool.js';
import type { SendQueue } from '../commands/send-queue.js';
import type { SupervisorConfig } from '../config.js';
import type { StallInfo, TurnWatchdog } from '../liveness/watchdog.js';
import type { SessionRecord, Sessions } from '../sessions/sessions.js';
import type { HostTools } from '../tools/host-tools.js';
import type { IsolatedPool } from '../tools/isolation.js';
import type { TurnResult } from '../types.js';
import type { AnnounceHost } from './abort.js';
import type { RenewalHost } from './renewal.js';
import type { SettleHost } from './settle.js';
import type { TurnSlots } from './slots.js';
import type { WorkerEventHost } from './worker-events.js';

export type TurnPhase = 'admitted' | 'running' | 'aborting' | 'settling' | 'done';

/** The steps a turn may take from each phase (any phase but done may fail straight to done). */
export const PHASE_STEPS: Readonly<Record<TurnPhase, readonly TurnPhase[]>> = {
  admitted: ['running', 'aborting', 'done'],
  running: ['aborting', 'settling', 'done'],
  aborting: ['settling', 'done'],
  settling: ['done'],
  done: [],
};

/** How a turn ended (its `done` result is in each). */
export type TurnEnd =
  | { readonly kind: 'completed'; readonly result: TurnResult }
  /** Interrupted: by its committed abort, or as the worker reported. */
  | { readonly kind: 'aborted'; readonly reason: AbortReason | undefined; readonly result: TurnResult }
  /** Failed: the model or a write failed, the worker died (`crashed`), or the end itself failed. */
  | {
      readonly kind: 'failed';
      readonly error: WireError | undefined;
      readonly crashed: boolean;
      readonly result: TurnResult;
    }
  /** A call waits for a person's approval: the session waits, durable, holding no thread. */
  | { readonly kind: 'awaiting_approval'; readonly result: TurnResult };

/** A committed abort: from then on the turn's journal writes are refused (L3). */
export interface AbortRecord {
  readonly reason: AbandonReason;
  readonly at: number;
}

/** What an abort knows: the watchdog's stall (its CAS set the fence already), or why the worker died. */
export interface AbortInfo {
  readonly stall?: StallInfo;
  readonly error?: unknown;
}

/** What a turn needs of the supervisor — its parts, never the engine. */
export interface TurnHost extends SettleHost, WorkerEventHost, RenewalHost, AnnounceHost {
  readonly config: SupervisorConfig;
  readonly clock: ActivityClock;
  readonly store: SettleHost['store'] & RenewalHost['store'] & Pick<TurnStore, 'releaseLease'>;
  readonly pool: Pick<WorkerPool, 'terminate' | 'release' | 'retire'>;
  readonly sessions: Sessions;
  readonly watchdog: Pick<TurnWatchdog, 'watch' | 'unwatch'> & Partial<Pick<TurnWatchdog, 'threadsChanged'>>;
  readonly isolation: Pick<IsolatedPool, 'cancelTurn'>;
  readonly hostTools: Pick<HostTools, 'cancelTurn'>;
  /** Cancels, closes and deletes on their way: the dispatch waits for them (C7). */
  readonly sends: Pick<SendQueue, 'announcedAfter'>;
  readonly slots: TurnSlots;
  /** Cluster mode: resolves once the events emitted so far are in the relay (cluster.ts `published`). */
  published?(): Promise<void>;
  /** A turn ended waiting for an approval: its wait's bound is kept (commands/approvals.ts). */
  readonly approvals?: {
    waiting(workstreamId: string, nonce: string, expiresAt: number): void;
    ended(workstreamId: string): void;
  };
  readonly logger: Logger;
  /** The turn has ended, still in its session's mailbox (a poisoned end fences the sends before it, C7). */
  turnEnded(rec: SessionRecord): void;
  /** The end left the mailbox: the workstream's next waiting send may start. */
  pump(workstreamId: string): void;
}

/** What a claim hands its turn. */
export interface TurnInit {
  readonly tenantId: string;
  /** Who sent the turn's message: only the same principal's sends queue behind it (T3). */
  readonly principal: string;
  /** Its admission permit (T4): released when the turn has ended, its worker back or retired. */
  readonly permit: Permit;
  readonly generation: number;
  readonly lease: Lease;
  readonly worker: WorkerHandle;
  /** For the worker: the history before the turn, the user row, the machine as the claim left it. */
  readonly history: readonly HistoryMessage[];
  readonly user: UserMessage;
  readonly claimed: SessionSnapshotData;
  /** A turn resumed by a decision: `claimed` waits for it; the worker applies it (commands/approvals.ts). */
  readonly resume?: TurnResume;
  /**
   * Told the turn's result while it still holds its lease, before the lease is released (a send
   * queued durably records its outcome under the lease: commands/durable-sends.ts).
   */
  readonly ending?: (result: TurnResult) => Promise<void>;
}

/** The outcome of a turn's result; `crashed`: its worker died (T7). */
export function endOf(result: TurnResult, crashed: boolean): TurnEnd {
  if (result.status === 'completed') return { kind: 'completed', result };
  if (result.status === 'awaiting_approval') return { kind: 'awaiting_approval', result };
  if (result.status === 'interrupted') {
    const reason = result.abortReason === 'crash' ? undefined : result.abortReason;
    return { kind: 'aborted', reason, result };
  }
  return { kind: 'failed', error: result.error, crashed, result };
}
