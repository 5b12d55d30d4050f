/**
 * The claim of a turn. A claim is admitted only where the session's machine takes CLAIM — idle;
 * a running turn, unanswered calls or unrepaired debt refuse it with a typed error (S3, T3) —
 * and runs in the session's mailbox: restore the machine (the durable snapshot; debt a crashed
 * process left is repaired first, S7), take a warm worker, the lease with a fresh fencing token,
 * the next generation; then the user row and the claimed snapshot become durable in one write
 * and the turn is armed (turn/turn.ts), which sends the claimed machine to its worker.
 */
import { randomUUID } from 'node:crypto';
import type { HistoryMessage, UserMessage } from '@turnwarden/protocol';
import { errors, type TurnwardenError } from '@turnwarden/protocol';
import { accepts, offer, waitingApproval } from '@turnwarden/session';
import type { TurnStore } from '@turnwarden/store';
import type { Permit } from '../capacity/admission.js';
import type { WorkerPool } from '../capacity/pool.js';
import type { ModelThreads } from '../models/threads.js';
import { acquireLease, leftover, type MaintenanceHost, repairLeftover } from '../sessions/maintenance.js';
import { claimRefusal, type SessionRecord } from '../sessions/sessions.js';
import type { TurnResult } from '../types.js';
import { Turn } from './turn.js';
import type { TurnHost } from './types.js';

export interface ClaimHost extends MaintenanceHost, TurnHost {
  readonly store: MaintenanceHost['store'] &
    TurnHost['store'] &
    Pick<TurnStore, 'nextGeneration' | 'readHistory' | 'readHistoryTail'>;
  readonly pool: WorkerPool;
  /** The shared model threads (`models.placement: 'shared'`): they check a message and read the context. */
  readonly models?: Pick<ModelThreads, 'catalogue' | 'checkInput'>;
  /** Shutdown began: no new turn is admitted. */
  readonly closing: boolean;
  /** A soft close waits on this workstream's running turn: no new turn is admitted (C1). */
  closeLatched(workstreamId: string): boolean;
  /** Cluster mode: a tenant's turns on all the hosts together (`admission.maxActivePerTenantInCluster`). */
  readonly tenantLimit?: number | undefined;
}

export interface ClaimInput {
  readonly tenantId: string;
  readonly workstreamId: string;
  readonly content: string;
  readonly principal: string;
  readonly tools?: readonly string[];
  /** The send's own approval policy (SendInput.requireApproval): the machine carries it for the turn. */
  readonly requireApproval?: readonly string[] | 'all';
  /**
   * An interrupt's send queued durably with `rollback` (M4): the rows of this generation are
   * removed before its turn is claimed (commands/sends.ts, whichever host starts it).
   */
  readonly rollback?: number;
  /**
   * A send queued durably (cluster mode, commands/durable-sends.ts): taken off the store's queue
   * under the turn's lease as the turn is claimed — false when it was answered meanwhile (the
   * claim is then refused with `NotWaiting`, nothing written) — and its user row is written
   * under `commitKey`, by which a host taking over tells a turn that began from one that did not.
   */
  readonly queued?: {
    readonly commitKey: string;
    take(token: number, generation: number): Promise<boolean>;
    /** The turn's result, recorded while the turn still holds its lease (TurnInit.ending). */
    ending(result: TurnResult): Promise<void>;
    /** The claim failed after the take: its error, recorded before the lease is released. */
    failed(err: unknown): Promise<void>;
  };
}

/** A queued send answered (revoked, withdrawn) before its claim could take it: nothing written. */
export class NotWaiting extends Error {
  constructor() {
    super('the queued send was answered before its turn could be claimed');
    this.name = 'NotWaiting';
  }
}

/**
 * Why no turn may be admitted on the workstream now — shutdown, or a soft close's latch (C1) —
 * or undefined. Checked where a claim is admitted and where a send would queue.
 */
export function admissionRefusal(
  host: Pick<ClaimHost, 'closing' | 'closeLatched'>,
  workstreamId: string,
): TurnwardenError | undefined {
  if (host.closing) return errors.shuttingDown('turnwarden is shutting down');
  if (host.closeLatched(workstreamId)) {
    return errors.turnInProgress(
      `workstream ${workstreamId} is closing: a soft close waits for its turn to end`,
    );
  }
  return undefined;
}

/**
 * The claim of a turn, in the session's mailbox (`rec.run`), on the permit `permit()` gives (T4;
 * the turn holds it until it ends). Refusals come first, before any wait for a worker: a turn
 * running or still settling (its machine may already read idle), shutdown, a soft close's latch
 * (C1), the machine not idle (closed; debt: TOOL_CLEANUP_PENDING, S3). Without a permit it
 * returns undefined: the send waits for one out of the mailbox, then claims again. Debt a
 * crashed process left is not a refusal: it is repaired first (S7). Then a worker
 * (CAPACITY_EXHAUSTED), the model's own check of the message, the lease with a fresh fencing
 * token, the next generation; the user row and the claimed snapshot become durable in one write
 * and the turn is armed (turn/turn.ts).
 *
 * Open calls the history holds that the machine did not account for (an older store, a lost
 * acknowledgement) are repaired once and the claim starts over; debt that survives a repair
 * refuses it (S3).
 */
