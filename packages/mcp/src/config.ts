/**
 * MCP server configurations and the options of a set of them. Refusals are INVALID_CONFIG naming
 * the field (`servers[1].command`); values of `env` and `headers` are never put in an error.
 */
import { errors, TurnwardenError } from '@turnwarden/protocol';

/** A server run as a child process, spoken to over its stdin and stdout. */
export interface McpStdioServerConfig {
  /** The server's name: the prefix of its tools' names (`<name>.<tool>`). `[A-Za-z0-9_-]`, 1–64. */
  readonly name: string;
  readonly transport: 'stdio';
  /** The executable (looked up on PATH). */
  readonly command: string;
  readonly args?: readonly string[];
  /**
   * Environment variables for the server. It inherits only HOME, LOGNAME, PATH, SHELL, TERM and
   * USER from the host (the MCP SDK's default); anything else it needs must be listed here.
   */
  readonly env?: Readonly<Record<string, string>>;
  /** Working directory (default: the host's). */
  readonly cwd?: string;
}

/** A server reached over Streamable HTTP. */
export interface McpHttpServerConfig {
  /** The server's name: the prefix of its tools' names (`<name>.<tool>`). `[A-Za-z0-9_-]`, 1–64. */
  readonly name: string;
  readonly transport: 'http';
  /** The MCP endpoint, an http(s) URL. */
  readonly url: string;
  /** Headers sent with every request (an `Authorization` header, for instance). */
  readonly headers?: Readonly<Record<string, string>>;
}

export type McpServerConfig = McpStdioServerConfig | McpHttpServerConfig;

/** What joins a server's name and its tool's name. */
export type ToolNameSeparator = '.' | '_' | '__' | '-';

export interface McpOptions {
  /**
   * Joins server and tool names: `<server><separator><tool>`. Default `.` (`files.read`). Some
   * model APIs (OpenAI, Anthropic) accept only `[A-Za-z0-9_-]` in tool names: use `__` for them.
   */
  readonly separator?: ToolNameSeparator;
  /** How long a server's start (spawn or connect, and the MCP handshake) may take. Default 30,000 ms. */
  readonly connectTimeoutMs?: number;
  /** The wait after a failed restart before the next one is tried: it doubles per failure from this. Default 500 ms. */
  readonly restartBaseDelayMs?: number;
  /** The longest wait between restarts. Default 30,000 ms. */
  readonly restartMaxDelayMs?: number;
  /**
   * A limit on one call's silence: no answer and no progress notification for this long fails
   * the call (effect `unknown`). Default: none — the watchdog bounds a call that makes no
   * progress, and aborting the turn cancels the request.
   */
  readonly callTimeoutMs?: number;
  /** Where stdio servers' stderr goes. Default `inherit` (the host's stderr). */
  readonly stderr?: 'inherit' | 'ignore';
}

export interface ResolvedOptions {
  readonly separator: ToolNameSeparator;
  readonly connectTimeoutMs: number;
  readonly restartBaseDelayMs: number;
  readonly restartMaxDelayMs: number;
  readonly callTimeoutMs: number | undefined;
  readonly stderr: 'inherit' | 'ignore';
}

const COMMON = ['name', 'transport'] as const;
const STDIO_FIELDS: readonly string[] = [...COMMON, 'command', 'args', 'env', 'cwd'];
const HTTP_FIELDS: readonly string[] = [...COMMON, 'url', 'headers'];
const OPTION_FIELDS: readonly string[] = [
  'separator',
  'connectTimeoutMs',
  'restartBaseDelayMs',
  'restartMaxDelayMs',
  'callTimeoutMs',
  'stderr',
];
export const SEPARATORS: readonly ToolNameSeparator[] = ['.', '_', '__', '-'];
const SERVER_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** The longest delay a Node timer takes (longer ones fire at once). */
export const MAX_TIMER_MS = 2_147_483_647;

