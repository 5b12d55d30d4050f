/**
 * The definitive stage of a committed abort (L5), after the fence is set and lease renewal has
 * stopped (L3): the definitive log, `turn_aborted`, the machine's ABORT (the supervisor owns the
 * session from here), the watchdog's definitive warning, and the generation-bound abort message
 * to the worker. Each step is guarded: one that throws is logged and the rest still run — the
 * fence stands whatever happens here. Called by `Turn.abort` only.
 */
import { type AbortReason, SeamName, seam } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import type { WorkerHandle } from '../capacity/pool.js';
import { definitiveWarning, LogMessage } from '../liveness/reporting.js';
import type { StallInfo } from '../liveness/watchdog.js';
import type { SessionRecord, Sessions } from '../sessions/sessions.js';
import type { EventHub } from '../streams/events.js';

export interface AnnounceHost {
  readonly events: EventHub;
  readonly sessions: Pick<Sessions, 'apply'>;
}

/** What the definitive stage reads of its turn. */
export interface AbortedTurn {
  readonly workstreamId: string;
  readonly generation: number;
  readonly worker: Pick<WorkerHandle, 'control'>;
  readonly log: Logger;
}

const byWatchdog = (reason: AbortReason): reason is 'watchdog' | 'deadline' | 'dispatch' =>
  reason === 'watchdog' || reason === 'deadline' || reason === 'dispatch';

export function announceAbort(
  host: AnnounceHost,
  rec: SessionRecord,
  turn: AbortedTurn,
  reason: AbortReason,
  info: StallInfo | undefined,
): void {
  const step = (fn: () => void) => {
    try {
      fn();
    } catch (err) {
      turn.log.error({ err }, 'abort step failed after commit');
    }
  };
  step(() => {
    if (byWatchdog(reason)) {
      turn.log.error(
        { idleMs: info?.idleMs, lastActivity: info?.lastActivity, bound: info?.bound },
        LogMessage.aborted,
      );
    } else {
      turn.log.warn({ reason }, LogMessage.abortedOther);
    }
  });
  step(() => host.events.emit(turn.workstreamId, 'turn_aborted', turn.generation, { reason }));
  // The machine leaves the turn (ABORT → force-abandoning): the supervisor owns it from here.
  step(() => {
    if (rec.turn === turn) host.sessions.apply(rec, { type: 'ABORT', reason }, turn.generation);
  });
  if (byWatchdog(reason)) {
    step(() =>
      host.events.emit(turn.workstreamId, 'warning', turn.generation, {
        stage: 'definitive',
        message: definitiveWarning(reason, info?.idleMs ?? 0),
      }),
    );
  }
  const post = () =>
    step(() => turn.worker.control.postMessage({ t: 'abort', generation: turn.generation, reason }));
  const held = seam(SeamName.watchdogCommitToPublish, {
    workstreamId: turn.workstreamId,
    generation: turn.generation,
  });
  if (held === undefined) post();
  else
    held.then(post, (err: unknown) => turn.log.error({ err }, 'abort message seam failed; the fence stands'));
}
