/**
 * Sends (T3, T4, C7): a send is claimed in the session's mailbox on a permit, or waits for one
 * in the fair admission queue, or queues behind the running turn of its own principal; a turn's
 * end pumps the next waiting send. The claim itself is claim.ts; the turn, turn/turn.ts.
 */
import { ErrorCode, errors, isTurnwardenError, SeamName, seam } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import type { Admission, Permit } from '../capacity/admission.js';
import type { TenantSlots } from '../capacity/tenant-slots.js';
import type { SupervisorConfig } from '../config.js';
import type { SessionRecord, Sessions } from '../sessions/sessions.js';
import { admissionRefusal, type ClaimHost, type ClaimInput, claim, NotWaiting } from '../turn/claim.js';
import type { Turn } from '../turn/turn.js';
import type { ClaimedTurn } from '../types.js';
import type { DurableSends } from './durable-sends.js';
import type { SendClaim, SendQueue } from './send-queue.js';

export interface SendsDeps {
  readonly config: Pick<SupervisorConfig, 'limits' | 'admission'>;
  readonly logger: Logger;
  readonly sessions: Sessions;
  readonly queue: SendQueue;
  readonly admission: Admission;
  /** What a claim needs (claim.ts, turn/). */
  readonly claims: ClaimHost;
  /** Cluster mode: sends that meet a turn on another host wait in the store (durable-sends.ts). */
  readonly durable?: DurableSends | undefined;
  /** Cluster mode with a tenant limit across hosts: where sends over it wait (tenant-slots.ts). */
  readonly slots?: TenantSlots | undefined;
  /** M4: removes the rows of a cancelled turn's generation (Rewrites.rollback). */
  readonly rollback?: (workstreamId: string, generation: number) => Promise<unknown>;
}

/** How a send meets a busy workstream (its double-texting policy, issue 26), as `send` carries it out. */
export interface SendOptions {
  /** `reject`: refused with TURN_IN_PROGRESS when the workstream is busy, anywhere (M1). */
  readonly reject?: boolean;
  /**
   * An interrupt's send (double-texting.ts), once it has cancelled what ran: it goes first —
   * not behind the sends made after it, which queue behind it — and `placed` is called as soon
   * as it has claimed its turn, queued or been refused.
   */
  readonly first?: { readonly placed: () => void };
}

export class Sends {
  /** Interrupts under way here, per workstream (M3): turn ends do not pump, new sends queue behind them. */
  private readonly reserved = new Map<string, number>();
  /** Workstreams whose durable queue is being pumped here. */
  private readonly pumping = new Set<string>();
  /** Pumps asked for while one ran: it pumps again. */
  private readonly pumpAgain = new Set<string>();
  /** Workstreams whose queued send met its tenant's bound across hosts, per tenant: pumped when one of its turns ends. */
  private readonly tenantBlocked = new Map<string, Set<string>>();
  /** Workstreams whose turn ended poisoned: their durable queue is revoked before it is pumped (C7). */
  private readonly poisoned = new Set<string>();

  constructor(private readonly deps: SendsDeps) {}

  /**
   * An interrupt of the workstream begins here (M3): until it is `unreserve`d, a turn's end takes
   * no queued send and new sends queue, so that the interrupting send is the next turn.
   */
  reserve(workstreamId: string): void {
    this.reserved.set(workstreamId, (this.reserved.get(workstreamId) ?? 0) + 1);
  }

