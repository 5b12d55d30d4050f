/**
 * A turn on the supervisor's side: the one owner of its lifecycle, from claim to outcome. It
 * holds the admission permit, the lease and its renewal, the worker, the clock slot and the
 * watchdog's watch, the grace timer; its phase (types.ts) says what may happen next:
 *   admitted ─run─▶ running ─(worker returned)─▶ settling ─▶ done
 *      └────abort────┴─▶ aborting ─(returned, died or never ran)─┘
 * `abort` is the one way an abort commits — watchdog, cancel, shutdown, lease loss, delete, the
 * worker's death (T7) — once. The end runs in the session's mailbox: the machine to idle
 * (settle.ts, abandon.ts), the lease released, the worker back or retired, the permit freed,
 * `stream_end` and `idle`, then `done` and `outcome`. A failing end still ends (`failed`):
 * `done` never hangs, and shutdown waits on it.
 */
import { isFenced } from '@turnwarden/clock';
import { type AbandonReason, type TurnOutcome, toWire } from '@turnwarden/protocol';
import type { Lease } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { Permit } from '../capacity/admission.js';
import type { WorkerHandle } from '../capacity/pool.js';
import type { SendClaim } from '../commands/send-queue.js';
import { LogMessage } from '../liveness/reporting.js';
import type { CancelTimer } from '../liveness/timers.js';
import type { WatchedTurn } from '../liveness/watchdog.js';
import type { ModelCall } from '../models/threads.js';
import type { SessionRecord } from '../sessions/sessions.js';
import type { ClaimedTurn, TurnResult } from '../types.js';
import { variant } from '../variants.js';
import { announceAbort } from './abort.js';
import { approvalToken } from './approval-token.js';
import { dispatch } from './dispatch.js';
import { LeaseRenewal } from './renewal.js';
import { settle } from './settle.js';
import {
  type AbortInfo,
  type AbortRecord,
  endOf,
  PHASE_STEPS,
  type TurnEnd,
  type TurnHost,
  type TurnInit,
  type TurnPhase,
} from './types.js';
import { onWorkerEvent } from './worker-events.js';

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

export class Turn {
  readonly workstreamId: string;
  readonly tenantId: string;
  readonly principal: string;
  readonly permit: Permit;
  readonly generation: number;
  readonly lease: Lease;
  readonly worker: WorkerHandle;
  readonly watched: WatchedTurn;
  readonly log: Logger;
  readonly done: Promise<TurnResult>;
  readonly outcome: Promise<TurnEnd>;
  private current: TurnPhase = 'admitted';
  private abortRecord: AbortRecord | undefined;
  private readonly renewal: LeaseRenewal;
  private cancelGrace: CancelTimer | undefined;
  private terminated = false;
  private reclaimed = false;
  private readonly rewrites = new Set<Promise<unknown>>();
  /** The model call running on a shared model thread (`shared` placement), if any. */
  private modelCall: ModelCall | undefined;
  private watching = true;
  private readonly resolveDone: (result: TurnResult) => void;
  private readonly resolveOutcome: (end: TurnEnd) => void;

  /** Arms the turn: the clock slot at its generation, the watchdog's watch, the slot, renewal. */
  constructor(
    private readonly host: TurnHost,
    private readonly rec: SessionRecord,
    private readonly init: TurnInit,
  ) {
    const { workstreamId } = rec;
    const { tenantId, principal, generation, worker } = init;
    this.workstreamId = workstreamId;
    this.tenantId = tenantId;
    this.principal = principal;
    this.permit = init.permit;
    this.generation = generation;
    this.lease = init.lease;
    this.worker = worker;
    host.clock.arm(worker.slot, generation);
    // The threads the turn's progress depends on: its worker's, and the shared model thread
    // running its model call while one runs — read by the watchdog only once the turn is long
    // silent (a starved thread is not a stalled turn).
    this.watched = host.watchdog.watch({
      slot: worker.slot,
      workstreamId,
      tenantId,
      generation,
      threads: () => {
        const tids: number[] = [];
        if (worker.tid !== undefined) tids.push(worker.tid);
        const model = this.modelCall?.tid;
        if (model !== undefined) tids.push(model);
        return tids;
      },
    });
    this.log = host.logger.child({ workstreamId, tenantId, principal, generation });
    const done = deferred<TurnResult>();
    const outcome = deferred<TurnEnd>();
    this.done = done.promise;
    this.resolveDone = done.resolve;
    this.outcome = outcome.promise;
    this.resolveOutcome = outcome.resolve;
    // The one place a turn is attached: its session, its slot, its worker's events.
    rec.turn = this;
    host.slots.attach(this);
    worker.onEvent = (event) => onWorkerEvent(host, rec, this, event);
    host.counters.turnsStarted++;
    // Built through `variant`: the harness build may swap in a broken renewal (variants.ts).
    this.renewal = new (variant(LeaseRenewal))(host, this);
    this.renewal.start();
  }

