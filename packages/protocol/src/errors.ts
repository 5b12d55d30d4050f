/**
 * Typed errors with stable codes. They cross `postMessage` as plain data (`toWire`) and are
 * rebuilt on the other side (`fromWire`); check them with `isTurnwardenError(e, code)`, never
 * with `instanceof` (class identity does not survive threads or duplicate package copies).
 */
export const ErrorCode = {
  /** A configuration value is missing, of the wrong type or out of range. */
  INVALID_CONFIG: 'INVALID_CONFIG',
  /** A scripted-model script is malformed. */
  INVALID_SCRIPT: 'INVALID_SCRIPT',
  /** A request is malformed (bad id, oversize, unknown field). Nothing was written. */
  INVALID_INPUT: 'INVALID_INPUT',
  WORKSTREAM_NOT_FOUND: 'WORKSTREAM_NOT_FOUND',
  WORKSTREAM_EXISTS: 'WORKSTREAM_EXISTS',
  WORKSTREAM_CLOSED: 'WORKSTREAM_CLOSED',
  /** A turn is already running on this workstream. */
  TURN_IN_PROGRESS: 'TURN_IN_PROGRESS',
  /**
   * The workstream's turn lease is held by another holder — a turn or a repair on another host, or
   * a process that died mid-turn whose lease has not expired yet. `details`: `{ workstreamId,
   * holder, expiresAt, retryAfterMs, hostId? }` — `expiresAt` on the store's clock, `retryAfterMs`
   * the time until then (at most `lease.ttlMs`), `hostId` when the holder has one. Nothing was
   * written; retryable (after `retryAfterMs`, or on that host).
   */
  LEASED_ELSEWHERE: 'LEASED_ELSEWHERE',
  /** The workstream's queue of sends waiting behind its running turn is full; retry later. */
  QUEUE_FULL: 'QUEUE_FULL',
  /**
   * A send captured before a cancel, a close or a poisoned turn end cannot start after it (C7);
   * `details.reason` says which. Nothing was written.
   */
  SEND_REVOKED: 'SEND_REVOKED',
  /** Structural debt (tool calls without results) is unresolved: no claim until repaired (S3). */
  TOOL_CLEANUP_PENDING: 'TOOL_CLEANUP_PENDING',
  /** No active-worker capacity right now; retry later (T4). */
  CAPACITY_EXHAUSTED: 'CAPACITY_EXHAUSTED',
  /** The worker thread serving a call exited before the call settled. */
  WORKER_EXITED: 'WORKER_EXITED',
  /** The turn was aborted (watchdog, cancel, deadline, shutdown). */
  TURN_ABORTED: 'TURN_ABORTED',
  /** A durable write was refused because its lease/generation was superseded (P6, L3). */
  FENCED: 'FENCED',
  /** The store refused or failed a write. */
  STORE_ERROR: 'STORE_ERROR',
  /** Same commit key, different body (P1). */
  COMMIT_CONFLICT: 'COMMIT_CONFLICT',
  /** History would become structurally invalid (S1). */
  STRUCTURE_VIOLATION: 'STRUCTURE_VIOLATION',
  MODEL_ERROR: 'MODEL_ERROR',
  TOOL_ERROR: 'TOOL_ERROR',
  SHUTTING_DOWN: 'SHUTTING_DOWN',
  TIMEOUT: 'TIMEOUT',
  INTERNAL: 'INTERNAL',
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

const RETRYABLE: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  ErrorCode.CAPACITY_EXHAUSTED,
  ErrorCode.TURN_IN_PROGRESS,
  ErrorCode.LEASED_ELSEWHERE,
  ErrorCode.QUEUE_FULL,
  ErrorCode.TIMEOUT,
]);

/** The plain-data form of an error, safe for structured clone. */
export interface WireError {
  readonly name: 'TurnwardenError';
  readonly code: ErrorCode;
  readonly message: string;
  readonly retryable: boolean;
  readonly details?: Readonly<Record<string, unknown>>;
}

export class TurnwardenError extends Error {
  override readonly name = 'TurnwardenError' as const;
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly details: Readonly<Record<string, unknown>> | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options: { details?: Record<string, unknown>; cause?: unknown; retryable?: boolean } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = options.retryable ?? RETRYABLE.has(code);
    this.details = options.details;
  }

  toWire(): WireError {
    return {
      name: 'TurnwardenError',
      code: this.code,
      message: this.message,
      retryable: this.retryable,
      ...(this.details === undefined ? {} : { details: this.details }),
    };
  }
}

const CODES: ReadonlySet<string> = new Set(Object.values(ErrorCode));

/** True for a TurnwardenError from any thread or package copy, optionally of one code. */
export function isTurnwardenError(e: unknown, code?: ErrorCode): e is TurnwardenError {
  if (typeof e !== 'object' || e === null) return false;
  const c = (e as { code?: unknown }).code;
  if ((e as { name?: unknown }).name !== 'TurnwardenError' || typeof c !== 'string' || !CODES.has(c)) {
    return false;
  }
  return code === undefined || c === code;
}

/** Plain data for any thrown value; unknown errors become INTERNAL. */
export function toWire(e: unknown): WireError {
  if (e instanceof TurnwardenError) return e.toWire();
  if (isTurnwardenError(e)) {
    const w = e as unknown as WireError;
    return {
      name: 'TurnwardenError',
      code: w.code,
      message: w.message,
      retryable: Boolean(w.retryable),
      ...(w.details === undefined ? {} : { details: w.details }),
    };
  }
  const message = e instanceof Error ? e.message : String(e);
  return { name: 'TurnwardenError', code: ErrorCode.INTERNAL, message, retryable: false };
}

/** Rebuilds a TurnwardenError from its wire form (or anything error-like). */
export function fromWire(w: unknown): TurnwardenError {
  if (w instanceof TurnwardenError) return w;
  const wire = toWire(w);
  return new TurnwardenError(wire.code, wire.message, {
    retryable: wire.retryable,
    ...(wire.details === undefined ? {} : { details: { ...wire.details } }),
  });
}
