/** The `messages` table: gap-free seqs, commit-key idempotency (P1), structural check (S1). */

import { errors, type HistoryRow, type JournalEntry, structuralRefusal } from '@turnwarden/protocol';
import type Database from 'better-sqlite3';
import { compactionToWrite, rewindToWrite } from './rewrite-rules.js';
import { type MessageRow as SharedMessageRow, toHistoryRow } from './rows.js';

/** `SELECT *`: the shared columns and the role. */
interface MessageRow extends SharedMessageRow {
  role: string;
}

const PARKING = 2 ** 40;

type StructuralRow = Pick<HistoryRow, 'commitKey' | 'message'>;

export class MessageTable {
  readonly #byKey;
  readonly #lastSeq;
  readonly #insert;
  readonly #all;
  readonly #tail;
  readonly #after;
  readonly #page;
  readonly #deleteThrough;
  readonly #deleteFrom;
  readonly #deleteAll;
  readonly #park;
  readonly #unpark;

  constructor(db: Database.Database) {
    this.#byKey = db.prepare<[string, string], { seq: number; body: string }>(
      'SELECT seq, body FROM messages WHERE workstream_id = ? AND commit_key = ?',
    );
    this.#lastSeq = db.prepare<[string], { seq: number }>(
      'SELECT COALESCE(MAX(seq), 0) AS seq FROM messages WHERE workstream_id = ?',
    );
    this.#insert = db.prepare<[string, number, string, number, string, string, number, number | null]>(
      `INSERT INTO messages (workstream_id, seq, commit_key, generation, role, body, created_at, fencing_token)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.#all = db.prepare<[string], MessageRow>(
      'SELECT * FROM messages WHERE workstream_id = ? ORDER BY seq',
    );
    this.#after = db.prepare<[string, number], MessageRow>(
      'SELECT * FROM messages WHERE workstream_id = ? AND seq > ? ORDER BY seq',
    );
    // Keyset paging: a range scan of the (workstream_id, seq) primary key, LIMIT rows long.
    this.#page = db.prepare<[string, number, number], MessageRow>(
      'SELECT * FROM messages WHERE workstream_id = ? AND seq > ? ORDER BY seq LIMIT ?',
    );
    // From the last non-tool row on: all that S1 needs, since the history before it is complete.
    this.#tail = db.prepare<[{ ws: string }], MessageRow>(
      `SELECT * FROM messages WHERE workstream_id = @ws AND seq >= COALESCE(
         (SELECT seq FROM messages WHERE workstream_id = @ws AND role <> 'tool' ORDER BY seq DESC LIMIT 1), 1)
       ORDER BY seq`,
    );
    this.#deleteThrough = db.prepare<[string, number]>(
      'DELETE FROM messages WHERE workstream_id = ? AND seq <= ?',
    );
    this.#deleteAll = db.prepare<[string]>('DELETE FROM messages WHERE workstream_id = ?');
    this.#deleteFrom = db.prepare<[string, number]>(
      'DELETE FROM messages WHERE workstream_id = ? AND seq >= ?',
    );
    // Renumber in two passes through a parking range above every real seq, so no intermediate
    // state collides on the primary key.
    this.#park = db.prepare<[number, string, number]>(
      'UPDATE messages SET seq = seq + ? WHERE workstream_id = ? AND seq > ?',
    );
    this.#unpark = db.prepare<[number, string, number]>(
      'UPDATE messages SET seq = seq - ? WHERE workstream_id = ? AND seq > ?',
    );
  }

  /**
   * Replaces rows 1..throughSeq with `summary` (a system row at seq 1) and renumbers the rest
   * from 2. The cut must leave S1 intact: the prefix has no open tool call and the first kept
   * row is not a tool result. Call inside a write transaction. Idempotent on the summary's key.
   */
  compact(
    workstreamId: string,
    generation: number,
    throughSeq: number,
    summary: JournalEntry,
    now: number,
  ): number {
    const body = JSON.stringify(summary.message);
    const existing = this.#byKey.get(workstreamId, summary.commitKey);
    if (!compactionToWrite(workstreamId, summary, throughSeq, existing?.body, () => this.all(workstreamId))) {
      return 0;
    }
    this.#deleteThrough.run(workstreamId, throughSeq);
    this.#park.run(PARKING, workstreamId, throughSeq);
    this.#unpark.run(PARKING + throughSeq - 1, workstreamId, PARKING);
    this.#insert.run(workstreamId, 1, summary.commitKey, generation, 'system', body, now, null);
    return throughSeq;
  }

  /**
   * Drops rows `fromSeq`.. (a rewind) when row `fromSeq` holds `fromKey`; reports 0 when the
   * history already ends at `fromSeq - 1` with no row under `fromKey` (the rewind was applied).
   * The kept rows must leave no call open (S1). Call inside a write transaction.
   */
  truncate(workstreamId: string, fromSeq: number, fromKey: string): number {
    const lastSeq = this.#lastSeq.get(workstreamId)!.seq;
    const keySeq = this.#byKey.get(workstreamId, fromKey)?.seq;
    const kept = () => this.all(workstreamId).slice(0, fromSeq - 1);
    if (!rewindToWrite(workstreamId, fromSeq, fromKey, lastSeq, keySeq, kept)) return 0;
    this.#deleteFrom.run(workstreamId, fromSeq);
    return lastSeq - fromSeq + 1;
  }

  /** Drops the workstream's whole history (its deletion); returns how many rows. */
  deleteAll(workstreamId: string): number {
    return this.#deleteAll.run(workstreamId).changes;
  }

  all(workstreamId: string): HistoryRow[] {
    return this.#all.all(workstreamId).map(toHistoryRow);
  }

  /** The rows after `afterSeq`, in order. */
  after(workstreamId: string, afterSeq: number): HistoryRow[] {
    return this.#after.all(workstreamId, afterSeq).map(toHistoryRow);
  }

  /** At most `limit` rows after `afterSeq`, in order. */
  page(workstreamId: string, afterSeq: number, limit: number): HistoryRow[] {
    return this.#page.all(workstreamId, afterSeq, limit).map(toHistoryRow);
  }

  /** The rows from the last non-tool message on: enough for `openToolCalls`/`structuralRefusal`. */
  tail(workstreamId: string): HistoryRow[] {
    return this.#tail.all({ ws: workstreamId }).map(toHistoryRow);
  }

  /**
   * Appends `entries` (already validated and normalized) in order; call inside a write
   * transaction, which a refusal rolls back whole.
   */
  append(
    workstreamId: string,
    generation: number,
    entries: readonly JournalEntry[],
    now: number,
    token: number | null = null,
  ): number[] {
    if (entries.length === 0) return []; // a session snapshot alone (the journal's group commit)
    const tail: StructuralRow[] = this.tail(workstreamId);
    let next = this.#lastSeq.get(workstreamId)!.seq + 1;
    const seqs: number[] = [];
    for (const { commitKey, message } of entries) {
      const body = JSON.stringify(message);
      const existing = this.#byKey.get(workstreamId, commitKey);
      if (existing !== undefined) {
        if (existing.body !== body) {
          throw errors.commitConflict(
            `commit key ${commitKey} of workstream ${workstreamId} already holds a different row (seq ${existing.seq})`,
            { workstreamId, commitKey, seq: existing.seq },
          );
        }
        seqs.push(existing.seq);
        continue;
      }
      const refusal = structuralRefusal(tail, message);
      if (refusal !== undefined) {
        throw errors.structureViolation(`workstream ${workstreamId}: ${refusal}`, {
          workstreamId,
          commitKey,
        });
      }
      this.#insert.run(workstreamId, next, commitKey, generation, message.role, body, now, token);
      if (message.role !== 'tool') tail.length = 0;
      tail.push({ commitKey, message });
      seqs.push(next);
      next += 1;
    }
    return seqs;
  }
}
