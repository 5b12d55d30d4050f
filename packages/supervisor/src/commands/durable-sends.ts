/**
 * Sends queued durably (issue 25): several hosts, any of them accepts any send.
 *
 * In cluster mode a send that meets a turn running on another host (LEASED_ELSEWHERE) does not
 * fail and is not routed into that host's memory: it is queued in the store (`enqueueSend`,
 * bounded by `limits.maxQueuedSends` under the workstream row's lock: QUEUE_FULL), and whichever
 * host holds the workstream when a turn ends takes the oldest waiting one under its lease and
 * runs it (Sends.pump, claim.ts). The order is the store's: sends start in the order they were
 * queued, whichever hosts queued them. A send whose turn has not begun is never lost with a
 * host: the next holder finds it waiting again (`reclaim`, from the failover sweep).
 *
 * The host that queued it — its *origin* — answers its caller: it is told over the cluster's
 * channel when the row changes (`changed`) and re-reads its rows every lease period anyway, so
 * no handle waits on a lost notification. Taken: the send resolves with the turn's generation;
 * done: the turn's `done` resolves with its result; revoked (a cancel, close, delete or poisoned
 * turn end, wherever called: C7) — SEND_REVOKED; withdrawn by its signal — TURN_ABORTED.
 *
 * C7 across hosts: a send is linearized when its enqueue commits, a cancel, close or delete when
 * its revocation does (`revoke`, awaited before a running turn is aborted, so that turn's end
 * cannot take a send the call revokes). T3: only the running turn's principal queues behind it,
 * read from the history's last user row.
 */
import {
  errors,
  fromWire,
  keyTenantId,
  type RevokeReason,
  toWire,
  type WireError,
} from '@turnwarden/protocol';
import { type QueuedSend, type QueuedSends, queuedCommitKey, type Store } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { CancelTimer, Timers } from '../liveness/timers.js';
import { lastUserPrincipal } from '../sessions/last-principal.js';
import type { ClaimInput } from '../turn/claim.js';
import type { ClaimedTurn, TurnResult } from '../types.js';
import { revokedError } from './send-queue.js';

export interface DurableSendsDeps {
  readonly store: QueuedSends & Pick<Store, 'getLease' | 'readHistory' | 'readHistoryTail'>;
  /** This process's lease holder name: the origin its rows carry. */
  readonly holder: string;
  readonly logger: Logger;
  readonly timers: Timers;
  /** How often an origin re-reads its rows (`lease.renewMs`). */
  readonly pollMs: number;
  readonly maxQueued: number;
  /** A tenant's sends waiting on all its workstreams together (`limits.maxQueuedSendsPerTenant`). */
  readonly maxQueuedPerTenant?: number | undefined;
  /** QUEUE_FULL's `retryAfterMs`. */
  readonly retryAfterMs: () => number;
  /** Tells the host `origin` that its rows `ids` changed (the cluster's channel). */
  readonly tell: (origin: string, ids: readonly number[]) => void;
  /** Cancels the workstream's turn of `generation`, wherever it runs (C4: not a later one). */
  readonly cancelTurn: (workstreamId: string, generation: number) => void;
  /** Starts the workstream's next waiting send here, unless a turn runs (Sends.pump). */
  readonly pump: (workstreamId: string) => void;
}

/** What a queued send's body carries. */
interface Body {
  readonly content: string;
  readonly tools?: readonly string[];
  readonly requireApproval?: readonly string[] | 'all';
  /** An interrupt's rollback (M4): the generation whose rows go before this send's turn starts. */
  readonly rollback?: number;
}

/** What its sender is answered. */
type Outcome = { readonly result: TurnResult } | { readonly error: WireError };

interface Waiter {
  readonly id: number;
  readonly workstreamId: string;
  /** The ticket its send was captured at (C7). */
  readonly ticket: number;
  resolve(turn: ClaimedTurn): void;
  reject(err: unknown): void;
  /** Once taken: the turn's `done`, and its generation. */
  finished?: (result: TurnResult) => void;
  generation?: number;
  detach(): void;
}

/** Rows read per store call (the store's bound is 1,000). */
const READ_CHUNK = 500;

/** The result a sender gets for a turn whose host stopped mid-turn (its session was repaired: S7). */
const lostTurn = (workstreamId: string, generation: number): TurnResult => ({
  workstreamId,
  generation,
  status: 'interrupted',
  abortReason: 'lease_lost',
  synthesized: 0,
  workerTerminated: true,
});