  get phase(): TurnPhase {
    return this.current;
  }

  /** The committed abort, if any. */
  get aborted(): AbortRecord | undefined {
    return this.abortRecord;
  }

  /**
   * An abort of the turn has committed: recorded here, or — by the watchdog on its own thread,
   * whose report has not arrived yet — set on the turn's clock slot (the fence is the commit, L6).
   */
  get fenced(): boolean {
    if (this.abortRecord !== undefined) return true;
    return !this.ending && isFenced(this.host.clock.sample(this.worker.slot));
  }

  /** The turn's end has begun: no task, event or renewal of it counts any more. */
  get ending(): boolean {
    return this.current === 'settling' || this.current === 'done';
  }

  get renewing(): boolean {
    return this.renewal.running;
  }

  /** The worker was terminated after the grace period (L3). */
  get workerTerminated(): boolean {
    return this.terminated;
  }

  /** History rewrites in flight under the turn's lease: its end waits for them (L8). */
  get rewritesInFlight(): number {
    return this.rewrites.size;
  }

  /** Sends the turn to its worker (dispatch.ts); its end follows in the session's mailbox. */
  run(claim: SendClaim, tools: readonly string[] | undefined): ClaimedTurn {
    const { history, user, claimed, resume } = this.init;
    dispatch(this.host, this, { claim, tools, history, user, claimed, ...(resume ? { resume } : {}) })
      .then(
        // The worker reported the turn done: nothing of it can stall any more, so the watchdog
        // stops watching now, not once its end had its turn in the mailbox. Every event the
        // worker posted before returning is delivered before the turn ends.
        (outcome) => {
          this.unwatch();
          return this.worker.caughtUp(outcome.eventsPosted).then(() => this.end(outcome, undefined));
        },
        (err: unknown) => this.end(undefined, err),
      )
      .catch((err: unknown) => this.fail(err, 'turn dispatch failed'));
    return { workstreamId: this.workstreamId, generation: this.generation, done: this.done };
  }

  /** The dispatch is sending the turn to its worker. */
  dispatched(): void {
    this.to('running');
  }

  /**
   * Commits the turn's abort, once; returns whether this call committed it. The watchdog's CAS
   * has set the fence already (`info.stall`); any other reason sets it unconditionally. Order
   * matters: renewal stops first (L3), then the definitive stage (L5, abort.ts), then the grace
   * timer. A dead worker has nothing to tell and nothing to wait for: it is terminated (T7).
   * Once the turn's end has begun, nothing is aborted any more.
   */
  abort(reason: AbandonReason, info: AbortInfo = {}): boolean {
    if (this.abortRecord !== undefined || !PHASE_STEPS[this.current].includes('aborting')) return false;
    const fenced = info.stall !== undefined || this.host.clock.fence(this.worker.slot);
    if (!fenced && reason !== 'crash') return false;
    this.abortRecord = { reason, at: this.host.clock.nowMs() };
    this.to('aborting');
    this.renewal.aborted();
    if (reason === 'crash') {
      this.modelCall?.abort(reason);
      this.host.counters.workersCrashed++;
      this.log.error({ err: info.error }, LogMessage.workerDied);
      void this.host.pool.terminate(this.worker);
      return true;
    }
    this.host.counters.abortsCommitted++;
    announceAbort(this.host, this.rec, this, reason, info.stall);
    if (this.modelCall !== undefined) {
      // The abort reaches the model's request on its shared thread too (the worker is told
      // above). The worker was only asleep on the call: it ran nothing that could leak, and is kept.
      this.modelCall.abort(reason);
      this.reclaimWork();
    }
    this.cancelGrace = this.host.timers.after(this.host.config.watchdog.graceMs, () => this.escalate());
    return true;
  }

