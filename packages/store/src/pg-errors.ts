/** PostgreSQL failures as typed errors: STORE_ERROR, retryable when a retry can succeed. */
import { errors, isTurnwardenError, type TurnwardenError } from '@turnwarden/protocol';

/**
 * SQLSTATEs worth a retry: serialization failure, deadlock, the server shutting down or
 * restarting, too many connections, a lock or statement timeout, a session ended for idling
 * in a transaction (or idling at all); and every connection exception (class 08).
 */
const RETRYABLE_SQLSTATE = new Set([
  '40001',
  '40P01',
  '57P01',
  '57P02',
  '57P03',
  '53300',
  '55P03',
  '57014',
  '25P03',
  '57P05',
]);
/** Node socket errors of a connection that failed or dropped. */
const RETRYABLE_NODE = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EAI_AGAIN',
]);
/** What node-postgres says, without a code, when the connection is gone. */
const CONNECTION_LOST =
  /connection terminated|connection timeout|not queryable|timeout exceeded when trying to connect/i;

function isRetryablePgError(e: unknown): boolean {
  const code = typeof (e as { code?: unknown })?.code === 'string' ? (e as { code: string }).code : undefined;
  if (code !== undefined) {
    return RETRYABLE_SQLSTATE.has(code) || code.startsWith('08') || RETRYABLE_NODE.has(code);
  }
  return e instanceof Error && CONNECTION_LOST.test(e.message);
}

/** Replaces every occurrence of `secret` (the connection's password) in `text`. */
function redact(text: string, secret: string | undefined): string {
  if (secret === undefined || secret.length === 0) return text;
  return text.split(secret).join('***');
}

/**
 * Typed errors pass through; anything else (a pg DatabaseError, a dropped connection, a bug)
 * becomes STORE_ERROR naming the operation and the SQLSTATE, with the password redacted.
 */
export function toPgStoreError(e: unknown, operation: string, password: string | undefined): TurnwardenError {
  if (isTurnwardenError(e)) return e;
  const code = typeof (e as { code?: unknown })?.code === 'string' ? (e as { code: string }).code : undefined;
  const raw = e instanceof Error ? e.message : String(e);
  const message = redact(raw, password);
  // The original error is kept as the cause unless it carries the password.
  const safe = message === raw && !(e instanceof Error && redact(e.stack ?? '', password) !== e.stack);
  return errors.storeError(
    `store ${operation} failed: ${message}`,
    { operation, ...(code === undefined ? {} : { sqlState: code }) },
    { ...(safe ? { cause: e } : {}), retryable: isRetryablePgError(e) },
  );
}

export function storeClosed(): TurnwardenError {
  return errors.storeError('the PostgreSQL store is closed', { closed: true });
}