export class DurableSends {
  private readonly waiters = new Map<number, Waiter>();
  /** Revocations on their way, per workstream: a pump waits for them before it takes a send (C7). */
  private readonly revoking = new Map<string, Set<Promise<void>>>();
  /** Enqueues on their way, per workstream, by the ticket their send was captured at (C7). */
  private readonly enqueuing = new Map<
    string,
    Set<{ readonly ticket: number; readonly settled: Promise<unknown> }>
  >();
  private stopPoll: CancelTimer | undefined;
  private polling = false;
  private closed = false;

  constructor(private readonly deps: DurableSendsDeps) {}

  /**
   * Queues a send behind a turn another host runs; resolves once a host has taken it (its turn
   * claimed), rejects as a local queued send would (QUEUE_FULL, TURN_IN_PROGRESS for another
   * principal — T3 —, SEND_REVOKED, TURN_ABORTED by its signal).
   */
  enqueue(
    input: ClaimInput,
    signal: AbortSignal | undefined,
    ticket: number,
    /** Told the send's row id once it waits in the store (an interrupt's, M3). */
    queuedAs?: (id: number) => void,
  ): Promise<ClaimedTurn> {
    const { workstreamId } = input;
    const queued = this.queue(input);
    if (queuedAs !== undefined)
      void queued.then(
        ({ row }) => queuedAs(row.id),
        () => undefined,
      );
    // C7: a cancel, close or delete called on this host after the send waits for its enqueue to
    // commit before it revokes, so it revokes this send too (`revoke`).
    const set = this.enqueuing.get(workstreamId) ?? new Set();
    const entry = { ticket, settled: queued.catch(() => undefined) };
    set.add(entry);
    this.enqueuing.set(workstreamId, set);
    void entry.settled.then(() => {
      set.delete(entry);
      if (set.size === 0 && this.enqueuing.get(workstreamId) === set) this.enqueuing.delete(workstreamId);
    });
    return queued.then(async ({ row }) => {
      if (this.closed) {
        // Shutdown began while it was on its way: it never waits here.
        await this.deps.store.withdrawQueuedSend(row.id).catch(() => false);
        throw errors.shuttingDown('turnwarden shut down before the send could start');
      }
      const answered = this.wait(row, signal, ticket);
      // The turn may have ended before the send was queued, leaving nobody to start it: try here.
      this.deps.pump(workstreamId);
      return answered;
    });
  }

  private async queue(input: ClaimInput): Promise<{ readonly row: QueuedSend }> {
    const { store, holder, logger } = this.deps;
    const { workstreamId, principal } = input;
    if (this.closed) throw errors.shuttingDown('turnwarden is shutting down');
    // T3, while a turn runs (somebody holds the lease): its principal is its last user row's.
    const lease = await store.getLease(workstreamId);
    const held = lease !== undefined && !lease.released && lease.expiresAt > Date.now();
    const running = held ? await lastUserPrincipal(store, workstreamId) : undefined;
    if (running !== undefined && running !== principal) {
      throw errors.turnInProgress(
        `workstream ${workstreamId} is running another principal's turn; only its own messages queue behind it`,
      );
    }
    const body: Body = {
      content: input.content,
      ...(input.tools === undefined ? {} : { tools: input.tools }),
      ...(input.requireApproval === undefined ? {} : { requireApproval: input.requireApproval }),
      ...(input.rollback === undefined ? {} : { rollback: input.rollback }),
    };
    const row = await store.enqueueSend({
      workstreamId,
      principal,
      body: JSON.stringify(body),
      origin: holder,
      max: this.deps.maxQueued,
      retryAfterMs: this.deps.retryAfterMs(),
      ...(this.deps.maxQueuedPerTenant === undefined ? {} : { maxPerTenant: this.deps.maxQueuedPerTenant }),
    });
    logger.info({ workstreamId, queuedSend: row.id }, 'send queued durably behind a turn on another host');
    return { row };
  }

  /** The oldest waiting send, as a claim's input — unless another host holds the lease (its turn's end takes it). */
  async next(workstreamId: string): Promise<QueuedSend | undefined> {
    const { store, holder } = this.deps;
    const lease = await store.getLease(workstreamId);
    if (lease !== undefined && !lease.released && lease.holder !== holder && lease.expiresAt > Date.now()) {
      return undefined;
    }
    return store.nextQueuedSend(workstreamId);
  }

