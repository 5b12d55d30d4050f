/**
 * Claim and dispatch. A claim is admitted only where the session's machine takes CLAIM — idle;
 * a running turn, unanswered calls or unrepaired debt refuse it with a typed error (S3, T3) —
 * and runs in the session's mailbox: restore the machine (the durable snapshot; debt a crashed
 * process left is repaired first, S7), take a warm worker, the lease with a fresh fencing token,
 * the next generation; then the user row and the claimed snapshot become durable in one write,
 * the clock slot is armed, and the claimed machine is sent to the worker, which drives the turn.
 */
import { randomUUID } from 'node:crypto';
import type { ActivityClock } from '@turnwarden/clock';
import type { HistoryMessage, SessionSnapshotData, TurnOutcome, UserMessage } from '@turnwarden/protocol';
import { errors, SeamName, seam, type TurnwardenError, toWire } from '@turnwarden/protocol';
import { offer } from '@turnwarden/session';
import type { TurnStore } from '@turnwarden/store';
import type { ActiveTurn } from './active-turn.js';
import type { Permit } from './admission.js';
import type { SupervisorConfig } from './config.js';
import type { EventHub } from './events.js';
import { acquireLease, leftover, type MaintenanceHost, repairLeftover } from './maintenance.js';
import type { WorkerHandle, WorkerPool } from './pool.js';
import { LogMessage } from './reporting.js';
import type { SendClaim, SendQueue } from './send-queue.js';
import { claimRefusal, type SessionRecord } from './sessions.js';
import type { ClaimedTurn, TurnResult } from './types.js';
import type { Watchdog } from './watchdog.js';

export interface ClaimHost extends MaintenanceHost {
  readonly store: MaintenanceHost['store'] & Pick<TurnStore, 'nextGeneration' | 'readHistory'>;
  readonly config: SupervisorConfig;
  readonly clock: ActivityClock;
  readonly watchdog: Watchdog;
  readonly pool: WorkerPool;
  readonly events: EventHub;
  /** The turn holds its slot: events and journal requests from its worker find it. */
  attach(turn: ActiveTurn): void;
  startRenewal(turn: ActiveTurn): void;
  /** Shutdown began: no new turn is admitted. */
  readonly closing: boolean;
  /** A soft close waits on this workstream's running turn: no new turn is admitted (C1). */
  closeLatched(workstreamId: string): boolean;
  /** Cancels, closes and deletes on their way: the dispatch waits for them (C7). */
  readonly sends: Pick<SendQueue, 'announcedAfter'>;
  /** Ends the turn (in the session's mailbox) when its worker returned or died. */
  settleLater(rec: SessionRecord, turn: ActiveTurn, outcome: TurnOutcome | undefined, err: unknown): void;
}

export interface ClaimInput {
  readonly tenantId: string;
  readonly workstreamId: string;
  readonly content: string;
  readonly principal: string;
  readonly tools?: readonly string[];
}

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/**
 * Why no turn may be admitted on the workstream now — shutdown, or a soft close's latch (C1) —
 * or undefined. Checked where a claim is admitted and where a send would queue.
 */
export function admissionRefusal(host: ClaimHost, workstreamId: string): TurnwardenError | undefined {
  if (host.closing) return errors.shuttingDown('turnwarden is shutting down');
  if (host.closeLatched(workstreamId)) {
    return errors.turnInProgress(
      `workstream ${workstreamId} is closing: a soft close waits for its turn to end`,
    );
  }
  return undefined;
}

/**
 * Refuses at once a claim that could not be admitted — shutdown, a soft close's latch, the
 * machine not idle (closed, a turn's debt) — so that it never waits for a worker first (T4).
 * Run in the session's mailbox. Debt a crashed process left is not a refusal: `admit` repairs it.
 */
export async function claimable(host: ClaimHost, rec: SessionRecord, workstreamId: string): Promise<void> {
  const refused = admissionRefusal(host, workstreamId);
  if (refused) throw refused;
  await host.sessions.load(rec);
  if (rec.turn === undefined && leftover(rec, undefined) && rec.state !== 'force-abandoning') return;
  if (offer(rec.snapshot!, { type: 'CLAIM', generation: 0 }) === undefined) {
    throw claimRefusal(workstreamId, rec.state!, rec.turn !== undefined);
  }
}

/** Dispatches an admitted turn to its worker; the turn runs from here. */
export function start(
  host: ClaimHost,
  rec: SessionRecord,
  admitted: Admitted,
  claim: SendClaim,
  tools: readonly string[] | undefined,
): ClaimedTurn {
  dispatch(host, rec, admitted, claim, tools);
  const { turn } = admitted;
  return { workstreamId: turn.workstreamId, generation: turn.generation, done: turn.done };
}

