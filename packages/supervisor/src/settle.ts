/**
 * The end of a turn, on the supervisor (in the session's mailbox): the watchdog lets go of the
 * slot, a dead worker counts as a committed abort (T7), rewrites and writes in flight settle
 * (L8; everything admitted is durable before repair reads history), the machine is brought to
 * idle — directly when the worker's machine ended there, through `abandon` otherwise — the
 * lease is released, the worker goes back to the pool or is retired, and listeners get
 * `stream_end` then `idle` before any successor can publish (C3).
 */
import type { ActivityClock } from '@turnwarden/clock';
import type { TurnOutcome, TurnStatus } from '@turnwarden/protocol';
import { toWire } from '@turnwarden/protocol';
import { stateOf } from '@turnwarden/session';
import type { TurnStore } from '@turnwarden/store';
import { type AbandonHost, abandon } from './abandon.js';
import type { ActiveTurn } from './active-turn.js';
import type { HostTools } from './host-tools.js';
import type { IsolatedPool } from './isolation.js';
import type { WorkerPool } from './pool.js';
import { describeAbort, LogMessage } from './reporting.js';
import { rewritesInFlight } from './rewrite.js';
import type { SessionRecord } from './sessions.js';
import { variant } from './variants.js';
import type { Watchdog } from './watchdog.js';

export interface SettleHost extends AbandonHost {
  readonly store: AbandonHost['store'] & Pick<TurnStore, 'releaseLease'>;
  readonly clock: ActivityClock;
  readonly watchdog: Watchdog;
  readonly pool: WorkerPool;
  readonly isolation: Pick<IsolatedPool, 'cancelTurn'>;
  readonly hostTools: Pick<HostTools, 'cancelTurn'>;
  readonly holder: string;
  stopRenewal(turn: ActiveTurn): void;
  /** The turn no longer occupies its slot. */
  detach(turn: ActiveTurn): void;
}

export async function settle(
  host: SettleHost,
  rec: SessionRecord,
  turn: ActiveTurn,
  outcome: TurnOutcome | undefined,
  err: unknown,
): Promise<void> {
  if (turn.finished) return;
  turn.finished = true;
  host.stopRenewal(turn);
  turn.cancelGrace?.();
  // Isolated tool tasks still running end with the turn: their pool threads are terminated.
  host.isolation.cancelTurn(turn);
  host.hostTools.cancelTurn(turn);
  host.watchdog.unwatch(turn.watched);
  const { workstreamId, generation, log } = turn;

  const workerGone = outcome === undefined;
  if (workerGone && !turn.abort) {
    // T7: the worker died under a live turn — treat it like a committed abort.
    host.clock.fence(turn.worker.slot);
    turn.abort = { reason: 'crash', at: host.clock.nowMs() };
    host.counters.workersCrashed++;
    log.error({ err }, LogMessage.workerDied);
    void host.pool.terminate(turn.worker);
  }
  // L8: a rewrite already in flight completes before the abort's repair reads history.
  const rewrites = variant(rewritesInFlight)(turn);
  if (rewrites.length > 0) {
    log.info({ rewrites: rewrites.length }, 'turn end waiting for history rewrite in flight');
    await Promise.allSettled(rewrites);
  }
  // Everything the turn had admitted is ahead of the repair and the snapshot in the
  // workstream's write queue: repair reads history only once those rows are durable.

  // A committed abort decides the status unless the turn completed first; a crash is a failure.
  const status: TurnStatus =
    outcome?.status === 'completed'
      ? 'completed'
      : turn.abort?.reason === 'crash'
        ? 'failed'
        : turn.abort
          ? 'interrupted'
          : (outcome?.status ?? 'failed');
  // Once an abort committed the supervisor owns the machine; otherwise it is where the worker left it.
  const from = turn.abort !== undefined || outcome === undefined ? rec.snapshot! : outcome.snapshot;
  let synthesized = 0;
  if (stateOf(from) === 'idle') {
    host.sessions.set(rec, from, generation);
    await host.gate
      .write(
        workstreamId,
        () => host.store.saveSession({ workstreamId, fencingToken: turn.lease.token, session: from }),
        () => undefined,
      )
      .catch((e: unknown) => log.warn({ err: e }, 'session snapshot not saved; the durable one is older'));
  } else {
    ({ synthesized } = await abandon(host, rec, {
      from,
      reason: turn.abort?.reason ?? outcome?.abortReason ?? 'failure',
      why: describeAbort(turn.abort?.reason, outcome),
      lease: turn.lease,
      generation,
      startedCalls: outcome === undefined ? undefined : outcome.startedCalls,
      log,
    }));
  }
  await host.store.releaseLease(workstreamId, host.holder, turn.lease.token).catch((e: unknown) => {
    log.warn({ err: e }, 'lease release failed; it will expire');
    return false;
  });
  host.detach(turn);
  rec.turn = undefined;
  if (!workerGone && !turn.workerTerminated) {
    // Only a worker whose turn completed goes back to the pool; one that was aborted or failed
    // may hold leaked work and is retired (replaced in the background).
    // A worker whose aborted turn was only waiting on an isolated task (cancelled, its pool
    // thread terminated) holds nothing leaked either: kept.
    if (status === 'completed' || (turn.workReclaimed && outcome !== undefined))
      host.pool.release(turn.worker);
    else host.pool.retire(turn.worker);
  }
  // T4: the permit frees only now: the next turn admitted finds the worker back (or retiring).
  turn.permit.release();

  if (status === 'completed') host.counters.turnsCompleted++;
  else if (status === 'interrupted') host.counters.turnsInterrupted++;
  else host.counters.turnsFailed++;
  // C3: stream_end then idle, before any successor turn can publish.
  host.events.emit(workstreamId, 'stream_end', generation, { status });
  host.events.emit(workstreamId, 'idle', generation, {});
  const error = outcome?.error ?? (err === undefined ? undefined : toWire(err));
  const abortReason = turn.abort?.reason ?? outcome?.abortReason;
  const workerTerminated = turn.workerTerminated || workerGone;
  log.info({ status, synthesized, workerTerminated }, 'turn finished');
  turn.resolve({
    workstreamId,
    generation,
    status,
    ...(outcome?.finalText === undefined ? {} : { finalText: outcome.finalText }),
    ...(abortReason === undefined ? {} : { abortReason }),
    ...(error === undefined ? {} : { error }),
    synthesized,
    workerTerminated,
  });
}
