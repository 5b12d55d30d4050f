/**
 * Appends on PostgreSQL: one or several batches (group commit) in one transaction of two
 * round trips. The first sends, pipelined, BEGIN, the locks (workstream rows in id order, then
 * in a statement of its own the lease rows of fenced batches, FOR UPDATE) and one read of all that the batches are
 * checked against — each workstream's last seq, its tail for S1, the rows already under the
 * batches' commit keys (P1), and the clock — which runs once those locks are held. Every batch
 * is then decided in memory, in submission order, against that state and the rows accepted
 * before it: a refused batch contributes nothing and is reported in its slot, so no savepoint
 * is needed. The second round trip sends the accepted rows in one multi-row INSERT, the
 * session snapshots in one UPDATE, and COMMIT. A database failure fails the whole call.
 */
import {
  errors,
  type HistoryMessage,
  type HistoryRow,
  isTurnwardenError,
  structuralRefusal,
} from '@turnwarden/protocol';
import type { CheckedAppend } from './entries.js';
import { invalidInput, workstreamClosed, workstreamNotFound } from './errors.js';
import { fenceRefusal } from './leases.js';
import { LEASE_LOCK_SQL, type LeaseRow, LOCK_SQL, type LockedRow, nowSql, toLocked } from './pg-rows.js';
import type { PgTx } from './pg-tx.js';
import type { AppendOutcome } from './types.js';

type StructuralRow = Pick<HistoryRow, 'commitKey' | 'message'>;

interface StateRow {
  kind: number;
  ws: string | null;
  seq: number;
  commit_key: string | null;
  body: string | null;
}

/** 0: the clock; 1: a workstream's last seq; 2: its tail rows (S1); 3: rows under the batches' keys (P1). */
const STATE_SQL = `
  SELECT 0 AS kind, NULL::text AS ws, ${nowSql(4)} AS seq, NULL::text AS commit_key, NULL::text AS body
  UNION ALL
  SELECT 1, w.id, (SELECT COALESCE(MAX(seq), 0) FROM messages m WHERE m.workstream_id = w.id), NULL, NULL
    FROM unnest($1::text[]) AS w(id)
  UNION ALL
  SELECT 2, t.workstream_id, t.seq, t.commit_key, t.body FROM unnest($1::text[]) AS w(id)
    CROSS JOIN LATERAL (
      SELECT workstream_id, seq, commit_key, body FROM messages
      WHERE workstream_id = w.id AND seq >= COALESCE(
        (SELECT seq FROM messages WHERE workstream_id = w.id AND role <> 'tool' ORDER BY seq DESC LIMIT 1), 1)
    ) t
  UNION ALL
  SELECT 3, m.workstream_id, m.seq, m.commit_key, m.body
    FROM unnest($2::text[], $3::text[]) AS k(ws, key)
    JOIN messages m ON m.workstream_id = k.ws AND m.commit_key = k.key`;

const INSERT_SQL = `
  INSERT INTO messages (workstream_id, seq, commit_key, generation, role, body, created_at, fencing_token)
  SELECT ws, seq, key, gen, role, body, $7::bigint, token
  FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $8::bigint[])
    AS r(ws, seq, key, gen, role, body, token)`;

const SESSIONS_SQL = `
  UPDATE workstreams w SET session = s.session
  FROM unnest($1::text[], $2::text[]) AS s(id, session) WHERE w.id = s.id`;

interface History {
  lastSeq: number;
  tail: StructuralRow[];
  readonly keys: Map<string, { readonly seq: number; readonly body: string }>;
}

interface Rows {
  readonly ws: string[];
  readonly seq: number[];
  readonly key: string[];
  readonly gen: number[];
  readonly role: string[];
  readonly body: string[];
  readonly token: (number | null)[];
}

/**
 * Writes `batches` (already checked for shape) in the transaction `tx`; `clock` is the
 * injected clock's value, or null for the database's. Returns one outcome per batch.
 */
