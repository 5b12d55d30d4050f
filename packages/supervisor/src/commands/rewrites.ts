/**
 * History rewrites (L8, C6): `compact` under a running turn is fenced by its abort (rewrite.ts);
 * on an idle session it, and `rewind`, run in the mailbox under a lease of their own
 * (maintenance.ts), counted while queued or in flight so that a cancel does not wait behind
 * them. A committed rewrite makes what listeners hold stale: `history_resync` (E2).
 */
import { errors } from '@turnwarden/protocol';
import { compactIdle, type MaintenanceHost, rewindIdle, rollbackIdle } from '../sessions/maintenance.js';
import { claimRefusal, type SessionRecord, type Sessions } from '../sessions/sessions.js';
import type { EventHub } from '../streams/events.js';
import { admissionRefusal, type ClaimHost } from '../turn/claim.js';
import { compactLive, type RewriteHost } from '../turn/rewrite.js';
import type { RewindResult } from '../types.js';
import type { SendClaim, SendQueue } from './send-queue.js';

export interface RewritesDeps {
  readonly sessions: Sessions;
  readonly events: Pick<EventHub, 'emit'>;
  readonly queue: Pick<SendQueue, 'fencedSince' | 'settled'>;
  /** Rewrites of a session without a running turn (maintenance.ts), under a running one (rewrite.ts). */
  readonly maintenance: MaintenanceHost & RewriteHost;
  /** Shutdown and soft closes refuse a rewind as they refuse a claim. */
  readonly admission: Pick<ClaimHost, 'closing' | 'closeLatched'>;
}

export interface Summary {
  readonly commitKey: string;
  readonly message: { readonly role: 'system'; readonly content: string };
}

export class Rewrites {
  constructor(private readonly deps: RewritesDeps) {}

  /** See `Turnwarden.compact`. */
  async compact(workstreamId: string, throughSeq: number, summary: Summary): Promise<{ removed: number }> {
    const { maintenance } = this.deps;
    // A turn that has begun to settle takes no rewrite: its end no longer waits for one, and its
    // lease is about to be released (a compact called during the turn whose ownership read came
    // back only then was written under that released lease and refused FENCED, found by the
    // harness on PostgreSQL under load). Such a compact runs in the mailbox, after the turn's end.
    const current = this.deps.sessions.peek(workstreamId)?.turn;
    const running = current?.ending === true ? undefined : current;
    const result = await (running
      ? compactLive(maintenance, running, throughSeq, summary)
      : this.rewriting(workstreamId, (rec) =>
          rec.turn
            ? compactLive(maintenance, rec.turn, throughSeq, summary)
            : compactIdle(maintenance, rec, { workstreamId, throughSeq, summary }),
        ));
    if (result.removed > 0) this.rewritten(workstreamId);
    return result;
  }

  /**
   * See `Turnwarden.rewind`: drops the last `turns` turns of an idle session (TURN_IN_PROGRESS
   * while a turn runs; the machine must be idle). The claim was captured when the host called:
   * a cancel after it revokes the rewind unless its write has begun (C6).
   */
  async rewind(claim: SendClaim, turns: number, ifLastSeq: number | undefined): Promise<RewindResult> {
    const { workstreamId } = claim;
    const { queue, maintenance } = this.deps;
    try {
      const result = await this.rewriting(workstreamId, async (rec) => {
        if (rec.turn !== undefined) {
          throw errors.turnInProgress(
            `rewind of ${workstreamId} refused: a turn is running (cancel it or wait for its end)`,
            { workstreamId },
          );
        }
        const refused = admissionRefusal(this.deps.admission, workstreamId);
        if (refused) throw refused;
        const state = rec.state!;
        if (state !== 'idle') throw claimRefusal(workstreamId, state, false);
        return rewindIdle(maintenance, rec, { turns, ifLastSeq, revokedBy: () => queue.fencedSince(claim) });
      });
      if (result.removed > 0) this.rewritten(workstreamId);
      return result;
    } finally {
      queue.settled(claim);
    }
  }

  /**
   * M4: the rows of the turn of `generation`, which an interrupt has just cancelled, are removed
   * (the session idle, its history repaired). A turn that started meanwhile (on another host)
   * refuses it: TURN_IN_PROGRESS, or LEASED_ELSEWHERE.
   */
  async rollback(workstreamId: string, generation: number): Promise<{ removed: number }> {
    const result = await this.rewriting(workstreamId, async (rec) => {
      if (rec.turn !== undefined) {
        throw errors.turnInProgress(`rollback of ${workstreamId} refused: another turn started`, {
          workstreamId,
        });
      }
      const state = rec.state!;
      if (state !== 'idle') throw claimRefusal(workstreamId, state, false);
      return rollbackIdle(this.deps.maintenance, rec, generation);
    });
    if (result.removed > 0) this.rewritten(workstreamId);
    return result;
  }

  /**
   * A rewrite committed: what listeners hold of the history, and every handoff token before it,
   * is stale (E2) — on every host: the event is relayed (cluster.ts).
   */
  private rewritten(workstreamId: string): void {
    this.deps.events.emit(workstreamId, 'history_resync', undefined, { reason: 'rewritten' });
  }

  /** An idle-session command that rewrites history: counted while queued or in flight (C6). */
  private async rewriting<T>(workstreamId: string, command: (rec: SessionRecord) => Promise<T>): Promise<T> {
    const rec = this.deps.sessions.record(workstreamId);
    rec.rewrites++;
    try {
      return await this.deps.sessions.idle(workstreamId, command);
    } finally {
      rec.rewrites--;
    }
  }
}
