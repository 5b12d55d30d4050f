/**
 * (Over 300 lines on purpose: admission, the per-workstream write queue, its retries and its
 * status are one state machine per journal — the admission must be one synchronous step with the
 * queueing (L3), and the long comment below is the argument for it.)
 *
 * The journal gate: the only path by which anything becomes durable, on the supervisor's thread.
 *
 * **Admission (L3).** A worker's rows are admitted only while their turn is live: the check —
 * no abort committed, the clock slot not fenced, the generation the running one — and the
 * admission are one synchronous step on the thread that also commits aborts, so no commit falls
 * between them. A row admitted before the commit is in flight and lands; a row that arrives
 * after it is refused (FENCED) and never written. This holds whether the store is synchronous
 * or not: what orders a row against the commit is its admission, not its write.
 *
 * **Order (P2).** Every durable write of a workstream — journal rows, session snapshots,
 * repairs, rewrites — goes through one queue per workstream: the next write starts only once
 * the previous one settled. So acceptance order is durable order with any store, and a repair —
 * queued like any write — reads history only once everything admitted before it is durable.
 *
 * **Persistence status (P3, P4).** A batch of rows the store refuses with a transient error
 * (`STORE_ERROR` marked retryable: a busy or locked database, a dropped connection) is retried
 * with jittered exponential backoff, up to `journal.maxAttempts`; inserts are idempotent on the
 * commit key (P1), so a retry after a lost acknowledgement returns the rows already written.
 * Meanwhile the workstream is `retrying` (attempts, next retry time, the error), in `status()`
 * and as a `persistence` event; the rows behind it wait (P2). A maintenance sweep every
 * `journal.sweepMs` retries every batch waiting out its backoff at once. `COMMIT_CONFLICT` (the
 * key holds another body) is `conflict` and never retried. Any other failure is the writer's.
 *
 * **Group commit.** Batches that become ready in the same turn of the event loop — rows of
 * different workstreams arriving together — go to the store in one `appendMany` call: one
 * transaction, each batch in a savepoint of its own, so each is still all-or-nothing and each
 * writer hears exactly when its own rows are durable (or why they are not). A workstream never
 * has two batches in one group out of order: its queue releases the next only when the previous
 * settled (P2). A store without `appendMany` is written batch by batch.
 *
 * **Workstream gone (P5).** A write the store refuses because the workstream no longer exists
 * (deleted under its session) tells the host, which latches the session. Journal rows are then
 * discarded — the write resolves with no seqs, no retry, no error state: the deletion is the
 * event, not a persistence failure. Other writes are discarded the same way when their caller
 * says what a discarded one returns (the finalizers: a turn's end, repair, close); without
 * that, the refusal stands.
 */

