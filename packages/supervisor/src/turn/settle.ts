/**
 * The session's side of a turn's end (a step of the turn, turn/turn.ts, in the session's
 * mailbox): rewrites in flight settle first (L8; everything admitted is durable before repair
 * reads history), then the machine is brought to idle — directly when the worker's machine
 * ended there, through `abandon` (force-abandoning → repair) otherwise. Returns the turn's
 * status and how many results were synthesized; the turn does the rest of its end.
 */
import type { AbandonReason, TurnOutcome, TurnStatus } from '@turnwarden/protocol';
import { stateOf, waitingApproval } from '@turnwarden/session';
import type { Lease, TurnStore } from '@turnwarden/store';
import type { Logger } from 'pino';
import { describeAbort } from '../liveness/reporting.js';
import type { SessionRecord } from '../sessions/sessions.js';
import { variant } from '../variants.js';
import { type AbandonHost, abandon } from './abandon.js';
import { rewritesInFlight } from './rewrite.js';

export interface SettleHost extends AbandonHost {
  readonly store: AbandonHost['store'] & Pick<TurnStore, 'saveSession'>;
}

/** What the end reads of its turn. */
export interface SettlingTurn {
  readonly generation: number;
  readonly lease: Lease;
  readonly log: Logger;
  readonly aborted: { readonly reason: AbandonReason } | undefined;
  rewritesPending(): Promise<unknown>[];
}

export interface Settled {
  readonly status: TurnStatus;
  readonly synthesized: number;
}

export async function settle(
  host: SettleHost,
  rec: SessionRecord,
  turn: SettlingTurn,
  outcome: TurnOutcome | undefined,
): Promise<Settled> {
  const { workstreamId } = rec;
  const { generation, log } = turn;
  // L8: a rewrite already in flight completes before the abort's repair reads history.
  const rewrites = variant(rewritesInFlight)(turn);
  if (rewrites.length > 0) {
    log.info({ rewrites: rewrites.length }, 'turn end waiting for history rewrite in flight');
    await Promise.allSettled(rewrites);
  }
  // Everything the turn had admitted is ahead of the repair and the snapshot in the
  // workstream's write queue: repair reads history only once those rows are durable.

  // A committed abort decides the status unless the turn completed first; a crash is a failure.
  const abort = turn.aborted;
  const status: TurnStatus =
    outcome?.status === 'completed'
      ? 'completed'
      : abort?.reason === 'crash'
        ? 'failed'
        : abort
          ? 'interrupted'
          : outcome?.status === 'awaiting_approval'
            ? 'failed' // unless the machine waits (below)
            : (outcome?.status ?? 'failed');
  // Once an abort committed the supervisor owns the machine; otherwise it is where the worker left it.
  const from = abort !== undefined || outcome === undefined ? rec.snapshot! : outcome.snapshot;
  // A call waits for a person's approval (no abort): the wait is made durable as it is, like an
  // idle session's snapshot; the session holds no thread until the decision (commands/approvals.ts).
  const waiting = abort === undefined && outcome?.status === 'awaiting_approval' && waitingApproval(from);
  if (stateOf(from) === 'idle' || waiting) {
    host.sessions.set(rec, from, generation);
    await host.gate
      .write(
        workstreamId,
        () => host.store.saveSession({ workstreamId, fencingToken: turn.lease.token, session: from }),
        () => undefined,
      )
      .catch((e: unknown) => log.warn({ err: e }, 'session snapshot not saved; the durable one is older'));
    return { status: waiting ? 'awaiting_approval' : status, synthesized: 0 };
  }
  const { synthesized } = await abandon(host, rec, {
    from,
    reason: abort?.reason ?? outcome?.abortReason ?? 'failure',
    why: describeAbort(abort?.reason, outcome),
    lease: turn.lease,
    generation,
    startedCalls: outcome === undefined ? undefined : outcome.startedCalls,
    log,
  });
  return { status, synthesized };
}
