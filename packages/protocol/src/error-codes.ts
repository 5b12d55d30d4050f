/**
 * The error table: every code with its HTTP status, whether a retry may succeed, and the type
 * of its `details` — one row per code, the one place each is said. `ErrorCode`, the server's
 * statuses, the default `retryable` and the typed constructors (`errors.*`, errors.ts) are
 * derived from it.
 */
import type { EffectStatus } from './history.js';
import type { CapacityReason, LeaseRefusal, RevokeReason } from './rules.js';

declare const details: unique symbol;

/** One code: `D` is its details' type (`undefined`: none; `X | undefined`: optional). */
export interface CodeSpec<D> {
  /** The HTTP status the server answers it with. */
  readonly status: number;
  /** The default: a retry of the same call may succeed. */
  readonly retryable: boolean;
  /** Type only: never set. */
  readonly [details]?: { readonly of: D };
}

const code = <D extends object | undefined = undefined>(status: number, retryable: boolean): CodeSpec<D> => ({
  status,
  retryable,
});

export const ERROR_TABLE = {
  /** A configuration value is missing, of the wrong type or out of range. */
  INVALID_CONFIG: code<{ readonly field: string } | undefined>(500, false),
  /** A scripted-model script is malformed; `path` names the offending element. */
  INVALID_SCRIPT: code<{ readonly path: string }>(400, false),
  /** A request is malformed (bad id, oversize, unknown field). Nothing was written. */
  INVALID_INPUT: code<
    { readonly field: string; readonly available?: number; readonly reason?: string } | undefined
  >(400, false),
  /** No such workstream for this tenant (another tenant's is answered the same, T2). */
  WORKSTREAM_NOT_FOUND: code<{ readonly workstreamId: string; readonly reason?: 'deleted' } | undefined>(
    404,
    false,
  ),
  /** The id is taken, or a delete of it is not finished (`reason: 'deleting'`, D2). */
  WORKSTREAM_EXISTS: code<{ readonly workstreamId: string; readonly reason?: 'deleting' }>(409, false),
  WORKSTREAM_CLOSED: code<{ readonly workstreamId: string } | undefined>(409, false),
  /** A turn is already running on this workstream. */
  TURN_IN_PROGRESS: code<{ readonly workstreamId: string; readonly doubleTexting?: 'reject' } | undefined>(
    409,
    true,
  ),
  /**
   * The workstream's turn lease is held by another holder — a turn or a repair on another host, or
   * a process that died mid-turn whose lease has not expired yet. `expiresAt` on the store's
   * clock, `retryAfterMs` the time until then (at most `lease.ttlMs`), `hostId` when the holder
   * has one. Nothing was written; retryable (after `retryAfterMs`, or on that host).
   */
  LEASED_ELSEWHERE: code<{
    readonly workstreamId: string;
    readonly holder: string;
    readonly expiresAt: number;
    readonly retryAfterMs: number;
    readonly hostId?: string;
  }>(409, true),
  /** The workstream's queue of sends waiting behind its running turn is full; retry later. */
  QUEUE_FULL: code<{ readonly limit: number; readonly retryAfterMs: number }>(429, true),
  /**
   * A send captured before a cancel, a close or a poisoned turn end cannot start after it (C7);
   * `reason` says which. Nothing was written.
   */
  SEND_REVOKED: code<{ readonly reason: RevokeReason }>(409, false),
  /** Structural debt (tool calls without results) is unresolved: no claim until repaired (S3). */
  TOOL_CLEANUP_PENDING: code<{ readonly workstreamId: string; readonly openCalls: number } | undefined>(
    409,
    false,
  ),
  /**
   * The workstream's turn waits for a person's approval of a call: no new turn until it is
   * decided (`approve`, `deny`) or the wait ends (a cancel, its timeout). Nothing was written.
   */
  APPROVAL_PENDING: code<{ readonly workstreamId: string; readonly token?: string }>(409, false),
  /**
   * The approval token names no wait of this workstream: another turn's (`generation`), a call
   * no longer waiting or never asked — another workstream's, one deleted and created again
   * (its session is new), one cancelled or timed out — (`not_waiting`), or not a token
   * (`malformed`). Nothing changed.
   */
  APPROVAL_STALE: code<{
    readonly workstreamId: string;
    readonly reason: 'malformed' | 'generation' | 'not_waiting';
  }>(409, false),
  /** The approval was decided the other way already (the same decision again is no error). Nothing changed. */
  APPROVAL_DECIDED: code<{ readonly workstreamId: string; readonly approved: boolean }>(409, false),
  /** No active-worker capacity right now; retry after `retryAfterMs` (T4). */
  CAPACITY_EXHAUSTED: code<
    { readonly reason: CapacityReason; readonly retryAfterMs: number; readonly tenantId?: string } | undefined
  >(429, true),
  /** The worker thread serving a call exited before the call settled. */
  WORKER_EXITED: code(500, false),
  /** The turn was aborted (watchdog, cancel, deadline, shutdown). */
  TURN_ABORTED: code(409, false),
  /**
   * A durable write was refused because its lease/generation was superseded (P6, L3): the
   * store's refusal names its token and why; a revoked rewind names what revoked it.
   */
  FENCED: code<
    | {
        readonly workstreamId: string;
        readonly reason?: LeaseRefusal | RevokeReason;
        readonly fencingToken?: number;
        readonly currentToken?: number | null;
      }
    | undefined
  >(409, false),
  /** The store refused or failed a write; `retryable` says whether a retry may succeed. */
  STORE_ERROR: code<
    | {
        readonly operation?: string;
        readonly sqliteCode?: string;
        readonly sqlState?: string;
        readonly injected?: true;
        readonly closed?: true;
        readonly schemaVersion?: number;
        readonly supported?: number;
      }
    | undefined
  >(503, false),
  /** Same commit key, different body (P1); or a rewrite or rewind found another history. */
  COMMIT_CONFLICT: code<{
    readonly workstreamId: string;
    readonly commitKey?: string;
    readonly seq?: number;
    readonly fromSeq?: number;
    readonly fromKey?: string;
    readonly lastSeq?: number;
    readonly ifLastSeq?: number;
  }>(409, false),
  /** History would become structurally invalid (S1). */
  STRUCTURE_VIOLATION: code<{
    readonly workstreamId: string;
    readonly commitKey?: string;
    readonly throughSeq?: number;
    readonly fromSeq?: number;
  }>(409, false),
  /** The model provider failed: what it said, never the key (packages/providers). */
  MODEL_ERROR: code<
    | {
        readonly model: string;
        readonly provider: string;
        readonly message: string;
        readonly type?: string;
        readonly status?: number;
        readonly code?: string | number;
      }
    | undefined
  >(500, false),
  /** A tool failed; `toolEffect` says whether it may have had an effect (S2). */
  TOOL_ERROR: code<
    { readonly tool?: string; readonly server?: string; readonly toolEffect?: EffectStatus } | undefined
  >(500, false),
  SHUTTING_DOWN: code(503, false),
  /** A wait ran out: a soft close (`waitMs`, C2), a host that did not answer, a worker's start. */
  TIMEOUT: code<
    { readonly workstreamId?: string; readonly hostId?: string; readonly waitMs?: number } | undefined
  >(504, true),
  INTERNAL: code<{ readonly workstreamId?: string; readonly injected?: true } | undefined>(500, false),
} as const;

export type ErrorCode = keyof typeof ERROR_TABLE;

/** The codes by name: `ErrorCode.LEASED_ELSEWHERE` is `'LEASED_ELSEWHERE'`. */
export const ErrorCode = Object.fromEntries(Object.keys(ERROR_TABLE).map((c) => [c, c])) as {
  readonly [C in ErrorCode]: C;
};

/** The type of a code's `details`, as the table says (`undefined` when it has none). */
export type ErrorDetails<C extends ErrorCode> = NonNullable<(typeof ERROR_TABLE)[C][typeof details]>['of'];
