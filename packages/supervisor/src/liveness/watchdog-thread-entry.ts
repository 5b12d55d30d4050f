/**
 * The watchdog's own thread (entry; watchdog-thread.ts starts it). It runs the same `Watchdog` —
 * the same bounds, the same starvation verdicts, the same commit CAS on the activity clock (L6) —
 * on a thread that sleeps between polls, so a poll is as punctual as a timer in a quiet process
 * however busy the supervisor's thread is (L12). Every stage is reported to the supervisor's
 * thread, which runs the abort protocol: the observational stage, and for a committed abort the
 * definitive one (the fence is set here, by the CAS, before the report leaves).
 *
 * Nothing here writes anything durable or touches a session: it reads the clock, reads the
 * scheduler, sets fences and posts messages.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { ActivityClock } from '@turnwarden/clock';
import type { Logger } from 'pino';
import type { WatchdogConfig } from '../config.js';
import { procSchedStats } from './sched.js';
import {
  type StallInfo,
  type StarvedInfo,
  Watchdog,
  type WatchdogDelegate,
  type WatchdogScheduler,
  type WatchedTurn,
} from './watchdog.js';
import {
  type FromWatchdogThread,
  publishStats,
  readThreads,
  type ToWatchdogThread,
  type WatchdogThreadData,
} from './watchdog-thread-protocol.js';

const data = workerData as WatchdogThreadData;
const port = parentPort;
if (port === null) throw new Error('the watchdog thread entry runs only as a worker thread');

// The supervisor's monotonic time, read here: both sources are the process's monotonic clock.
const hr0 = BigInt(data.hrStart);
const now = () => data.perfStart + Number(process.hrtime.bigint() - hr0) / 1e6;
const clock = ActivityClock.attach(data.clock, now, data.epochMs);
const threads = new Int32Array(data.threads);
const counters = new Float64Array(data.stats);

const ids = new WeakMap<WatchedTurn, number>();
const turns = new Map<number, WatchedTurn>();
const post = (msg: FromWatchdogThread) => port.postMessage(msg);
const idOf = (turn: WatchedTurn) => ids.get(turn) ?? -1;

const delegate: WatchdogDelegate = {
  fired: (turn: WatchedTurn, info: StallInfo) => post({ t: 'fired', id: idOf(turn), info }),
  committed: (turn: WatchedTurn, info: StallInfo) => post({ t: 'committed', id: idOf(turn), info }),
  declined: (turn, info, why, err) =>
    post({ t: 'declined', id: idOf(turn), info, why, ...(err === undefined ? {} : { err: String(err) }) }),
  starved: (turn: WatchedTurn, info: StarvedInfo) => post({ t: 'starved', id: idOf(turn), info }),
};

// The watchdog logs only a delegate that threw; the supervisor's logger has it.
const logger = {
  error: (obj: object, msg: string) =>
    post({ t: 'log', msg, detail: String((obj as { err?: unknown }).err) }),
} as unknown as Logger;

const scheduler: WatchdogScheduler | undefined =
  data.mainTid === undefined || !data.schedstat
    ? undefined
    : { stats: procSchedStats, self: data.mainTid, support: [data.mainTid] };

const watchdog = new Watchdog(clock, data.config as WatchdogConfig, delegate, logger, {}, scheduler, {
  latency: data.latency,
  polled: () => publishStats(counters, watchdog.counts(), now()),
});

function handle(msg: ToWatchdogThread, dropped: number[]): void {
  if (msg.t === 'watch') {
    const { id, slot } = msg;
    const turn = watchdog.watch({
      slot,
      workstreamId: msg.workstreamId,
      tenantId: msg.tenantId,
      generation: msg.generation,
      startedAt: msg.startedAt,
      version: msg.version,
      threads: () => readThreads(threads, slot),
    });
    ids.set(turn, id);
    turns.set(id, turn);
  } else if (msg.t === 'unwatch') {
    const turn = turns.get(msg.id);
    dropped.push(msg.id);
    if (turn === undefined) return;
    turns.delete(msg.id);
    watchdog.unwatch(turn);
  }
}

port.on('message', (batch: readonly ToWatchdogThread[]) => {
  const dropped: number[] = [];
  for (const msg of batch) handle(msg, dropped);
  if (dropped.length > 0) post({ t: 'unwatched', ids: dropped });
});

watchdog.start();
post({ t: 'ready' });
