import { errors, isTurnwardenError, type TurnwardenError } from '@turnwarden/protocol';

export function invalidConfig(field: string, problem: string): TurnwardenError {
  return errors.invalidConfig(`store option ${field} ${problem}`, { field });
}

export function invalidInput(field: string, problem: string): TurnwardenError {
  return errors.invalidInput(`${field} ${problem}`, { field });
}

export function workstreamNotFound(workstreamId: string): TurnwardenError {
  return errors.workstreamNotFound(`workstream ${workstreamId} not found`, { workstreamId });
}

export function workstreamClosed(workstreamId: string): TurnwardenError {
  return errors.workstreamClosed(`workstream ${workstreamId} is closed`, { workstreamId });
}

const RETRYABLE_SQLITE = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED']);

/** Typed errors pass through; anything else (a SqliteError, a bug) becomes STORE_ERROR. */
export function toStoreError(e: unknown, operation: string): TurnwardenError {
  if (isTurnwardenError(e)) return e;
  const code = typeof (e as { code?: unknown })?.code === 'string' ? (e as { code: string }).code : undefined;
  const message = e instanceof Error ? e.message : String(e);
  return errors.storeError(
    `store ${operation} failed: ${message}`,
    { operation, ...(code === undefined ? {} : { sqliteCode: code }) },
    { cause: e, retryable: code !== undefined && RETRYABLE_SQLITE.has(code) },
  );
}
