/**
 * Work on sessions without a running turn, each under a lease of its own (P6) and in the
 * session's mailbox: repairing debt a crashed process or a failed repair left behind (S7, C5),
 * the startup sweep over such sessions, closing (the machine's CLOSE), and history rewrites of
 * an idle session.
 */
import type { HistoryRow, RevokeReason } from '@turnwarden/protocol';
import { errors, openToolCalls, type TurnwardenError } from '@turnwarden/protocol';
import { offer, stateOf, waitingApproval } from '@turnwarden/session';
import type { AdminStore, CompactInput, CompactResult, Lease, TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import { hostOf } from '../cluster/cluster.js';
import { type AbandonHost, type Abandonment, abandon } from '../turn/abandon.js';
import { claimRefusal, type SessionRecord } from './sessions.js';

export interface MaintenanceHost extends AbandonHost {
  readonly store: AbandonHost['store'] &
    Pick<
      TurnStore,
      'acquireLease' | 'releaseLease' | 'getLease' | 'getWorkstream' | 'compactHistory' | 'truncateHistory'
    > &
    Pick<AdminStore, 'closeWorkstream' | 'listWorkstreams'>;
  readonly holder: string;
  /** The holder prefix of this host's earlier processes, whose leases are taken over (S7). */
  readonly predecessors: string | undefined;
  readonly leaseTtlMs: number;
  readonly logger: Logger;
  /** Waits for an approval and their timeouts (commands/approvals.ts): a wait repaired here has ended. */
  readonly approvals?: {
    waiting(workstreamId: string, nonce: string, expiresAt: number): void;
    ended(workstreamId: string): void;
  };
}

/**
 * Takes the workstream's lease for this host. Held by another holder — a turn or a repair on
 * another host, or a dead process whose lease has not expired (S7) — LEASED_ELSEWHERE, and the
 * session's machine as loaded here (the other holder's, mid-turn) is forgotten: it is re-read
 * from the store the next time, never acted on stale.
 */
export async function acquireLease(
  host: MaintenanceHost,
  workstreamId: string,
  rec?: SessionRecord,
  /** A turn's claim: at most this many of its tenant's turns on all the hosts (T4 across hosts). */
  tenantLimit?: number,
): Promise<Lease> {
  const lease = await host.store.acquireLease(workstreamId, host.holder, host.leaseTtlMs, {
    ...(host.predecessors === undefined ? {} : { replacing: host.predecessors }),
    ...(tenantLimit === undefined ? {} : { tenantLimit }),
  });
  if (lease) {
    if (lease.tookOverFrom !== undefined) tookOver(host, workstreamId, lease.tookOverFrom);
    return lease;
  }
  // What refused it (a failed read is the store's error, thrown as it is). A lease that ended
  // since is refused all the same, with the least retryAfterMs: the retry takes it.
  const held = await host.store.getLease(workstreamId);
  if (held === undefined) {
    throw errors.internal(`the store refused the lease of ${workstreamId} but holds no lease for it`, {
      workstreamId,
    });
  }
  if (rec !== undefined && rec.turn === undefined) rec.snapshot = undefined;
  throw leasedElsewhere(workstreamId, held, host.leaseTtlMs);
}

/**
 * E1 across hosts: the lease's last holder stopped without handing the workstream over (killed,
 * or paused past its lease), so events it authored — a row's `message`, the last tokens — may
 * never have reached the relay, and the listeners on other hosts would miss them without a word
 * (a stream that began after the last row it saw cannot tell a row is missing). Before any event
 * of its own, the new holder tells every listener, on every host, to re-read: a relayed
 * `history_resync` (`replay_truncated`), which a reconnect from before it is replayed too.
 */
function tookOver(host: MaintenanceHost, workstreamId: string, from: string): void {
  if (!host.events.relaying) return; // one host: its listeners went with the process that stopped
  host.logger.warn(
    { workstreamId, from },
    'took over the lease of a host that did not hand it over; listeners re-read',
  );
  host.events.emit(workstreamId, 'history_resync', undefined, { reason: 'replay_truncated' });
}

/**
 * The one refusal of a lease another holder has, whoever refuses it (a send's claim, a cancel's
 * or close's repair, recovery at start, the cluster's sweep): always `{ workstreamId, holder,
 * expiresAt, retryAfterMs, hostId? }` — `hostId` when the holder is `<hostId>:<uuid>`;
 * `expiresAt` on the store's clock; `retryAfterMs` the time until the lease expires unless
 * renewed, at least 1 ms and at most `lease.ttlMs` (a lease is never renewed further ahead than
 * its TTL; the bound also caps a skew between this clock and PostgreSQL's), so a host can wait
 * exactly that long before it retries.
 */
function leasedElsewhere(workstreamId: string, held: Lease, ttlMs: number): TurnwardenError {
  const { holder, expiresAt } = held;
  const hostId = hostOf(holder);
  return errors.leasedElsewhere(
    `the turn lease of ${workstreamId} is held by ${hostId ? `host ${hostId}` : `another holder (${holder})`}`,
    {
      workstreamId,
      holder,
      expiresAt,
      retryAfterMs: Math.min(ttlMs, Math.max(1, Math.ceil(expiresAt - Date.now()))),
      ...(hostId ? { hostId } : {}),
    },
  );
}

/** Runs `fn` under a lease of its own, then releases it. */
async function withIdleLease<T>(
  host: MaintenanceHost,
  rec: SessionRecord,
  fn: (lease: Lease, generation: number) => Promise<T>,
): Promise<T> {
  const { workstreamId } = rec;
  const lease = await acquireLease(host, workstreamId, rec);
  try {
    const ws = await host.store.getWorkstream(workstreamId);
    return await fn(lease, ws?.generation ?? 0);
  } finally {
    await host.store.releaseLease(workstreamId, host.holder, lease.token).catch(() => false);
  }
}

/** Whether a session without a running turn holds debt: a machine mid-turn or unrepaired, or open calls. */
export function leftover(rec: SessionRecord, rows: readonly HistoryRow[] | undefined): boolean {
  const state = rec.state;
  if (state === 'idle') return rows !== undefined && openToolCalls(rows).length > 0;
  return state !== 'closed';
}

/**
 * Repairs what a session without a running turn was left with: a machine mid-turn (a crashed
 * process, S7) or still force-abandoning (a failed repair, S3), or — in a store written before
 * machine snapshots — an idle session whose history ends with open calls. The machine takes it
 * to idle through force-abandoning, like any abandoned turn. The caller loaded the record and
 * runs this in the session's mailbox.
 */
export async function repairLeftover(
  host: MaintenanceHost,
  rec: SessionRecord,
  why: string,
): Promise<Abandonment> {
  const { workstreamId } = rec;
  return withIdleLease(host, rec, async (lease, generation) => {
    let from = rec.snapshot!;
    if (stateOf(from) === 'idle') {
      // Debt the machine never saw (an older store): the turn that left it is abandoned now.
      const claimed = offer(from, { type: 'CLAIM', generation });
      if (claimed !== undefined)
        host.sessions.logTransition(rec, { from: 'idle', to: 'claimed', via: 'CLAIM' }, generation);
      from = claimed ?? from;
    }
    const log = host.logger.child({ workstreamId, generation });
    // A call that waited for approval never ran, nor did the calls after it: their results say
    // denied (effect none), whatever ended the wait (a cancel, a close, a delete, its timeout).
    const waited = waitingApproval(from) !== undefined;
    const result = await abandon(host, rec, {
      from,
      reason: 'crash',
      why: waited ? `${why} while it waited for approval` : why,
      lease,
      generation,
      startedCalls: waited ? [] : undefined,
      log,
    });
    if (waited && result.repaired) host.approvals?.ended(workstreamId);
    if (!result.repaired) {
      throw errors.storeError(`repair of ${workstreamId} failed; it refuses claims until repaired`);
    }
    log.warn({ count: result.synthesized }, 'repaired a session left with debt');
    return result;
  });
}

/** Closes an idle session: the machine's CLOSE, then the store (closed is final). */
export async function closeSession(host: MaintenanceHost, rec: SessionRecord): Promise<void> {
  // A call waiting for approval is answered first — denied, effect none (A4) — then it closes.
  if (waitingApproval(rec.snapshot!) !== undefined) await repairLeftover(host, rec, 'closed');
  const next = offer(rec.snapshot!, { type: 'CLOSE' });
  if (next === undefined)
    throw claimRefusal(rec.workstreamId, stateOf(rec.snapshot!), rec.turn !== undefined);
  await host.gate.write(
    rec.workstreamId,
    async () => {
      await host.store.closeWorkstream(rec.workstreamId, next);
    },
    // Deleted (P5): closing it is done.
    () => undefined,
  );
  host.sessions.set(rec, next, undefined, { from: 'idle', via: 'CLOSE' });
}

/** A history rewrite of a session without a running turn, under a lease of its own (L8, P6). */
export function compactIdle(
  host: MaintenanceHost,
  rec: SessionRecord,
  input: Omit<CompactInput, 'generation' | 'fencingToken'>,
): Promise<CompactResult> {
  return withIdleLease(host, rec, (lease, generation) =>
    host.gate.write(rec.workstreamId, () =>
      host.store.compactHistory({ ...input, generation, fencingToken: lease.token }),
    ),
  );
}

/**
 * M4: drops the rows of the turn of `generation` — from its user message on — once an interrupt
 * has cancelled it (its history repaired), under a lease of its own (P6), queued behind the
 * session's journal writes like a rewind. A turn whose user row is not in the history (it wrote
 * nothing, or a compaction took it in) drops nothing: `removed` 0.
 */
export function rollbackIdle(
  host: MaintenanceHost,
  rec: SessionRecord,
  generation: number,
): Promise<{ removed: number }> {
  const { workstreamId } = rec;
  return withIdleLease(host, rec, (lease, current) =>
    host.gate.write(workstreamId, async () => {
      const rows = await host.store.readHistory(workstreamId);
      const from = rows.find((r) => r.generation === generation && r.message.role === 'user');
      if (from === undefined) {
        host.logger.info({ workstreamId, generation }, 'rollback found no row of the interrupted turn');
        return { removed: 0 };
      }
      const { removed } = await host.store.truncateHistory({
        workstreamId,
        generation: current,
        fencingToken: lease.token,
        fromSeq: from.seq,
        fromKey: from.commitKey,
      });
      host.logger.info({ workstreamId, generation, removed }, 'interrupted turn rolled back');
      return { removed };
    }),
  );
}

export interface RewindPlan {
  readonly turns: number;
  readonly ifLastSeq: number | undefined;
  /** What fenced the workstream since the rewind was called (a cancel): it must not begin. */
  revokedBy(): RevokeReason | undefined;
}

/**
 * Drops the last `turns` turns of a session without a running turn — the rows from the user
 * message that began the earliest of them — under a lease of its own (P6). Queued behind the
 * session's journal writes, so rows still on their way are part of what it sees. Once its
 * write has begun it cannot be abandoned; a cancel before that revokes it (L8, C6). Its cut
 * names its first row, so the store never applies it twice.
 */
export function rewindIdle(
  host: MaintenanceHost,
  rec: SessionRecord,
  plan: RewindPlan,
): Promise<{ removed: number; lastSeq: number }> {
  const { workstreamId } = rec;
  return withIdleLease(host, rec, (lease, generation) =>
    host.gate.write(workstreamId, async () => {
      const rows = await host.store.readHistory(workstreamId);
      const lastSeq = rows.at(-1)?.seq ?? 0;
      if (plan.ifLastSeq !== undefined && plan.ifLastSeq !== lastSeq) {
        throw errors.commitConflict(
          `rewind of ${workstreamId}: the history ends at seq ${lastSeq}, not ${plan.ifLastSeq} as expected`,
          { workstreamId, ifLastSeq: plan.ifLastSeq, lastSeq },
        );
      }
      const starts = rows.filter((r) => r.message.role === 'user');
      const from = starts[starts.length - plan.turns];
      if (from === undefined) {
        throw errors.invalidInput(
          `rewind of ${workstreamId}: ${plan.turns} turns asked, the history holds ${starts.length}`,
          { field: 'turns', available: starts.length },
        );
      }
      const revoked = plan.revokedBy();
      if (revoked !== undefined) {
        throw errors.fenced(
          `rewind of ${workstreamId} revoked before it began: the workstream was cancelled`,
          { workstreamId, reason: revoked },
        );
      }
      const { removed } = await host.store.truncateHistory({
        workstreamId,
        generation,
        fencingToken: lease.token,
        fromSeq: from.seq,
        fromKey: from.commitKey,
      });
      host.logger.info({ workstreamId, turns: plan.turns, removed }, 'history rewound');
      return { removed, lastSeq: from.seq - 1 };
    }),
  );
}
