/**
 * Sends (T3, T4, C7): a send is claimed in the session's mailbox on a permit, or waits for one
 * in the fair admission queue, or queues behind the running turn of its own principal; a turn's
 * end pumps the next waiting send. The claim itself is claim.ts; the turn, turn/turn.ts.
 */
import { SeamName, seam } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import type { Admission, Permit } from '../capacity/admission.js';
import type { SupervisorConfig } from '../config.js';
import type { SessionRecord, Sessions } from '../sessions/sessions.js';
import { admissionRefusal, type ClaimHost, type ClaimInput, claim } from '../turn/claim.js';
import type { Turn } from '../turn/turn.js';
import type { ClaimedTurn } from '../types.js';
import type { SendClaim, SendQueue } from './send-queue.js';

export interface SendsDeps {
  readonly config: Pick<SupervisorConfig, 'limits' | 'admission'>;
  readonly logger: Logger;
  readonly sessions: Sessions;
  readonly queue: SendQueue;
  readonly admission: Admission;
  /** What a claim needs (claim.ts, turn/). */
  readonly claims: ClaimHost;
}

export class Sends {
  constructor(private readonly deps: SendsDeps) {}

  /**
   * A send (input and ownership already checked; its claim captured when the host called).
   * With no turn running and none waiting, the turn is claimed and dispatched now — once it holds
   * a permit (T4): when none is free for its tenant it waits for one in the fair admission queue,
   * out of the session's mailbox, then tries again. While a turn runs, the send waits in the
   * workstream's queue instead (QUEUE_FULL when full) and its turn is claimed when the turns
   * before it have ended. Either way the claim is revalidated in the session's mailbox, where it
   * would enqueue or start: one captured before a fence is revoked (C7), waiting or not.
   */
  async send(
    sent: SendClaim,
    input: ClaimInput,
    signal: AbortSignal | undefined,
    maxWaitMs: number = this.deps.config.admission.maxWaitMs,
  ): Promise<ClaimedTurn> {
    const { sessions, queue, admission, logger, config } = this.deps;
    const { workstreamId, tenantId } = input;
    let permit: Permit | undefined;
    try {
      const held = seam(SeamName.sendCaptureToEnqueue, { workstreamId });
      if (held !== undefined) await held;
      for (;;) {
        // Taken anew each time: a record left passive while the send waited was let go.
        const rec = sessions.record(workstreamId);
        type Step =
          | { readonly queued: Promise<ClaimedTurn> }
          | { readonly turn: Turn }
          | { readonly wait: true };
        let step: Step;
        try {
          step = await rec.run(async (): Promise<Step> => {
            queue.check(sent);
            const busy = rec.turn !== undefined || queue.depth(workstreamId) > 0;
            // T3: only the running turn's own principal queues behind it; another's message is an
            // interjection, refused (TURN_IN_PROGRESS) by the claim — as is any send while queueing is off.
            const own = rec.turn === undefined || rec.turn.principal === input.principal;
            if (busy && own && config.limits.maxQueuedSends > 0) {
              const refused = admissionRefusal(this.deps.claims, workstreamId);
              if (refused) throw refused;
              // A turn started while this send waited for a permit: it queues, the permit goes back.
              permit?.release();
              permit = undefined;
              const queued = queue.enqueue(sent, input, signal);
              logger.debug(
                { workstreamId, depth: queue.depth(workstreamId) },
                'send queued behind the running turn',
              );
              return { queued };
            }
            // Refusals first (a turn, closing, closed, debt): a send that cannot claim never waits.
            const turn = await claim(
              this.deps.claims,
              rec,
              input,
              () => (permit ??= admission.tryAcquire(tenantId)),
            );
            return turn === undefined ? { wait: true } : { turn };
          });
        } finally {
          sessions.release(rec);
        }
        if ('wait' in step) {
          permit = await this.waitForPermit(sent, tenantId, signal, maxWaitMs);
          continue;
        }
        if ('queued' in step) return await step.queued;
        permit = undefined; // the turn holds it now; its end releases it
        return step.turn.run(sent, input.tools);
      }
    } catch (e) {
      permit?.release();
      throw e;
    } finally {
      queue.settled(sent);
    }
  }

  /**
   * The next waiting send of a workstream whose turn has ended: given a permit (T4), then
   * revalidated and claimed in the session's mailbox. A refused one is answered with its refusal
   * and the next one tried.
   */
  pump(workstreamId: string): void {
    const { queue, admission, config } = this.deps;
    const head = queue.peek(workstreamId);
    if (head === undefined) return;
    const { tenantId } = head.input;
    // Its sends were accepted into the workstream's queue already: the wait is not capped again.
    admission.acquire(tenantId, { maxWaitMs: config.admission.maxWaitMs, accepted: true }).then(
      (permit) => this.pumpWith(workstreamId, permit),
      (err: unknown) => {
        // No permit for it (the queue full, the wait run out, shutdown): the head send is answered.
        const waiting = queue.shift(workstreamId);
        waiting?.reject(err);
        if (waiting !== undefined) this.pump(workstreamId);
      },
    );
  }

  /** A turn ended poisoned — its history still open: sends captured before it cannot start (C7). */
  turnEnded(rec: SessionRecord): void {
    const { queue, logger } = this.deps;
    const state = rec.state;
    if (state !== undefined && state !== 'idle' && state !== 'closed') {
      const revoked = queue.fence(rec.workstreamId, queue.ticket(), 'poison');
      if (revoked > 0)
        logger.warn(
          { workstreamId: rec.workstreamId, revoked },
          'queued sends revoked: the turn ended poisoned',
        );
    }
  }

  private pumpWith(workstreamId: string, permit: Permit): void {
    const { sessions, queue } = this.deps;
    const rec = sessions.record(workstreamId);
    let waiting: ReturnType<SendQueue['shift']>;
    rec
      .run(async () => {
        // A turn started meanwhile: its end pumps again.
        if (rec.turn !== undefined) return undefined;
        waiting = queue.shift(workstreamId);
        if (waiting === undefined) return undefined;
        queue.check(waiting.claim);
        return claim(this.deps.claims, rec, waiting.input, () => permit);
      })
      .then(
        (turn) => {
          if (turn !== undefined && waiting !== undefined)
            waiting.resolve(turn.run(waiting.claim, waiting.input.tools));
          else permit.release();
        },
        (err: unknown) => {
          permit.release();
          waiting?.reject(err);
          this.pump(workstreamId);
        },
      )
      .finally(() => sessions.release(rec));
  }

  /** T4: waits in the fair admission queue; a fence revokes the wait as it would a queued send (C7). */
  private async waitForPermit(
    sent: SendClaim,
    tenantId: string,
    signal: AbortSignal | undefined,
    maxWaitMs: number,
  ): Promise<Permit> {
    const { admission, queue, logger } = this.deps;
    logger.debug(
      { workstreamId: sent.workstreamId, tenantId, ...admission.stats() },
      'send waits for a session worker',
    );
    return admission.acquire(tenantId, {
      signal,
      maxWaitMs,
      revocable: (revoke) => queue.park(sent, revoke),
    });
  }
}
