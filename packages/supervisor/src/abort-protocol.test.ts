/**
 * The abort protocol alone, with a stub host, a real clock and manual timers: what each stage
 * reports and in which order (L5), what a commit stops (L3), grace escalation, lease renewal.
 */
import { Activity, ActivityClock, SlotStamp } from '@turnwarden/clock';
import type { AbortReason } from '@turnwarden/protocol';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { type AbortHost, AbortProtocol } from './abort-protocol.js';
import type { ActiveTurn } from './active-turn.js';
import { resolveConfig } from './config.js';
import { EventHub, type TurnwardenEvent } from './events.js';
import { newCounters } from './stats.js';
import type { CancelTimer, Timers } from './timers.js';
import { type StallInfo, WatchedTurn } from './watchdog.js';

class Timeline implements Timers {
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

function world(options: { refresh?: () => Promise<boolean> } = {}) {
  const logs: { level: number; msg: string; [k: string]: unknown }[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void logs.push(JSON.parse(s)) });
  const events: TurnwardenEvent[] = [];
  const hub = new EventHub(logger);
  hub.subscribe('ws', (e) => events.push(e));
  const clock = ActivityClock.create(2, () => 0);
  const timers = new Timeline();
  const posted: unknown[] = [];
  const terminated: number[] = [];
  const abandoned: AbortReason[] = [];
  const refreshes: number[] = [];
  const config = resolveConfig({
    model: 'scripted',
    watchdog: { timeoutMs: 1_000, pollMs: 100, graceMs: 500 },
    lease: { ttlMs: 5_000, renewMs: 200 },
  });
  clock.arm(1, 4);
  const watched = new WatchedTurn(1, 'ws', 't', 4, 0, clock.sample(1));
  const turn: ActiveTurn = {
    workstreamId: 'ws',
    tenantId: 't',
    principal: 'user',
    permit: { tenantId: 't', release: () => {} },
    generation: 4,
    lease: { workstreamId: 'ws', holder: 'me', token: 9, acquiredAt: 0, expiresAt: 1e12, released: false },
    worker: { id: 12, slot: 1, control: { postMessage: (m: unknown) => posted.push(m) } } as never,
    watched,
    log: logger.child({ workstreamId: 'ws', generation: 4 }),
    abort: undefined,
    rewrites: new Set(),
    stopRenewal: undefined,
    cancelGrace: undefined,
    workerTerminated: false,
    finished: false,
    resolve: () => {},
    done: new Promise(() => {}),
  };
  const counters = newCounters();
  const host: AbortHost = {
    config,
    clock,
    events: hub,
    counters,
    pool: {
      terminate: async (w) => {
        terminated.push(w.id);
      },
    },
    store: {
      refreshLease: async (...args) => {
        refreshes.push(args[2]);
        return options.refresh ? options.refresh() : true;
      },
    },
    logger,
    holder: 'me',
    timers,
    turnOnSlot: (slot) => (slot === 1 ? turn : undefined),
    abandoning: (_t, reason) => void abandoned.push(reason),
  };
  const protocol = new AbortProtocol(host);
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
  const msgs = () => logs.map((l) => l.msg);
  return {
    protocol,
    turn,
    watched,
    logs,
    msgs,
    events,
    timers,
    posted,
    terminated,
    abandoned,
    refreshes,
    counters,
    clock,
    info,
  };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('abort protocol', () => {
  it('L5: the observational stage logs, counts and warns, and says nothing definitive', () => {
    const w = world();
    w.protocol.fired(w.watched, w.info());
    expect(w.counters.watchdogFired).toBe(1);
    expect(w.logs).toEqual([
      expect.objectContaining({
        level: 50,
        msg: 'turn liveness watchdog fired; attempting recovery',
        workstreamId: 'ws',
        generation: 4,
        idleMs: 1_234,
        lastActivity: 'toolStart',
        bound: 'idle',
      }),
    ]);
    expect(w.events.map((e) => [e.type, e.data])).toEqual([
      // Exactly what a host can act on: no clock slot, no sampled version.
      ['watchdog_fired', { idleMs: 1_234, bound: 'idle', lastActivity: 'toolStart' }],
      [
        'warning',
        { stage: 'observational', message: 'No progress for 1.2s (last: toolStart); attempting recovery.' },
      ],
    ]);
    expect(w.posted).toEqual([]);
  });

  it('a stage for a slot whose turn is gone is still reported, through the supervisor logger', () => {
    const w = world();
    const gone = new WatchedTurn(0, 'ws', 't', 4, 0, 0);
    w.protocol.fired(gone, { ...w.info(), slot: 0 });
    w.protocol.declined(gone, { ...w.info(), slot: 0 }, 'ended', undefined);
    // The turn's own logger would add its generation binding; the supervisor's has none.
    expect(w.logs.map((l) => [l.msg, l.generation])).toEqual([
      ['turn liveness watchdog fired; attempting recovery', undefined],
      ['watchdog abort declined', undefined],
    ]);
  });

  it('L4 L7: a decline is logged by why — a failed publish as a warning with its error — and announced', () => {
    const w = world();
    w.protocol.declined(w.watched, w.info(), 'activity', undefined);
    w.protocol.declined(w.watched, w.info(), 'failed', new Error('publish broke'));
    expect(w.counters.abortsDeclined).toBe(2);
    expect(
      w.logs.map((l) => [l.level, l.msg, l.why ?? (l.err as { message: string })?.message, l.workstreamId]),
    ).toEqual([
      [30, 'watchdog abort declined', 'activity', 'ws'],
      [40, 'watchdog abort declined: publish failed; still watching', 'publish broke', 'ws'],
    ]);
    expect(w.events.map((e) => [e.type, e.data])).toEqual([
      ['watchdog_declined', { why: 'activity' }],
      ['watchdog_declined', { why: 'failed' }],
    ]);
  });

  it('L3 L5: a watchdog commit stops renewal first, then logs, announces, moves the machine, warns, tells the worker, arms grace', () => {
    const w = world();
    w.protocol.startRenewal(w.turn);
    expect(w.timers.pending).toBe(1);
    w.clock.fence(1);
    w.protocol.committed(w.watched, w.info());
    expect(w.turn.abort).toEqual({ reason: 'watchdog', at: 0 });
    expect(w.counters.abortsCommitted).toBe(1);
    expect(w.turn.stopRenewal).toBeUndefined();
    expect(w.logs.map((l) => [l.msg, l.idleMs, l.bound])).toEqual([
      ['watchdog aborted turn; lease renewal stopped', 1_234, 'idle'],
    ]);
    expect(w.events.map((e) => e.type)).toEqual(['turn_aborted', 'warning']);
    expect(w.events[0]!.data).toEqual({ reason: 'watchdog' });
    expect(w.events[1]!.data).toEqual({
      stage: 'definitive',
      message: 'Turn aborted by the liveness watchdog after 1.2s without progress. You can retry.',
    });
    expect(w.abandoned).toEqual(['watchdog']);
    expect(w.posted).toEqual([{ t: 'abort', generation: 4, reason: 'watchdog' }]);
    // Only the grace timer is pending: renewal stopped.
    expect(w.timers.pending).toBe(1);
    w.timers.run(499);
    expect(w.terminated).toEqual([]);
    w.timers.run(1);
    expect(w.terminated).toEqual([12]);
    expect(w.turn.workerTerminated).toBe(true);
    expect(w.counters.workersTerminated).toBe(1);
    expect(w.logs.at(-1)).toMatchObject({
      msg: 'turn did not unwind within grace; terminating worker',
      graceMs: 500,
      workerId: 12,
    });
  });

  it('L11: deadline and dispatch commits say which bound, with their own warnings', () => {
    for (const bound of ['deadline', 'dispatch'] as const) {
      const w = world();
      w.clock.fence(1);
      w.protocol.committed(w.watched, w.info(bound));
      expect(w.turn.abort?.reason).toBe(bound);
      expect(w.logs[0]).toMatchObject({ msg: 'watchdog aborted turn; lease renewal stopped', bound });
      expect(w.events.find((e) => e.type === 'warning')?.data).toMatchObject({ stage: 'definitive' });
      expect(w.posted).toEqual([{ t: 'abort', generation: 4, reason: bound }]);
    }
  });

  it('a cancel, shutdown or lost lease fences unconditionally, logs its reason and gives no watchdog warning', () => {
    const w = world();
    w.protocol.abort(w.turn, 'cancel');
    expect(w.turn.abort?.reason).toBe('cancel');
    // The fence is set on the clock: the worker's next stamp reports the abort (L6).
    expect(new SlotStamp(w.clock.buffer, 1).touch(Activity.streamToken)).toBe(false);
    expect(w.logs.map((l) => [l.level, l.msg, l.reason])).toEqual([
      [40, 'turn aborted; lease renewal stopped', 'cancel'],
    ]);
    expect(w.events.map((e) => e.type)).toEqual(['turn_aborted']);
    // A second abort of the same turn does nothing.
    w.protocol.abort(w.turn, 'shutdown');
    expect(w.counters.abortsCommitted).toBe(1);
    expect(w.posted).toHaveLength(1);
  });

  it('commits once: a commit for a turn that already aborted, or for a turn no longer on its slot, is ignored', () => {
    const w = world();
    w.protocol.commit(w.turn, 'cancel');
    w.protocol.commit(w.turn, 'watchdog');
    expect(w.counters.abortsCommitted).toBe(1);
    const other = world();
    other.protocol.committed(new WatchedTurn(1, 'ws', 't', 4, 0, 0), other.info());
    expect(other.turn.abort).toBeUndefined();
    expect(other.counters.abortsCommitted).toBe(0);
  });

  it('a step that throws after the commit is logged and the rest of the definitive stage still runs', () => {
    const w = world();
    (w.turn.worker as unknown as { control: { postMessage: () => void } }).control.postMessage = () => {
      throw new Error('port closed');
    };
    w.protocol.commit(w.turn, 'cancel');
    expect(w.msgs()).toContain('abort step failed after commit');
    expect(w.timers.pending).toBe(1); // grace still armed
  });

  it('escalation does nothing for a turn that already finished', () => {
    const w = world();
    w.turn.finished = true;
    w.protocol.escalate(w.turn);
    expect(w.terminated).toEqual([]);
    expect(w.counters.workersTerminated).toBe(0);
  });

  it('L2: renewal refreshes the lease every renewMs and counts successes; it is never progress', async () => {
    const w = world();
    const before = w.clock.sample(1);
    w.protocol.startRenewal(w.turn);
    w.timers.run(600);
    await settle();
    expect(w.refreshes).toEqual([9, 9, 9]);
    expect(w.counters.leaseRenewals).toBe(3);
    expect(w.clock.sample(1)).toBe(before);
    w.protocol.stopRenewal(w.turn);
    w.timers.run(600);
    await settle();
    expect(w.refreshes).toHaveLength(3);
  });

  it('L3: once the abort committed, a renewal that still fires does not refresh; one in flight is not counted', async () => {
    const w = world();
    w.turn.abort = { reason: 'cancel', at: 0 };
    w.protocol.renew(w.turn);
    await settle();
    expect(w.refreshes).toEqual([]);
    let finish!: (ok: boolean) => void;
    const slow = world({ refresh: () => new Promise((r) => (finish = r)) });
    slow.protocol.renew(slow.turn);
    slow.turn.finished = true;
    finish(true);
    await settle();
    expect(slow.counters.leaseRenewals).toBe(0);
    // A refresh in flight when the abort commits (the turn not finished yet): its answer,
    // granted or refused, is neither a renewal nor a lost lease.
    for (const ok of [true, false]) {
      let answer!: (ok: boolean) => void;
      const late = world({ refresh: () => new Promise((r) => (answer = r)) });
      late.protocol.renew(late.turn);
      late.protocol.abort(late.turn, 'cancel');
      answer(ok);
      await settle();
      expect(late.counters).toMatchObject({ leaseRenewals: 0, leaseLosses: 0 });
      expect(late.turn.abort?.reason).toBe('cancel');
    }
  });

  it('P6: a refused refresh is a lost lease: logged with the token, counted, and the turn aborted', async () => {
    const w = world({ refresh: async () => false });
    w.protocol.renew(w.turn);
    await settle();
    expect(w.counters.leaseLosses).toBe(1);
    expect(w.counters.leaseRenewals).toBe(0);
    expect(w.logs[0]).toMatchObject({ level: 50, msg: 'turn lease lost; aborting turn', token: 9 });
    expect(w.turn.abort?.reason).toBe('lease_lost');
  });

  it('a refresh that fails (the store is down) is retried at the next period, not a loss', async () => {
    const w = world({ refresh: async () => Promise.reject(new Error('db busy')) });
    w.protocol.renew(w.turn);
    await settle();
    expect(w.turn.abort).toBeUndefined();
    expect(w.logs).toEqual([expect.objectContaining({ level: 40, msg: 'lease renewal failed; will retry' })]);
  });
});
