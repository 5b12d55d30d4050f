/**
 * Closing a workstream (C1, C2): the machine's CLOSE. At once when no turn runs or the caller
 * will not wait; a soft close latches the workstream — no new turn is admitted — and waits for
 * the running turn's end. A workstream whose turn runs on another host is closed there.
 */
import { errors } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import type { Cluster } from '../cluster/cluster.js';
import type { Timers } from '../liveness/timers.js';
import { closeSession, type MaintenanceHost } from '../sessions/maintenance.js';
import type { Sessions } from '../sessions/sessions.js';
import { type EndsDeps, workstreamEnded } from './ends.js';
import { type Revoker, revoke } from './revoke.js';
import type { Announced, SendQueue } from './send-queue.js';

export interface ClosesDeps extends EndsDeps {
  readonly logger: Logger;
  readonly timers: Timers;
  readonly sessions: Sessions;
  readonly queue: Pick<SendQueue, 'fence'>;
  readonly cluster: Pick<Cluster, 'route'> | undefined;
  readonly maintenance: MaintenanceHost;
  readonly durable?: Revoker['durable'];
}

export interface CloseCall {
  readonly waitMs: number;
  readonly fence: Announced;
  /** The caller's tenant, whose lifecycle feed advertises the close (undefined when routed here). */
  readonly tenantId?: string;
  /** Routed here by the host the call was made on (cluster.ts). */
  readonly routed?: boolean;
}

export class Closes {
  /**
   * Workstreams whose soft closes wait on their running turn (C1): latched while any of them
   * waits; the first to find the turn ended closes, the others join its close.
   */
  private readonly latches = new Map<string, { waiting: number; closed: boolean }>();

  constructor(private readonly deps: ClosesDeps) {}

  /**
   * Closes a session: the machine's CLOSE; listeners receive `ws_closed` and are removed. With a
   * running turn it refuses at once (`waitMs` 0) or, soft, latches the workstream — no new turn
   * is admitted — and waits up to `waitMs` for the turn to end (its tools finished or repaired),
   * then closes a structurally complete history (C1). On timeout the latch is rolled back, the
   * turn keeps running and the workstream stays usable; a force cancel repairs it (C2). Soft
   * closes at once share the latch (it holds until the last of them has ended) and the CLOSE:
   * one closes, the others — and a close meeting one on its way — resolve with it. Resolves
   * true when this call closed the workstream, false when it joined another's close.
   */
  async close(workstreamId: string, call: CloseCall): Promise<boolean> {
    try {
      return await this.closeFenced(workstreamId, call);
    } finally {
      call.fence.done();
    }
  }

  /** A soft close waits on this workstream's running turn: no new turn is admitted (C1). */
  latched(workstreamId: string): boolean {
    return this.latches.has(workstreamId);
  }

  private async closeFenced(workstreamId: string, call: CloseCall): Promise<boolean> {
    const { sessions, cluster, logger, maintenance } = this.deps;
    const { waitMs, fence, tenantId } = call;
    const { ticket } = fence;
    if (!call.routed && cluster) {
      const r = await cluster.route(workstreamId, { op: 'close', waitMs });
      if (r.ran) {
        await revoke(this.deps, workstreamId, ticket, 'close');
        // Joined a close there: that one told the listeners.
        if (r.result === false) return false;
        workstreamEnded(this.deps, workstreamId, 'closed', { tenantId });
        return true;
      }
    }
    const running = sessions.peek(workstreamId)?.turn;
    let latch = this.latches.get(workstreamId);
    // At once: a close that will not wait for the running turn (refused by the machine), or one
    // of an idle workstream no soft close is about to close.
    if (running !== undefined ? waitMs === 0 : latch === undefined) {
      await sessions.idle(workstreamId, async (rec) => {
        await closeSession(maintenance, rec);
        await revoke(this.deps, workstreamId, ticket, 'close');
      });
    } else {
      if (latch === undefined) {
        latch = { waiting: 0, closed: false };
        this.latches.set(workstreamId, latch);
      }
      const mine = latch;
      mine.waiting++;
      // Latched: sends captured before the close never start, even if the close times out (C7).
      await revoke(this.deps, workstreamId, ticket, 'close');
      // A soft close waits for the turn — whose dispatch may be waiting on this call (C7).
      fence.done();
      logger.info({ workstreamId, waitMs }, 'soft close waiting for the running turn');
      try {
        if (running !== undefined) await this.turnEnded(workstreamId, running.done, waitMs);
        // Deleted under the turn (P5), the close's own write is discarded: it succeeds.
        const closedHere = await sessions.idle(workstreamId, async (rec) => {
          if (mine.closed) return false;
          await closeSession(maintenance, rec);
          mine.closed = true;
          return true;
        });
        if (!closedHere) return false;
      } finally {
        // The last soft close to end lifts the latch; one that timed out leaves it to the others.
        if (--mine.waiting === 0 && this.latches.get(workstreamId) === mine)
          this.latches.delete(workstreamId);
      }
    }
    workstreamEnded(this.deps, workstreamId, 'closed', { tenantId });
    return true;
  }

  /** Waits up to `waitMs` for the running turn's end; TIMEOUT (C2) otherwise. */
  private async turnEnded(workstreamId: string, done: Promise<unknown>, waitMs: number): Promise<void> {
    let cancelTimer = () => {};
    const timedOut = new Promise<true>((resolve) => {
      cancelTimer = this.deps.timers.after(waitMs, () => resolve(true));
    });
    const ended = await Promise.race([done.then(() => false as const), timedOut]);
    cancelTimer();
    if (ended === false) return;
    this.deps.logger.warn({ workstreamId, waitMs }, 'soft close timed out; the turn keeps running');
    throw errors.timeout(
      `soft close of ${workstreamId} timed out after ${waitMs} ms: its turn is still running (cancel() forces it)`,
      { waitMs },
    );
  }
}