export async function claim(
  host: ClaimHost,
  rec: SessionRecord,
  input: ClaimInput,
  permit: () => Permit | undefined,
): Promise<Turn | undefined> {
  const { workstreamId } = input;
  for (let repaired = false; ; repaired = true) {
    const refused =
      rec.turn !== undefined
        ? claimRefusal(workstreamId, rec.state ?? 'streaming', true)
        : admissionRefusal(host, workstreamId);
    if (refused) throw refused;
    await host.sessions.load(rec);
    // A call waits for a person's approval: no new turn until it is decided or the wait ends.
    if (waitingApproval(rec.snapshot!) !== undefined) {
      throw errors.approvalPending(
        `workstream ${workstreamId} waits for the approval of a tool call: approve or deny it, or cancel`,
        { workstreamId },
      );
    }
    // The machine is mid-turn with no turn running here: a crashed process left it (S7).
    const crashed = leftover(rec, undefined) && rec.state !== 'force-abandoning';
    // The machine decides: only idle takes CLAIM (the generation is not known yet).
    if (!crashed && !accepts(rec.snapshot!, { type: 'CLAIM', generation: 0 })) {
      throw claimRefusal(workstreamId, rec.state!, false);
    }
    const held = permit();
    if (held === undefined) return undefined;
    if (crashed) await repairLeftover(host, rec, 'interrupted by a crash');
    const turn = await take(host, rec, input, held, repaired);
    if (turn !== undefined) return turn;
    await repairLeftover(host, rec, 'interrupted by a crash');
  }
}

/** A worker, the lease, the generation, the durable user row: the armed turn — or undefined for debt to repair first. */
async function take(
  host: ClaimHost,
  rec: SessionRecord,
  input: ClaimInput,
  permit: Permit,
  repaired: boolean,
): Promise<Turn | undefined> {
  const { workstreamId, tenantId, principal } = input;
  const worker = await host.pool.acquire();
  try {
    // The model's own check of the message (a malformed script: INVALID_SCRIPT), nothing written.
    const { model } = host.config;
    const { models } = host;
    if (models !== undefined) {
      if (models.catalogue?.checks.includes(model)) await models.checkInput(model, input.content);
    } else if (host.pool.catalogue?.checks.includes(model)) {
      await worker.api.checkInput(model, input.content);
    }
    // The answer came from another thread, with those of every claim of a burst: go on in a loop
    // turn of our own (L12).
    await host.sessions.nextTurn();
    const lease = await acquireLease(host, workstreamId, rec, host.tenantLimit);
    try {
      const generation = await host.store.nextGeneration(workstreamId);
      // With shared model threads the worker needs no history (the threads read the context
      // off this thread): only the tail where an open call could be (S1) is read — a claim costs
      // the same on a long history as on a short one.
      const rows =
        models !== undefined && host.store.readHistoryTail !== undefined
          ? await host.store.readHistoryTail(workstreamId)
          : await host.store.readHistory(workstreamId);
      if (leftover(rec, rows)) {
        if (repaired) throw claimRefusal(workstreamId, 'tool-debt', false);
        await host.store.releaseLease(workstreamId, host.holder, lease.token).catch(() => false);
        host.pool.release(worker);
        return undefined;
      }
      const claimed = offer(rec.snapshot!, {
        type: 'CLAIM',
        generation,
        ...(input.requireApproval === undefined ? {} : { approvals: input.requireApproval }),
      });
      if (claimed === undefined) throw claimRefusal(workstreamId, rec.state!, false);
      const { queued } = input;
      if (queued !== undefined && !(await queued.take(lease.token, generation))) throw new NotWaiting();
      const user: UserMessage = { role: 'user', content: input.content, principal };
      await host.gate.append({
        workstreamId,
        generation,
        fencingToken: lease.token,
        entries: [{ commitKey: queued?.commitKey ?? `g${generation}:u`, message: user }],
        session: claimed,
      });
      // A group commit answers every claim of a burst at once: each arms its turn in a loop turn of its own (L12).
      await host.sessions.nextTurn();
      // Deleted meanwhile (P5): the user row was discarded; no turn starts on it.
      if (rec.gone) throw deletedError(workstreamId);
      const history: HistoryMessage[] = models !== undefined ? [] : [...rows.map((r) => r.message), user];
      host.sessions.set(rec, claimed, generation, { from: 'idle', via: 'CLAIM' });
      return new Turn(host, rec, {
        tenantId,
        principal,
        permit,
        generation,
        lease,
        worker,
        history,
        user,
        claimed,
        ...(queued === undefined ? {} : { ending: (result: TurnResult) => queued.ending(result) }),
      });
    } catch (e) {
      // A queued send taken for this claim is answered with its error while the lease is held
      // (a host acquiring the lease next would otherwise find it taken and requeue it).
      if (input.queued !== undefined) await input.queued.failed(e).catch(() => undefined);
      await host.store.releaseLease(workstreamId, host.holder, lease.token).catch(() => false);
      throw e;
    }
  } catch (e) {
    host.pool.release(worker);
    throw e;
  }
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
