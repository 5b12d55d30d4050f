/**
 * Finishing `force-abandoning` on the supervisor — after an abort, a cancel, a worker's death,
 * a failed result write, or a crash of an earlier process (S7) — with the session's own machine:
 * ABORT if the session is still mid-turn, then REPAIR, whose actor synthesizes the missing
 * results (repair.ts) through the journal gate under a lease. The machine is idle once the
 * history is complete, or stays in force-abandoning when the repair fails — and then refuses
 * every claim until a later repair succeeds (S3). The one place repair is run and reported.
 */
import {
  type AbandonReason,
  ErrorCode,
  isTurnwardenError,
  type SessionSnapshotData,
} from '@turnwarden/protocol';
import { finishAbandoning, stateOf } from '@turnwarden/session';
import type { Lease, TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import type { JournalGate } from '../journal/journal-gate.js';
import { LogMessage } from '../liveness/reporting.js';
import type { SessionRecord, Sessions } from '../sessions/sessions.js';
import type { RuntimeCounters } from '../stats.js';
import type { EventHub } from '../streams/events.js';
import { variant } from '../variants.js';
import { repairOpenCalls } from './repair.js';

export interface AbandonHost {
  readonly store: Pick<TurnStore, 'readHistory' | 'appendMessages' | 'saveSession'>;
  readonly gate: JournalGate;
  readonly sessions: Sessions;
  readonly events: EventHub;
  readonly counters: RuntimeCounters;
}

export interface AbandonInput {
  /** Where the machine stands: the worker's last snapshot, or the last durable one. */
  readonly from: SessionSnapshotData;
  readonly reason: AbandonReason | 'failure';
  /** Why, in the synthesized results' words ("aborted by the liveness watchdog"). */
  readonly why: string;
  readonly lease: Lease;
  readonly generation: number;
  /** Occurrences the worker reported started; undefined when it died (every effect unknown). */
  readonly startedCalls: readonly number[] | undefined;
  readonly log: Logger;
}

export interface Abandonment {
  readonly synthesized: number;
  /** False when the repair failed: the session stays in force-abandoning (S3). */
  readonly repaired: boolean;
}

export async function abandon(
  host: AbandonHost,
  rec: SessionRecord,
  input: AbandonInput,
): Promise<Abandonment> {
  const { workstreamId } = rec;
  const { lease, generation, log } = input;
  // The machine leaves the turn first (listeners see force-abandoning), then repairs.
  host.sessions.set(rec, input.from, generation);
  if (stateOf(input.from) !== 'force-abandoning') {
    host.sessions.apply(rec, { type: 'ABORT', reason: input.reason }, generation);
  }
  const { snapshot, synthesized, error } = await finishAbandoning(
    rec.snapshot!,
    input.reason,
    () =>
      host.gate.write(
        workstreamId,
        () =>
          variant(repairOpenCalls)({
            store: host.store,
            workstreamId,
            generation,
            fencingToken: lease.token,
            why: input.why,
            startedCalls: input.startedCalls,
            durable: (entries, seqs) => host.gate.announceRows(workstreamId, generation, entries, seqs),
          }),
        // Deleted (P5): nothing left to repair.
        () => 0,
      ),
    (step) => host.sessions.logTransition(rec, step, generation),
  );
  host.sessions.set(rec, snapshot, generation);
  await host.gate
    .write(
      workstreamId,
      () => host.store.saveSession({ workstreamId, fencingToken: lease.token, session: snapshot }),
      () => undefined,
    )
    .catch((err: unknown) => log.warn({ err }, 'session snapshot not saved; the durable one is older'));
  if (synthesized > 0) {
    host.counters.toolResultsSynthesized += synthesized;
    log.warn({ count: synthesized }, LogMessage.synthesized);
    host.events.emit(workstreamId, 'tool_results_synthesized', generation, { count: synthesized });
  }
  if (error !== undefined && isTurnwardenError(error, ErrorCode.FENCED)) {
    // The lease is lost (P6): another holder repairs the session — or this host, under a lease
    // of its own, when it next loads it. What this host holds of the session is stale: forgotten
    // (re-read from the store next time), not latched as debt it cannot repair.
    log.warn({ err: error }, 'repair refused: the lease was lost; the session is left to its holder');
    rec.snapshot = undefined;
    return { synthesized, repaired: false };
  }
  if (error !== undefined) log.error({ err: error }, LogMessage.cleanupFailed);
  return { synthesized, repaired: error === undefined };
}
