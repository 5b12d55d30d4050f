/**
 * One source per rule: the ids, bounds and enums of the API, defined once. The supervisor's
 * input checks (T5), the store's validation and the server's zod schemas — and so the OpenAPI
 * document generated from them — are built from these; the TypeScript unions are derived from
 * the arrays, so a member added here is a member of the type and of the document at once.
 */

// ── ids ──────────────────────────────────────────────────────────────────────

/** Longest workstream, tenant or principal id. The server's router bound follows it. */
export const ID_MAX_LENGTH = 128;
/** Workstream, tenant and principal ids (T5). */
export const ID_PATTERN = new RegExp(`^[A-Za-z0-9._:-]{1,${ID_MAX_LENGTH}}$`);
/** The id rule as a refusal says it, after the field's name. */
export const ID_RULE = `must be 1–${ID_MAX_LENGTH} characters of A–Z a–z 0–9 . _ : -`;

/** Cluster host ids: stable names, a prefix of lease holders (no `:`, the holder's separator). */
export const HOST_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;
export const HOST_ID_RULE = 'must be 1–64 characters of A–Z a–z 0–9 . _ -';

export const isId = (value: unknown): value is string => typeof value === 'string' && ID_PATTERN.test(value);

/**
 * A workstream's key in the store and inside the runtime: its tenant's id and its own, joined by
 * `/` (in neither id), so that two tenants may use the same workstream id (T2). Callers name a
 * workstream by `{ tenantId, workstreamId }`; the key never leaves the runtime but in logs.
 */
export const workstreamKey = (tenantId: string, workstreamId: string): string =>
  `${tenantId}/${workstreamId}`;

/** The workstream id a key carries (the key itself where it has no tenant part). */
export const keyWorkstreamId = (key: string): string => key.slice(key.indexOf('/') + 1);

/** The tenant id a key carries (empty where it has no tenant part). */
export const keyTenantId = (key: string): string => key.slice(0, Math.max(0, key.indexOf('/')));

/** A store key: a workstream id, or a tenant id and a workstream id joined by `/`. */
export const isWorkstreamKey = (value: unknown): value is string => {
  if (typeof value !== 'string') return false;
  const cut = value.indexOf('/');
  return cut < 0 ? isId(value) : isId(value.slice(0, cut)) && isId(value.slice(cut + 1));
};
export const WORKSTREAM_KEY_RULE = `must be a workstream id or <tenant id>/<workstream id>, each ${ID_RULE.replace('must be ', '')}`;

// ── bounds (inclusive) ──────────────────────────────────────────────────────

export interface Bound {
  readonly min: number;
  readonly max: number;
}

/** Integer arguments of the API. */
export const Bounds = {
  /** A soft close's wait for the running turn (ms): at most an hour. */
  waitMs: { min: 0, max: 3_600_000 },
  /** A send's wait for a session worker (ms): at most an hour. */
  maxWaitMs: { min: 0, max: 3_600_000 },
  /** A page of `listWorkstreams`. */
  limit: { min: 1, max: 1_000 },
  /**
   * A page of `history()`: rows read on the supervisor's thread in one go (`bench --only
   * history`: a page of 1,000 SQLite rows costs about 5 ms of its CPU, one of 100 under 1 ms).
   */
  historyLimit: { min: 1, max: 1_000 },
  /** A page of the store's `readHistoryPage`: the API's page and one row to see if there is more. */
  storeHistoryPage: { min: 1, max: 10_000 },
  /** The turns a rewind drops: more than any rewind needs, a larger count is a caller's bug. */
  rewindTurns: { min: 1, max: 10_000 },
  /** The last row a compaction replaces. */
  throughSeq: { min: 1, max: Number.MAX_SAFE_INTEGER },
  /** The history's last seq a rewind expects. */
  ifLastSeq: { min: 0, max: Number.MAX_SAFE_INTEGER },
} as const satisfies Record<string, Bound>;

