/**
 * Deleting a workstream (D1–D4, P5). The tombstone goes up first — the workstream is hidden,
 * takes no new turn, its journal writes nothing in the background — waiting sends are revoked,
 * a running turn is aborted and settled, then the store deletes. An ambiguous store failure
 * leaves the tombstone; the retry or the sweep's proof retires it. A write that finds the
 * workstream deleted by another process latches its session instead (`gone`, P5).
 */
import type { Store } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { Cluster } from '../cluster/cluster.js';
import type { Sessions } from '../sessions/sessions.js';
import type { EventHub } from '../streams/events.js';
import { type EndsDeps, workstreamEnded } from './ends.js';
import { type Revoker, revoke } from './revoke.js';
import type { Announced, SendQueue } from './send-queue.js';

export interface DeletesDeps extends EndsDeps {
  readonly logger: Logger;
  readonly store: Pick<Store, 'deleteWorkstream' | 'getWorkstream'>;
  readonly events: EndsDeps['events'] & Pick<EventHub, 'emit'>;
  readonly sessions: Sessions;
  readonly queue: Pick<SendQueue, 'fence' | 'ticket'>;
  readonly cluster: Pick<Cluster, 'route'> | undefined;
  readonly durable?: Revoker['durable'];
}

export interface Tombstone {
  readonly tenantId: string;
  readonly incarnation: string;
}

export class Deletes {
  /**
   * D2: deletes under way or left ambiguous — hidden (not listed, gettable or openable), their
   * id not re-creatable, their journal never replayed (D4) — until retired on proof (D3).
   */
  private readonly tombstones = new Map<string, Tombstone>();

  constructor(private readonly deps: DeletesDeps) {}

  /** The tombstone of a delete under way or left ambiguous (D2), if any. */
  tombstone(workstreamId: string): Tombstone | undefined {
    return this.tombstones.get(workstreamId);
  }

  get pending(): number {
    return this.tombstones.size;
  }

  /**
   * Deletes one incarnation of a workstream (D1; the caller checked tenant and incarnation).
   * The tombstone goes up first: the workstream is hidden and takes no new turn, its waiting
   * sends are revoked, a running turn is aborted and has settled before the store deletes. An
   * ambiguous store failure (an error, a lost acknowledgement) leaves the tombstone (D2) and
   * rejects; a retry finishes. The tombstone retires only on proof — the row deleted, missing,
   * or another incarnation's (D3) — and then listeners get `ws_closed` (`deleted`), once (D6).
   */
  async delete(
    workstreamId: string,
    tenantId: string,
    incarnation: string,
    { fence, routed = false }: { readonly fence: Announced; readonly routed?: boolean },
  ): Promise<void> {
    try {
      await this.deleteFenced(workstreamId, tenantId, incarnation, fence, routed);
    } finally {
      fence.done();
    }
  }

  /**
   * D3: the sweep's look at each tombstone. Retired when the store proves its incarnation gone;
   * kept when the row is still that incarnation's, or the store cannot say. It never deletes,
   * and never writes a row (D4): the explicit retry finishes a delete.
   */
  async probe(): Promise<void> {
    for (const [workstreamId, t] of [...this.tombstones]) {
      const row = await this.deps.store.getWorkstream(workstreamId).catch(() => 'unknown' as const);
      if (row === 'unknown' || row?.incarnation === t.incarnation) continue;
      this.retire(workstreamId, 'proven');
    }
  }

  /**
   * P5: the workstream was deleted under its session. Latched once per session: listeners get
   * one `history_resync` (reason `workstream_gone`), waiting sends are revoked, a running turn
   * is aborted (`workstream_gone`) and its finalizers run with their writes discarded; no turn
   * or rewrite is admitted again. Nothing is an error: the deletion is what happened.
   */
  gone(workstreamId: string): void {
    const { sessions, logger, events, queue } = this.deps;
    const rec = sessions.peek(workstreamId);
    if (rec === undefined || rec.gone) return;
    rec.gone = true;
    const turn = rec.turn;
    logger.warn(
      { workstreamId, ...(turn ? { generation: turn.generation } : {}) },
      'workstream deleted under its session: its writes are discarded and no new turn is admitted',
    );
    events.emit(workstreamId, 'history_resync', undefined, { reason: 'workstream_gone' });
    const revoked = queue.fence(workstreamId, queue.ticket(), 'gone');
    if (revoked > 0) logger.info({ workstreamId, revoked, reason: 'gone' }, 'queued sends revoked');
    turn?.abort('workstream_gone');
  }

  private async deleteFenced(
    workstreamId: string,
    tenantId: string,
    incarnation: string,
    fence: Announced,
    routed: boolean,
  ): Promise<void> {
    const { sessions, cluster, logger, store } = this.deps;
    if (!this.tombstones.has(workstreamId)) {
      this.tombstones.set(workstreamId, { tenantId, incarnation });
      logger.info({ workstreamId, incarnation }, 'workstream deleting');
    }
    await revoke(this.deps, workstreamId, fence.ticket, 'gone');
    if (!routed && cluster) {
      // Its turn runs on another host, which aborts it and deletes; an error leaves the tombstone (D2).
      const r = await cluster.route(workstreamId, { op: 'delete', tenantId, incarnation });
      if (r.ran) {
        this.retire(workstreamId, 'deleted');
        return;
      }
    }
    const rec = sessions.peek(workstreamId);
    const turn = rec?.turn;
    if (turn !== undefined) {
      turn.abort('workstream_gone');
      fence.done(); // committed: a dispatch waiting on this call sees the abort (C7)
      await turn.done;
    }
    // Whatever was queued on the session (a repair, a rewrite) has run.
    if (rec !== undefined) {
      await rec.run(async () => {}).finally(() => sessions.release(rec));
    }
    try {
      await store.deleteWorkstream(workstreamId, incarnation);
    } catch (err) {
      logger.warn(
        { err, workstreamId, incarnation },
        'workstream delete ambiguous: hidden until a retry or the sweep proves it gone',
      );
      throw err;
    }
    this.retire(workstreamId, 'deleted');
  }

  /** D3: a tombstone proven gone — its row missing or another incarnation's — retires; listeners are closed once. */
  private retire(workstreamId: string, how: 'deleted' | 'proven'): void {
    const t = this.tombstones.get(workstreamId);
    if (t === undefined) return;
    this.tombstones.delete(workstreamId);
    this.deps.logger.info({ workstreamId, how }, 'workstream deleted');
    workstreamEnded(this.deps, workstreamId, 'deleted', { tenantId: t.tenantId });
  }
}
