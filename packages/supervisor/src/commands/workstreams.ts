/**
 * Workstreams as the host sees them: creation (an incarnation each, D1; advertised once
 * committed, D5), listing without the hidden tombstones (D2), the history — whole or a page at a
 * time — with its handoff position (E2), and the live part of a session's status.
 */
import { type ActivityClock, activityName } from '@turnwarden/clock';
import {
  type DoubleTexting,
  ErrorCode,
  errors,
  isTurnwardenError,
  type SessionSnapshotData,
} from '@turnwarden/protocol';
import { contextOf, stateOf, waitingApproval } from '@turnwarden/session';
import type { Store, WorkstreamStatus as StoredStatus, WorkstreamRecord } from '@turnwarden/store';
import type { Logger } from 'pino';
import { invalid } from '../input.js';
import type { JournalGate } from '../journal/journal-gate.js';
import type { TurnWatchdog } from '../liveness/watchdog.js';
import type { Sessions } from '../sessions/sessions.js';
import type { EventHub } from '../streams/events.js';
import type { LifecycleFeed } from '../streams/lifecycle-feed.js';
import { cursorToken, type HistoryCursor, handoffToken, incarnationDigest } from '../streams/streams.js';
import { approvalToken } from '../turn/approval-token.js';
import type { HistoryPage, HistoryRead, WorkstreamInfo, WorkstreamStatus } from '../types.js';
import type { Deletes } from './deletes.js';
import type { SendQueue } from './send-queue.js';

export interface WorkstreamsDeps {
  readonly store: Pick<Store, 'createWorkstream' | 'listWorkstreams' | 'readHistory' | 'readHistoryPage'>;
  readonly events: Pick<EventHub, 'reopen' | 'position'>;
  readonly lifecycle: Pick<LifecycleFeed, 'created' | 'unconfirmed'>;
  readonly logger: Logger;
  readonly deletes: Pick<Deletes, 'tombstone'>;
  readonly sessions: Pick<Sessions, 'peek'>;
  readonly gate: Pick<JournalGate, 'status'>;
  readonly queue: Pick<SendQueue, 'depth'>;
  readonly clock: Pick<ActivityClock, 'lastCode'>;
  /** How long a running turn has been silent (`describe`). */
  readonly watchdog: Pick<TurnWatchdog, 'idleMs'>;
}

export interface ListQuery {
  readonly tenantId: string;
  readonly status: StoredStatus | undefined;
  readonly afterId: string | undefined;
  readonly limit: number;
}

/** A page of a history read (its input checked, its cursor decoded, the workstream owned). */
export interface PageQuery {
  /** The incarnation the caller owns now (D1). */
  readonly incarnation: string;
  readonly limit: number;
  /** Where the previous page ended; absent for the first page. */
  readonly cursor: HistoryCursor | undefined;
}

export class Workstreams {
  constructor(private readonly deps: WorkstreamsDeps) {}

  /** Creates a workstream (its id checked by the caller); each creation mints an incarnation (D1). */
  async create(
    id: string,
    tenantId: string,
    principal: string,
    doubleTexting: DoubleTexting | undefined,
  ): Promise<WorkstreamInfo> {
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
      rec = await store.createWorkstream({
        id,
        tenantId,
        ...(doubleTexting === undefined ? {} : { doubleTexting }),
      });
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
    return {
      workstreamId: rec.id,
      tenantId: rec.tenantId,
      incarnation: rec.incarnation,
      ...(rec.doubleTexting === undefined ? {} : { doubleTexting: rec.doubleTexting }),
    };
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

  /**
   * One page of the history, by seq after the previous page's last. E2 across pages: the stream
   * position is taken before the *first* page and carried in the cursor to the last, whose
   * handoff holds it with the last seq read. Rows announced after it are the rows no page can
   * have missed — every row durable before it has a seq the pages read through — and those the
   * pages returned are filtered out by seq; a rewrite between two pages (a compaction renumbers,
   * a rewind hands seqs to new rows) emitted `history_resync` after it, so the listener
   * re-reads. A page before the last has no handoff: a listener registered after it would miss
   * the rows of the pages not read yet. One row more than the page is read, so the page that
   * reaches the end is the last one, with no empty page after it.
   */
  async historyPage(workstreamId: string, query: PageQuery): Promise<HistoryPage> {
    const { limit, cursor } = query;
    const incarnation = incarnationDigest(query.incarnation);
    if (cursor !== undefined && cursor.incarnation !== incarnation) {
      // D1: the workstream was deleted and created again since the previous page.
      throw invalid(
        'cursor was returned by the history of a deleted incarnation: read from the start',
        'cursor',
      );
    }
    const position = cursor?.position ?? this.deps.events.position(workstreamId);
    const afterSeq = cursor?.afterSeq ?? 0;
    const rows = await this.deps.store.readHistoryPage(workstreamId, { afterSeq, limit: limit + 1 });
    if (rows.length > limit) {
      rows.length = limit;
      const next = { position, afterSeq: rows.at(-1)!.seq, limit, incarnation };
      return { rows, nextCursor: cursorToken(workstreamId, next) };
    }
    return { rows, handoff: handoffToken(workstreamId, position, rows.at(-1)?.seq ?? afterSeq) };
  }

  /** The live part of a session's status; `durable` is the stored snapshot of a passive one. */
  status(
    workstreamId: string,
    durable: SessionSnapshotData | undefined,
  ): Pick<
    WorkstreamStatus,
    'state' | 'cleanupPending' | 'persistence' | 'queuedSends' | 'activeTurn' | 'awaitingApproval'
  > {
    const { sessions, gate, queue, clock, watchdog } = this.deps;
    const rec = sessions.peek(workstreamId);
    const snapshot = rec?.snapshot ?? durable;
    const state = snapshot === undefined ? 'idle' : stateOf(snapshot);
    const turn = rec?.turn;
    const waiting = turn === undefined && snapshot !== undefined ? waitingApproval(snapshot) : undefined;
    const cleanupPending =
      turn === undefined && waiting === undefined && state !== 'idle' && state !== 'closed';
    const persistence = gate.status(workstreamId);
    const queuedSends = queue.depth(workstreamId);
    if (waiting !== undefined) {
      const generation = contextOf(snapshot!).generation;
      const awaitingApproval = {
        token: approvalToken(generation, waiting.callIndex, waiting.nonce),
        callIndex: waiting.callIndex,
        expiresAt: waiting.expiresAt,
      };
      return { state, cleanupPending, persistence, queuedSends, awaitingApproval };
    }
    if (!turn) return { state, cleanupPending, persistence, queuedSends };
    return {
      state,
      cleanupPending,
      persistence,
      queuedSends,
      activeTurn: {
        generation: turn.generation,
        idleMs: Math.round(watchdog.idleMs(turn.watched)),
        lastActivity: activityName(clock.lastCode(turn.worker.slot)),
        ...(turn.aborted ? { abortReason: turn.aborted.reason } : {}),
      },
    };
  }
}
