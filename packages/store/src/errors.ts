import { ErrorCode, isTurnwardenError, TurnwardenError } from '@turnwarden/protocol';

export function invalidConfig(field: string, problem: string): TurnwardenError {
  return new TurnwardenError(ErrorCode.INVALID_CONFIG, `store option ${field} ${problem}`, {
    details: { field },
  });
}

export function invalidInput(field: string, problem: string): TurnwardenError {
  return new TurnwardenError(ErrorCode.INVALID_INPUT, `${field} ${problem}`, { details: { field } });
}

export function workstreamNotFound(workstreamId: string): TurnwardenError {
  return new TurnwardenError(ErrorCode.WORKSTREAM_NOT_FOUND, `workstream ${workstreamId} not found`, {
    details: { workstreamId },
  });
}

export function workstreamClosed(workstreamId: string): TurnwardenError {
  return new TurnwardenError(ErrorCode.WORKSTREAM_CLOSED, `workstream ${workstreamId} is closed`, {
    details: { workstreamId },
  });
}

const RETRYABLE_SQLITE = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED']);

/** Typed errors pass through; anything else (a SqliteError, a bug) becomes STORE_ERROR. */
export function toStoreError(e: unknown, operation: string): TurnwardenError {
  if (isTurnwardenError(e)) return e;
  const code = typeof (e as { code?: unknown })?.code === 'string' ? (e as { code: string }).code : undefined;
  const message = e instanceof Error ? e.message : String(e);
  return new TurnwardenError(ErrorCode.STORE_ERROR, `store ${operation} failed: ${message}`, {
    cause: e,
    retryable: code !== undefined && RETRYABLE_SQLITE.has(code),
    details: { operation, ...(code === undefined ? {} : { sqliteCode: code }) },
  });
}