function bad(field: string, message: string): TurnwardenError {
  return errors.invalidConfig(`${field} ${message}`, { field });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function text(value: unknown, field: string): string {
  if (typeof value !== 'string' || value.trim() === '') throw bad(field, 'must be a non-empty string');
  return value;
}

function strings(value: unknown, field: string, name: RegExp, what: string): void {
  if (!isObject(value)) throw bad(field, 'must be an object of strings');
  for (const [k, v] of Object.entries(value)) {
    if (!name.test(k)) throw bad(`${field}.${k}`, `is not a valid ${what} name`);
    if (typeof v !== 'string') throw bad(`${field}.${k}`, 'must be a string');
  }
}

function int(value: unknown, field: string, min: number, max: number): void {
  if (
    value !== undefined &&
    (!Number.isSafeInteger(value) || (value as number) < min || (value as number) > max)
  ) {
    throw bad(field, `must be an integer in ${min}..${max}`);
  }
}

/** Checks one server configuration; refusals are INVALID_CONFIG naming `<at>.<field>`. */
export function checkServerConfig(value: unknown, at = 'server'): McpServerConfig {
  if (!isObject(value)) throw bad(at, 'must be an object');
  const name = text(value.name, `${at}.name`);
  if (!SERVER_NAME.test(name)) throw bad(`${at}.name`, 'must be 1–64 characters of A–Z, a–z, 0–9, _ and -');
  if (value.transport !== 'stdio' && value.transport !== 'http') {
    throw bad(`${at}.transport`, "must be 'stdio' or 'http'");
  }
  const fields = value.transport === 'stdio' ? STDIO_FIELDS : HTTP_FIELDS;
  for (const key of Object.keys(value)) {
    if (!fields.includes(key)) throw bad(`${at}.${key}`, `is not a setting of a ${value.transport} server`);
  }
  if (value.transport === 'stdio') {
    text(value.command, `${at}.command`);
    if (value.args !== undefined) {
      if (!Array.isArray(value.args)) throw bad(`${at}.args`, 'must be an array of strings');
      value.args.forEach((arg: unknown, i) => {
        if (typeof arg !== 'string') throw bad(`${at}.args[${i}]`, 'must be a string');
      });
    }
    if (value.env !== undefined) strings(value.env, `${at}.env`, ENV_NAME, 'environment variable');
    if (value.cwd !== undefined) text(value.cwd, `${at}.cwd`);
  } else {
    let url: URL;
    try {
      url = new URL(text(value.url, `${at}.url`));
    } catch (e) {
      if (e instanceof TurnwardenError) throw e;
      throw bad(`${at}.url`, 'must be an http(s) URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw bad(`${at}.url`, 'must be an http(s) URL');
    if (value.headers !== undefined) strings(value.headers, `${at}.headers`, HEADER_NAME, 'header');
  }
  return value as unknown as McpServerConfig;
}

/** Checks a list of server configurations (`<at>[i]`), refusing a name used twice. */
export function checkServerConfigs(value: unknown, at = 'servers'): McpServerConfig[] {
  if (!Array.isArray(value)) throw bad(at, 'must be an array of MCP server configurations');
  const seen = new Set<string>();
  return value.map((v: unknown, i) => {
    const c = checkServerConfig(v, `${at}[${i}]`);
    if (seen.has(c.name)) throw bad(`${at}[${i}].name`, `names a second server called ${c.name}`);
    seen.add(c.name);
    return c;
  });
}

/** Checks the options and fills in the defaults. */
export function resolveOptions(value: unknown, at = 'options'): ResolvedOptions {
  if (value === undefined) return resolveOptions({}, at);
  if (!isObject(value)) throw bad(at, 'must be an object');
  for (const key of Object.keys(value)) {
    if (!OPTION_FIELDS.includes(key)) throw bad(`${at}.${key}`, 'is not a known option');
  }
  const o = value as McpOptions;
  if (o.separator !== undefined && !SEPARATORS.includes(o.separator)) {
    throw bad(`${at}.separator`, "must be '.', '_', '__' or '-'");
  }
  int(o.connectTimeoutMs, `${at}.connectTimeoutMs`, 1, MAX_TIMER_MS);
  int(o.restartBaseDelayMs, `${at}.restartBaseDelayMs`, 0, MAX_TIMER_MS);
  int(o.restartMaxDelayMs, `${at}.restartMaxDelayMs`, 0, MAX_TIMER_MS);
  int(o.callTimeoutMs, `${at}.callTimeoutMs`, 1, MAX_TIMER_MS);
  if (o.stderr !== undefined && o.stderr !== 'inherit' && o.stderr !== 'ignore') {
    throw bad(`${at}.stderr`, "must be 'inherit' or 'ignore'");
  }
  const restartBaseDelayMs = o.restartBaseDelayMs ?? 500;
  return {
    separator: o.separator ?? '.',
    connectTimeoutMs: o.connectTimeoutMs ?? 30_000,
    restartBaseDelayMs,
    restartMaxDelayMs: Math.max(restartBaseDelayMs, o.restartMaxDelayMs ?? 30_000),
    callTimeoutMs: o.callTimeoutMs,
    stderr: o.stderr ?? 'inherit',
  };
}