export async function appendBatches(
  tx: PgTx,
  batches: readonly CheckedAppend[],
  clock: number | null,
): Promise<AppendOutcome[]> {
  // The locking statements take their row locks in id order themselves (ORDER BY … FOR UPDATE).
  const ids = [...new Set(batches.map((b) => b.workstreamId))];
  const fenced = [...new Set(batches.filter((b) => b.token !== undefined).map((b) => b.workstreamId))];
  const keyWs: string[] = [];
  const keyKeys: string[] = [];
  const seen = new Set<string>();
  for (const b of batches) {
    for (const e of b.entries) {
      const pair = `${b.workstreamId}\u0000${e.commitKey}`;
      if (seen.has(pair)) continue;
      seen.add(pair);
      keyWs.push(b.workstreamId);
      keyKeys.push(e.commitKey);
    }
  }
  const lockP = tx.query<LockedRow>(LOCK_SQL, [ids]);
  const leasesP = fenced.length === 0 ? undefined : tx.query<LeaseRow>(LEASE_LOCK_SQL, [fenced]);
  const stateP = tx.query<StateRow>(STATE_SQL, [ids, keyWs, keyKeys, clock]);
  const locked = toLocked((await lockP).rows, leasesP === undefined ? [] : (await leasesP).rows);
  const { now, histories } = readState((await stateP).rows);

  const rows: Rows = { ws: [], seq: [], key: [], gen: [], role: [], body: [], token: [] };
  const sessions = new Map<string, string>();
  const outcomes = batches.map((b): AppendOutcome => {
    try {
      const seqs = decide(b, locked.get(b.workstreamId), histories, now, rows);
      if (b.session !== undefined) sessions.set(b.workstreamId, b.session);
      return { seqs };
    } catch (e) {
      if (isTurnwardenError(e)) return { error: e };
      throw e;
    }
  });
  if (rows.ws.length > 0) {
    tx.send(INSERT_SQL, [rows.ws, rows.seq, rows.key, rows.gen, rows.role, rows.body, now, rows.token]);
  }
  if (sessions.size > 0) tx.send(SESSIONS_SQL, [[...sessions.keys()], [...sessions.values()]]);
  return outcomes;
}

function readState(stateRows: readonly StateRow[]): { now: number; histories: Map<string, History> } {
  let now = 0;
  const histories = new Map<string, History>();
  const history = (ws: string) => {
    let h = histories.get(ws);
    if (h === undefined) {
      h = { lastSeq: 0, tail: [], keys: new Map() };
      histories.set(ws, h);
    }
    return h;
  };
  const tails = new Map<string, { seq: number; row: StructuralRow }[]>();
  for (const r of stateRows) {
    if (r.kind === 0) now = r.seq;
    else if (r.kind === 1) history(r.ws!).lastSeq = r.seq;
    else if (r.kind === 2) {
      const list = tails.get(r.ws!) ?? [];
      list.push({
        seq: r.seq,
        row: { commitKey: r.commit_key!, message: JSON.parse(r.body!) as HistoryMessage },
      });
      tails.set(r.ws!, list);
    } else history(r.ws!).keys.set(r.commit_key!, { seq: r.seq, body: r.body! });
  }
  for (const [ws, list] of tails) history(ws).tail = list.sort((a, b) => a.seq - b.seq).map((t) => t.row);
  return { now, histories };
}

/**
 * One batch, in the order of checks of SQLite: workstream exists → open → fence (P6) →
 * generation → per entry idempotency (P1) and structure (S1). Throws its refusal having changed
 * nothing; accepted, its rows join `rows` and the workstream's history in memory.
 */
function decide(
  b: CheckedAppend,
  ws: { status: string; generation: number; lease: Parameters<typeof fenceRefusal>[2] } | undefined,
  histories: Map<string, History>,
  now: number,
  rows: Rows,
): number[] {
  if (ws === undefined) throw workstreamNotFound(b.workstreamId);
  if (ws.status !== 'open') throw workstreamClosed(b.workstreamId);
  if (b.token !== undefined) {
    const refusal = fenceRefusal(b.workstreamId, b.token, ws.lease, now);
    if (refusal !== undefined) throw refusal;
  }
  if (b.generation > ws.generation) {
    throw invalidInput(
      'generation',
      `${b.generation} was never issued (durable generation ${ws.generation})`,
    );
  }
  const h = histories.get(b.workstreamId) ?? { lastSeq: 0, tail: [], keys: new Map() };
  const tail = [...h.tail];
  const added = new Map<string, { seq: number; body: string; role: string }>();
  let next = h.lastSeq + 1;
  const seqs: number[] = [];
  for (const { commitKey, message } of b.entries) {
    const body = JSON.stringify(message);
    const existing = added.get(commitKey) ?? h.keys.get(commitKey);
    if (existing !== undefined) {
      if (existing.body !== body) {
        throw errors.commitConflict(
          `commit key ${commitKey} of workstream ${b.workstreamId} already holds a different row (seq ${existing.seq})`,
          { workstreamId: b.workstreamId, commitKey, seq: existing.seq },
        );
      }
      seqs.push(existing.seq);
      continue;
    }
    const refusal = structuralRefusal(tail, message);
    if (refusal !== undefined) {
      throw errors.structureViolation(`workstream ${b.workstreamId}: ${refusal}`, {
        workstreamId: b.workstreamId,
        commitKey,
      });
    }
    added.set(commitKey, { seq: next, body, role: message.role });
    if (message.role !== 'tool') tail.length = 0;
    tail.push({ commitKey, message });
    seqs.push(next);
    next += 1;
  }
  // Accepted: what later batches of the group see.
  for (const [key, row] of added) {
    h.keys.set(key, row);
    rows.ws.push(b.workstreamId);
    rows.seq.push(row.seq);
    rows.key.push(key);
    rows.gen.push(b.generation);
    rows.role.push(row.role);
    rows.body.push(row.body);
    rows.token.push(b.token ?? null);
  }
  h.lastSeq = next - 1;
  h.tail = tail;
  histories.set(b.workstreamId, h);
  return seqs;
}