import type { JournalAck, JournalEntry, JournalRequest, SessionSnapshotData } from '@turnwarden/protocol';
import {
  ErrorCode,
  errors,
  isTurnwardenError,
  keyWorkstreamId,
  SeamName,
  seam,
  type TurnwardenError,
  toWire,
} from '@turnwarden/protocol';
import type { AppendInput, AppendOutcome, TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { JournalConfig } from '../config.js';
import type { CancelTimer, Timers } from '../liveness/timers.js';
import { outwardWire } from '../names.js';
import type { EventHub } from '../streams/events.js';
import type { Turn } from '../turn/turn.js';
import type { PersistenceStatus } from '../types.js';

export interface GateHost {
  readonly store: Pick<TurnStore, 'appendMessages' | 'appendMany' | 'saveSession'>;
  readonly events: EventHub;
  /** The running turn of a workstream, if any. */
  turnOf(workstreamId: string): Turn | undefined;
  /** Whether the turn's clock slot carries a committed fence. */
  fenced(turn: Turn): boolean;
  /** Counts a refused row. */
  refused(): void;
  /** P5: a write found the workstream deleted (the store refused it with WORKSTREAM_NOT_FOUND). */
  workstreamGone(workstreamId: string): void;
  /** D4: a delete of the workstream is under way: its rows are never written in the background. */
  deleting(workstreamId: string): boolean;
  readonly logger: Logger;
  readonly timers: Timers;
  readonly config: { readonly journal: JournalConfig };
}

/** A workstream's journal while it has rows not yet durable, or a conflict. */
interface Journal {
  pendingRows: number;
  retry:
    | {
        readonly attempts: number;
        readonly nextRetryAt: number;
        readonly error: TurnwardenError;
        /** Ends the backoff now (the sweep). */
        readonly wake: () => void;
      }
    | undefined;
  conflict: TurnwardenError | undefined;
}

/** Batches per group commit at most; the rest go in the next loop turn's. */
const MAX_GROUP = 64;

const retryable = (e: unknown): e is TurnwardenError =>
  isTurnwardenError(e, ErrorCode.STORE_ERROR) && e.retryable;

export interface JournalStats {
  /** Rows admitted and not yet durable, over every workstream. */
  readonly pendingRows: number;
  /** Workstreams whose journal waits out a backoff after a transient store failure. */
  readonly retrying: number;
  /** Workstreams whose journal is in conflict (a commit key holds another row). */
  readonly conflicts: number;
}

export class JournalGate {
  private readonly queues = new Map<string, Promise<unknown>>();
  private readonly journals = new Map<string, Journal>();
  private group: { input: AppendInput; resolve: (seqs: number[]) => void; reject: (e: unknown) => void }[] =
    [];
  private groups = 0;
  private batches = 0;

  constructor(private readonly host: GateHost) {}

  /** P3: `healthy` unless rows are queued or in flight (`pending`), retrying, or in conflict. */
  status(workstreamId: string): PersistenceStatus {
    const j = this.journals.get(workstreamId);
    if (j === undefined) return { state: 'healthy', pendingRows: 0 };
    const { pendingRows, retry, conflict } = j;
    // Read by the host (status(), the persistence event): the error names the workstream by its
    // tenant's id, not the key it was raised with (names.ts).
    const named = (e: unknown) => outwardWire(toWire(e), workstreamId, keyWorkstreamId(workstreamId));
    if (retry) {
      const { attempts, nextRetryAt, error } = retry;
      return { state: 'retrying', pendingRows, attempts, nextRetryAt, error: named(error) };
    }
    if (conflict) return { state: 'conflict', pendingRows, error: named(conflict) };
    return { state: pendingRows > 0 ? 'pending' : 'healthy', pendingRows };
  }

  /** P3 across workstreams: rows not yet durable, and journals retrying or in conflict now. */
  stats(): JournalStats {
    let pendingRows = 0;
    let retrying = 0;
    let conflicts = 0;
    for (const j of this.journals.values()) {
      pendingRows += j.pendingRows;
      if (j.retry) retrying++;
      else if (j.conflict) conflicts++;
    }
    return { pendingRows, retrying, conflicts };
  }

  /**
   * Workstreams the gate keeps state for now: those with rows pending, retrying or in conflict.
   * A healthy workstream's state is dropped, so this never grows with the workstreams a
   * long-lived host has written to (a leak check reads it).
   */
  get tracked(): number {
    return this.journals.size;
  }

  /** P4: every batch waiting out its backoff is retried now; returns their workstreams. */
  sweep(): string[] {
    const woken: string[] = [];
    for (const [workstreamId, j] of this.journals) {
      if (j.retry === undefined) continue;
      j.retry.wake();
      woken.push(workstreamId);
    }
    return woken;
  }

  /**
   * Appends rows through the workstream's queue (P2), retrying transient store failures (P3).
   * Resolves once they are durable; rejects with the store's error when they cannot be.
   */
  append(input: AppendInput): Promise<number[]> {
    const { workstreamId } = input;
    const j = this.journalOf(workstreamId);
    j.pendingRows += input.entries.length;
    return this.write(workstreamId, () => this.persist(j, input)).then(async (seqs) => {
      const held = seam(SeamName.journalDurableToAnnounce, { workstreamId, generation: input.generation });
      if (held !== undefined) await held;
      this.announceRows(workstreamId, input.generation, input.entries, seqs);
      return seqs;
    });
  }

  /**
   * A running turn's session snapshot (a step of its machine that wrote no row), through the
   * workstream's queue (P2) and, where the store can, the group commit: the steps of many turns
   * that arrive together — a burst of workers moving at once — become durable in one transaction,
   * not one each. Fenced like the turn's rows (P6). Resolves undefined when the workstream was
   * deleted meanwhile (P5: the snapshot is discarded).
   */
  saveSession(input: {
    readonly workstreamId: string;
    readonly generation: number;
    readonly fencingToken: number;
    readonly session: SessionSnapshotData;
  }): Promise<void> {
    const { store } = this.host;
    return this.write(
      input.workstreamId,
      () =>
        store.appendMany === undefined
          ? store.saveSession({
              workstreamId: input.workstreamId,
              fencingToken: input.fencingToken,
              session: input.session,
            })
          : this.commit({ ...input, entries: [] }).then(() => undefined),
      () => undefined,
    );
  }

  /**
   * Every row that became durable is announced as a `message` event with its seq — what a
   * listener following a history handoff relies on (E2). Discarded rows (P5) have no seq and
   * are not announced.
   */
  announceRows(
    workstreamId: string,
    generation: number,
    entries: readonly JournalEntry[],
    seqs: readonly number[],
  ): void {
    entries.forEach((entry, i) => {
      const seq = seqs[i];
      if (seq === undefined) return;
      this.host.events.emit(workstreamId, 'message', generation, {
        seq,
        commitKey: entry.commitKey,
        message: entry.message,
      });
    });
  }

  /** The batch is durable or has failed for good: it is no longer pending; then report. */
  private done(j: Journal, input: AppendInput, announce: boolean): void {
    const { workstreamId } = input;
    j.pendingRows -= input.entries.length;
    if (announce) this.announce(workstreamId);
    if (j.pendingRows === 0 && j.conflict === undefined && this.journals.get(workstreamId) === j) {
      this.journals.delete(workstreamId);
    }
  }

  private journalOf(workstreamId: string): Journal {
    let j = this.journals.get(workstreamId);
    if (j === undefined) {
      j = { pendingRows: 0, retry: undefined, conflict: undefined };
      this.journals.set(workstreamId, j);
    }
    return j;
  }

  private async persist(j: Journal, input: AppendInput): Promise<number[]> {
    const { workstreamId } = input;
    const cfg = this.host.config.journal;
    for (let attempt = 1; ; attempt++) {
      // D4: a tombstone never replays rows; the delete decides what remains.
      if (this.host.deleting(workstreamId)) return this.discard(j, input, 'is being deleted');
      try {
        const seqs = await this.commit(input);
        const recovered = j.retry !== undefined || j.conflict !== undefined;
        j.retry = undefined;
        j.conflict = undefined;
        this.done(j, input, recovered);
        return seqs;
      } catch (e) {
        if (isTurnwardenError(e, ErrorCode.WORKSTREAM_NOT_FOUND)) {
          // P5: the workstream was deleted: the rows are discarded, not failed.
          this.host.workstreamGone(workstreamId);
          return this.discard(j, input, 'was deleted');
        }
        if (isTurnwardenError(e, ErrorCode.COMMIT_CONFLICT)) {
          // P1/P3: never retried automatically.
          j.retry = undefined;
          j.conflict = e;
          this.host.logger.error(
            { err: e, workstreamId },
            'journal conflict: a commit key holds another row',
          );
          this.done(j, input, true);
          throw e;
        }
        if (!retryable(e) || attempt >= cfg.maxAttempts) {
          const wasRetrying = j.retry !== undefined;
          j.retry = undefined;
          this.done(j, input, wasRetrying);
          throw e;
        }
        const ceiling = Math.min(cfg.retryMaxMs, cfg.retryBaseMs * 2 ** (attempt - 1));
        const delayMs = Math.max(1, Math.round(ceiling * (0.5 + Math.random() / 2)));
        await new Promise<void>((resolve) => {
          let cancel: CancelTimer = () => {};
          const wake = () => {
            cancel();
            resolve();
          };
          j.retry = { attempts: attempt, nextRetryAt: Date.now() + delayMs, error: e, wake };
          cancel = this.host.timers.after(delayMs, wake);
          this.host.logger.warn(
            { err: e, workstreamId, attempts: attempt, retryInMs: delayMs },
            'journal write failed; retrying',
          );
          this.announce(workstreamId);
        });
      }
    }
  }

  /** The batch will never be written (D4, P5): no longer pending, no error state; no seqs. */
  private discard(j: Journal, input: AppendInput, why: 'was deleted' | 'is being deleted'): number[] {
    const wasRetrying = j.retry !== undefined;
    j.retry = undefined;
    this.host.logger.info(
      { workstreamId: input.workstreamId, rows: input.entries.length },
      `journal rows discarded: the workstream ${why}`,
    );
    this.done(j, input, wasRetrying);
    return [];
  }

  /** One batch's durable write: grouped with the batches ready in this loop turn, if the store can. */
  private commit(input: AppendInput): Promise<number[]> {
    if (this.host.store.appendMany === undefined) return this.host.store.appendMessages(input);
    return new Promise<number[]>((resolve, reject) => {
      this.group.push({ input, resolve, reject });
      this.batches++;
      if (this.group.length === 1) setImmediate(() => this.flush());
    });
  }

  /**
   * One group: at most MAX_GROUP batches in one transaction, in a loop turn of its own. A burst of
   * batches — a thousand workers journaling at once — is written a group per loop turn, so the
   * watchdog's timer runs between two transactions (L12), never after all of them.
   */
  private flush(): void {
    const group = this.group.splice(0, MAX_GROUP);
    if (this.group.length > 0) setImmediate(() => this.flush());
    if (group.length === 0) return;
    this.groups++;
    let written: Promise<AppendOutcome[]>;
    try {
      written = this.host.store.appendMany!(group.map((g) => g.input));
    } catch (err) {
      // A store that throws instead of rejecting: every batch in the group failed.
      for (const g of group) g.reject(err);
      return;
    }
    written.then(
      (outcomes) => {
        group.forEach((g, i) => {
          const o = outcomes[i];
          if (o !== undefined && 'seqs' in o) g.resolve(o.seqs);
          else g.reject(o?.error ?? errors.storeError('appendMany returned no outcome'));
        });
      },
      // The transaction itself failed (the store is down, busy): every batch in it failed.
      (err: unknown) => {
        for (const g of group) g.reject(err);
      },
    );
  }

  /** Group commits so far and the batches they carried (a benchmark reads the ratio). */
  get commitStats(): { readonly groups: number; readonly batches: number } {
    return { groups: this.groups, batches: this.batches };
  }

  private announce(workstreamId: string): void {
    this.host.events.emit(workstreamId, 'persistence', undefined, { ...this.status(workstreamId) });
  }

  /**
   * Runs `write` after every write of the workstream queued before it; the queue moves on when
   * it settles, whatever its outcome. A write that finds the workstream deleted tells the host
   * (P5) and resolves with `onGone()` when given — a finalizer's write is discarded — or rejects.
   */
  write<T>(workstreamId: string, write: () => Promise<T>, onGone?: () => T): Promise<T> {
    const before = this.queues.get(workstreamId) ?? Promise.resolve();
    const guarded = async (): Promise<T> => {
      try {
        return await write();
      } catch (e) {
        if (!isTurnwardenError(e, ErrorCode.WORKSTREAM_NOT_FOUND)) throw e;
        this.host.workstreamGone(workstreamId);
        if (onGone === undefined) throw e;
        return onGone();
      }
    };
    const result = before.then(guarded);
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.queues.set(workstreamId, tail);
    void tail.then(() => {
      if (this.queues.get(workstreamId) === tail) this.queues.delete(workstreamId);
    });
    return result;
  }

  /** Writes queued or in flight, over every workstream (a clean runtime has none between turns). */
  get busy(): number {
    return this.queues.size;
  }

  /** A worker's journal request (HostApi.journal). */
  journal(req: JournalRequest, caughtUp: (turn: Turn, n: number) => Promise<void>): Promise<JournalAck> {
    const { eventsPosted, ...append } = req;
    const turn = this.host.turnOf(req.workstreamId);
    // The turn's earlier events (tokens) reach listeners before the row they make up.
    const caught = turn && eventsPosted !== undefined ? caughtUp(turn, eventsPosted) : Promise.resolve();
    return caught.then(() => {
      const held = seam(SeamName.journalAdmit, {
        workstreamId: req.workstreamId,
        generation: req.generation,
        // What the batch starts with (a harness fault can pick tool results); no allocation.
        firstRole: req.entries[0]?.message.role,
      });
      if (held === undefined) return this.admit(append);
      return held.then(async (fault) => {
        const ack = await this.admit(append);
        if (fault?.kind === 'lose-ack') {
          // Injected: the rows are durable, the worker never hears so (S6, P1 retries).
          throw errors.storeError('journal acknowledgement lost', { injected: true });
        }
        return ack;
      });
    });
  }

  /** L3: rows are admitted from the live turn only — not ended, superseded or abort-committed. */
  protected live(req: Omit<JournalRequest, 'eventsPosted'>): boolean {
    const turn = this.host.turnOf(req.workstreamId);
    return (
      turn !== undefined &&
      turn.generation === req.generation &&
      turn.aborted === undefined &&
      !this.host.fenced(turn)
    );
  }

  /** Admission and queueing: one synchronous step (see the file comment). */
  private admit(req: Omit<JournalRequest, 'eventsPosted'>): Promise<JournalAck> {
    if (!this.live(req)) {
      this.host.refused();
      return Promise.reject(errors.fenced(`turn ${req.generation} of ${req.workstreamId} is no longer live`));
    }
    if (this.host.logger.isLevelEnabled('debug')) {
      // The admission point orders a row against an abort commit (debug; the harness judges it).
      const commitKeys = req.entries.map((e) => e.commitKey);
      this.host.logger.debug(
        { workstreamId: req.workstreamId, generation: req.generation, commitKeys },
        'journal admitted',
      );
    }
    return this.append(req).then((seqs) => ({ seqs }));
  }
}
