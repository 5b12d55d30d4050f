/**
 * Workstreams as the host sees them: creation (an incarnation each, D1; advertised once
 * committed, D5), listing without the hidden tombstones (D2), the history with its handoff
 * position (E2), and the live part of a session's status.
 */
import { type ActivityClock, activityName } from '@turnwarden/clock';
import { ErrorCode, errors, isTurnwardenError, type SessionSnapshotData } from '@turnwarden/protocol';
import { stateOf } from '@turnwarden/session';
import type { Store, WorkstreamStatus as StoredStatus, WorkstreamRecord } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { JournalGate } from '../journal/journal-gate.js';
import type { Sessions } from '../sessions/sessions.js';
import type { EventHub } from '../streams/events.js';
import type { LifecycleFeed } from '../streams/lifecycle-feed.js';
import { handoffToken } from '../streams/streams.js';
import type { HistoryRead, WorkstreamInfo, WorkstreamStatus } from '../types.js';
import type { Deletes } from './deletes.js';
import type { SendQueue } from './send-queue.js';

export interface WorkstreamsDeps {
  readonly store: Pick<Store, 'createWorkstream' | 'listWorkstreams' | 'readHistory'>;
  readonly events: Pick<EventHub, 'reopen' | 'position'>;
  readonly lifecycle: Pick<LifecycleFeed, 'created' | 'unconfirmed'>;
  readonly logger: Logger;
  readonly deletes: Pick<Deletes, 'tombstone'>;
  readonly sessions: Pick<Sessions, 'peek'>;
  readonly gate: Pick<JournalGate, 'status'>;
  readonly queue: Pick<SendQueue, 'depth'>;
  readonly clock: Pick<ActivityClock, 'nowMs' | 'lastCode'>;
}

export interface ListQuery {
  readonly tenantId: string;
  readonly status: StoredStatus | undefined;
  readonly afterId: string | undefined;
  readonly limit: number;
}

export class Workstreams {
  constructor(private readonly deps: WorkstreamsDeps) {}

  /** Creates a workstream (its id checked by the caller); each creation mints an incarnation (D1). */
  async create(id: string, tenantId: string, principal: string): Promise<WorkstreamInfo> {
    const { store, events, lifecycle, logger, deletes } = this.deps;
    if (deletes.tombstone(id) !== undefined) {
      // D2: a delete of this id is not finished; it cannot be created again until it is.
      throw errors.workstreamExists(`workstream ${id} is being deleted`, {
        workstreamId: id,
        reason: 'deleting',
      });
    }
    let rec: WorkstreamRecord;
    try {
      rec = await store.createWorkstream({ id, tenantId });
    } catch (e) {
      // D5: the store may have committed it; unconfirmed, it is never advertised.
      if (isTurnwardenError(e, ErrorCode.STORE_ERROR)) lifecycle.unconfirmed(id);
      throw e;
    }
    // A predecessor's closed stream does not close the new incarnation's listeners (D6).
    events.reopen(id);
    logger.info(
      { workstreamId: id, tenantId, principal, incarnation: rec.incarnation },
      'workstream created',
    );
    lifecycle.created(rec.tenantId, rec.id, rec.incarnation);
    return { workstreamId: rec.id, tenantId: rec.tenantId, incarnation: rec.incarnation };
  }

  /**
   * A page of the tenant's workstreams in id order, the hidden tombstones skipped (D2): the
   * page is refilled from the store until full or exhausted. `last`: the last id read.
   */
  async list(query: ListQuery): Promise<{ readonly rows: WorkstreamRecord[]; readonly last?: string }> {
    const { store, deletes } = this.deps;
    const { tenantId, status, limit } = query;
    let { afterId } = query;
    const rows: WorkstreamRecord[] = [];
    let last: string | undefined;
    for (;;) {
      const page = await store.listWorkstreams({
        tenantId,
        ...(status === undefined ? {} : { status }),
        ...(afterId === undefined ? {} : { afterId }),
        limit: limit - rows.length,
      });
      for (const row of page) {
        last = row.id;
        if (deletes.tombstone(row.id) === undefined) rows.push(row);
      }
      if (page.length === 0 || rows.length === limit) break;
      afterId = last;
    }
    return last === undefined ? { rows } : { rows, last };
  }

  /**
   * The durable history and its handoff token. The position is taken before the read: a row
   * durable before it is in the rows; one that becomes durable after it is announced after it
   * (and filtered out if the read saw it) — E2.
   */
  async history(workstreamId: string): Promise<HistoryRead> {
    const position = this.deps.events.position(workstreamId);
    const rows = await this.deps.store.readHistory(workstreamId);
    return { rows, handoff: handoffToken(workstreamId, position, rows.at(-1)?.seq ?? 0) };
  }

  /** The live part of a session's status; `durable` is the stored snapshot of a passive one. */
  status(
    workstreamId: string,
    durable: SessionSnapshotData | undefined,
  ): Pick<WorkstreamStatus, 'state' | 'cleanupPending' | 'persistence' | 'queuedSends' | 'activeTurn'> {
    const { sessions, gate, queue, clock } = this.deps;
    const rec = sessions.peek(workstreamId);
    const snapshot = rec?.snapshot ?? durable;
    const state = snapshot === undefined ? 'idle' : stateOf(snapshot);
    const turn = rec?.turn;
    const cleanupPending = turn === undefined && state !== 'idle' && state !== 'closed';
    const persistence = gate.status(workstreamId);
    const queuedSends = queue.depth(workstreamId);
    if (!turn) return { state, cleanupPending, persistence, queuedSends };
    return {
      state,
      cleanupPending,
      persistence,
      queuedSends,
      activeTurn: {
        generation: turn.generation,
        idleMs: Math.round(clock.nowMs() - turn.watched.lastChangeAt),
        lastActivity: activityName(clock.lastCode(turn.worker.slot)),
        ...(turn.aborted ? { abortReason: turn.aborted.reason } : {}),
      },
    };
  }
}