  /** The interrupt's send has claimed its turn, queued or been refused: the queue moves again. */
  unreserve(workstreamId: string): void {
    const n = (this.reserved.get(workstreamId) ?? 1) - 1;
    if (n > 0) this.reserved.set(workstreamId, n);
    else this.reserved.delete(workstreamId);
    if (n <= 0) this.pump(workstreamId);
  }

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
    options: SendOptions = {},
  ): Promise<ClaimedTurn> {
    const { sessions, queue, admission, logger, config } = this.deps;
    const { first, reject } = options;
    let placed = first === undefined;
    const place = () => {
      if (placed) return;
      placed = true;
      first!.placed();
    };
    const { workstreamId, tenantId } = input;
    let permit: Permit | undefined;
    /** When the send first had to wait (for a worker, or for its tenant's bound across hosts): every wait of it counts. */
    let waitingSince: number | undefined;
    const remaining = () => {
      waitingSince ??= performance.now();
      return maxWaitMs - (performance.now() - waitingSince);
    };
    try {
      const held = seam(SeamName.sendCaptureToEnqueue, { workstreamId });
      if (held !== undefined) await held;
      for (;;) {
        // Taken anew each time: a record left passive while the send waited was let go.
        const rec = sessions.record(workstreamId);
        type Step =
          | { readonly queued: Promise<ClaimedTurn> }
          | { readonly durable: true }
          | { readonly tenantFull: true }
          | { readonly turn: Turn }
          | { readonly wait: true };
        let step: Step;
        try {
          step = await rec.run(async (): Promise<Step> => {
            queue.check(sent);
            // Cluster mode: sends waiting in the store's queue go first, whichever host they came to
            // (an interrupt's send goes before them: those made before it are revoked, M3).
            const behindDurable =
              this.deps.durable !== undefined &&
              first === undefined &&
              rec.turn === undefined &&
              (config.limits.maxQueuedSends > 0 || reject === true) &&
              (await this.deps.durable.waiting(workstreamId));
            const busy =
              rec.turn !== undefined ||
              (first === undefined && (queue.depth(workstreamId) > 0 || this.reserved.has(workstreamId))) ||
              behindDurable;
            // M1: a send that must not wait for the workstream is refused, nothing written.
            if (busy && reject === true) throw rejected(workstreamId);
            // T3: only the running turn's own principal queues behind it; another's message is an
            // interjection, refused (TURN_IN_PROGRESS) by the claim — as is any send while queueing is off.
            const own = rec.turn === undefined || rec.turn.principal === input.principal;
            if (busy && own && config.limits.maxQueuedSends > 0) {
              const refused = admissionRefusal(this.deps.claims, workstreamId);
              if (refused) throw refused;
              // A turn started while this send waited for a permit: it queues, the permit goes back.
              permit?.release();
              permit = undefined;
              // Cluster mode: behind the store's queue, the one every host's sends wait in, in order.
              if (this.deps.durable !== undefined) return { durable: true };
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
        } catch (e) {
          // Its tenant runs its most turns on the hosts together (T4 across hosts): it waits.
          if (
            this.deps.slots !== undefined &&
            isTurnwardenError(e, ErrorCode.CAPACITY_EXHAUSTED) &&
            e.details?.reason === 'tenant_active'
          )
            step = { tenantFull: true };
          // M1 across hosts: the turn runs on another host, and this send must not wait for it.
          else if (reject === true && isTurnwardenError(e, ErrorCode.LEASED_ELSEWHERE))
            throw rejected(workstreamId);
          // The turn runs on another host: the send waits for it in the store, queued durably.
          else if (
            this.deps.durable !== undefined &&
            config.limits.maxQueuedSends > 0 &&
            isTurnwardenError(e, ErrorCode.LEASED_ELSEWHERE)
          )
            step = { durable: true };
          else throw e;
        } finally {
          sessions.release(rec);
          // Claimed, queued, waiting for a worker or refused: an interrupt's send has its place.
          place();
        }
        if ('tenantFull' in step) {
          permit?.release();
          permit = undefined;
          await this.waitForTenant(sent, tenantId, signal, remaining());
          continue;
        }
        if ('wait' in step) {
          waitingSince ??= performance.now();
          permit = await this.waitForPermit(sent, tenantId, signal, maxWaitMs);
          continue;
        }
        if ('queued' in step) return await step.queued;
        if ('durable' in step) {
          // A permit its claim took goes back; a fence since its capture revokes it (C7).
          permit?.release();
          permit = undefined;
          queue.check(sent);
          return await this.deps.durable!.enqueue(input, signal, sent.ticket);
        }
        permit = undefined; // the turn holds it now; its end releases it
        return step.turn.run(sent, input.tools);
      }
    } catch (e) {
      permit?.release();
      throw e;
    } finally {
      place();
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
    // An interrupt is under way: its send goes next; its `unreserve` pumps (M3).
    if (this.reserved.has(workstreamId)) return;
    const head = queue.peek(workstreamId);
    if (head === undefined) {
      if (this.deps.durable !== undefined) void this.pumpDurable(workstreamId);
      return;
    }
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

  /** Turns of these tenants ended (here or on another host): their queued sends held back by the bound try again. */
  tenantFreed(tenantIds: Iterable<string>): void {
    for (const t of tenantIds) {
      const set = this.tenantBlocked.get(t);
      if (set === undefined) continue;
      this.tenantBlocked.delete(t);
      for (const ws of set) this.pump(ws);
    }
  }

  /** A turn ended poisoned — its history still open: sends captured before it cannot start (C7). */
  turnEnded(rec: SessionRecord): void {
    const { queue, logger } = this.deps;
    const state = rec.state;
    if (state !== undefined && state !== 'idle' && state !== 'closed') {
      // The durable queue's waiting sends too: its pump, at this turn's end, would find the debt.
      if (this.deps.durable !== undefined) this.poisoned.add(rec.workstreamId);
      const revoked = queue.fence(rec.workstreamId, queue.ticket(), 'poison');
      if (revoked > 0)
        logger.warn(
          { workstreamId: rec.workstreamId, revoked },
          'queued sends revoked: the turn ended poisoned',
        );
    }
  }

  /**
   * The workstream's oldest send queued durably (cluster mode), started here: taken off the
   * store's queue under this host's lease as its turn is claimed (claim.ts). Another host holding
   * the lease takes it at its turn's end instead. One pump per workstream at a time on this host;
   * a turn it starts pumps again at its end.
   */
  private async pumpDurable(workstreamId: string): Promise<void> {
    const { durable } = this.deps;
    if (durable === undefined) return;
    if (this.pumping.has(workstreamId)) {
      // One runs: it looks again when it is done (this call may have come for a send it missed).
      this.pumpAgain.add(workstreamId);
      return;
    }
    this.pumping.add(workstreamId);
    let again = false;
    try {
      if (this.poisoned.delete(workstreamId)) await durable.revoke(workstreamId, 'poison');
      // A cancel's revocation on its way is durable before a send is taken (C7).
      await durable.revoked(workstreamId);
      // A turn runs here: its end pumps.
      if (this.deps.sessions.peek(workstreamId)?.turn !== undefined) return;
      const row = await durable.next(workstreamId);
      if (row === undefined) return;
      again = await this.startQueued(row);
    } catch (err) {
      this.deps.logger.warn(
        { err, workstreamId },
        'durably queued send not started; the next turn end or poll retries',
      );
    } finally {
      this.pumping.delete(workstreamId);
    }
    if (this.pumpAgain.delete(workstreamId)) again = true;
    if (again) this.pump(workstreamId);
  }

  /** Claims a queued send's turn here; true when the next one should be tried now. */
  private async startQueued(row: Parameters<DurableSends['started']>[0]): Promise<boolean> {
    const { durable, sessions, admission, queue, config } = this.deps;
    const { workstreamId } = row;
    let token: number | undefined;
    const input = durable!.input(row, (t) => {
      token = t;
    });
    const sent = queue.capture(workstreamId);
    let permit: Permit | undefined;
    try {
      // An interrupt's rollback (M4): the cancelled turn's rows go before its send's turn starts,
      // on whichever host starts it (a retry finds them gone: nothing more is removed).
      if (input.rollback !== undefined) await this.deps.rollback?.(workstreamId, input.rollback);
      permit = await admission.acquire(input.tenantId, {
        maxWaitMs: config.admission.maxWaitMs,
        accepted: true,
      });
      const held = permit;
      const rec = sessions.record(workstreamId);
      let turn: Turn | undefined;
      try {
        // A turn started meanwhile: its end pumps again.
        turn = await rec.run(async () =>
          rec.turn !== undefined ? undefined : claim(this.deps.claims, rec, input, () => held),
        );
      } finally {
        sessions.release(rec);
      }
      if (turn === undefined) {
        permit.release();
        return false;
      }
      permit = undefined; // the turn holds it now; its end releases it
      turn.run(sent, input.tools);
      durable!.started(row);
      return false;
    } catch (err) {
      permit?.release();
      // Taken, then its claim failed: the claim answered it with its error under the lease.
      if (token !== undefined) return true;
      // Answered meanwhile: the next one.
      if (err instanceof NotWaiting) return true;
      // Its tenant runs its most turns across the hosts: it waits, pumped again when one ends.
      if (isTurnwardenError(err, ErrorCode.CAPACITY_EXHAUSTED) && err.details?.reason === 'tenant_active') {
        const set = this.tenantBlocked.get(input.tenantId) ?? new Set<string>();
        set.add(workstreamId);
        this.tenantBlocked.set(input.tenantId, set);
        return false;
      }
      // Another host holds it, or this one is stopping or full: the send waits on.
      if (
        isTurnwardenError(err, ErrorCode.LEASED_ELSEWHERE) ||
        isTurnwardenError(err, ErrorCode.SHUTTING_DOWN) ||
        isTurnwardenError(err, ErrorCode.CAPACITY_EXHAUSTED) ||
        isTurnwardenError(err, ErrorCode.QUEUE_FULL) ||
        isTurnwardenError(err, ErrorCode.TURN_IN_PROGRESS)
      )
        return false;
      // Debt (C7's poison), closed, deleted: every waiting send is revoked; else this one is refused.
      if (isTurnwardenError(err, ErrorCode.TOOL_CLEANUP_PENDING))
        await durable!.revoke(workstreamId, 'poison');
      else if (isTurnwardenError(err, ErrorCode.WORKSTREAM_CLOSED))
        await durable!.revoke(workstreamId, 'close');
      else if (isTurnwardenError(err, ErrorCode.WORKSTREAM_NOT_FOUND))
        await durable!.revoke(workstreamId, 'gone');
      else await durable!.refuse(row, err);
      return true;
    } finally {
      queue.settled(sent);
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

  /**
   * T4 across hosts: waits until a turn of the tenant ends on some host, or a lease period passes;
   * past `remainingMs` of waiting in all, CAPACITY_EXHAUSTED (`wait_timeout`). A fence revokes the
   * wait (C7), the signal ends it.
   */
  private async waitForTenant(
    sent: SendClaim,
    tenantId: string,
    signal: AbortSignal | undefined,
    remainingMs: number,
  ): Promise<void> {
    const { slots, queue, logger, admission } = this.deps;
    if (remainingMs <= 0) {
      throw errors.capacityExhausted(
        `tenant ${tenantId} ran its most turns across the cluster's hosts for as long as the send could wait`,
        { reason: 'wait_timeout', tenantId, retryAfterMs: admission.oneTurnRetryAfterMs() },
      );
    }
    logger.debug(
      { workstreamId: sent.workstreamId, tenantId },
      'send waits for a turn of its tenant to end in the cluster',
    );
    await slots!.wait(tenantId, remainingMs, signal, (revoke) => queue.park(sent, revoke));
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

/** M1: what a `reject` send is answered while its workstream is busy. */
function rejected(workstreamId: string) {
  return errors.turnInProgress(
    `workstream ${workstreamId} is busy (a turn runs or sends wait) and the send's double-texting policy is reject`,
    { workstreamId, doubleTexting: 'reject' },
  );
}
