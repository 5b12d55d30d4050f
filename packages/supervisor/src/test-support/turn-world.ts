/**
 * One armed turn (turn/turn.ts) on a stub host — a real clock, a real event hub, manual timers,
 * a worker whose `runTurn` the test answers — and the watchdog's delegate over it
 * (abort-protocol.ts): what each stage reports and in which order, what a commit stops.
 */
import { ActivityClock } from '@turnwarden/clock';
import type { AbortReason, TurnOutcome } from '@turnwarden/protocol';
import { newSession, type SessionEvent } from '@turnwarden/session';
import { pino } from 'pino';
import { resolveConfig } from '../config.js';
import { type AbortHost, AbortProtocol } from '../liveness/abort-protocol.js';
import type { CancelTimer, Timers } from '../liveness/timers.js';
import { LoopTurns } from '../liveness/turns.js';
import { type StallInfo, WatchedTurn } from '../liveness/watchdog.js';
import { SessionRecord } from '../sessions/sessions.js';
import { newCounters } from '../stats.js';
import { EventHub, type TurnwardenEvent } from '../streams/events.js';
import { TurnSlots } from '../turn/slots.js';
import { Turn } from '../turn/turn.js';
import type { TurnHost } from '../turn/types.js';

export class Timeline implements Timers {
  private t = 0;
  private readonly due: { at: number; every?: number; fn: () => void; id: number }[] = [];
  private next = 0;
  every(ms: number, fn: () => void): CancelTimer {
    return this.add({ at: this.t + ms, every: ms, fn, id: this.next++ });
  }
  after(ms: number, fn: () => void): CancelTimer {
    return this.add({ at: this.t + ms, fn, id: this.next++ });
  }
  get pending() {
    return this.due.length;
  }
  run(ms: number) {
    const until = this.t + ms;
    for (;;) {
      this.due.sort((a, b) => a.at - b.at || a.id - b.id);
      const d = this.due[0];
      if (!d || d.at > until) break;
      this.t = d.at;
      if (d.every) d.at += d.every;
      else this.due.shift();
      d.fn();
    }
    this.t = until;
  }
  private add(d: { at: number; every?: number; fn: () => void; id: number }): CancelTimer {
    this.due.push(d);
    return () => {
      const i = this.due.indexOf(d);
      if (i >= 0) this.due.splice(i, 1);
    };
  }
}

export interface TurnWorldOptions {
  readonly refresh?: () => Promise<boolean>;
  /** The lease release at the turn's end (default: granted). */
  readonly releaseLease?: () => Promise<boolean>;
  /** Called as the end brings an idle machine to its session (throw to make the end fail). */
  readonly sessionSet?: () => void;
  /** The worker's thread id (Linux), as the watchdog reads it for a long-silent turn. */
  readonly tid?: number;
  /** The worker's answer that every event it posted was delivered (default: at once). */
  readonly caughtUp?: () => Promise<void>;
  /** Told as the end is done (throw to make it fail once the turn is done). */
  readonly turnEnded?: () => void;
}

