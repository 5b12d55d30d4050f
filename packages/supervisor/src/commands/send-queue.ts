/**
 * (Over 300 lines on purpose: claims, fences and the queue they revoke are one ticket order —
 * C7 holds only if all three are read against the same counter.)
 *
 * Dispatch order and the send queue (C7).
 *
 * A send captures a *claim* the moment the host calls it: a ticket from one counter. A force
 * cancel (of the workstream or of its running turn), an admitted close and a turn that ends
 * *poisoned* — its history could not be made complete (S3, S5) — fence the workstream with a
 * ticket of their own, taken when they happen (a cancel or close: when the host called it). A
 * claim captured before a fence can neither enqueue nor start a turn after it: it is refused
 * with SEND_REVOKED (nothing written). One captured after the fence may. A turn starting
 * normally is not a fence: a send queued behind it stays valid.
 *
 * A cancel, close or delete the host called is *announced* at once (`announce`), before its
 * ownership check (T2) has come back from the store: a turn whose claim came first waits at its
 * dispatch until every such call announced after its claim has done what the turn must see (a
 * cancel: its abort committed) or was refused, and is not sent to its worker if it was aborted.
 * So a cancel takes effect as of the host's call even when the store answers slowly — and another
 * tenant's cancel, refused, changes nothing (it may only delay that dispatch by one store read).
 *
 * While a turn runs (or sends wait before it), a send waits in a bounded FIFO queue per
 * workstream and starts once the turns before it have ended; a full queue refuses with
 * QUEUE_FULL (retryable, nothing written). A waiting send ends early by its signal (withdrawn)
 * or by shutdown. The queue holds claims and input only; the turn itself is claimed by the
 * session's mailbox when its turn comes (claim.ts), revalidated there.
 */
import { errors, type RevokeReason, type TurnwardenError } from '@turnwarden/protocol';
import type { ClaimInput } from '../turn/claim.js';
import type { ClaimedTurn } from '../types.js';

/** What fenced a workstream's earlier claims (SEND_REVOKED's `details.reason`). */
export type FenceReason = RevokeReason;

/** A send's claim: its workstream and the moment (ticket) it was captured. */
export interface SendClaim {
  readonly workstreamId: string;
  readonly ticket: number;
}

export interface Waiting {
  readonly claim: SendClaim;
  readonly input: ClaimInput;
  resolve(turn: ClaimedTurn): void;
  reject(err: unknown): void;
}

/** A cancel, close or delete the host called, on its way (see `announce`). */
export interface Announced {
  /** Its fence's ticket, taken as the host called. */
  readonly ticket: number;
  /**
   * It has done what a turn being dispatched must see (a cancel: its abort committed), or it was
   * refused: a dispatch waiting on it goes on. Idempotent.
   */
  done(): void;
}

interface Pending {
  readonly ticket: number;
  readonly settled: Promise<void>;
  readonly resolve: () => void;
}

interface Entry extends Waiting {
  /** Stops listening to the send's signal. */
  detach(): void;
}

const WHY: Record<FenceReason, string> = {
  cancel: 'the workstream was cancelled after it was sent',
  close: 'the workstream was closed after it was sent',
  poison: 'the turn before it ended with tool calls it could not complete (cancel() repairs them)',
  gone: 'the workstream was deleted',
};

export class SendQueue {
  private ticketCounter = 0;
  /** The latest fence per workstream, kept only while claims captured before it are outstanding. */
  private readonly fences = new Map<string, { readonly ticket: number; readonly reason: FenceReason }>();
  private readonly outstanding = new Map<string, number>();
  private readonly queues = new Map<string, Entry[]>();
  /** Sends waiting for a session worker (admission, T4): revoked by a fence like queued ones. */
  private readonly parked = new Map<string, Set<{ readonly ticket: number; revoke(err: unknown): void }>>();
  /** Fences the host called, not applied or refused yet (`announce`). */
  private readonly announced = new Map<string, Set<Pending>>();

  constructor(
    private readonly maxPerWorkstream: number,
    /** QUEUE_FULL's `retryAfterMs`: how long until a turn ends and frees a place (T4's hold estimate). */
    private readonly retryAfterMs: () => number,
  ) {}