  /** The claim input of a queued send, taken as the claim takes its lease (claim.ts). */
  input(row: QueuedSend, took: (token: number) => void): ClaimInput {
    const body = JSON.parse(row.body) as Body;
    let taken: number | undefined;
    return {
      tenantId: keyTenantId(row.workstreamId),
      workstreamId: row.workstreamId,
      content: body.content,
      principal: row.principal,
      ...(body.tools === undefined ? {} : { tools: body.tools }),
      ...(body.requireApproval === undefined ? {} : { requireApproval: body.requireApproval }),
      ...(body.rollback === undefined ? {} : { rollback: body.rollback }),
      queued: {
        commitKey: queuedCommitKey(row.id),
        take: async (token, generation) => {
          const ok = await this.deps.store.takeQueuedSend({
            id: row.id,
            workstreamId: row.workstreamId,
            holder: this.deps.holder,
            token,
            generation,
          });
          if (ok) {
            taken = token;
            took(token);
          }
          return ok;
        },
        // Under the turn's lease: a host that takes the workstream next finds it answered.
        ending: (result) => (taken === undefined ? Promise.resolve() : this.finish(row, taken, { result })),
        failed: (err) =>
          taken === undefined ? Promise.resolve() : this.finish(row, taken, { error: toWire(err) }),
      },
    };
  }

  /** Its turn runs here: the origin is told now (and with the result, as the turn ends: `input`). */
  started(row: QueuedSend): void {
    this.tellOrigin(row);
  }

  /** Refused before it was taken, for itself alone (a malformed script, say): its sender gets the error. */
  async refuse(row: QueuedSend, err: unknown): Promise<void> {
    const answered = await this.deps.store.withdrawQueuedSend(row.id, JSON.stringify({ error: toWire(err) }));
    if (answered) this.tellOrigin(row);
  }

  /**
   * C7: every send waiting on the workstream is revoked — by a cancel, close or delete, on
   * whichever host it runs, or a turn that ended poisoned. Resolves once the revocation is durable.
   */
  revoke(workstreamId: string, reason: RevokeReason, ticket?: number, beforeId?: number): Promise<void> {
    const p = this.revokeNow(workstreamId, reason, ticket, beforeId);
    const set = this.revoking.get(workstreamId) ?? new Set();
    set.add(p);
    this.revoking.set(workstreamId, set);
    const done = () => {
      set.delete(p);
      if (set.size === 0 && this.revoking.get(workstreamId) === set) this.revoking.delete(workstreamId);
    };
    p.then(done, done);
    return p;
  }

  /**
   * C7 for a cancel of one turn through its handle, which found its turn on another host (whose
   * holder revoked the sends waiting there as it aborted the turn): the sends this host was
   * called with before `ticket` — on their way to the queue, or waiting in it — are revoked too,
   * and no later one.
   */
  async revokeEarlier(workstreamId: string, ticket: number): Promise<void> {
    const onTheirWay = [...(this.enqueuing.get(workstreamId) ?? [])].filter((e) => e.ticket < ticket);
    await Promise.all(onTheirWay.map((e) => e.settled));
    const earlier = [...this.waiters.values()].filter(
      (w) => w.workstreamId === workstreamId && w.ticket < ticket && w.finished === undefined,
    );
    if (earlier.length === 0) return;
    const outcome = JSON.stringify({ error: toWire(revokedError(workstreamId, 'cancel')) });
    const revoked: number[] = [];
    for (const w of earlier) if (await this.deps.store.withdrawQueuedSend(w.id, outcome)) revoked.push(w.id);
    if (revoked.length > 0) {
      this.deps.logger.info(
        { workstreamId, revoked: revoked.length, reason: 'cancel' },
        'durably queued sends revoked',
      );
      this.changed(revoked);
    }
  }

  /** Resolves once the revocations of the workstream on their way are durable (or failed). */
  revoked(workstreamId: string): Promise<void> | undefined {
    const set = this.revoking.get(workstreamId);
    return set === undefined ? undefined : Promise.allSettled([...set]).then(() => undefined);
  }

  /** Whether sends wait on the workstream in the store's queue (a new send goes behind them). */
  async waiting(workstreamId: string): Promise<boolean> {
    return (await this.deps.store.countQueuedSends(workstreamId)) > 0;
  }

