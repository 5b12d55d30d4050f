/**
 * The history-rewrite fence (L8) under a running turn: a rewrite is refused once the turn's
 * abort has committed (a rewrite that has not started is revoked); once admitted it is in
 * flight, queued with the turn's writes under its lease, and the turn's end waits for it — an
 * abort never tears it; a declined abort changes nothing.
 */
import { errors, SeamName, seam } from '@turnwarden/protocol';
import type { CompactResult, TurnStore } from '@turnwarden/store';
import type { JournalGate } from '../journal/journal-gate.js';
import { variant } from '../variants.js';
import type { Turn } from './turn.js';

export interface RewriteHost {
  readonly store: Pick<TurnStore, 'compactHistory'>;
  readonly gate: JournalGate;
}

export async function compactLive(
  host: RewriteHost,
  turn: Turn,
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
  return turn.holdEndFor(held === undefined ? write() : held.then(write));
}

/**
 * L8: a rewrite asked for once the turn's abort has committed is refused (FENCED) — committed as
 * the slot says, too: the watchdog's own thread sets the fence before the supervisor hears of it.
 */
export function admitRewrite(turn: Pick<Turn, 'workstreamId' | 'aborted' | 'fenced'>): void {
  if (turn.fenced) {
    throw errors.fenced(
      `history rewrite of ${turn.workstreamId} revoked: the turn's abort (${turn.aborted?.reason ?? 'watchdog'}) has committed`,
    );
  }
}

/** L8: the rewrites admitted and still in flight, which the turn's end waits for. */
export function rewritesInFlight(turn: Pick<Turn, 'rewritesPending'>): Promise<unknown>[] {
  return turn.rewritesPending();
}