  /** L3: the turn did not unwind within graceMs — terminate its worker. */
  escalate(): void {
    if (this.ending) return;
    this.terminated = true;
    this.host.counters.workersTerminated++;
    this.log.warn(
      { graceMs: this.host.config.watchdog.graceMs, workerId: this.worker.id },
      LogMessage.graceExpired,
    );
    void this.host.pool.terminate(this.worker);
  }

  /**
   * A model call of the turn started on a shared model thread: the turn's abort and its end
   * reach the call's request. A call that starts after the abort committed is aborted at once.
   */
  modelCallStarted(call: ModelCall): void {
    this.modelCall = call;
    this.host.watchdog.threadsChanged?.(this.watched);
    if (this.abortRecord !== undefined) call.abort(this.abortRecord.reason);
    else if (this.ending) call.abort('ended');
  }

  modelCallEnded(call: ModelCall): void {
    if (this.modelCall !== call) return;
    this.modelCall = undefined;
    this.host.watchdog.threadsChanged?.(this.watched);
  }

  /** Work it handed elsewhere (an isolated task, a host tool call) was cancelled, or it never reached its worker: the worker holds no leaked work and is kept. */
  reclaimWork(): void {
    this.reclaimed = true;
  }

  /** A history rewrite admitted under the turn's lease: its end waits for it (L8). */
  holdEndFor<T>(rewrite: Promise<T>): Promise<T> {
    this.rewrites.add(rewrite);
    return rewrite.finally(() => this.rewrites.delete(rewrite));
  }

  /** The rewrites in flight now. */
  rewritesPending(): Promise<unknown>[] {
    return [...this.rewrites];
  }

  private to(next: TurnPhase): void {
    if (!PHASE_STEPS[this.current].includes(next)) {
      throw new Error(
        `turn ${this.generation} of ${this.workstreamId}: ${this.current} → ${next} is not a step`,
      );
    }
    this.current = next;
  }

  /** In the session's mailbox, on a loop turn of its own: an abort storm's ends do not block the watchdog's timer (L12). */
  private end(outcome: TurnOutcome | undefined, err: unknown): void {
    const { rec, host } = this;
    rec
      .run(async () => {
        await this.settle(outcome, err);
        host.turnEnded(rec);
      })
      .catch((e: unknown) => {
        this.fail(e, 'turn finish failed');
        host.turnEnded(rec);
      })
      .finally(() => {
        host.sessions.release(rec);
        host.pump(this.workstreamId);
      });
  }