  private async revokeNow(
    workstreamId: string,
    reason: RevokeReason,
    ticket?: number,
    beforeId?: number,
  ): Promise<void> {
    // Sends this host was called with before the call that revokes (all, for a poisoned end).
    const earlier = [...(this.enqueuing.get(workstreamId) ?? [])].filter(
      (e) => ticket === undefined || e.ticket < ticket,
    );
    if (earlier.length > 0) {
      this.deps.logger.debug(
        { workstreamId, reason, sends: earlier.length },
        'revocation waits for sends queued before it',
      );
      await Promise.all(earlier.map((e) => e.settled));
    }
    const error = revokedError(workstreamId, reason);
    const rows = await this.deps.store.revokeQueuedSends(
      workstreamId,
      JSON.stringify({ error: toWire(error) }),
      beforeId,
    );
    if (rows.length === 0) return;
    this.deps.logger.info({ workstreamId, revoked: rows.length, reason }, 'durably queued sends revoked');
    this.tellOrigins(rows);
  }

  /**
   * A dead holder's sends (the failover sweep, after its repair): a taken one whose turn began
   * is answered as lost with its host, the others wait again; then the queue goes on here.
   */
  async reclaim(workstreamId: string, deadToken: number): Promise<void> {
    const { store, logger } = this.deps;
    const rows = await store.reclaimQueuedSends(
      workstreamId,
      deadToken,
      // The generation is the row's own: each is answered with its turn (`answer`).
      JSON.stringify({ lost: true }),
    );
    if (rows.length > 0) {
      logger.warn(
        { workstreamId, reclaimed: rows.map((r) => `${r.id}:${r.state}`) },
        'durably queued sends of a host that stopped reclaimed',
      );
      this.tellOrigins(rows);
    }
    this.deps.pump(workstreamId);
  }

  /** The origin side: rows of its sends changed (a notification). */
  changed(ids: readonly number[]): void {
    const mine = ids.filter((id) => this.waiters.has(id));
    if (mine.length > 0) void this.read(mine);
  }

  /** Shutdown: sends still waiting are withdrawn (best effort) and refused SHUTTING_DOWN. */
  async stop(): Promise<void> {
    this.closed = true;
    // Enqueues on their way land first (each is then withdrawn and refused below or as it lands).
    await Promise.all([...this.enqueuing.values()].flatMap((set) => [...set].map((e) => e.settled)));
    this.stopPoll?.();
    this.stopPoll = undefined;
    const waiting = [...this.waiters.values()];
    this.waiters.clear();
    for (const w of waiting) {
      w.detach();
      await this.deps.store.withdrawQueuedSend(w.id).catch(() => false);
      w.reject(errors.shuttingDown('turnwarden is shutting down'));
      w.finished?.(lostTurn(w.workstreamId, w.generation ?? 0));
    }
  }

  /** How many sends wait on the workstream, queued on any host (its status). */
  count(workstreamId: string): Promise<number> {
    return this.deps.store.countQueuedSends(workstreamId);
  }

  // ── internals ──────────────────────────────────────────────────────────────

