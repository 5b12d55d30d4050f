/**
 * History rewrites on PostgreSQL — compaction (L8) and rewind (C6) — decided on the rows read
 * under the workstream's lock, with the rules both stores share (rewrite-rules.ts), then written by
 * statements sent together with COMMIT.
 */
import type { HistoryRow, JournalEntry } from '@turnwarden/protocol';
import type { PgTx } from './pg-tx.js';
import { compactionToWrite, rewindToWrite } from './rewrite-rules.js';

/** Above every real seq: renumbering goes through it so no step collides on the primary key. */
const PARKING = 2 ** 40;

export interface Compaction {
  readonly generation: number;
  readonly throughSeq: number;
  readonly summary: JournalEntry;
  readonly now: number;
}

/** Rows 1..throughSeq become `summary` (seq 1), the rest is renumbered from 2. Idempotent on the summary's key. */
export function compactRows(
  tx: PgTx,
  workstreamId: string,
  rows: readonly HistoryRow[],
  c: Compaction,
): number {
  const { summary, throughSeq } = c;
  const body = JSON.stringify(summary.message);
  const existing = rows.find((r) => r.commitKey === summary.commitKey);
  const existingBody = existing === undefined ? undefined : JSON.stringify(existing.message);
  if (!compactionToWrite(workstreamId, summary, throughSeq, existingBody, () => rows)) return 0;
  tx.send('DELETE FROM messages WHERE workstream_id = $1 AND seq <= $2', [workstreamId, throughSeq]);
  tx.send('UPDATE messages SET seq = seq + $3 WHERE workstream_id = $1 AND seq > $2', [
    workstreamId,
    throughSeq,
    PARKING,
  ]);
  tx.send('UPDATE messages SET seq = seq - $3 WHERE workstream_id = $1 AND seq > $2', [
    workstreamId,
    PARKING,
    PARKING + throughSeq - 1,
  ]);
  tx.send(
    `INSERT INTO messages (workstream_id, seq, commit_key, generation, role, body, created_at)
     VALUES ($1, 1, $2, $3, 'system', $4, $5)`,
    [workstreamId, summary.commitKey, c.generation, body, c.now],
  );
  return throughSeq;
}

/**
 * Drops rows `fromSeq`.. when row `fromSeq` holds `fromKey`; 0 when the history already ends
 * at `fromSeq - 1` without that key (the rewind was applied). The kept rows must leave no call open (S1).
 */
export function truncateRows(
  tx: PgTx,
  workstreamId: string,
  rows: readonly HistoryRow[],
  fromSeq: number,
  fromKey: string,
): number {
  const lastSeq = rows.at(-1)?.seq ?? 0;
  const keySeq = rows.find((r) => r.commitKey === fromKey)?.seq;
  if (!rewindToWrite(workstreamId, fromSeq, fromKey, lastSeq, keySeq, () => rows.slice(0, fromSeq - 1)))
    return 0;
  tx.send('DELETE FROM messages WHERE workstream_id = $1 AND seq >= $2', [workstreamId, fromSeq]);
  return lastSeq - fromSeq + 1;
}