  private async settle(outcome: TurnOutcome | undefined, err: unknown): Promise<void> {
    const { host, log } = this;
    const workerGone = outcome === undefined;
    // T7: the worker died under a live turn — a committed abort like any other.
    if (workerGone) this.abort('crash', { error: err });
    this.to('settling');
    this.renewal.stop();
    this.cancelGrace?.();
    // Work handed to the supervisor's side ends with the turn (isolated tasks' threads terminated).
    host.isolation.cancelTurn(this);
    host.hostTools.cancelTurn(this);
    this.modelCall?.abort('ended');
    this.unwatch();
    const { status, synthesized } = await settle(host, this.rec, this, outcome);
    const awaiting = status === 'awaiting_approval' ? outcome?.approval : undefined;
    const approval =
      awaiting === undefined
        ? undefined
        : {
            token: approvalToken(this.generation, awaiting.callIndex, awaiting.nonce),
            callIndex: awaiting.callIndex,
            callId: awaiting.call.id,
            name: awaiting.call.name,
            arguments: awaiting.call.arguments,
            expiresAt: awaiting.expiresAt,
          };
    const error = outcome?.error ?? (err === undefined ? undefined : toWire(err));
    const abortReason = this.abortRecord?.reason ?? outcome?.abortReason;
    const workerTerminated = this.terminated || workerGone;
    const end: Omit<TurnResult, 'workstreamId' | 'generation'> = {
      status,
      ...(outcome?.finalText === undefined ? {} : { finalText: outcome.finalText }),
      ...(abortReason === undefined ? {} : { abortReason }),
      ...(error === undefined ? {} : { error }),
      synthesized,
      workerTerminated,
      ...ranOn(host),
      ...(approval === undefined ? {} : { approval }),
    };
    // C3: stream_end then idle, before any successor turn can publish — on any host: emitted
    // while the lease is held and, in cluster mode, in the relay before it goes (cluster.ts). A
    // turn that waits for an approval says what waits instead of idle: the session is not idle.
    if (approval !== undefined) {
      host.events.emit(this.workstreamId, 'approval_requested', this.generation, approval);
      host.approvals?.waiting(this.workstreamId, awaiting!.nonce, approval.expiresAt);
    }
    host.events.emit(this.workstreamId, 'stream_end', this.generation, { status });
    if (approval === undefined) host.events.emit(this.workstreamId, 'idle', this.generation, {});
    await host
      .published?.()
      .catch((e: unknown) => log.warn({ err: e }, 'events not relayed before the lease went'));
    // Told under the lease, before it goes (a durably queued send's outcome: P6 fences it). Not
    // recorded: the lease is left to expire, so the failover sweep answers the send (S7).
    const recorded = await (
      this.init.ending?.({ workstreamId: this.workstreamId, generation: this.generation, ...end }) ??
      Promise.resolve()
    ).then(
      () => true,
      (e: unknown) => {
        log.warn({ err: e }, 'turn result not recorded for its queued send; its lease is left to expire');
        return false;
      },
    );
    if (recorded) {
      await host.store.releaseLease(this.workstreamId, host.holder, this.lease.token).catch((e: unknown) => {
        log.warn({ err: e }, 'lease release failed; it will expire');
        return false;
      });
    }
    this.detach();
    if (!workerGone && !this.terminated) {
      // Only a worker whose turn completed goes back to the pool; one that was aborted or failed
      // may hold leaked work and is retired (replaced in the background) — unless the turn's
      // work was reclaimed (it was only waiting on an isolated task or a host tool, now cancelled).
      if (status === 'completed' || approval !== undefined || this.reclaimed) host.pool.release(this.worker);
      else host.pool.retire(this.worker);
    }
    // T4: the permit frees only now: the next turn admitted finds the worker back (or retiring).
    this.permit.release();
    if (status === 'completed') host.counters.turnsCompleted++;
    else if (status === 'awaiting_approval') host.counters.turnsAwaitingApproval++;
    else if (status === 'interrupted') host.counters.turnsInterrupted++;
    else host.counters.turnsFailed++;
    log.info({ status, synthesized, workerTerminated }, 'turn finished');
    this.finish(end);
  }

  /** The turn's end failed unexpectedly: it is ended all the same — `done` never hangs, nor its permit. */
  private fail(err: unknown, message: string): void {
    if (this.current === 'done') return;
    this.log.error({ err }, message);
    this.modelCall?.abort('ended');
    this.unwatch();
    this.detach();
    this.permit.release(); // idempotent: the end may have released it already
    this.finish({
      status: 'failed',
      error: toWire(err),
      synthesized: 0,
      workerTerminated: this.terminated,
      ...ranOn(this.host),
    });
  }

  private unwatch(): void {
    if (!this.watching) return;
    this.watching = false;
    this.host.watchdog.unwatch(this.watched);
  }

  private detach(): void {
    this.host.slots.detach(this);
    if (this.rec.turn === this) this.rec.turn = undefined;
  }

  private finish(end: Omit<TurnResult, 'workstreamId' | 'generation'>): void {
    this.to('done');
    const result: TurnResult = { workstreamId: this.workstreamId, generation: this.generation, ...end };
    this.resolveDone(result);
    this.resolveOutcome(endOf(result, this.abortRecord?.reason === 'crash'));
  }
}

/** The result's `host`: the host's id, where it has one. */
function ranOn(host: TurnHost): { host?: string } {
  const id = host.config.hostId;
  return id === undefined ? {} : { host: id };
}
