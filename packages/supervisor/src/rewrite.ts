/**
 * The history-rewrite fence (L8) under a running turn: a rewrite is refused once the turn's
 * abort has committed (a rewrite that has not started is revoked); once admitted it is in
 * flight, queued with the turn's writes under its lease, and the turn's end waits for it — an
 * abort never tears it; a declined abort changes nothing.
 */
import { errors, SeamName, seam } from '@turnwarden/protocol';
import type { CompactResult, TurnStore } from '@turnwarden/store';
import type { ActiveTurn } from './active-turn.js';
import type { JournalGate } from './journal-gate.js';
import { variant } from './variants.js';

export interface RewriteHost {
  readonly store: Pick<TurnStore, 'compactHistory'>;
  readonly gate: JournalGate;
}

export async function compactLive(
  host: RewriteHost,
  turn: ActiveTurn,
  throughSeq: number,
  summary: { commitKey: string; message: { role: 'system'; content: string } },
): Promise<CompactResult> {
  const { workstreamId, generation } = turn;
  variant(admitRewrite)(turn);
  // Admitted: from here the rewrite is in flight and the turn's end waits for it.
  const held = seam(SeamName.rewriteAdmitToWrite, { workstreamId, generation });
  const write = () =>
    host.gate.write(workstreamId, () =>
      host.store.compactHistory({
        workstreamId,
        generation,
        fencingToken: turn.lease.token,
        throughSeq,
        summary,
      }),
    );
  const rewrite = held === undefined ? write() : held.then(write);
  turn.rewrites.add(rewrite);
  try {
    return await rewrite;
  } finally {
    turn.rewrites.delete(rewrite);
  }
}

/** L8: a rewrite asked for once the turn's abort has committed is refused (FENCED). */
export function admitRewrite(turn: ActiveTurn): void {
  if (turn.abort) {
    throw errors.fenced(
      `history rewrite of ${turn.workstreamId} revoked: the turn's abort (${turn.abort.reason}) has committed`,
    );
  }
}

/** L8: the rewrites admitted and still in flight, which the turn's end waits for. */
export function rewritesInFlight(turn: ActiveTurn): Promise<unknown>[] {
  return [...turn.rewrites];
}
