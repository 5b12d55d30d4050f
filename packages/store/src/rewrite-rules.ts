/**
 * The rules of a history rewrite — compaction (L8) and rewind (C6) — shared by both stores: each
 * store reads what the rule needs under its own lock, asks here whether to write, and writes.
 * A refusal is thrown having changed nothing.
 */
import { errors, type HistoryRow, type JournalEntry, openToolCalls } from '@turnwarden/protocol';

type Row = Pick<HistoryRow, 'commitKey' | 'message'>;

/**
 * Whether a compaction through `throughSeq` is to be written: false when its summary is in the
 * history already (a retry of an applied compaction). Refused: a summary key holding another
 * row (COMMIT_CONFLICT), a cut outside the history (INVALID_INPUT), a cut that would separate
 * tool calls from their results (S1). `existingBody` is the body stored under the summary's key.
 */
export function compactionToWrite(
  workstreamId: string,
  summary: JournalEntry,
  throughSeq: number,
  existingBody: string | undefined,
  rows: () => readonly Row[],
): boolean {
  if (existingBody !== undefined) {
    if (existingBody !== JSON.stringify(summary.message)) {
      throw errors.commitConflict(
        `commit key ${summary.commitKey} of workstream ${workstreamId} already holds a different row`,
        { workstreamId, commitKey: summary.commitKey },
      );
    }
    return false;
  }
  const all = rows();
  if (throughSeq < 1 || throughSeq > all.length) {
    throw errors.invalidInput(`throughSeq ${throughSeq} is outside 1..${all.length}`, {
      field: 'throughSeq',
    });
  }
  if (openToolCalls(all.slice(0, throughSeq)).length > 0 || all[throughSeq]?.message.role === 'tool') {
    throw errors.structureViolation(
      `workstream ${workstreamId}: compacting through seq ${throughSeq} would separate tool calls from their results`,
      { workstreamId, throughSeq },
    );
  }
  return true;
}

/**
 * Whether a rewind dropping rows `fromSeq`.. is to be written: false when the history already
 * ends at `fromSeq - 1` with no row under `fromKey` (a retry of an applied rewind). Refused: row
 * `fromSeq` does not hold `fromKey` (the history changed since the rewind was planned:
 * COMMIT_CONFLICT), or the kept rows would leave a tool call without its result (S1).
 */
export function rewindToWrite(
  workstreamId: string,
  fromSeq: number,
  fromKey: string,
  lastSeq: number,
  keySeq: number | undefined,
  kept: () => readonly Row[],
): boolean {
  if (keySeq === undefined && lastSeq === fromSeq - 1) return false;
  if (keySeq !== fromSeq) {
    throw errors.commitConflict(
      `workstream ${workstreamId}: the history changed since the rewind was planned (row ${fromSeq} does not hold ${fromKey})`,
      { workstreamId, fromSeq, fromKey, lastSeq },
    );
  }
  if (openToolCalls(kept()).length > 0) {
    throw errors.structureViolation(
      `workstream ${workstreamId}: rewinding to seq ${fromSeq} would leave a tool call without its result`,
      { workstreamId, fromSeq },
    );
  }
  return true;
}
