import { invalidConfig } from './errors.js';

export interface SqliteStoreOptions {
  /** A file path (its parent directory is created if missing) or ':memory:'. */
  readonly path: string;
  /** PRAGMA synchronous. Default 'NORMAL' (durable across process crashes in WAL mode; 'FULL' also across power loss). */
  readonly synchronous?: 'NORMAL' | 'FULL';
  /** How long a write waits for another connection's lock. Default 5000. */
  readonly busyTimeoutMs?: number;
  /** Wall-clock ms for timestamps and lease expiry. Default Date.now; injectable for tests. */
  readonly now?: () => number;
}

export interface ResolvedSqliteStoreOptions {
  readonly path: string;
  readonly memory: boolean;
  readonly synchronous: 'NORMAL' | 'FULL';
  readonly busyTimeoutMs: number;
  readonly now: () => number;
}

const KNOWN: readonly string[] = ['path', 'synchronous', 'busyTimeoutMs', 'now'];
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** Validates options (INVALID_CONFIG naming the field) and fills defaults. */
export function resolveOptions(options: unknown): ResolvedSqliteStoreOptions {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw invalidConfig('options', 'must be an object');
  }
  const o = options as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!KNOWN.includes(key)) throw invalidConfig(key, 'is not a known option');
  }
  const { path, synchronous = 'NORMAL', busyTimeoutMs = 5000, now = Date.now } = o;
  if (typeof path !== 'string' || path.length === 0 || path.includes('\0')) {
    throw invalidConfig('path', "must be a non-empty file path or ':memory:'");
  }
  if (synchronous !== 'NORMAL' && synchronous !== 'FULL') {
    throw invalidConfig('synchronous', "must be 'NORMAL' or 'FULL'");
  }
  if (
    typeof busyTimeoutMs !== 'number' ||
    !Number.isInteger(busyTimeoutMs) ||
    busyTimeoutMs < 0 ||
    busyTimeoutMs > MAX_TIMEOUT_MS
  ) {
    throw invalidConfig('busyTimeoutMs', `must be an integer from 0 to ${MAX_TIMEOUT_MS}`);
  }
  if (typeof now !== 'function') throw invalidConfig('now', 'must be a function returning ms');
  return {
    path,
    memory: path === ':memory:',
    synchronous,
    busyTimeoutMs,
    now: now as () => number,
  };
}
