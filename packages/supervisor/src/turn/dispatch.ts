/**
 * Dispatch: the admitted turn goes to its worker — unless its abort has committed by then. A
 * cancel, close or delete the host called after the send's claim was captured may still be on
 * its way (its ownership check reading the store): the dispatch waits for it first, so the call
 * takes effect as of the host's call (C7). A turn that is not dispatched ends interrupted, its
 * worker having run nothing of it (kept, not retired).
 */
import type {
  AbortReason,
  HistoryMessage,
  SessionSnapshotData,
  TurnOutcome,
  TurnResume,
  UserMessage,
} from '@turnwarden/protocol';
import { SeamName, seam } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import type { WorkerHandle } from '../capacity/pool.js';
import type { SendClaim, SendQueue } from '../commands/send-queue.js';
import type { SupervisorConfig } from '../config.js';
import { LogMessage } from '../liveness/reporting.js';
import type { EventHub } from '../streams/events.js';

export interface DispatchHost {
  readonly config: Pick<SupervisorConfig, 'model' | 'limits' | 'approvals'>;
  readonly events: EventHub;
  readonly sends: Pick<SendQueue, 'announcedAfter'>;
}

/** What the dispatch reads of its turn, and the two things it tells it. */
export interface DispatchedTurn {
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly generation: number;
  readonly lease: { readonly token: number };
  readonly worker: WorkerHandle;
  readonly log: Logger;
  readonly aborted: { readonly reason: AbortReason | 'crash' } | undefined;
  /** The turn is being sent to its worker. */
  dispatched(): void;
  /** Its worker ran nothing of it: kept. */
  reclaimWork(): void;
}

export interface DispatchJob {
  readonly claim: SendClaim;
  readonly tools: readonly string[] | undefined;
  readonly history: readonly HistoryMessage[];
  readonly user: UserMessage;
  /** The machine as the claim left it; the worker restores it (an abort may move the session meanwhile). */
  readonly claimed: SessionSnapshotData;
  /** A turn resumed by a decision (`claimed` waits for it). */
  readonly resume?: TurnResume;
}

/** The worker's outcome of the turn — or the one of a turn aborted before it was sent. */
export function dispatch(host: DispatchHost, turn: DispatchedTurn, job: DispatchJob): Promise<TurnOutcome> {
  const { workstreamId, generation } = turn;
  host.events.emit(workstreamId, 'turn_started', generation, { workerId: turn.worker.id });
  turn.log.info({ workerId: turn.worker.id, slot: turn.worker.slot }, 'turn started');
  const captured = seam(SeamName.claimCaptureToDispatch, { workstreamId, generation });
  return (captured ?? Promise.resolve())
    .then(() => {
      const waiting = host.sends.announcedAfter(job.claim);
      if (waiting !== undefined) turn.log.debug(LogMessage.dispatchWaitsForFence);
      return waiting;
    })
    .then((): Promise<TurnOutcome> | TurnOutcome => {
      // Aborted meanwhile (a cancel, a delete, shutdown): the worker never hears of it.
      if (turn.aborted !== undefined) return notDispatched(turn, job.claimed);
      turn.dispatched();
      return turn.worker.api.runTurn({
        workstreamId,
        tenantId: turn.tenantId,
        generation,
        fencingToken: turn.lease.token,
        history: job.history,
        input: job.user,
        model: host.config.model,
        ...(job.tools ? { tools: job.tools } : {}),
        limits: {
          maxModelSteps: host.config.limits.maxModelSteps,
          maxToolArgBytes: host.config.limits.maxToolArgBytes,
        },
        snapshot: job.claimed,
        approvals: host.config.approvals,
        ...(job.resume === undefined ? {} : { resume: job.resume }),
      });
    });
}

/**
 * The outcome of a turn whose abort committed before it was dispatched: its worker ran nothing
 * of it (no leaked work: the worker is kept), the machine is the supervisor's to finish.
 */
function notDispatched(turn: DispatchedTurn, claimed: SessionSnapshotData): TurnOutcome {
  turn.reclaimWork();
  const reason = turn.aborted?.reason;
  turn.log.info({ reason }, LogMessage.notDispatched);
  return {
    generation: turn.generation,
    status: 'interrupted',
    ...(reason === undefined || reason === 'crash' ? {} : { abortReason: reason }),
    startedCalls: [],
    modelSteps: 0,
    eventsPosted: 0,
    snapshot: claimed,
  };
}