export function turnWorld(options: TurnWorldOptions = {}) {
  const logs: { level: number; msg: string; [k: string]: unknown }[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void logs.push(JSON.parse(s)) });
  const events: TurnwardenEvent[] = [];
  const hub = new EventHub(logger);
  hub.subscribe('ws', (e) => events.push(e));
  const clock = ActivityClock.create(2, () => 0);
  const timers = new Timeline();
  const posted: unknown[] = [];
  const terminated: number[] = [];
  const retired: number[] = [];
  const abandoned: AbortReason[] = [];
  const refreshes: number[] = [];
  let unwatched = 0;
  let watchedThreads: (() => number[]) | undefined;
  const workersReleasedIds: number[] = [];
  const ended: string[] = [];
  const requests: unknown[] = [];
  const cancelled: string[] = [];
  const config = resolveConfig({
    model: 'scripted',
    watchdog: { timeoutMs: 1_000, pollMs: 100, graceMs: 500 },
    lease: { ttlMs: 5_000, renewMs: 200 },
  });
  const counters = newCounters();
  const slots = new TurnSlots();
  const rec = new SessionRecord('ws', new LoopTurns());
  rec.snapshot = newSession('ws');
  let answer!: (outcome: TurnOutcome) => void;
  let die!: (err: Error) => void;
  const worker = {
    id: 12,
    slot: 1,
    tid: options.tid,
    control: { postMessage: (m: unknown) => posted.push(m) },
    api: {
      runTurn: (req: unknown) =>
        new Promise<TurnOutcome>((r, j) => {
          requests.push(req);
          answer = r;
          die = j;
        }),
    },
    caughtUp: () => (options.caughtUp ? options.caughtUp() : Promise.resolve()),
    onEvent: undefined,
  };
  const host = {
    config,
    clock,
    events: hub,
    counters,
    logger,
    holder: 'me',
    timers,
    slots,
    pool: {
      terminate: async (w: { id: number }) => void terminated.push(w.id),
      release: (w: { id: number }) => void workersReleasedIds.push(w.id),
      retire: (w: { id: number }) => void retired.push(w.id),
    },
    store: {
      refreshLease: async (...args: unknown[]) => {
        refreshes.push(args[2] as number);
        return options.refresh ? options.refresh() : true;
      },
      releaseLease: async () => (options.releaseLease ? options.releaseLease() : true),
      saveSession: async () => {},
    },
    sessions: {
      apply: (_rec: SessionRecord, event: SessionEvent) =>
        void (event.type === 'ABORT' && abandoned.push(event.reason as AbortReason)),
      set: () => options.sessionSet?.(),
      release: () => void ended.push('mailbox released'),
      logTransition: () => {},
    },
    gate: { write: async () => undefined },
    watchdog: {
      watch: (t: {
        slot: number;
        workstreamId: string;
        tenantId: string;
        generation: number;
        threads: () => number[];
      }) => {
        watchedThreads = t.threads;
        return new WatchedTurn(t.slot, t.workstreamId, t.tenantId, t.generation, 0, clock.sample(t.slot));
      },
      unwatch: () => void unwatched++,
    },
    isolation: { cancelTurn: () => void cancelled.push('isolated tasks') },
    hostTools: { cancelTurn: () => void cancelled.push('host tool calls') },
    sends: { announcedAfter: () => undefined },
    turnEnded: () => {
      ended.push('turn ended');
      options.turnEnded?.();
    },
    pump: (id: string) => void ended.push(`pump ${id}`),
  } as unknown as TurnHost;
  let released = 0;
  const turn = new Turn(host, rec, {
    tenantId: 't',
    principal: 'user',
    permit: { tenantId: 't', release: () => void released++ },
    generation: 4,
    lease: { workstreamId: 'ws', holder: 'me', token: 9, acquiredAt: 0, expiresAt: 1e12, released: false },
    worker: worker as never,
    history: [],
    user: { role: 'user', content: 'hi', principal: 'user' },
    claimed: newSession('ws'),
  });
  const protocolHost: AbortHost = {
    config,
    events: hub,
    counters,
    logger,
    turnOnSlot: (slot) => slots.on(slot),
  };
  const protocol = new AbortProtocol(protocolHost);
  const info = (bound: StallInfo['bound'] = 'idle'): StallInfo => ({
    workstreamId: 'ws',
    tenantId: 't',
    generation: 4,
    slot: 1,
    bound,
    idleMs: 1_234,
    lastActivity: 'toolStart',
    sampledVersion: clock.sample(1),
  });
  /**
   * Dispatches the turn; `finish` answers its worker (completed, back at idle — or interrupted,
   * the machine left in force-abandoning for the supervisor) and waits for its end; `answer`
   * only answers.
   */
  const run = () => {
    turn.run({ workstreamId: 'ws', ticket: 0 }, undefined);
    const reply = async (
      status: 'completed' | 'interrupted' | 'failed' = 'completed',
      extra: Partial<TurnOutcome> = {},
    ) => {
      await new Promise((r) => setImmediate(r));
      answer({
        generation: 4,
        status,
        ...(status === 'completed' ? { finalText: 'ok' } : { abortReason: 'cancel' as const }),
        startedCalls: [],
        modelSteps: 1,
        eventsPosted: 0,
        snapshot: newSession('ws'),
        ...extra,
      });
    };
    return {
      answer: reply,
      /** The worker dies under the turn: its `runTurn` rejects. */
      die: async (err = new Error('worker exited')) => {
        await new Promise((r) => setImmediate(r));
        die(err);
        return turn.done;
      },
      finish: async (
        status: 'completed' | 'interrupted' | 'failed' = 'completed',
        extra: Partial<TurnOutcome> = {},
      ) => {
        await reply(status, extra);
        return turn.done;
      },
    };
  };
  const msgs = () => logs.map((l) => l.msg);
  return {
    protocol,
    turn,
    rec,
    slots,
    watched: turn.watched,
    logs,
    msgs,
    events,
    timers,
    posted,
    terminated,
    retired,
    abandoned,
    refreshes,
    counters,
    clock,
    info,
    run,
    released: () => released,
    unwatched: () => unwatched,
    /** The threads the watchdog would read for this turn (what `watch` was given). */
    threads: () => watchedThreads?.() ?? [],
    /** Workers the end gave back to the pool. */
    workersReleased: workersReleasedIds,
    /** What the end told the host after the turn, in order. */
    ended,
    /** What the worker's `runTurn` was asked. */
    requests,
    /** Work handed to the supervisor's side the end cancelled. */
    cancelled,
  };
}
