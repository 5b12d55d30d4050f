/**
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
 */
import type { JournalAck, JournalRequest } from '@turnwarden/protocol';
import { ErrorCode, SeamName, seam, TurnwardenError } from '@turnwarden/protocol';
// Harness-only switches: stripped from dist/ by scripts/build.mjs (see protocol/src/mutations.ts).
import { Mutation, mutated } from '@turnwarden/protocol/mutations';
import type { TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { ActiveTurn } from './active-turn.js';
import type { EventHub } from './events.js';

export interface GateHost {
  readonly store: Pick<TurnStore, 'appendMessages'>;
  readonly events: EventHub;
  /** The running turn of a workstream, if any. */
  turnOf(workstreamId: string): ActiveTurn | undefined;
  /** Whether the turn's clock slot carries a committed fence. */
  fenced(turn: ActiveTurn): boolean;
  /** Counts a refused row. */
  refused(): void;
  readonly logger: Logger;
}

export class JournalGate {
  private readonly queues = new Map<string, Promise<unknown>>();

  constructor(private readonly host: GateHost) {}

  /**
   * Runs `write` after every write of the workstream queued before it; the queue moves on when
   * it settles, whatever its outcome.
   */
  write<T>(workstreamId: string, write: () => Promise<T>): Promise<T> {
    const before = this.queues.get(workstreamId) ?? Promise.resolve();
    const result = before.then(write);
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
  journal(
    req: JournalRequest,
    caughtUp: (turn: ActiveTurn, n: number) => Promise<void>,
  ): Promise<JournalAck> {
    const { eventsPosted, ...append } = req;
    const turn = this.host.turnOf(req.workstreamId);
    // The turn's earlier events (tokens) reach listeners before the row they make up.
    const caught = turn && eventsPosted !== undefined ? caughtUp(turn, eventsPosted) : Promise.resolve();
    return caught.then(() => {
      const held = seam(SeamName.journalAdmit, {
        workstreamId: req.workstreamId,
        generation: req.generation,
      });
      if (held === undefined) return this.admit(append);
      return held.then(async (fault) => {
        const ack = await this.admit(append);
        if (fault?.kind === 'lose-ack') {
          // Injected: the rows are durable, the worker never hears so (S6, P1 retries).
          throw new TurnwardenError(ErrorCode.STORE_ERROR, 'journal acknowledgement lost', {
            details: { injected: true },
          });
        }
        return ack;
      });
    });
  }

  /** Admission and queueing: one synchronous step (see the file comment). */
  private admit(req: Omit<JournalRequest, 'eventsPosted'>): Promise<JournalAck> {
    const turn = this.host.turnOf(req.workstreamId);
    const fenced =
      turn === undefined ||
      turn.generation !== req.generation ||
      turn.abort !== undefined ||
      this.host.fenced(turn);
    if (fenced && !mutated(Mutation.admitFencedJournal)) {
      this.host.refused();
      return Promise.reject(
        new TurnwardenError(
          ErrorCode.FENCED,
          `turn ${req.generation} of ${req.workstreamId} is no longer live`,
        ),
      );
    }
    if (this.host.logger.isLevelEnabled('debug')) {
      // The admission point orders a row against an abort commit (debug; the harness judges it).
      const commitKeys = req.entries.map((e) => e.commitKey);
      this.host.logger.debug(
        { workstreamId: req.workstreamId, generation: req.generation, commitKeys },
        'journal admitted',
      );
    }
    return this.write(req.workstreamId, () => this.host.store.appendMessages(req)).then((seqs) => {
      for (const entry of req.entries) {
        this.host.events.emit(req.workstreamId, 'message', req.generation, {
          commitKey: entry.commitKey,
          message: entry.message,
        });
      }
      return { seqs };
    });
  }
}
