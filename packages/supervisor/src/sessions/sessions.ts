/**
 * The supervisor's side of the session actors. A session that is neither claimed, running nor
 * holding unrepaired debt is passivated: nothing of it is in memory, its machine snapshot is
 * durable with the workstream. A record lives here from a claim (or a repair, or a close) until
 * the session is idle again; it holds the machine's latest snapshot — loaded from the store,
 * then moved only by the machine: the supervisor's own transitions (`offer`), the worker's
 * reports while its turn is live, `finishAbandoning` after an abort or a crash.
 *
 * Commands on one session (claim, settle, close, idle repair, idle rewrite) run one at a time,
 * in arrival order, through the record's mailbox — like an actor's.
 */
import type { SessionSnapshotData, SessionState } from '@turnwarden/protocol';
import { errors, type TurnwardenError } from '@turnwarden/protocol';
import {
  newSession,
  offer,
  type SessionEvent,
  stateNameOf,
  stateOf,
  type Transition,
  waitingApproval,
} from '@turnwarden/session';
import type { TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import { LoopTurns } from '../liveness/turns.js';
import type { EventHub } from '../streams/events.js';
import type { Turn } from '../turn/turn.js';

export class SessionRecord {
  /** The machine's latest snapshot (undefined until loaded from the store). */
  snapshot: SessionSnapshotData | undefined;
  /** The running turn, from dispatch until it settled. */
  turn: Turn | undefined;
  /** History rewrites of the idle session (compact, rewind) queued or in flight (C6). */
  rewrites = 0;
  /**
   * P5: the workstream was deleted under this session. A latch: no turn or rewrite is admitted
   * again, while finalizers (a turn's end, repair, close) still run and their writes are
   * discarded. It names this record — a workstream created again under the id gets a new one.
   */
  gone = false;
  private queue: Promise<unknown> = Promise.resolve();
  private pending = 0;

  constructor(
    readonly workstreamId: string,
    private readonly loop: LoopTurns,
  ) {}

  /**
   * Runs `command` after every command queued before it (the session's mailbox). Each command
   * starts on a loop turn of its own (LoopTurns): a burst of claims or turn ends across many
   * sessions never holds the supervisor's thread in one block (L12).
   */
  run<T>(command: () => Promise<T>): Promise<T> {
    this.pending++;
    const start = () => new Promise<void>((resolve) => this.loop.run(resolve)).then(command);
    const result = this.queue.then(start, start);
    this.queue = result.then(
      () => this.pending--,
      () => this.pending--,
    );
    return result;
  }

  get state(): SessionState | undefined {
    return this.snapshot === undefined ? undefined : stateOf(this.snapshot);
  }

  /**
   * Nothing left to keep in memory: idle (or closed) — or never loaded, or forgotten because
   * another host holds it — with no turn and no command queued.
   */
  get passive(): boolean {
    const state = this.state;
    return (
      this.turn === undefined &&
      this.pending === 0 &&
      (state === undefined ||
        state === 'idle' ||
        state === 'closed' ||
        // A wait for an approval is durable: nothing of it needs memory (issue 26).
        (this.snapshot !== undefined && waitingApproval(this.snapshot) !== undefined))
    );
  }
}

export class Sessions {
  private readonly records = new Map<string, SessionRecord>();
  private readonly loop = new LoopTurns();

  constructor(
    private readonly store: Pick<TurnStore, 'getWorkstream'>,
    private readonly events: EventHub,
    private readonly logger: Logger,
  ) {}

  /** The record of a session, created (not yet loaded) when it is passive. */
  record(workstreamId: string): SessionRecord {
    let rec = this.records.get(workstreamId);
    if (rec === undefined) {
      rec = new SessionRecord(workstreamId, this.loop);
      this.records.set(workstreamId, rec);
    }
    return rec;
  }
  /**
   * Resolves on a loop turn of its own, behind the commands already queued (L12): a claim that
   * resumes from another thread's answer — many arrive in one burst, on one port — goes on one
   * per loop turn, so a burst of claims never holds the supervisor's thread in one block.
   */
  nextTurn(): Promise<void> {
    return new Promise<void>((resolve) => this.loop.run(resolve));
  }

  /** The record if the session is active in memory. */
  peek(workstreamId: string): SessionRecord | undefined {
    return this.records.get(workstreamId);
  }

  /** Loads the durable snapshot (a never-claimed workstream is a new, idle session). */
  async load(rec: SessionRecord): Promise<SessionSnapshotData> {
    if (rec.snapshot !== undefined) return rec.snapshot;
    const ws = await this.store.getWorkstream(rec.workstreamId);
    if (ws === undefined) {
      throw errors.workstreamNotFound(`workstream ${rec.workstreamId} not found`);
    }
    rec.snapshot ??= ws.session ?? newSession(rec.workstreamId);
    return rec.snapshot;
  }

  /** Every session in memory. */
  all(): SessionRecord[] {
    return [...this.records.values()];
  }

  /**
   * Moves the session to `next` (a snapshot the machine produced) and tells listeners when its
   * lifecycle state changed.
   */
  set(
    rec: SessionRecord,
    next: SessionSnapshotData,
    generation: number | undefined,
    step?: { readonly from: string; readonly via: string },
  ): void {
    const before = rec.state;
    rec.snapshot = next;
    if (step) this.logTransition(rec, { ...step, to: stateNameOf(next) }, generation);
    const after = stateOf(next);
    if (after !== before) this.events.emit(rec.workstreamId, 'state', generation, { state: after });
  }

  /** Every step of a session's machine, wherever it ran, at debug level (`session transition`). */
  logTransition(rec: SessionRecord, step: Transition, generation: number | undefined): void {
    this.logger.debug({ workstreamId: rec.workstreamId, generation, ...step }, 'session transition');
  }

  /**
   * Offers a supervisor event to the session's machine and applies it. Returns the new snapshot,
   * or undefined when the machine refuses the event in its current state.
   */
  apply(rec: SessionRecord, event: SessionEvent, generation?: number): SessionSnapshotData | undefined {
    if (rec.snapshot === undefined) throw new Error(`session ${rec.workstreamId} is not loaded`);
    const next = offer(rec.snapshot, event);
    if (next !== undefined)
      this.set(rec, next, generation, { from: stateNameOf(rec.snapshot), via: event.type });
    return next;
  }

  /**
   * Runs a command in the session's mailbox, on its loaded machine (claims and turn ends go
   * through `rec.run` themselves); the session is passivated afterwards if it can be.
   */
  async idle<T>(workstreamId: string, command: (rec: SessionRecord) => Promise<T>): Promise<T> {
    const rec = this.record(workstreamId);
    try {
      return await rec.run(async () => {
        await this.load(rec);
        return command(rec);
      });
    } finally {
      this.release(rec);
    }
  }

  /** Forgets a session that no longer needs memory (passivation). */
  release(rec: SessionRecord): void {
    if (rec.passive && this.records.get(rec.workstreamId) === rec) this.records.delete(rec.workstreamId);
  }

  /** Sessions held in memory now (claimed, running, unrepaired, or with a command queued). */
  get size(): number {
    return this.records.size;
  }
}

/** The typed refusal of a claim, by the state whose machine refused it (S3, T3). */
export function claimRefusal(workstreamId: string, state: SessionState, running: boolean): TurnwardenError {
  if (state === 'closed') {
    return errors.workstreamClosed(`workstream ${workstreamId} is closed`);
  }
  if (running || state === 'claimed' || state === 'streaming') {
    return errors.turnInProgress(`a turn is already running on ${workstreamId}`);
  }
  return errors.toolCleanupPending(
    `workstream ${workstreamId} has tool calls without results; cancel() repairs it`,
  );
}