/** String arguments, by length (UTF-16 code units). */
export const Lengths = {
  /** Lease holders (`host:uuid`), incarnations, `replacing` prefixes. */
  holder: { min: 1, max: 256 },
  /** An incarnation, as `createWorkstream` minted it. */
  incarnation: { min: 1, max: 256 },
  /** A history read's handoff token. */
  handoff: { min: 1, max: 512 },
  /** A page's `nextCursor`. */
  cursor: { min: 1, max: 512 },
} as const satisfies Record<string, Bound>;

/** A safe integer within `bound`. */
export const inBound = (value: unknown, bound: Bound): value is number =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= bound.min && value <= bound.max;

/** A string whose length is within `bound`. */
export const ofLength = (value: unknown, bound: Bound): value is string =>
  typeof value === 'string' && value.length >= bound.min && value.length <= bound.max;

// ── enums ────────────────────────────────────────────────────────────────────

/** The session machine's states (see packages/session/src/machine.ts). */
export const SessionState = {
  idle: 'idle',
  claimed: 'claimed',
  streaming: 'streaming',
  toolDebt: 'tool-debt',
  forceAbandoning: 'force-abandoning',
  closed: 'closed',
} as const;
export type SessionState = (typeof SessionState)[keyof typeof SessionState];
export const SESSION_STATES = Object.values(SessionState) as readonly SessionState[];

/**
 * How a turn ended. `awaiting_approval`: a call it made needs a person's approval — the session
 * waits for it in `tool-debt`, durable, with no thread held; the decision resumes the turn.
 */
export const TURN_STATUSES = ['completed', 'interrupted', 'failed', 'awaiting_approval'] as const;
export type TurnStatus = (typeof TURN_STATUSES)[number];

/** Why a turn was aborted (`workstream_gone`: the workstream was deleted under it, P5). */
export const ABORT_REASONS = [
  'watchdog',
  'deadline',
  'dispatch',
  'cancel',
  'shutdown',
  'lease_lost',
  'workstream_gone',
] as const;
export type AbortReason = (typeof ABORT_REASONS)[number];

/** Why a turn was abandoned: an abort's reason, or `crash` (its worker died, T7). */
export const ABANDON_REASONS = [...ABORT_REASONS, 'crash'] as const;
export type AbandonReason = (typeof ABANDON_REASONS)[number];

/**
 * What a send does when its workstream is busy — a turn running on any host, sends waiting, a
 * call waiting for approval (issue 26, guarantees M1–M4): `reject` refuses it (TURN_IN_PROGRESS,
 * APPROVAL_PENDING while a call waits), `enqueue` queues it behind the turn, `interrupt`
 * force-cancels the running turn (its history repaired) and runs it next, `rollback` does the
 * same and removes the cancelled turn's rows first.
 */
export const DOUBLE_TEXTING_POLICIES = ['reject', 'enqueue', 'interrupt', 'rollback'] as const;
export type DoubleTexting = (typeof DOUBLE_TEXTING_POLICIES)[number];

/** A workstream is open until closed (final). */
export const WORKSTREAM_STATUSES = ['open', 'closed'] as const;
export type WorkstreamStatusName = (typeof WORKSTREAM_STATUSES)[number];

/** The journal's persistence state (P3). */
export const PERSISTENCE_STATES = ['healthy', 'pending', 'retrying', 'conflict'] as const;
export type PersistenceState = (typeof PERSISTENCE_STATES)[number];

/** What revoked a send captured before it (C7): SEND_REVOKED's `details.reason`. */
export type RevokeReason = 'cancel' | 'close' | 'poison' | 'gone';

/** Why the store refused a fenced write (P6): FENCED's `details.reason` from the store. */
export type LeaseRefusal = 'no_lease' | 'superseded' | 'unknown_token' | 'released' | 'expired';

/** Why there was no capacity (T4): CAPACITY_EXHAUSTED's `details.reason`. */
export type CapacityReason =
  | 'queue_full'
  | 'tenant_queue_full'
  /** The tenant runs its most turns across a cluster's hosts (`admission.maxActivePerTenantInCluster`). */
  | 'tenant_active'
  | 'wait_timeout'
  | 'workers_busy'
  | 'worker_exiting';