/**
 * Admits a turn — run it in the session's mailbox (`rec.run`) — and returns what `start`
 * dispatches, on the permit the send was admitted with (T4; the turn holds it until it ends).
 * Refusals are typed: closing, a soft close's latch (C1), the machine not idle
 * (TURN_IN_PROGRESS, TOOL_CLEANUP_PENDING: S3), no worker (CAPACITY_EXHAUSTED).
 *
 * `repaired`: debt found in the history was repaired once already; if the history still ends
 * with open calls, the claim is refused (S3) instead of repairing again.
 */
export async function admit(
  host: ClaimHost,
  rec: SessionRecord,
  input: ClaimInput,
  permit: Permit,
  repaired = false,
): Promise<Admitted> {
  const { workstreamId, tenantId } = input;
  const refused = admissionRefusal(host, workstreamId);
  if (refused) throw refused;
  // A turn still settling (its machine may already read idle) is a turn in progress.
  if (rec.turn !== undefined) throw claimRefusal(workstreamId, rec.state ?? 'streaming', true);
  await host.sessions.load(rec);
  if (rec.turn === undefined && leftover(rec, undefined) && rec.state !== 'force-abandoning') {
    // The machine is mid-turn with no turn running here: a crashed process left it (S7).
    await repairLeftover(host, rec, 'interrupted by a crash');
  }
  // The machine decides: only idle takes CLAIM (the generation is not known yet).
  if (offer(rec.snapshot!, { type: 'CLAIM', generation: 0 }) === undefined) {
    throw claimRefusal(workstreamId, rec.state!, rec.turn !== undefined);
  }
  const worker = await host.pool.acquire();
  try {
    // The model's own check of the message (a malformed script: INVALID_SCRIPT), nothing written.
    const { model } = host.config;
    if (host.pool.catalogue?.checks.includes(model)) await worker.api.checkInput(model, input.content);
    const lease = await acquireLease(host, workstreamId, rec);
    try {
      const generation = await host.store.nextGeneration(workstreamId);
      const rows = await host.store.readHistory(workstreamId);
      if (leftover(rec, rows)) {
        // Open calls the machine did not account for (an older store, a lost acknowledgement):
        // repaired once before any new turn (S7); debt that survives a repair refuses the claim (S3).
        if (repaired) throw claimRefusal(workstreamId, 'tool-debt', false);
        await host.store.releaseLease(workstreamId, host.holder, lease.token).catch(() => false);
        await repairLeftover(host, rec, 'interrupted by a crash');
        throw new RetryClaim();
      }
      const claimed = offer(rec.snapshot!, { type: 'CLAIM', generation })!;
      const user: UserMessage = { role: 'user', content: input.content, principal: input.principal };
      await host.gate.append({
        workstreamId,
        generation,
        fencingToken: lease.token,
        entries: [{ commitKey: `g${generation}:u`, message: user }],
        session: claimed,
      });
      // Deleted meanwhile (P5): the user row was discarded; no turn starts on it.
      if (rec.gone) throw deletedError(workstreamId);
      const history: HistoryMessage[] = [...rows.map((r) => r.message), user];
      host.sessions.set(rec, claimed, generation, { from: 'idle', via: 'CLAIM' });
      const turn = arm(
        host,
        rec,
        worker,
        lease,
        { tenantId, principal: input.principal, permit },
        generation,
      );
      return { turn, history, user, claimed };
    } catch (e) {
      await host.store.releaseLease(workstreamId, host.holder, lease.token).catch(() => false);
      throw e;
    }
  } catch (e) {
    host.pool.release(worker);
    if (e instanceof RetryClaim) return admit(host, rec, input, permit, true);
    throw e;
  }
}

/** The history had debt the machine never saw; it was repaired: claim again from the start. */
class RetryClaim extends Error {}

function arm(
  host: ClaimHost,
  rec: SessionRecord,
  worker: WorkerHandle,
  lease: ActiveTurn['lease'],
  sender: { readonly tenantId: string; readonly principal: string; readonly permit: Permit },
  generation: number,
): ActiveTurn {
  const { tenantId, principal, permit } = sender;
  const { workstreamId } = rec;
  host.clock.arm(worker.slot, generation);
  const watched = host.watchdog.watch({ slot: worker.slot, workstreamId, tenantId, generation });
  const { promise, resolve } = deferred<TurnResult>();
  const turn: ActiveTurn = {
    workstreamId,
    tenantId,
    principal,
    permit,
    generation,
    lease,
    worker,
    watched,
    log: host.logger.child({ workstreamId, tenantId, principal, generation }),
    abort: undefined,
    rewrites: new Set(),
    stopRenewal: undefined,
    cancelGrace: undefined,
    workerTerminated: false,
    finished: false,
    resolve,
    done: promise,
  };
  rec.turn = turn;
  host.attach(turn);
  host.counters.turnsStarted++;
  host.startRenewal(turn);
  return turn;
}

