import { invalidConfig } from './errors.js';

export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/database` (its password never appears in an error). */
  readonly connectionString: string;
  /**
   * Wall-clock ms for timestamps and lease expiry, injectable for tests. Default: the
   * database's clock, read inside each transaction, so hosts whose clocks disagree still agree
   * on which lease is live.
   */
  readonly now?: () => number;
  /** Size of the connection pool. Default 10. */
  readonly maxConnections?: number;
  /** The schema holding the tables, created if missing (isolates tests). Default 'public'. */
  readonly schema?: string;
  /** `statement_timeout` of every connection (ms; 0: none). Default: the server's. */
  readonly statementTimeoutMs?: number;
  /**
   * `idle_in_transaction_session_timeout` of every connection (ms; 0: none). Default 5,000. A
   * host stalled inside a transaction (paused, or its event loop blocked) holds the row locks of
   * the workstreams it was writing: the lock of each one's lease row among them, so no other host
   * can take that lease over, however long ago it expired. After this long the server ends
   * the stalled session: its locks go, and its transaction's writes fail (retryably) rather than
   * commit late. The runtime sets it from its lease (`max(lease.renewMs, 1,000)`).
   */
  readonly idleInTransactionTimeoutMs?: number;
  /** `application_name` of every connection, as `pg_stat_activity` shows it. Default 'turnwarden'. */
  readonly applicationName?: string;
  /** How long opening a connection may take (ms). Default 10,000. */
  readonly connectionTimeoutMs?: number;
}

export interface ResolvedPostgresStoreOptions {
  readonly connectionString: string;
  /** To redact from error messages; undefined when the connection string carries none. */
  readonly password: string | undefined;
  readonly now: (() => number) | undefined;
  readonly maxConnections: number;
  readonly schema: string;
  readonly statementTimeoutMs: number | undefined;
  readonly idleInTransactionTimeoutMs: number;
  readonly applicationName: string;
  readonly connectionTimeoutMs: number;
}

const KNOWN: readonly string[] = [
  'connectionString',
  'now',
  'maxConnections',
  'schema',
  'statementTimeoutMs',
  'idleInTransactionTimeoutMs',
  'applicationName',
  'connectionTimeoutMs',
];
/** A lowercase identifier that needs no quoting (also the rule for LISTEN channels). */
export const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;
const MAX_MS = 2 ** 31 - 1;

function checkMs(field: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > MAX_MS) {
    throw invalidConfig(field, `must be an integer from ${min} to ${MAX_MS}`);
  }
  return value;
}

/** Validates options (INVALID_CONFIG naming the field) and fills defaults. */
export function resolvePostgresOptions(options: unknown): ResolvedPostgresStoreOptions {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw invalidConfig('options', 'must be an object');
  }
  const o = options as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!KNOWN.includes(key)) throw invalidConfig(key, 'is not a known option');
  }
  const {
    connectionString,
    now,
    maxConnections = 10,
    schema = 'public',
    statementTimeoutMs,
    idleInTransactionTimeoutMs = 5_000,
    applicationName = 'turnwarden',
    connectionTimeoutMs = 10_000,
  } = o;
  if (typeof connectionString !== 'string' || connectionString.length === 0) {
    throw invalidConfig('connectionString', 'must be a non-empty postgres:// URL');
  }
  let url: URL;
  try {
    url = new URL(connectionString);
  } catch {
    // The string itself is not echoed: it may carry a password.
    throw invalidConfig('connectionString', 'must be a postgres:// URL');
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw invalidConfig('connectionString', 'must be a postgres:// URL');
  }
  // Parameters of the URL override the client's: these would undo the store's own settings.
  for (const param of [
    'options',
    'application_name',
    'statement_timeout',
    'idle_in_transaction_session_timeout',
  ]) {
    if (url.searchParams.has(param)) {
      throw invalidConfig('connectionString', `must not set ${param}: use the store's options`);
    }
  }
  if (now !== undefined && typeof now !== 'function') {
    throw invalidConfig('now', 'must be a function returning ms');
  }
  if (
    typeof maxConnections !== 'number' ||
    !Number.isInteger(maxConnections) ||
    maxConnections < 1 ||
    maxConnections > 1000
  ) {
    throw invalidConfig('maxConnections', 'must be an integer from 1 to 1000');
  }
  if (typeof schema !== 'string' || !IDENTIFIER.test(schema)) {
    throw invalidConfig('schema', 'must match [a-z_][a-z0-9_]{0,62}');
  }
  if (typeof applicationName !== 'string' || !/^[\x20-\x7e]{1,63}$/.test(applicationName)) {
    throw invalidConfig('applicationName', 'must be 1-63 printable ASCII characters');
  }
  return {
    connectionString,
    password: url.password === '' ? undefined : decodeURIComponent(url.password),
    now: now as (() => number) | undefined,
    maxConnections,
    schema,
    statementTimeoutMs:
      statementTimeoutMs === undefined ? undefined : checkMs('statementTimeoutMs', statementTimeoutMs, 0),
    idleInTransactionTimeoutMs: checkMs('idleInTransactionTimeoutMs', idleInTransactionTimeoutMs, 0),
    applicationName,
    connectionTimeoutMs: checkMs('connectionTimeoutMs', connectionTimeoutMs, 1),
  };
}
