/** The `workstreams` table: creation with a fresh incarnation (D1), generation, close. */
import { randomUUID } from 'node:crypto';
import type { DoubleTexting } from '@turnwarden/protocol';
import type Database from 'better-sqlite3';
import { workstreamClosed, workstreamNotFound } from './errors.js';
import { toRecord, type WorkstreamRow } from './rows.js';
import type { WorkstreamFilter, WorkstreamRecord } from './types.js';

export class WorkstreamTable {
  readonly #get;
  readonly #list;
  readonly #insert;
  readonly #close;
  readonly #bump;
  readonly #session;
  readonly #state;
  readonly #delete;

  constructor(db: Database.Database) {
    this.#get = db.prepare<[string], WorkstreamRow>('SELECT * FROM workstreams WHERE id = ?');
    // What every write checks: no session snapshot to read and parse (it can be kilobytes).
    this.#state = db.prepare<[string], { status: 'open' | 'closed'; generation: number }>(
      'SELECT status, generation FROM workstreams WHERE id = ?',
    );
    this.#list = db.prepare<
      [{ tenant: string | null; status: string | null; after: string | null; limit: number }],
      WorkstreamRow
    >(
      `SELECT * FROM workstreams
       WHERE (@tenant IS NULL OR tenant_id = @tenant) AND (@status IS NULL OR status = @status)
         AND (@after IS NULL OR id > @after)
       ORDER BY id LIMIT @limit`,
    );
    this.#insert = db.prepare<[string, string, string, number, string | null]>(
      `INSERT INTO workstreams (id, tenant_id, incarnation, generation, status, created_at, double_texting)
       VALUES (?, ?, ?, 0, 'open', ?, ?)`,
    );
    this.#close = db.prepare<[number, string]>(
      "UPDATE workstreams SET status = 'closed', closed_at = ? WHERE id = ? AND status = 'open'",
    );
    this.#bump = db.prepare<[string], { generation: number }>(
      'UPDATE workstreams SET generation = generation + 1 WHERE id = ? RETURNING generation',
    );
    this.#session = db.prepare<[string, string]>('UPDATE workstreams SET session = ? WHERE id = ?');
    this.#delete = db.prepare<[string]>('DELETE FROM workstreams WHERE id = ?');
  }

  get(id: string): WorkstreamRecord | undefined {
    const row = this.#get.get(id);
    return row === undefined ? undefined : toRecord(row);
  }

  list(filter: WorkstreamFilter): WorkstreamRecord[] {
    return this.#list
      .all({
        tenant: filter.tenantId ?? null,
        status: filter.status ?? null,
        after: filter.afterId ?? null,
        limit: filter.limit ?? -1,
      })
      .map(toRecord);
  }

  /** The caller has checked that the id is free. */
  insert(id: string, tenantId: string, now: number, doubleTexting?: DoubleTexting): WorkstreamRecord {
    this.#insert.run(id, tenantId, randomUUID(), now, doubleTexting ?? null);
    return this.get(id)!;
  }

  require(id: string): WorkstreamRecord {
    const ws = this.get(id);
    if (ws === undefined) throw workstreamNotFound(id);
    return ws;
  }

  /** An open workstream's durable generation (a write's check); not found or closed: typed errors. */
  requireOpen(id: string): { readonly generation: number } {
    const ws = this.#state.get(id);
    if (ws === undefined) throw workstreamNotFound(id);
    if (ws.status !== 'open') throw workstreamClosed(id);
    return ws;
  }

  /** Deletes the row; the caller deleted its messages first. */
  delete(id: string): void {
    this.#delete.run(id);
  }

  /** Closes an open workstream; a closed one is left as it is. */
  close(id: string, now: number): void {
    this.#close.run(now, id);
  }

  bumpGeneration(id: string): number {
    return this.#bump.get(id)!.generation;
  }

  /** Stores the session machine's snapshot (already validated JSON). */
  saveSession(id: string, json: string): void {
    this.#session.run(json, id);
  }
}
