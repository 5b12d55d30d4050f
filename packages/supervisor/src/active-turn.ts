import type { AbandonReason } from '@turnwarden/protocol';
import type { Lease } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { Permit } from './admission.js';
import type { WorkerHandle } from './pool.js';
import type { CancelTimer } from './timers.js';
import type { TurnResult } from './types.js';
import type { WatchedTurn } from './watchdog.js';

/** Why a turn is being abandoned: an abort reason, or the death of its worker. */
export type { AbandonReason };

/**
 * The supervisor's record of one running turn, from dispatch until the session is idle again.
 * It holds what the supervisor owns for the turn — its lease, worker, watched slot, timers and
 * the abort commit — and no lifecycle state: that is the session machine's (sessions.ts).
 */
export interface ActiveTurn {
  readonly workstreamId: string;
  readonly tenantId: string;
  /** Who sent the turn's message: only the same principal's sends queue behind it (T3). */
  readonly principal: string;
  /**
   * Work the turn had handed elsewhere — a thread-isolated task (its pool thread terminated) or
   * a host tool call (its signal aborted) — was cancelled: the session worker was only waiting
   * on it, so it holds no leaked work of this turn and is kept, not retired.
   */
  workReclaimed?: boolean;
  /** Its admission permit (T4): released when the turn has ended, its worker back or retired. */
  readonly permit: Permit;
  readonly generation: number;
  readonly lease: Lease;
  readonly worker: WorkerHandle;
  readonly watched: WatchedTurn;
  readonly log: Logger;
  /** Set the moment an abort commits; from then on the turn's journal writes are refused (L3). */
  abort: { readonly reason: AbandonReason; readonly at: number } | undefined;
  /** History rewrites in flight under this turn's lease: an abort waits for them, never tears them (L8). */
  readonly rewrites: Set<Promise<unknown>>;
  /** Stops lease renewal; set while renewal runs. */
  stopRenewal: CancelTimer | undefined;
  /** Cancels the pending grace escalation; set from the abort commit until the turn ends. */
  cancelGrace: CancelTimer | undefined;
  workerTerminated: boolean;
  finished: boolean;
  readonly resolve: (result: TurnResult) => void;
  readonly done: Promise<TurnResult>;
}