  /** A ticket for an event that fences (a cancel or close call): take it when the host calls. */
  ticket(): number {
    return ++this.ticketCounter;
  }

  /**
   * A cancel, close or delete the host is calling: its fence's ticket, taken now, and what to
   * call once it has done what a dispatch must see, or was refused. Until then a dispatch whose
   * claim was captured before it waits (`announcedAfter`), so it never sends a turn to its worker
   * that the call aborts (C7).
   */
  announce(workstreamId: string, ticket: number = this.ticket()): Announced {
    let resolve!: () => void;
    const settled = new Promise<void>((r) => {
      resolve = r;
    });
    const pending: Pending = { ticket, settled, resolve };
    const set = this.announced.get(workstreamId) ?? new Set<Pending>();
    set.add(pending);
    this.announced.set(workstreamId, set);
    return { ticket, done: () => this.settle(workstreamId, pending) };
  }

  /**
   * C7: resolves once every call announced after `claim` was captured is done; undefined when
   * none is on its way (the common case costs no await).
   */
  announcedAfter(claim: SendClaim): Promise<void> | undefined {
    const later = [...(this.announced.get(claim.workstreamId) ?? [])].filter((p) => p.ticket > claim.ticket);
    return later.length === 0 ? undefined : Promise.all(later.map((p) => p.settled)).then(() => {});
  }

  private settle(workstreamId: string, pending: Pending): void {
    const set = this.announced.get(workstreamId);
    if (set === undefined || !set.delete(pending)) return;
    if (set.size === 0) this.announced.delete(workstreamId);
    pending.resolve();
  }

  /** Captures a send's claim; `settled` must be called once the send is answered. */
  capture(workstreamId: string): SendClaim {
    this.outstanding.set(workstreamId, (this.outstanding.get(workstreamId) ?? 0) + 1);
    return { workstreamId, ticket: this.ticket() };
  }

  settled(claim: SendClaim): void {
    const n = (this.outstanding.get(claim.workstreamId) ?? 1) - 1;
    if (n > 0) {
      this.outstanding.set(claim.workstreamId, n);
    } else {
      this.outstanding.delete(claim.workstreamId);
      this.fences.delete(claim.workstreamId);
    }
  }

  /**
   * Fences the workstream at `ticket`: claims captured before it are revoked — waiting ones at
   * once, the others where they would enqueue or start. Returns how many waiting sends it revoked.
   */
  fence(workstreamId: string, ticket: number, reason: FenceReason): number {
    if (this.outstanding.has(workstreamId)) {
      const last = this.fences.get(workstreamId);
      if (last === undefined || last.ticket < ticket) this.fences.set(workstreamId, { ticket, reason });
    }
    return this.revokeBefore(workstreamId, ticket, reason);
  }

  /** Revokes the sends waiting on the workstream whose claims were captured before `ticket`. */
  protected revokeBefore(workstreamId: string, ticket: number, reason: FenceReason): number {
    let parked = 0;
    for (const p of this.parked.get(workstreamId) ?? []) {
      if (p.ticket >= ticket) continue;
      parked++;
      p.revoke(revokedError(workstreamId, reason));
    }
    const queue = this.queues.get(workstreamId);
    if (queue === undefined) return parked;
    const revoked = queue.filter((e) => e.claim.ticket < ticket);
    if (revoked.length === 0) return parked;
    this.setQueue(
      workstreamId,
      queue.filter((e) => e.claim.ticket >= ticket),
    );
    for (const e of revoked) {
      e.detach();
      e.reject(revokedError(workstreamId, reason));
    }
    return parked + revoked.length;
  }

  /**
   * A send waiting elsewhere — for a session worker — is revoked by a later fence too: `revoke`
   * is called with SEND_REVOKED. Returns what stops it (call it once the wait ends).
   */
  park(claim: SendClaim, revoke: (err: unknown) => void): () => void {
    const { workstreamId } = claim;
    const entry = { ticket: claim.ticket, revoke };
    const set = this.parked.get(workstreamId) ?? new Set();
    set.add(entry);
    this.parked.set(workstreamId, set);
    return () => {
      set.delete(entry);
      if (set.size === 0 && this.parked.get(workstreamId) === set) this.parked.delete(workstreamId);
    };
  }

