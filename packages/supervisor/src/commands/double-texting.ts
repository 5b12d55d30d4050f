/**
 * Double texting (issue 26, M1–M4): what a send does when its workstream is busy — a turn running
 * on any host, sends waiting, a call waiting for approval. `reject` and `enqueue` are the send's
 * own ways (sends.ts). `interrupt` and `rollback` are here: the running turn is force-cancelled
 * wherever it runs — its history repaired, the sends made before this one revoked, a call
 * waiting for approval denied (C4–C7, A4) —, for `rollback` its rows are then removed by a history
 * rewrite (E2's `history_resync`), and the new message's turn is the next to start on this host:
 * sends made here meanwhile queue behind it.
 */
import { type DoubleTexting, errors, type SessionSnapshotData } from '@turnwarden/protocol';
import { contextOf, stateOf, waitingApproval } from '@turnwarden/session';
import type { Store } from '@turnwarden/store';
import type { Logger } from 'pino';
import { lastUserPrincipal } from '../sessions/last-principal.js';
import type { Sessions } from '../sessions/sessions.js';
import type { ClaimInput } from '../turn/claim.js';
import type { ClaimedTurn } from '../types.js';
import type { Cancels } from './cancels.js';
import type { DurableSends } from './durable-sends.js';
import type { Rewrites } from './rewrites.js';
import type { Announced, SendClaim, SendQueue } from './send-queue.js';
import type { Sends } from './sends.js';

export interface DoubleTextingDeps {
  readonly logger: Logger;
  readonly sessions: Pick<Sessions, 'peek'>;
  readonly queue: Pick<SendQueue, 'announce' | 'settled'>;
  readonly sends: Pick<Sends, 'send' | 'reserve' | 'unreserve'>;
  readonly cancels: Pick<Cancels, 'cancel' | 'cancelBefore'>;
  /** Cluster mode: the store's queue, where an interrupt of a turn on another host waits first. */
  readonly durable?: Pick<DurableSends, 'enqueue'> | undefined;
  readonly rewrites: Pick<Rewrites, 'rollback'>;
  readonly store: Pick<Store, 'readHistory' | 'readHistoryTail' | 'getLease'>;
  /** This host's lease holder: a lease of another holder says the turn runs elsewhere. */
  readonly holder: string;
}

/** The turn an interrupt ends: its generation (whose rows a rollback removes) and principal (T3). */
interface Victim {
  readonly generation: number;
  readonly principal: string | undefined;
  /** It runs on another host (the durable snapshot is mid-turn, not waiting for approval). */
  readonly elsewhere: boolean;
}

export class DoubleTexts {
  constructor(private readonly deps: DoubleTextingDeps) {}

  /**
   * A send whose policy is `interrupt` or `rollback` (M3, M4). `stored` is the workstream's
   * durable session snapshot as the caller's ownership check read it: a turn on another host, or
   * a call waiting for approval, is known by it.
   */
  async interrupt(
    sent: SendClaim,
    input: ClaimInput,
    signal: AbortSignal | undefined,
    maxWaitMs: number | undefined,
    mode: Extract<DoubleTexting, 'interrupt' | 'rollback'>,
    stored: SessionSnapshotData | undefined,
  ): Promise<ClaimedTurn> {
    const { queue, sends, cancels, rewrites, logger } = this.deps;
    const { workstreamId } = input;
    // C7: the cancel revokes the sends made before this one (their tickets are lower), not it.
    const fence = queue.announce(workstreamId, sent.ticket);
    // Until this send has its place, turn ends here take no queued send and new sends queue.
    sends.reserve(workstreamId);
    let lifted = false;
    const lift = () => {
      if (lifted) return;
      lifted = true;
      sends.unreserve(workstreamId);
    };
    try {
      try {
        const victim = await this.victim(workstreamId, stored);
        // T3: another principal's message does not end a turn it did not start.
        if (victim?.principal !== undefined && victim.principal !== input.principal) {
          throw errors.turnInProgress(
            `workstream ${workstreamId} is running another principal's turn; only its own messages interrupt it`,
            { workstreamId },
          );
        }
        if (victim !== undefined) {
          logger.info(
            { workstreamId, principal: input.principal, doubleTexting: mode, generation: victim.generation },
            mode === 'rollback' ? 'send rolls back the running turn' : 'send interrupts the running turn',
          );
        }
        if (victim?.elsewhere === true && this.deps.durable !== undefined) {
          return await this.queuedFirst(sent, input, signal, mode, victim, fence, lift);
        }
        await cancels.cancel(workstreamId, fence);
        if (mode === 'rollback' && victim !== undefined)
          await rewrites.rollback(workstreamId, victim.generation);
      } catch (e) {
        fence.done();
        queue.settled(sent);
        throw e;
      }
      return await sends.send(sent, input, signal, maxWaitMs, { first: { placed: lift } });
    } finally {
      lift();
    }
  }

  /**
   * M3 across hosts: the turn runs on another host. The send waits in the store's queue first —
   * the sends made after it, on any host, queue behind it — and then the turn is cancelled where
   * it runs, with the sends queued before it; the host that ends the turn starts this one next
   * (for a rollback, after removing the cancelled turn's rows). Resolves once it has started.
   */
  private async queuedFirst(
    sent: SendClaim,
    input: ClaimInput,
    signal: AbortSignal | undefined,
    mode: Extract<DoubleTexting, 'interrupt' | 'rollback'>,
    victim: Victim,
    fence: Announced,
    placed: () => void,
  ): Promise<ClaimedTurn> {
    const { durable, cancels, queue } = this.deps;
    const { workstreamId } = input;
    try {
      let started!: Promise<ClaimedTurn>;
      const id = await new Promise<number>((resolve, reject) => {
        started = durable!.enqueue(
          mode === 'rollback' ? { ...input, rollback: victim.generation } : input,
          signal,
          sent.ticket,
          resolve,
        );
        started.catch(reject);
      });
      // In the queue: this host's turn ends may take sends again (this one is first of them).
      placed();
      await cancels.cancelBefore(workstreamId, fence, victim.generation, id);
      return await started;
    } finally {
      fence.done();
      queue.settled(sent);
    }
  }

  /** What runs or waits on the workstream: this host's turn, else what the durable snapshot says. */
  private async victim(
    workstreamId: string,
    stored: SessionSnapshotData | undefined,
  ): Promise<Victim | undefined> {
    const rec = this.deps.sessions.peek(workstreamId);
    const turn = rec?.turn;
    if (turn !== undefined)
      return { generation: turn.generation, principal: turn.principal, elsewhere: false };
    const snapshot = stored ?? rec?.snapshot;
    if (snapshot === undefined) return undefined;
    const state = stateOf(snapshot);
    if (state === 'idle' || state === 'closed') return undefined;
    // Another host's live lease: its turn. (A call waiting for approval holds none, nor does a
    // turn a dead process left: the cancel repairs those here.)
    const lease =
      waitingApproval(snapshot) === undefined ? await this.deps.store.getLease(workstreamId) : undefined;
    const elsewhere =
      lease !== undefined &&
      !lease.released &&
      lease.expiresAt > Date.now() &&
      lease.holder !== this.deps.holder;
    return {
      generation: contextOf(snapshot).generation,
      principal: await lastUserPrincipal(this.deps.store, workstreamId),
      elsewhere,
    };
  }
}
