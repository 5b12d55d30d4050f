/**
 * Force cancel (C4–C7): a running turn's abort commits unconditionally and the cancel waits for
 * its end (not for a history rewrite in flight, C6); without a turn, debt is repaired (C5) or it
 * is a silent no-op. A turn running on another host is that host's to cancel (cluster.ts).
 */
import type { Logger } from 'pino';
import type { Cluster } from '../cluster/cluster.js';
import { leftover, type MaintenanceHost, repairLeftover } from '../sessions/maintenance.js';
import type { SessionRecord, Sessions } from '../sessions/sessions.js';
import type { DurableSends } from './durable-sends.js';
import { revoke } from './revoke.js';
import type { Announced, SendQueue } from './send-queue.js';

export interface CancelsDeps {
  readonly logger: Logger;
  readonly sessions: Sessions;
  readonly queue: Pick<SendQueue, 'fence' | 'ticket'>;
  readonly cluster: Pick<Cluster, 'route'> | undefined;
  readonly durable?: Pick<DurableSends, 'revoke' | 'revokeEarlier'> | undefined;
  /** Repairs of sessions without a running turn (maintenance.ts). */
  readonly maintenance: MaintenanceHost;
}

export class Cancels {
  constructor(private readonly deps: CancelsDeps) {}

  /**
   * Force cancel. A running turn: the abort commits unconditionally, results are synthesized
   * before the slot is released; resolves once the session is idle. Without one: debt is
   * repaired (true), or it is a silent no-op (false).
   */
  async cancel(workstreamId: string, fence: Announced, routed = false): Promise<boolean> {
    try {
      return await this.cancelFenced(workstreamId, fence, routed);
    } finally {
      fence.done();
    }
  }

  /**
   * Force-cancels one turn, named by its `done` promise — the turn's identity: a later turn on
   * the workstream is left alone (C4), and so is a turn of a workstream created again under the
   * id, whose generations start over (D4).
   */
  cancelTurn(workstreamId: string, turn: Promise<unknown>, keepFrom?: number): void {
    const running = this.deps.sessions.peek(workstreamId)?.turn;
    if (running && running.done === turn) {
      // The turn's end waits for this revocation before it takes a queued send (Sends.pump).
      void revoke(this.deps, workstreamId, this.deps.queue.ticket(), 'cancel', keepFrom);
      running.abort('cancel');
    }
  }

  /**
   * M3 across hosts: an interrupt whose send waits in the store's queue as row `keepFrom` ends the
   * turn of `generation` wherever it runs — not a later one — and revokes the sends made before
   * it: this host's (captured before `fence`) and the store's rows before `keepFrom`, not the
   * interrupting send nor those queued after it. Resolves once that turn has ended (or was over).
   */
  async cancelBefore(
    workstreamId: string,
    fence: Announced,
    generation: number,
    keepFrom: number,
  ): Promise<void> {
    const { sessions, cluster } = this.deps;
    try {
      await revoke(this.deps, workstreamId, fence.ticket, 'cancel', keepFrom);
      const routed = await cluster?.route(workstreamId, { op: 'cancel', generation, keepFrom });
      if (routed?.ran === true) return;
      // Not another host's: this host's, if it still runs.
      const running = sessions.peek(workstreamId)?.turn;
      if (running?.generation !== generation) return;
      running.abort('cancel');
      fence.done();
      await running.done;
    } finally {
      fence.done();
    }
  }

  /**
   * A turn on another host was cancelled through its handle, called here at `ticket`: the sends
   * this host was called with before it are revoked (C7) — not the workstream's later ones.
   */
  async revokeEarlier(workstreamId: string, ticket: number): Promise<void> {
    const revoked = this.deps.queue.fence(workstreamId, ticket, 'cancel');
    if (revoked > 0)
      this.deps.logger.info({ workstreamId, revoked, reason: 'cancel' }, 'queued sends revoked');
    await this.deps.durable?.revokeEarlier(workstreamId, ticket);
  }

  private async cancelFenced(workstreamId: string, fence: Announced, routed: boolean): Promise<boolean> {
    const { sessions, cluster, logger } = this.deps;
    const { ticket } = fence;
    if (!routed && cluster) {
      // Sends this host was called with before this cancel are queued (or refused) and revoked
      // first, so the aborted turn's end cannot take one of them (C7).
      await revoke(this.deps, workstreamId, ticket, 'cancel');
      // The turn runs on another host: the cancel is its to carry out (cluster.ts).
      const r = await cluster.route(workstreamId, { op: 'cancel' });
      if (r.ran) return r.result === true;
    }
    // C7: sends captured before the call cannot start after it, whatever the cancel finds — a
    // turn, a rewrite, debt, or nothing (another call may have ended the turn meanwhile).
    // Durably queued ones first: the aborted turn's end must not take one this call revokes.
    await revoke(this.deps, workstreamId, ticket, 'cancel');
    const running = sessions.peek(workstreamId)?.turn;
    if (running) {
      running.abort('cancel');
      // Committed: a dispatch waiting on this call sees the abort (C7); the cancel waits on.
      fence.done();
      // C6: a history rewrite in flight cannot be abandoned and the turn's end waits for it (L8);
      // the cancel does not. It returns once the abort is committed and signalled; the turn
      // finishes — results synthesized, stream_end, idle — when the rewrite is done.
      if (running.rewritesInFlight > 0) {
        logger.info(
          { workstreamId, rewrites: running.rewritesInFlight },
          'cancel returns before a history rewrite in flight; the turn ends after it',
        );
        return true;
      }
      await running.done;
      return true;
    }
    const rewriting = sessions.peek(workstreamId)?.rewrites ?? 0;
    if (rewriting > 0) {
      // C6: a history rewrite of the idle session is queued or in flight in its mailbox. One
      // that has begun cannot be abandoned, and the cancel does not wait for it: it fences the
      // workstream (above) — a rewrite that has not begun is revoked, as are earlier sends —
      // and returns. Debt (C5) is looked for after the rewrite, without the caller waiting.
      logger.info(
        { workstreamId, rewrites: rewriting },
        'cancel returns before a history rewrite of the idle workstream; it completes unless it had not begun',
      );
      sessions
        .idle(workstreamId, (rec) => (rec.turn ? Promise.resolve(false) : this.repairIdle(rec)))
        .catch((err: unknown) => logger.warn({ err, workstreamId }, 'repair after a cancel failed'));
      return true;
    }
    return sessions.idle(workstreamId, async (rec) => {
      if (rec.turn) {
        rec.turn.abort('cancel');
        return true;
      }
      return this.repairIdle(rec);
    });
  }

  /** C5: an idle session's debt is repaired (true); an idle clean one is a silent no-op (false). */
  private async repairIdle(rec: SessionRecord): Promise<boolean> {
    const { workstreamId } = rec;
    const { maintenance } = this.deps;
    const rows = rec.state === 'idle' ? await maintenance.store.readHistory(workstreamId) : undefined;
    // A clean workstream: nothing changes, nothing is said (C5).
    if (!leftover(rec, rows)) return false;
    await repairLeftover(maintenance, rec, 'cancelled');
    return true;
  }
}
