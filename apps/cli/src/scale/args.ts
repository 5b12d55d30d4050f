/** Flags of `turnwarden scale` (node:util parseArgs, strict): every mistake is a `ScaleUsageError`. */
import { parseArgs } from 'node:util';
import type { ScaleProvider } from './types.js';
import { DEFAULT_WORKLOAD, idealTurnMs, type Workload } from './workload.js';

export class ScaleUsageError extends Error {
  override readonly name = 'ScaleUsageError';
}

export interface ScaleArgs {
  /** Session counts, each run in fresh child processes, in the order given. */
  readonly ns: readonly number[];
  readonly providers: readonly ScaleProvider[];
  readonly json: boolean;
  readonly quick: boolean;
  readonly help: boolean;
  readonly workload: Workload;
  readonly timeoutMs: number;
  readonly pollMs: number;
  /** A turn not settled this long after the sends is counted unfinished (and cancelled). */
  readonly boundMs: number;
  /** Empty Workers started for the rss reference. */
  readonly emptyWorkers: number;
}

export const SCALE_DEFAULTS = {
  ns: [250, 500, 1_000],
  quickNs: [40],
  timeoutMs: 10_000,
  pollMs: 250,
  emptyWorkers: 50,
  quickEmptyWorkers: 20,
  maxN: 4_096,
} as const;

/** The bound on a turn: ten ideal turns, and at least a minute. */
export function defaultBoundMs(w: Workload): number {
  return Math.max(60_000, 10 * idealTurnMs(w));
}

export const SCALE_USAGE = `usage: turnwarden scale [--n N[,N…]] [--provider scripted|http|both] [--json] [--quick] [options]

N sessions stream at once on the runtime (Turnwarden, public API), beside the same N turns as
plain async functions on one thread writing the same rows to better-sqlite3 (the in-process
baseline), back to back, each N in fresh child processes. Per session: one turn of --tokens
tokens --delay-ms apart, a --tool-ms tool heartbeating every --heartbeat-ms, --tokens more.

  --n LIST            session counts (default ${SCALE_DEFAULTS.ns.join(',')}; --quick: ${SCALE_DEFAULTS.quickNs.join(',')})
  --provider P        scripted (the offline scripted model, default), http (the OpenAI-compatible
                      provider against the loopback server in its own process), or both
  --quick             the smaller default N and ${SCALE_DEFAULTS.quickEmptyWorkers} empty Workers for the rss reference
  --json              print one JSON document and nothing else
  --tokens N          tokens per model message (default ${DEFAULT_WORKLOAD.tokens})
  --delay-ms N        between two tokens (default ${DEFAULT_WORKLOAD.delayMs})
  --tool-ms N         the heartbeating tool's duration (default ${DEFAULT_WORKLOAD.toolMs})
  --heartbeat-ms N    the tool's heartbeat period (default ${DEFAULT_WORKLOAD.heartbeatMs})
  --timeout-ms N      watchdog timeoutMs (default ${SCALE_DEFAULTS.timeoutMs})
  --poll-ms N         watchdog pollMs (default ${SCALE_DEFAULTS.pollMs}); the other process's timer ticks every pollMs/2
  --bound-s N         a turn not settled N s after the sends is counted unfinished and cancelled
                      (default: 10 ideal turns, at least 60 s)
  --empty-workers N   empty Workers started for the rss reference (default ${SCALE_DEFAULTS.emptyWorkers})
  --help              this text

Targets (issue 24) are only marked met or MISSED: timing never fails the command. Exit code 0
when the figures were printed, 1 when a run could not finish, 2 on bad flags.
`;

function int(name: string, raw: string | undefined, min: number, max: number): number | undefined {
  if (raw === undefined) return undefined;
  if (!/^\d+$/.test(raw.trim())) throw new ScaleUsageError(`--${name} must be an integer (got "${raw}")`);
  const v = Number(raw.trim());
  if (v < min || v > max) throw new ScaleUsageError(`--${name} must be in ${min}..${max} (got ${v})`);
  return v;
}

/** "250,500,1000" → [250, 500, 1000]; each in 1..4096, no duplicates. */
export function parseNs(raw: string): number[] {
  const parts = raw.split(',').map((p) => p.trim());
  if (parts.length === 0 || parts.every((p) => p === '')) throw new ScaleUsageError('--n needs a number');
  const ns: number[] = [];
  for (const p of parts) {
    if (p === '') continue;
    const n = int('n', p, 1, SCALE_DEFAULTS.maxN) as number;
    if (ns.includes(n)) throw new ScaleUsageError(`--n lists ${n} twice`);
    ns.push(n);
  }
  return ns;
}

function parseProvider(raw: string | undefined): ScaleProvider[] {
  if (raw === undefined || raw === 'scripted') return ['scripted'];
  if (raw === 'http') return ['http'];
  if (raw === 'both') return ['scripted', 'http'];
  throw new ScaleUsageError(`--provider must be scripted, http or both (got "${raw}")`);
}

/** Parses the arguments after `scale` (a leading `scale` token is tolerated). */
export function parseScaleArgs(argv: readonly string[]): ScaleArgs {
  const args = argv[0] === 'scale' ? argv.slice(1) : [...argv];
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        n: { type: 'string' },
        provider: { type: 'string' },
        json: { type: 'boolean' },
        quick: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        tokens: { type: 'string' },
        'delay-ms': { type: 'string' },
        'tool-ms': { type: 'string' },
        'heartbeat-ms': { type: 'string' },
        'timeout-ms': { type: 'string' },
        'poll-ms': { type: 'string' },
        'bound-s': { type: 'string' },
        'empty-workers': { type: 'string' },
      },
    }));
  } catch (e) {
    throw new ScaleUsageError((e as Error).message);
  }
  const s = (k: string) => values[k] as string | undefined;
  const quick = values.quick === true;
  const workload: Workload = {
    tokens: int('tokens', s('tokens'), 1, 65_536) ?? DEFAULT_WORKLOAD.tokens,
    delayMs: int('delay-ms', s('delay-ms'), 0, 60_000) ?? DEFAULT_WORKLOAD.delayMs,
    toolMs: int('tool-ms', s('tool-ms'), 0, 3_600_000) ?? DEFAULT_WORKLOAD.toolMs,
    heartbeatMs: int('heartbeat-ms', s('heartbeat-ms'), 1, 3_600_000) ?? DEFAULT_WORKLOAD.heartbeatMs,
  };
  const timeoutMs = int('timeout-ms', s('timeout-ms'), 1, 86_400_000) ?? SCALE_DEFAULTS.timeoutMs;
  const pollMs = int('poll-ms', s('poll-ms'), 2, 3_600_000) ?? SCALE_DEFAULTS.pollMs;
  if (pollMs > timeoutMs) throw new ScaleUsageError('--poll-ms must not exceed --timeout-ms');
  const boundS = int('bound-s', s('bound-s'), 1, 86_400);
  return {
    ns:
      s('n') === undefined
        ? [...(quick ? SCALE_DEFAULTS.quickNs : SCALE_DEFAULTS.ns)]
        : parseNs(s('n') as string),
    providers: parseProvider(s('provider')),
    json: values.json === true,
    quick,
    help: values.help === true,
    workload,
    timeoutMs,
    pollMs,
    boundMs: boundS === undefined ? defaultBoundMs(workload) : boundS * 1000,
    emptyWorkers:
      int('empty-workers', s('empty-workers'), 1, 1_000) ??
      (quick ? SCALE_DEFAULTS.quickEmptyWorkers : SCALE_DEFAULTS.emptyWorkers),
  };
}
