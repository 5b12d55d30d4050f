/**
 * Command-line parsing (node:util parseArgs, strict). Every mistake is a `UsageError`, which
 * the entry point prints on stderr with exit code 2.
 */
import { parseArgs } from 'node:util';

export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

const COMMANDS = ['demo', 'serve', 'bench', 'scale', 'stress', 'help'] as const;

export interface DemoArgs {
  readonly workstreams: number;
  readonly turns: number;
  readonly seed: number;
  /** Undefined: the default `./.turnwarden/demo.db`. */
  readonly db: string | undefined;
  readonly json: boolean;
  readonly quiet: boolean;
  readonly logStderr: boolean;
  readonly logLevel: LogLevel;
  /** Undefined: `demo.log` next to the db. */
  readonly logFile: string | undefined;
  readonly timeoutMs: number;
  readonly pollMs: number;
  readonly graceMs: number;
  readonly maxWorkers: number;
  readonly warmWorkers: number;
  /** The model the turns use: the offline scripted one, or a real provider over HTTP. */
  readonly provider: 'scripted' | 'openai-compatible';
  /** A real OpenAI-compatible server (default with --provider openai-compatible: a loopback server). */
  readonly baseUrl: string | undefined;
  readonly model: string | undefined;
  /** The environment variable holding the server's API key. */
  readonly apiKeyEnv: string | undefined;
  /** A running `turnwarden serve` to run the workload against, over HTTP. */
  readonly server: string | undefined;
  /** Its bearer token (`--token`, or TURNWARDEN_TOKEN). */
  readonly token: string | undefined;
  /** Several `turnwarden serve` processes on one PostgreSQL database (`--hosts N`). */
  readonly hosts: number | undefined;
  /** `--postgres URL`; `true` for a throwaway cluster (`--postgres` alone). */
  readonly postgres: string | true | undefined;
  /** `--balancer`: every call of the hosts demo goes through a real load balancer (HAProxy). */
  readonly balancer: boolean;
  /** `--redis`: the hosts demo relays events through a throwaway Redis server. */
  readonly redis: boolean;
}

export type Command =
  | { readonly name: 'help'; readonly topic?: 'demo' | 'bench' | 'scale' | 'stress' | 'serve' }
  | { readonly name: 'version' }
  | { readonly name: 'demo'; readonly args: DemoArgs }
  | { readonly name: 'bench'; readonly argv: readonly string[] }
  | { readonly name: 'scale'; readonly argv: readonly string[] }
  | { readonly name: 'stress'; readonly argv: readonly string[] }
  | { readonly name: 'serve'; readonly argv: readonly string[] };

export const DEMO_DEFAULTS = {
  workstreams: 24,
  turns: 4,
  seed: 1,
  timeoutMs: 1000,
  pollMs: 100,
  graceMs: 500,
  maxWorkers: 8,
  warmWorkers: 4,
  logLevel: 'info',
} as const;

/** Parses the whole command line (without `node` and the script). */
export function parseCommand(argv: readonly string[]): Command {
  const [first, ...rest] = argv;
  if (first === undefined || first === '--help' || first === '-h') return { name: 'help' };
  if (first === '--version' || first === '-V') return { name: 'version' };
  if (first.startsWith('-')) throw new UsageError(`unknown option '${first}' (options go after the command)`);
  switch (first) {
    case 'help': {
      const [topic, ...extra] = rest;
      if (extra.length > 0) throw new UsageError(`unexpected argument '${extra[0]}'`);
      if (topic === undefined) return { name: 'help' };
      if (
        topic === 'demo' ||
        topic === 'bench' ||
        topic === 'scale' ||
        topic === 'stress' ||
        topic === 'serve'
      )
        return { name: 'help', topic };
      throw new UsageError(`no help for '${topic}' (commands: ${COMMANDS.join(', ')})`);
    }
    case 'demo':
      if (rest.includes('--help') || rest.includes('-h')) return { name: 'help', topic: 'demo' };
      return { name: 'demo', args: parseDemoArgs(rest) };
    case 'bench':
      // The bench owns its flags.
      return { name: 'bench', argv: rest };
    case 'scale':
      // So does the scale bench.
      return { name: 'scale', argv: rest };
    case 'stress':
      return { name: 'stress', argv: rest };
    case 'serve':
      return { name: 'serve', argv: rest };
    default:
      throw new UsageError(`unknown command '${first}' (commands: ${COMMANDS.join(', ')})`);
  }
}

