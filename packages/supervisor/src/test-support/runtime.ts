import { randomBytes } from 'node:crypto';
import { workstreamKey } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { delayedStore, type Postgres, startPostgres } from '@turnwarden/store/testing';
import { pino } from 'pino';
import type { Turnwarden, TurnwardenEvent, TurnwardenOptions } from '../index.js';
import { startForTesting, type TestSeams } from '../testing.js';

/**
 * `TURNWARDEN_TEST_STORE=delayed`: every store a test starts the runtime with delays every
 * write by a random time — the suite then runs against an asynchronous store (check.sh runs the
 * supervisor tests both ways).
 */
export const DELAYED = process.env.TURNWARDEN_TEST_STORE === 'delayed';

/**
 * `TURNWARDEN_TEST_STORE=postgres`: every runtime a test starts without a store of its own runs
 * on the PostgreSQL store — one throwaway cluster per test file, a schema per runtime.
 */
export const POSTGRES = process.env.TURNWARDEN_TEST_STORE === 'postgres';
let cluster: Promise<Postgres> | undefined;
let schemas = 0;

/** The runtime opens (and at shutdown closes) the PostgreSQL store itself. */
async function postgresStore(): Promise<{ postgres: string; schema: string }> {
  cluster ??= startPostgres().then((pg) => {
    if ('skip' in pg) throw new Error(`TURNWARDEN_TEST_STORE=postgres, but ${pg.skip}`);
    process.once('exit', () => pg.stop());
    return pg;
  });
  const pg = await cluster;
  return { postgres: pg.url, schema: `t${process.pid}_${++schemas}_${randomBytes(3).toString('hex')}` };
}

async function testStore(option: TurnwardenOptions['store']): Promise<TurnwardenOptions['store']> {
  // Only where the test asked for no store in particular: a Store it built (a fault-injecting
  // wrapper, a shared store) is its own.
  const given = option !== undefined && 'appendMessages' in option;
  if (POSTGRES && !given && (option === undefined || ('path' in option && option.path === ':memory:'))) {
    return postgresStore();
  }
  if (!DELAYED) return option;
  const inner =
    option !== undefined && 'appendMessages' in option
      ? option
      : openSqliteStore({ path: (option as { path?: string } | undefined)?.path ?? ':memory:' });
  return delayedStore(inner, { maxDelayMs: 4, seed: 7 }).store;
}

export interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly [key: string]: unknown;
}

export const PLUGIN = new URL('./plugin.mjs', import.meta.url).href;
export const SCRIPTED = '@turnwarden/session/scripted';

/**
 * The watchdog of a test whose subject is the watchdog or what follows an abort it commits (a
 * stall detected, a wedge terminated after grace): quick to fire. Such a test passes it as
 * `watchdog: FAST_WATCHDOG`; its turns that must not be aborted stamp well inside timeoutMs.
 */
export const FAST_WATCHDOG = { timeoutMs: 300, pollMs: 30, graceMs: 250 } as const;

/**
 * Every other test's watchdog: a turn that is not about the watchdog is never aborted by it
 * because a busy machine delayed a thread (a worker's or a pool thread's start, a slow store
 * write under the turn, a GC pause) for a few hundred ms. No such test waits on it: a turn ends
 * when it ends, so a patient watchdog costs nothing.
 */
const PATIENT_WATCHDOG = { timeoutMs: 10_000, pollMs: 30, graceMs: 2_000 } as const;

const DEFAULTS = {
  watchdog: PATIENT_WATCHDOG,
  lease: { ttlMs: 3_000, renewMs: 50 },
  pool: { maxWorkers: 4, warmWorkers: 2 },
} as const;

export function script(...steps: unknown[]): string {
  return JSON.stringify({ script: steps });
}

/**
 * Starts a runtime with a patient watchdog (FAST_WATCHDOG where the test asks for it), fast lease renewal, capturing logs and events, on workstream ws-1 of
 * tenant-a (created, unless `existing`: a store that already has it).
 */
export async function startRuntime(
  options: Partial<TurnwardenOptions> & TestSeams = {},
  { existing = false } = {},
) {
  const { hooks, now, harness, manualWatchdog, timers, scheduler, ...rest } = options;
  const seams: TestSeams = {
    ...(hooks ? { hooks } : {}),
    ...(now ? { now } : {}),
    ...(harness ? { harness } : {}),
    ...(manualWatchdog ? { manualWatchdog } : {}),
    ...(timers ? { timers } : {}),
    ...(scheduler !== undefined ? { scheduler } : {}),
  };
  const logs: LogLine[] = [];
  const logWaiters: { msg: string; resolve: (l: LogLine) => void }[] = [];
  const logger = pino(
    { level: 'debug' },
    {
      write: (s: string) => {
        const line = JSON.parse(s) as LogLine;
        logs.push(line);
        for (const w of logWaiters.splice(0)) {
          if (w.msg === line.msg) w.resolve(line);
          else logWaiters.push(w);
        }
      },
    },
  );
  /** Resolves when a log line with this message is written (deterministic: no polling). */
  const waitForLog = (msg: string) => new Promise<LogLine>((resolve) => logWaiters.push({ msg, resolve }));
  const store = await testStore(rest.store);
  const tw = await startForTesting(
    {
      ...DEFAULTS,
      model: 'scripted',
      ...rest,
      // The offline scripted model and demo tools are a plugin like any other (opt-in).
      pluginModules: [SCRIPTED, ...(rest.pluginModules ?? [PLUGIN])],
      ...(store === undefined ? {} : { store }),
      logger,
    },
    seams,
  );
  const workstreamId = 'ws-1';
  if (!existing) await tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId });
  const events: TurnwardenEvent[] = [];
  await tw.subscribe({
    tenantId: 'tenant-a',
    principal: 'user-a',
    workstreamId,
    listener: (e) => events.push(e),
  });
  const send = (content: string) =>
    tw.send({ tenantId: 'tenant-a', principal: 'user-a', workstreamId, content });
  const history = async () =>
    (await tw.history({ tenantId: 'tenant-a', principal: 'user-a', workstreamId })).rows;
  const logged = (msg: string) => logs.filter((l) => l.msg === msg);
  const types = () => events.map((e) => e.type);
  /** The workstream's key in the store and the logs (T2: `<tenant>/<id>`). */
  const key = workstreamKey('tenant-a', workstreamId);
  return { tw, logs, events, workstreamId, key, send, history, logged, types, waitForLog };
}

/** Resolves with the first event of `type` (deterministic waiting: no sleeps). */
export function nextEvent<K extends TurnwardenEvent['type']>(
  tw: Turnwarden,
  workstreamId: string,
  type: K,
  tenantId = 'tenant-a',
  principal = 'user-a',
): Promise<Extract<TurnwardenEvent, { type: K }>> {
  return new Promise((resolve, reject) => {
    let seen = false;
    // Registration is synchronous: an event emitted right after this call is not missed.
    const subscribed = tw.subscribe({
      tenantId,
      principal,
      workstreamId,
      listener: (e) => {
        if (seen || e.type !== type) return;
        seen = true;
        void subscribed.then((off) => off());
        resolve(e as Extract<TurnwardenEvent, { type: K }>);
      },
    });
    subscribed.catch(reject);
  });
}