  private wait(row: QueuedSend, signal: AbortSignal | undefined, ticket: number): Promise<ClaimedTurn> {
    return new Promise<ClaimedTurn>((resolve, reject) => {
      const onAbort = () => {
        // Withdrawn if it still waits; once taken, the handle's signal cancels its turn.
        void this.deps.store.withdrawQueuedSend(row.id).then(
          (withdrawn) => {
            if (withdrawn) void this.read([row.id]);
          },
          () => undefined,
        );
      };
      const waiter: Waiter = {
        id: row.id,
        workstreamId: row.workstreamId,
        ticket,
        resolve,
        reject,
        detach: () => signal?.removeEventListener('abort', onAbort),
      };
      this.waiters.set(row.id, waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (signal?.aborted) onAbort();
      this.startPoll();
    });
  }

  /** Every lease period while sends wait: their rows re-read (a notification may be lost). */
  private startPoll(): void {
    if (this.stopPoll !== undefined) return;
    this.stopPoll = this.deps.timers.every(this.deps.pollMs, () => {
      if (this.polling || this.waiters.size === 0) return;
      this.polling = true;
      void this.read([...this.waiters.keys()]).finally(() => {
        this.polling = false;
      });
    });
  }

  private async read(all: readonly number[]): Promise<void> {
    for (let i = 0; i < all.length; i += READ_CHUNK) await this.readChunk(all.slice(i, i + READ_CHUNK));
  }

  private async readChunk(ids: readonly number[]): Promise<void> {
    let rows: QueuedSend[];
    try {
      rows = await this.deps.store.readQueuedSends(ids);
    } catch (err) {
      this.deps.logger.warn({ err }, 'queued sends not read; will retry');
      return;
    }
    const found = new Set(rows.map((r) => r.id));
    const answered: number[] = [];
    for (const id of ids) {
      const w = this.waiters.get(id);
      if (w === undefined) continue;
      const row = rows.find((r) => r.id === id);
      // Gone with its workstream (deleted: D1).
      if (!found.has(id) || row === undefined) {
        this.settle(w, { error: toWire(revokedError(w.workstreamId, 'gone')) });
        continue;
      }
      if (this.answer(w, row)) answered.push(id);
    }
    if (answered.length > 0) {
      await this.deps.store.dropQueuedSends(answered).catch(() => undefined);
    }
    if (this.waiters.size === 0) {
      this.stopPoll?.();
      this.stopPoll = undefined;
    }
    // Waiting ones whose workstream nobody holds: started here (a holder that stopped before
    // its turn's end took them; the sweep's reclaim does it too, this is the origin's own net).
    for (const r of rows) if (r.state === 'waiting') this.deps.pump(r.workstreamId);
  }

  /** Applies a row's state to its waiter; true once it is answered for good. */
  private answer(w: Waiter, row: QueuedSend): boolean {
    switch (row.state) {
      case 'waiting':
        return false;
      case 'taken':
        this.start(w, row);
        return false;
      case 'done': {
        this.start(w, row);
        const outcome = JSON.parse(row.outcome ?? '{}') as Outcome | { lost: true };
        const generation = row.generation ?? 0;
        if ('result' in outcome) w.finished?.(outcome.result);
        else if ('error' in outcome)
          // Taken, then its claim failed before the turn began: nothing of it was written.
          w.finished?.({
            workstreamId: row.workstreamId,
            generation,
            status: 'failed',
            error: outcome.error,
            synthesized: 0,
            workerTerminated: false,
          });
        else w.finished?.(lostTurn(row.workstreamId, generation));
        this.waiters.delete(w.id);
        return true;
      }
      case 'revoked':
      case 'withdrawn': {
        const outcome = row.outcome === undefined ? undefined : (JSON.parse(row.outcome) as Outcome);
        this.settle(
          w,
          outcome !== undefined && 'error' in outcome
            ? outcome
            : {
                error: toWire(
                  errors.turnAborted(
                    'the send was withdrawn by its signal while it waited for the turn before it',
                  ),
                ),
              },
        );
        return true;
      }
    }
  }

  /** Taken: the send resolves with its turn (once). */
  private start(w: Waiter, row: QueuedSend): void {
    if (w.finished !== undefined) return;
    w.detach();
    const generation = row.generation ?? 0;
    let finished!: (r: TurnResult) => void;
    const done = new Promise<TurnResult>((r) => {
      finished = r;
    });
    w.finished = finished;
    w.generation = generation;
    w.resolve({
      workstreamId: row.workstreamId,
      generation,
      done,
      cancel: () => this.deps.cancelTurn(row.workstreamId, generation),
    });
  }

  /** Answered before it was taken: refused with its error. */
  private settle(w: Waiter, outcome: { readonly error: WireError }): void {
    this.waiters.delete(w.id);
    w.detach();
    if (w.finished !== undefined) {
      // Taken, then gone with its workstream: the turn ended with it.
      w.finished(lostTurn(w.workstreamId, w.generation ?? 0));
      return;
    }
    w.reject(fromWire(outcome.error));
  }

  /**
   * Records the outcome under the lease it was taken by; rejects when the store could not (the
   * turn then leaves its lease to expire, so the failover sweep answers the send: Turn.settle).
   */
  private async finish(row: QueuedSend, token: number, outcome: Outcome): Promise<void> {
    if (await this.deps.store.finishQueuedSend(row.id, token, JSON.stringify(outcome))) this.tellOrigin(row);
  }

  private tellOrigin(row: QueuedSend): void {
    this.tellOrigins([row]);
  }

  private tellOrigins(rows: readonly QueuedSend[]): void {
    const by = new Map<string, number[]>();
    for (const r of rows) by.set(r.origin, [...(by.get(r.origin) ?? []), r.id]);
    for (const [origin, ids] of by) {
      if (origin === this.deps.holder) this.changed(ids);
      else this.deps.tell(origin, ids);
    }
  }
}