export function parseDemoArgs(input: readonly string[]): DemoArgs {
  // `--postgres` may stand alone (a throwaway cluster) or take a URL.
  const argv = input.map((a, i) =>
    a === '--postgres' && (input[i + 1] === undefined || input[i + 1]!.startsWith('--')) ? '--postgres=' : a,
  );
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        workstreams: { type: 'string' },
        turns: { type: 'string' },
        seed: { type: 'string' },
        db: { type: 'string' },
        json: { type: 'boolean' },
        quiet: { type: 'boolean', short: 'q' },
        'log-stderr': { type: 'boolean' },
        'log-level': { type: 'string' },
        'log-file': { type: 'string' },
        'timeout-ms': { type: 'string' },
        'poll-ms': { type: 'string' },
        'grace-ms': { type: 'string' },
        'max-workers': { type: 'string' },
        'warm-workers': { type: 'string' },
        provider: { type: 'string' },
        'base-url': { type: 'string' },
        model: { type: 'string' },
        'api-key-env': { type: 'string' },
        server: { type: 'string' },
        token: { type: 'string' },
        hosts: { type: 'string' },
        postgres: { type: 'string' },
        balancer: { type: 'boolean' },
        redis: { type: 'boolean' },
      },
    }));
  } catch (e) {
    throw new UsageError(`demo: ${(e as Error).message}`);
  }
  const hosts = values.hosts === undefined ? undefined : int(values, 'hosts', 3, 2, 8);
  const pgRaw = values.postgres as string | undefined;
  const postgres = pgRaw === undefined ? undefined : pgRaw === '' ? true : pgRaw;
  if (typeof postgres === 'string' && !/^postgres(ql)?:\/\/\S+$/.test(postgres)) {
    throw new UsageError('demo: --postgres takes a postgres:// URL (or nothing, for a throwaway cluster)');
  }
  if ((hosts === undefined) !== (postgres === undefined)) {
    throw new UsageError('demo: --hosts and --postgres go together (several hosts share one database)');
  }
  if (values.balancer === true && hosts === undefined) {
    throw new UsageError(
      'demo: --balancer puts a load balancer in front of the hosts: it needs --hosts N --postgres',
    );
  }
  if (values.redis === true && hosts === undefined) {
    throw new UsageError('demo: --redis relays the events of several hosts: it needs --hosts N --postgres');
  }
  if (hosts !== undefined && (values.server !== undefined || values.provider !== undefined)) {
    throw new UsageError(
      'demo: --hosts runs its own servers with the scripted model; drop --server/--provider',
    );
  }
  const d = DEMO_DEFAULTS;
  const timeoutMs = int(values, 'timeout-ms', d.timeoutMs, 10, 600_000);
  const maxWorkers = int(values, 'max-workers', d.maxWorkers, 1, 256);
  const logLevel = (values['log-level'] as string | undefined) ?? d.logLevel;
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
    throw new UsageError(`demo: --log-level must be one of ${LOG_LEVELS.join(', ')} (got '${logLevel}')`);
  }
  if (values['log-stderr'] === true && values['log-file'] !== undefined) {
    throw new UsageError('demo: --log-stderr and --log-file exclude each other');
  }
  const provider = (values.provider as string | undefined) ?? 'scripted';
  if (provider !== 'scripted' && provider !== 'openai-compatible') {
    throw new UsageError(`demo: --provider must be scripted or openai-compatible (got '${provider}')`);
  }
  const baseUrl = values['base-url'] as string | undefined;
  const model = values.model as string | undefined;
  const apiKeyEnv = values['api-key-env'] as string | undefined;
  if (provider === 'scripted' && (baseUrl ?? model ?? apiKeyEnv) !== undefined) {
    throw new UsageError('demo: --base-url, --model and --api-key-env need --provider openai-compatible');
  }
  if (baseUrl !== undefined) {
    let url: URL | undefined;
    try {
      url = new URL(baseUrl);
    } catch {
      url = undefined;
    }
    if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
      throw new UsageError(`demo: --base-url must be an http(s) URL (got '${baseUrl}')`);
    }
    if (model === undefined) throw new UsageError("demo: --base-url needs --model (the server's model id)");
  }
  const server = values.server as string | undefined;
  const token =
    (values.token as string | undefined) ??
    (server === undefined ? undefined : process.env.TURNWARDEN_TOKEN || undefined);
  if (server !== undefined) {
    if (!/^https?:\/\/[^\s]+$/.test(server))
      throw new UsageError(`demo: --server must be an http(s) URL (got '${server}')`);
    if (token === undefined)
      throw new UsageError(
        'demo: --server needs --token (or TURNWARDEN_TOKEN): the server requires a bearer token',
      );
    if (provider !== 'scripted')
      throw new UsageError("demo: --server runs the workload the server's own model plays; drop --provider");
  } else if (values.token !== undefined) {
    throw new UsageError('demo: --token needs --server');
  }
  if (apiKeyEnv !== undefined && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(apiKeyEnv)) {
    throw new UsageError(`demo: --api-key-env must name an environment variable (got '${apiKeyEnv}')`);
  }
  return {
    workstreams: int(values, 'workstreams', d.workstreams, 1, 1000),
    turns: int(values, 'turns', d.turns, 1, 100),
    seed: int(values, 'seed', d.seed, 0, 2 ** 32 - 1),
    db: path(values, 'db'),
    json: values.json === true,
    quiet: values.quiet === true,
    logStderr: values['log-stderr'] === true,
    logLevel: logLevel as LogLevel,
    logFile: path(values, 'log-file'),
    timeoutMs,
    pollMs: int(values, 'poll-ms', Math.min(d.pollMs, timeoutMs), 2, timeoutMs),
    graceMs: int(values, 'grace-ms', d.graceMs, 0, 600_000),
    maxWorkers,
    warmWorkers: int(values, 'warm-workers', Math.min(d.warmWorkers, maxWorkers), 0, maxWorkers),
    provider,
    baseUrl,
    model,
    apiKeyEnv,
    server,
    token,
    hosts,
    postgres,
    balancer: values.balancer === true,
    redis: values.redis === true,
  };
}

function int(
  values: Record<string, string | boolean | undefined>,
  flag: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = values[flag];
  if (raw === undefined) return fallback;
  if (typeof raw !== 'string' || !/^\d+$/.test(raw)) {
    throw new UsageError(`demo: --${flag} must be a whole number (got '${String(raw)}')`);
  }
  const n = Number(raw);
  if (n < min || n > max)
    throw new UsageError(`demo: --${flag} must be between ${min} and ${max} (got ${raw})`);
  return n;
}

function path(values: Record<string, string | boolean | undefined>, flag: string): string | undefined {
  const raw = values[flag];
  if (raw === undefined) return undefined;
  if (typeof raw !== 'string' || raw.length === 0) throw new UsageError(`demo: --${flag} needs a path`);
  return raw;
}