export interface Admitted {
  readonly turn: ActiveTurn;
  readonly history: HistoryMessage[];
  readonly user: UserMessage;
  /** The machine as the claim left it; the worker restores it (an abort may move the session meanwhile). */
  readonly claimed: SessionSnapshotData;
}

/**
 * Sends the claimed turn to its worker — unless its abort has committed by then. A cancel or
 * delete the host called after the claim was captured may still be on its way (its ownership
 * check reading the store): the dispatch waits for it first, so the call takes effect as of the
 * host's call (C7). A turn that is not dispatched ends interrupted, its worker having run nothing.
 */
function dispatch(
  host: ClaimHost,
  rec: SessionRecord,
  admitted: Admitted,
  claim: SendClaim,
  tools: readonly string[] | undefined,
): void {
  const { turn, history, user, claimed } = admitted;
  const { workstreamId, generation } = turn;
  host.events.emit(workstreamId, 'turn_started', generation, { workerId: turn.worker.id });
  turn.log.info({ workerId: turn.worker.id, slot: turn.worker.slot }, 'turn started');
  const captured = seam(SeamName.claimCaptureToDispatch, { workstreamId, generation });
  (captured ?? Promise.resolve())
    .then(() => {
      const waiting = host.sends.announcedAfter(claim);
      if (waiting !== undefined) turn.log.debug(LogMessage.dispatchWaitsForFence);
      return waiting;
    })
    .then((): Promise<TurnOutcome> | TurnOutcome => {
      // Aborted meanwhile (a cancel, a delete, shutdown): the worker never hears of it.
      if (turn.abort !== undefined) return notDispatched(turn, claimed);
      return turn.worker.api.runTurn({
        workstreamId,
        tenantId: turn.tenantId,
        generation,
        fencingToken: turn.lease.token,
        history,
        input: user,
        model: host.config.model,
        ...(tools ? { tools } : {}),
        limits: {
          maxModelSteps: host.config.limits.maxModelSteps,
          maxToolArgBytes: host.config.limits.maxToolArgBytes,
        },
        snapshot: claimed,
      });
    })
    .then(
      // Every event the worker posted before returning is delivered before the turn ends.
      (outcome) =>
        turn.worker
          .caughtUp(outcome.eventsPosted)
          .then(() => host.settleLater(rec, turn, outcome, undefined)),
      (err: unknown) => host.settleLater(rec, turn, undefined, err),
    )
    .catch((err: unknown) => {
      // Never leave `done` (and so shutdown) hanging on an unexpected failure, nor its permit held.
      turn.log.error({ err }, 'turn dispatch failed');
      turn.permit.release();
      turn.resolve({
        workstreamId,
        generation,
        status: 'failed',
        error: toWire(err),
        synthesized: 0,
        workerTerminated: turn.workerTerminated,
      });
    });
}

/**
 * The outcome of a turn whose abort committed before it was dispatched: its worker ran nothing
 * of it (no leaked work: the worker is kept), the machine is the supervisor's to finish.
 */
function notDispatched(turn: ActiveTurn, claimed: SessionSnapshotData): TurnOutcome {
  turn.workReclaimed = true;
  turn.log.info({ reason: turn.abort?.reason }, LogMessage.notDispatched);
  return {
    generation: turn.generation,
    status: 'interrupted',
    ...(turn.abort === undefined || turn.abort.reason === 'crash' ? {} : { abortReason: turn.abort.reason }),
    startedCalls: [],
    modelSteps: 0,
    eventsPosted: 0,
    snapshot: claimed,
  };
}

/**
 * This process's lease holder: `<hostId>:<uuid>` when the host has a stable id (so a restarted
 * process recognises its predecessor's leases by the prefix), else `tw-<uuid>`.
 */
export const newHolder = (hostId: string | undefined): string =>
  hostId === undefined ? `tw-${randomUUID()}` : `${hostId}:${randomUUID()}`;

/** P5: what an admission into a deleted workstream is refused with. */
function deletedError(workstreamId: string): TurnwardenError {
  return errors.workstreamNotFound(`workstream ${workstreamId} was deleted`, {
    workstreamId,
    reason: 'deleted',
  });
}