  /** C7: throws SEND_REVOKED when a fence came after the claim was captured. */
  check(claim: SendClaim): void {
    const reason = this.fencedSince(claim);
    if (reason !== undefined) throw revokedError(claim.workstreamId, reason);
  }

  /** What fenced the workstream after the claim was captured, if anything did. */
  fencedSince(claim: SendClaim): FenceReason | undefined {
    const fence = this.fences.get(claim.workstreamId);
    return fence !== undefined && fence.ticket > claim.ticket ? fence.reason : undefined;
  }

  /** Sends waiting on the workstream. */
  depth(workstreamId: string): number {
    return this.queues.get(workstreamId)?.length ?? 0;
  }

  /** Every waiting send, across workstreams. */
  get total(): number {
    let n = 0;
    for (const q of this.queues.values()) n += q.length;
    return n;
  }

  /**
   * Queues a send behind the running turn. Refused with QUEUE_FULL when the workstream's queue
   * is full. The promise settles when the send's turn is claimed (or it is refused, revoked,
   * withdrawn by its signal).
   */
  enqueue(claim: SendClaim, input: ClaimInput, signal: AbortSignal | undefined): Promise<ClaimedTurn> {
    const { workstreamId } = claim;
    const queue = this.queues.get(workstreamId) ?? [];
    if (queue.length >= this.maxPerWorkstream) {
      throw errors.queueFull(
        `${queue.length} sends already wait on ${workstreamId} (limits.maxQueuedSends); retry when its turn ends`,
        { limit: this.maxPerWorkstream, retryAfterMs: this.retryAfterMs() },
      );
    }
    return new Promise<ClaimedTurn>((resolve, reject) => {
      const onAbort = () => {
        if (!this.remove(entry)) return;
        reject(
          errors.turnAborted('the send was withdrawn by its signal while it waited for the turn before it'),
        );
      };
      const entry: Entry = {
        claim,
        input,
        resolve,
        reject,
        detach: () => signal?.removeEventListener('abort', onAbort),
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      queue.push(entry);
      this.queues.set(workstreamId, queue);
    });
  }

  /** The next waiting send of the workstream, left on its queue. */
  peek(workstreamId: string): Waiting | undefined {
    return this.queues.get(workstreamId)?.[0];
  }

  /** The next waiting send of the workstream, taken off its queue (its signal no longer heard). */
  shift(workstreamId: string): Waiting | undefined {
    const queue = this.queues.get(workstreamId);
    const entry = queue?.shift();
    if (queue !== undefined) this.setQueue(workstreamId, queue);
    entry?.detach();
    return entry;
  }

  /** Refuses every waiting send (shutdown). */
  rejectAll(err: () => unknown): void {
    const all = [...this.queues.values()].flat();
    this.queues.clear();
    for (const e of all) {
      e.detach();
      e.reject(err());
    }
  }

  /**
   * How many workstreams each of its maps holds an entry for: what it keeps must go with the
   * claims, fences, calls and sends that needed it (a leak check for tests).
   */
  held(): { fences: number; outstanding: number; queues: number; parked: number; announced: number } {
    return {
      fences: this.fences.size,
      outstanding: this.outstanding.size,
      queues: this.queues.size,
      parked: this.parked.size,
      announced: this.announced.size,
    };
  }

  private remove(entry: Entry): boolean {
    const queue = this.queues.get(entry.claim.workstreamId);
    const at = queue?.indexOf(entry) ?? -1;
    if (queue === undefined || at < 0) return false;
    queue.splice(at, 1);
    this.setQueue(entry.claim.workstreamId, queue);
    entry.detach();
    return true;
  }

  private setQueue(workstreamId: string, queue: Entry[]): void {
    if (queue.length === 0) this.queues.delete(workstreamId);
    else this.queues.set(workstreamId, queue);
  }
}

export function revokedError(workstreamId: string, reason: FenceReason): TurnwardenError {
  return errors.sendRevoked(
    `the send to ${workstreamId} did not start: ${WHY[reason]}; nothing was written`,
    { reason },
  );
}
