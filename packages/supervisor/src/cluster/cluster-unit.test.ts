/**
 * Cluster (cluster.ts) on its own: several Cluster objects in one process over a fake world —
 * leases in a map, a notification channel delivered asynchronously to every listener (as
 * LISTEN/NOTIFY does, the sender included), timers on a virtual clock, a real event hub. No
 * runtime, no threads, no wall clock: routing's rounds, following, the control messages'
 * checks, shutdown and the failover sweep, each asserted on what the hosts said and did.
 */
import { ErrorCode, errors, type HistoryRow } from '@turnwarden/protocol';
import type { Lease, Store } from '@turnwarden/store';
import { describe, expect, it } from 'vitest';
import type { Timers } from '../liveness/timers.js';
import { EventHub, type TurnwardenEvent } from '../streams/events.js';
import {
  Cluster,
  type ClusterChannel,
  type ClusterHost,
  channelOf,
  hostOf,
  type RoutedOp,
} from './cluster.js';

const TTL = 3_000;
const RENEW = 1_000;

interface Timer {
  at: number;
  fn: () => void;
  every?: number;
}

/** Timers on a virtual clock; `until` runs the promise, firing timers in order while it waits. */
class Clock {
  now = 0;
  private readonly pending: Timer[] = [];
  readonly timers: Timers = {
    after: (ms, fn) => this.add({ at: this.now + ms, fn }),
    every: (ms, fn) => this.add({ at: this.now + ms, fn, every: ms }),
  };

  /** Timers not fired or cancelled yet. */
  get waiting(): number {
    return this.pending.length;
  }

  private add(t: Timer) {
    this.pending.push(t);
    return () => {
      const at = this.pending.indexOf(t);
      if (at >= 0) this.pending.splice(at, 1);
    };
  }

  /** Lets every callback, promise and setImmediate delivery run. */
  async settle(): Promise<void> {
    for (let i = 0; i < 30; i++) await new Promise<void>((r) => setImmediate(r));
  }

  /** Fires the timers due up to `t`, in order, settling after each; the clock ends at `t`. */
  async advanceTo(t: number): Promise<void> {
    for (;;) {
      await this.settle();
      const due = this.pending.filter((x) => x.at <= t).sort((a, b) => a.at - b.at)[0];
      if (due === undefined) break;
      this.now = due.at;
      if (due.every === undefined) this.pending.splice(this.pending.indexOf(due), 1);
      else due.at += due.every;
      due.fn();
    }
    this.now = t;
    await this.settle();
  }

  /** Runs until `p` settles, advancing to each next timer; resolves to the clock then. */
  async until(p: Promise<unknown>): Promise<number> {
    let done = false;
    p.then(
      () => (done = true),
      () => (done = true),
    );
    for (let i = 0; i < 1_000; i++) {
      await this.settle();
      if (done) return this.now;
      const next = Math.min(...this.pending.map((x) => x.at));
      if (!Number.isFinite(next)) throw new Error('nothing left to fire, and the promise is still pending');
      await this.advanceTo(next);
    }
    throw new Error('still pending after 1,000 timers');
  }
}

type Log = { level: 'info' | 'warn'; fields: Record<string, unknown>; msg: string };

/** The shared world: leases, journals, the channel, the clock. */
class World {
  readonly clock = new Clock();
  readonly leases = new Map<string, Lease>();
  readonly rows = new Map<string, HistoryRow[]>();
  readonly sent: { channel: string; payload: string }[] = [];
  private readonly listeners = new Map<string, Set<{ on: (p: string) => void; reconnect?: () => void }>>();
  failNotify = false;
  failRead = false;
  unlistened = 0;

  lease(ws: string, holder: string, token: number, expiresAt: number, released = false): Lease {
    const lease = { workstreamId: ws, holder, token, acquiredAt: 0, expiresAt, released };
    this.leases.set(ws, lease);
    return lease;
  }

  readonly channel: ClusterChannel = {
    notify: async (channel, payload) => {
      if (this.failNotify) throw new Error('notify failed');
      this.sent.push({ channel, payload });
      const targets = [...(this.listeners.get(channel) ?? [])];
      setImmediate(() => {
        for (const t of targets) t.on(payload);
      });
    },
    listen: async (channel, on, reconnect) => {
      const set = this.listeners.get(channel) ?? new Set();
      this.listeners.set(channel, set);
      const entry = { on, ...(reconnect === undefined ? {} : { reconnect }) };
      set.add(entry);
      return async () => {
        this.unlistened++;
        set.delete(entry);
      };
    },
    readHistoryAfter: async (ws, after) => {
      if (this.failRead) throw new Error('read failed');
      return (this.rows.get(ws) ?? []).filter((r) => r.seq > after);
    },
  };

  /** A raw notification, as any database user could send. */
  async raw(channel: string, payload: string): Promise<void> {
    await this.channel.notify(channel, payload);
    await this.clock.settle();
  }

  reconnect(): void {
    for (const set of this.listeners.values()) for (const l of set) l.reconnect?.();
  }

  control(): Record<string, unknown>[] {
    return this.sent
      .filter((s) => s.channel === 'turnwarden_control')
      .flatMap((s) => {
        try {
          const m = JSON.parse(s.payload);
          return typeof m === 'object' && m !== null ? [m] : [];
        } catch {
          return [];
        }
      });
  }

  appendRows(ws: string, ...seqs: number[]): void {
    const rows = this.rows.get(ws) ?? [];
    for (const seq of seqs) {
      rows.push({
        workstreamId: ws,
        seq,
        commitKey: `k${seq}`,
        generation: 1,
        message: { role: 'user', content: `m${seq}` },
        createdAt: 0,
      } as unknown as HistoryRow);
    }
    this.rows.set(ws, rows);
  }
}

interface HostOptions {
  predecessors?: string;
  runs?: Set<string>;
  runLocally?: (ws: string, op: RoutedOp) => Promise<unknown>;
  repairIfLeft?: (ws: string) => Promise<boolean>;
  expiredLeases?: () => Promise<Lease[]>;
  renewMs?: number;
}

function hostIn(world: World, hostId: string, options: HostOptions = {}) {
  const logs: Log[] = [];
  const logger = {
    info: (fields: Record<string, unknown>, msg: string) => void logs.push({ level: 'info', fields, msg }),
    warn: (fields: Record<string, unknown>, msg: string) => void logs.push({ level: 'warn', fields, msg }),
  };
  const calls: [string, RoutedOp][] = [];
  const repaired: string[] = [];
  const runs = options.runs ?? new Set<string>();
  const store = {
    getLease: async (ws: string) => world.leases.get(ws),
    expiredLeases:
      options.expiredLeases ??
      (async () => [...world.leases.values()].filter((l) => !l.released && l.expiresAt <= world.clock.now)),
  } as unknown as Store;
  const events = new EventHub(logger as never);
  const host: ClusterHost = {
    store,
    holder: `${hostId}:${hostId}-uuid`,
    hostId,
    predecessors: options.predecessors,
    events,
    timers: world.clock.timers,
    logger: logger as never,
    lease: { ttlMs: TTL, renewMs: options.renewMs ?? RENEW },
    runsHere: (ws) => runs.has(ws),
    runLocally: async (ws, op) => {
      calls.push([ws, op]);
      return options.runLocally ? options.runLocally(ws, op) : undefined;
    },
    repairIfLeft: async (ws) => {
      repaired.push(ws);
      return options.repairIfLeft ? options.repairIfLeft(ws) : false;
    },
  };
  const cluster = new Cluster(host, world.channel);
  const said = (msg: string) => logs.filter((l) => l.msg === msg);
  return { cluster, host, logs, said, calls, repaired, runs, events };
}

async function twoHosts(options: { a?: HostOptions; b?: HostOptions } = {}) {
  const world = new World();
  const a = hostIn(world, 'a', options.a);
  const b = hostIn(world, 'b', options.b);
  await a.cluster.start();
  await b.cluster.start();
  return { world, a, b };
}

function listen(events: EventHub, ws: string): TurnwardenEvent[] {
  const got: TurnwardenEvent[] = [];
  events.subscribe(ws, (e) => void got.push(e));
  return got;
}

describe('the channel and host ids', () => {
  it('a store is a cluster channel only with notify, listen and readHistoryAfter', () => {
    const fn = () => undefined;
    const full = { notify: fn, listen: fn, readHistoryAfter: fn } as unknown as Store;
    expect(channelOf(full)).toBe(full);
    for (const missing of ['notify', 'listen', 'readHistoryAfter']) {
      const partial = { notify: fn, listen: fn, readHistoryAfter: fn, [missing]: 'not a function' };
      expect(channelOf(partial as unknown as Store), missing).toBeUndefined();
    }
  });

  it("a holder's host id is what comes before its last colon", () => {
    expect(hostOf('host-a:1234')).toBe('host-a');
    expect(hostOf('a:b:c')).toBe('a:b');
    expect(hostOf('no-colon')).toBe('');
  });

  it('start listens on both channels, schedules the sweep every renewal period and says so', async () => {
    const world = new World();
    const a = hostIn(world, 'a');
    await a.cluster.start();
    expect(a.said('cluster host joined')).toEqual([
      { level: 'info', fields: { hostId: 'a', holder: 'a:a-uuid' }, msg: 'cluster host joined' },
    ]);
    world.lease('w', 'dead:1', 1, 500);
    await world.clock.advanceTo(RENEW - 1);
    expect(a.repaired).toEqual([]);
    await world.clock.advanceTo(RENEW);
    expect(a.repaired).toEqual(['w']);
    await a.cluster.stop();
    expect(world.unlistened).toBe(2);
  });
});

describe('routing', () => {
  it('runs here, unrouted: a turn here, no lease, a released one, its own, a predecessor’s', async () => {
    const { world, a } = await twoHosts({ a: { predecessors: 'a:old-', runs: new Set(['here']) } });
    world.lease('here', 'b:b-uuid', 1, 10_000);
    expect(await a.cluster.route('here', { op: 'cancel' })).toEqual({ ran: false });
    expect(await a.cluster.route('none', { op: 'cancel' })).toEqual({ ran: false });
    world.lease('released', 'b:b-uuid', 1, 10_000, true);
    expect(await a.cluster.route('released', { op: 'cancel' })).toEqual({ ran: false });
    world.lease('mine', 'a:a-uuid', 1, 10_000);
    expect(await a.cluster.route('mine', { op: 'cancel' })).toEqual({ ran: false });
    world.lease('pred', 'a:old-123', 1, 10_000);
    expect(await a.cluster.route('pred', { op: 'cancel' })).toEqual({ ran: false });
    expect(await a.cluster.foreignLease('pred')).toBeUndefined();
    world.lease('theirs', 'b:b-uuid', 1, 10_000);
    expect(await a.cluster.foreignLease('theirs')).toMatchObject({ holder: 'b:b-uuid' });
    expect(world.control()).toEqual([]);
    expect(a.cluster.stats().routedOut).toBe(0);
  });

  it('a call on a workstream leased by another host runs there, as its request says, and its answer comes back', async () => {
    const { world, a, b } = await twoHosts({ b: { runLocally: async () => ({ cancelled: true }) } });
    world.lease('w', 'b:b-uuid', 7, 10_000);
    const routed = a.cluster.route('w', { op: 'cancel' });
    await world.clock.until(routed);
    expect(await routed).toEqual({ ran: true, result: { cancelled: true } });
    expect(b.calls).toEqual([['w', { op: 'cancel' }]]);
    const [req, rep] = world.control();
    expect(req).toEqual({
      k: 'req',
      id: expect.any(String),
      to: 'b:b-uuid',
      from: 'a:a-uuid',
      ws: 'w',
      token: 7,
      op: 'cancel',
    });
    expect(rep).toEqual({ k: 'rep', id: req!.id, to: 'a:a-uuid', ok: true, result: { cancelled: true } });
    expect(a.said('call routed to the host holding the lease')[0]?.fields).toEqual({
      workstreamId: 'w',
      op: 'cancel',
      to: 'b:b-uuid',
      token: 7,
    });
    expect(b.said('routed call received')[0]?.fields).toEqual({
      workstreamId: 'w',
      op: 'cancel',
      from: 'a:a-uuid',
    });
    expect(a.cluster.stats()).toEqual({
      hostId: 'a',
      routedOut: 1,
      routedIn: 0,
      routedFallbacks: 0,
      failovers: 0,
      followedRows: 0,
      relayedEvents: 0,
      relayGaps: 0,
    });
    expect(b.cluster.stats()).toMatchObject({ hostId: 'b', routedIn: 1, routedOut: 0 });
  });

  it('an undefined result comes back as null; the holder’s error comes back as that typed error', async () => {
    let fail = false;
    const { world, a } = await twoHosts({
      b: {
        runLocally: async () => {
          if (fail) throw errors.turnInProgress('a turn is running', { workstreamId: 'w' });
          return undefined;
        },
      },
    });
    world.lease('w', 'b:b-uuid', 1, 10_000);
    const first = a.cluster.route('w', { op: 'close', waitMs: 0 });
    await world.clock.until(first);
    expect(await first).toEqual({ ran: true, result: null });
    fail = true;
    const second = a.cluster.route('w', { op: 'close', waitMs: 0 });
    await world.clock.until(second);
    await expect(second).rejects.toMatchObject({
      code: ErrorCode.TURN_IN_PROGRESS,
      message: 'a turn is running',
    });
  });

  it('a request for a lease the holder no longer holds is answered stale, never run; the call is routed again by the lease as it is then', async () => {
    const { world, a, b } = await twoHosts();
    world.lease('w', 'b:b-uuid', 1, 10_000);
    // b holds token 2 by the time the request (token 1) arrives: stale; then the lease is gone.
    const stale: Lease = {
      workstreamId: 'w',
      holder: 'b:b-uuid',
      token: 1,
      acquiredAt: 0,
      expiresAt: 10_000,
      released: false,
    };
    let reads = 0;
    (a.host.store as { getLease: (ws: string) => Promise<Lease | undefined> }).getLease = async () =>
      reads++ === 0 ? stale : undefined;
    world.lease('w', 'b:b-uuid', 2, 10_000);
    const routed = a.cluster.route('w', { op: 'cancel' });
    await world.clock.until(routed);
    expect(await routed).toEqual({ ran: false });
    expect(b.calls).toEqual([]);
    expect(world.control()[1]).toEqual({
      k: 'rep',
      id: expect.any(String),
      to: 'a:a-uuid',
      ok: false,
      stale: true,
    });
    expect(a.cluster.stats().routedFallbacks).toBe(0);
  });

  it('a holder serves only the lease it holds: released, another token, another holder or none are stale', async () => {
    const { world, a, b } = await twoHosts();
    for (const [i, lease] of [
      { holder: 'b:b-uuid', token: 1, released: true },
      { holder: 'b:b-uuid', token: 2, released: false },
      { holder: 'c:c-uuid', token: 1, released: false },
      undefined,
    ].entries()) {
      if (lease === undefined) world.leases.delete('w');
      else world.lease('w', lease.holder, lease.token, 10_000, lease.released);
      await world.raw(
        'turnwarden_control',
        JSON.stringify({
          k: 'req',
          id: `r${i}`,
          to: 'b:b-uuid',
          from: 'a:a-uuid',
          ws: 'w',
          token: 1,
          op: 'cancel',
        }),
      );
      await world.clock.settle();
    }
    expect(b.calls).toEqual([]);
    expect(world.control().filter((m) => m.k === 'rep')).toEqual(
      ['r0', 'r1', 'r2', 'r3'].map((id) => ({ k: 'rep', id, to: 'a:a-uuid', ok: false, stale: true })),
    );
    void a;
  });

  it('S7: a holder that neither answers nor renews: the call runs here once a TTL and a period passed, not before', async () => {
    const { world, a } = await twoHosts();
    world.lease('w', 'dead:1', 3, TTL);
    const routed = a.cluster.route('w', { op: 'cancel' });
    const at = await world.clock.until(routed);
    expect(await routed).toEqual({ ran: false });
    expect(at).toBe(TTL + RENEW);
    expect(a.cluster.stats().routedFallbacks).toBe(1);
    expect(
      a.said('the lease holder did not answer and its lease lapsed or changed hands: running the call here'),
    ).toEqual([
      {
        level: 'warn',
        fields: { workstreamId: 'w', op: 'cancel', holder: 'dead:1' },
        msg: 'the lease holder did not answer and its lease lapsed or changed hands: running the call here',
      },
    ]);
  });

  it('C2: a routed soft close waits its waitMs on top, in the first round only', async () => {
    const { world, a } = await twoHosts();
    world.lease('w', 'dead:1', 3, TTL);
    const routed = a.cluster.route('w', { op: 'close', waitMs: 2_500 });
    expect(await world.clock.until(routed)).toBe(TTL + RENEW + 2_500);
    expect(await routed).toEqual({ ran: false });
  });

  it('S7: a holder that keeps renewing without answering: TIMEOUT after four TTL-and-period rounds, naming its host', async () => {
    const { world, a } = await twoHosts();
    world.lease('w', 'silent:1', 3, TTL);
    const renew = world.clock.timers.every(RENEW, () =>
      world.lease('w', 'silent:1', 3, world.clock.now + TTL),
    );
    const routed = a.cluster.route('w', { op: 'cancel' });
    routed.catch(() => undefined);
    const at = await world.clock.until(routed);
    renew();
    expect(at).toBe(4 * (TTL + RENEW));
    await expect(routed).rejects.toMatchObject({
      code: ErrorCode.TIMEOUT,
      message: 'host silent holds the lease of w and did not answer the cancel',
      details: { workstreamId: 'w', hostId: 'silent' },
    });
    // A soft close's waitMs is counted once, in the first round.
    const close = a.cluster.route('w', { op: 'close', waitMs: 500 });
    close.catch(() => undefined);
    const start = world.clock.now;
    const renew2 = world.clock.timers.every(RENEW, () =>
      world.lease('w', 'silent:1', 3, world.clock.now + TTL),
    );
    const closedAt = await world.clock.until(close);
    renew2();
    expect(closedAt - start).toBe(4 * (TTL + RENEW) + 500);
  });

  it('a lease released while the call waits: one short wait for an answer on its way, then the call runs here', async () => {
    const { world, a } = await twoHosts();
    world.lease('w', 'slow:1', 3, 10_000);
    world.clock.timers.after(1_500, () => world.lease('w', 'slow:1', 3, 10_000, true));
    const routed = a.cluster.route('w', { op: 'cancel' });
    const at = await world.clock.until(routed);
    expect(await routed).toEqual({ ran: false });
    // Seen released at the 2,000 ms look; then min(renewMs, 1,000) more for a late answer.
    expect(at).toBe(2 * RENEW + 1_000);
  });

  it('that short wait is a renewal period when it is under a second', async () => {
    const world = new World();
    const a = hostIn(world, 'a', { renewMs: 400 });
    await a.cluster.start();
    world.lease('w', 'slow:1', 3, 10_000);
    world.clock.timers.after(500, () => world.lease('w', 'slow:1', 3, 10_000, true));
    const routed = a.cluster.route('w', { op: 'cancel' });
    // Seen released at the 800 ms look; then 400 ms more.
    expect(await world.clock.until(routed)).toBe(1_200);
  });

  it('an answer that arrives in that short wait is the answer', async () => {
    const { world, a } = await twoHosts();
    world.lease('w', 'slow:1', 3, 10_000);
    world.clock.timers.after(1_500, () => world.lease('w', 'slow:1', 3, 10_000, true));
    const routed = a.cluster.route('w', { op: 'cancel' });
    world.clock.timers.after(2_500, () => {
      const req = world.control().find((m) => m.k === 'req')!;
      void world.channel.notify(
        'turnwarden_control',
        JSON.stringify({ k: 'rep', id: req.id, to: 'a:a-uuid', ok: true, result: 'late' }),
      );
    });
    expect(await world.clock.until(routed)).toBe(2_500);
    expect(await routed).toEqual({ ran: true, result: 'late' });
  });

  it('a lease taken by another host while the call waits: the call follows it there', async () => {
    const { world, a } = await twoHosts({ b: { runLocally: async () => 'served by b' } });
    world.lease('w', 'dead:1', 3, 10_000);
    world.clock.timers.after(1_500, () => world.lease('w', 'b:b-uuid', 4, 20_000));
    const routed = a.cluster.route('w', { op: 'cancel' });
    await world.clock.until(routed);
    expect(await routed).toEqual({ ran: true, result: 'served by b' });
    expect(
      world
        .control()
        .filter((m) => m.k === 'req')
        .map((m) => [m.to, m.token]),
    ).toEqual([
      ['dead:1', 3],
      ['b:b-uuid', 4],
    ]);
    expect(a.cluster.stats().routedOut).toBe(2);
  });

  it('a lease that keeps moving between hosts: TIMEOUT after four hops', async () => {
    const { world, a } = await twoHosts();
    let token = 1;
    world.lease('w', 'h1:x', token, 100_000);
    const move = world.clock.timers.every(RENEW, () => {
      token++;
      world.lease('w', `h${token}:x`, token, 100_000);
    });
    const routed = a.cluster.route('w', { op: 'delete', tenantId: 't', incarnation: 'i' });
    routed.catch(() => undefined);
    await world.clock.until(routed);
    move();
    await expect(routed).rejects.toMatchObject({
      code: ErrorCode.TIMEOUT,
      message: 'the delete of w found its lease moving between hosts 4 times',
      details: { workstreamId: 'w' },
    });
    expect(world.control().filter((m) => m.k === 'req')).toHaveLength(4);
  });
});

describe('shutdown', () => {
  it('a host shutting down routes nothing, serves nothing (SHUTTING_DOWN) and sweeps nothing', async () => {
    const { world, a, b } = await twoHosts();
    world.lease('w', 'b:b-uuid', 1, 10_000);
    b.cluster.beginShutdown();
    const routed = a.cluster.route('w', { op: 'cancel' });
    routed.catch(() => undefined);
    await world.clock.until(routed);
    await expect(routed).rejects.toMatchObject({ code: ErrorCode.SHUTTING_DOWN });
    expect(b.calls).toEqual([]);
    a.cluster.beginShutdown();
    const requests = world.control().filter((m) => m.k === 'req').length;
    await expect(a.cluster.route('w', { op: 'cancel' })).rejects.toMatchObject({
      code: ErrorCode.SHUTTING_DOWN,
    });
    // Refused before a request went out.
    expect(world.control().filter((m) => m.k === 'req')).toHaveLength(requests);
    world.lease('x', 'dead:1', 1, 0);
    await world.clock.advanceTo(world.clock.now + 5 * RENEW);
    expect([...a.repaired, ...b.repaired]).toEqual([]);
  });

  it('a shutdown that begins while a routed call waits ends it with SHUTTING_DOWN at its next look at the lease', async () => {
    const { world, a } = await twoHosts();
    world.lease('w', 'silent:1', 1, 100_000);
    const routed = a.cluster.route('w', { op: 'cancel' });
    routed.catch(() => undefined);
    world.clock.timers.after(1_500, () => a.cluster.beginShutdown());
    expect(await world.clock.until(routed)).toBe(2 * RENEW);
    await expect(routed).rejects.toMatchObject({ code: ErrorCode.SHUTTING_DOWN });
  });

  it('nothing is held once routed calls end — answered, fallen back after a lapse, refused at shutdown: no reply awaited, nothing in flight, no timer but the sweeps', async () => {
    const { world, a, b } = await twoHosts({ b: { runLocally: async () => ({ cancelled: true }) } });
    await world.clock.settle();
    const sweeps = world.clock.waiting;
    expect(sweeps).toBe(2);
    // Answered: the reply's wait and its timer go with it, on both sides.
    world.lease('w', 'b:b-uuid', 7, 10_000);
    const answered = a.cluster.route('w', { op: 'cancel' });
    await world.clock.until(answered);
    await world.clock.settle();
    expect(a.cluster.held()).toEqual({ waiting: 0, busy: 0 });
    expect(b.cluster.held()).toEqual({ waiting: 0, busy: 0 });
    expect(world.clock.waiting).toBe(sweeps);
    // A holder that neither answers nor renews: the call falls back here and leaves nothing.
    world.lease('x', 'dead:1', 3, TTL);
    const lapsed = a.cluster.route('x', { op: 'cancel' });
    await world.clock.until(lapsed);
    expect(await lapsed).toEqual({ ran: false });
    await world.clock.settle();
    expect(a.cluster.held()).toEqual({ waiting: 0, busy: 0 });
    expect(world.clock.waiting).toBe(sweeps);
    // A call still waiting when its host stops: answered SHUTTING_DOWN, and nothing held after.
    world.lease('y', 'silent:1', 1, 100_000);
    const waiting = a.cluster.route('y', { op: 'cancel' });
    waiting.catch(() => undefined);
    await world.clock.settle();
    expect(a.cluster.held().waiting).toBe(1);
    await a.cluster.stop();
    await expect(waiting).rejects.toMatchObject({ code: ErrorCode.SHUTTING_DOWN });
    expect(a.cluster.held()).toEqual({ waiting: 0, busy: 0 });
  });

  it('stop waits for the calls being served, answers its own waiting calls SHUTTING_DOWN, stops listening', async () => {
    let finish!: () => void;
    const { world, a, b } = await twoHosts({
      b: { runLocally: () => new Promise((r) => (finish = () => r('done'))) },
    });
    world.lease('w', 'b:b-uuid', 1, 100_000);
    const routed = a.cluster.route('w', { op: 'cancel' });
    await world.clock.settle();
    expect(b.calls).toHaveLength(1);
    let stopped = false;
    const stopping = b.cluster.stop().then(() => (stopped = true));
    await world.clock.settle();
    expect(stopped).toBe(false);
    finish();
    await stopping;
    await world.clock.settle();
    // b answered before it stopped listening.
    expect(world.control().filter((m) => m.k === 'rep')).toEqual([
      expect.objectContaining({ ok: true, result: 'done' }),
    ]);
    expect(await routed).toEqual({ ran: true, result: 'done' });
    // a's own call waiting when a stops: SHUTTING_DOWN.
    world.lease('x', 'silent:1', 1, 100_000);
    const waiting = a.cluster.route('x', { op: 'cancel' });
    waiting.catch(() => undefined);
    await world.clock.settle();
    await a.cluster.stop();
    await expect(waiting).rejects.toMatchObject({ code: ErrorCode.SHUTTING_DOWN });
    expect(world.unlistened).toBe(4);
    // Both stopped: no sweep scheduled any more (only a's cancelled-call timers could be left).
    await world.clock.advanceTo(world.clock.now + 100_000);
    expect(world.clock.waiting).toBe(0);
  });

  it('messages already on their way when stop begins are ignored', async () => {
    const { world, b } = await twoHosts();
    world.lease('w', 'b:b-uuid', 1, 100_000);
    const got = listen(b.events, 'w');
    world.appendRows('w', 1);
    // Sent (their delivery queued), then stop: they arrive after it began.
    await world.channel.notify(
      'turnwarden_events',
      JSON.stringify({ f: 'a:a-uuid', b: [['w', [{ id: 1, workstreamId: 'w', type: 'idle', data: {} }]]] }),
    );
    await world.channel.notify(
      'turnwarden_control',
      JSON.stringify({
        k: 'req',
        id: 'r',
        to: 'b:b-uuid',
        from: 'a:a-uuid',
        ws: 'w',
        token: 1,
        op: 'cancel',
      }),
    );
    await b.cluster.stop();
    await world.clock.settle();
    expect(got).toEqual([]);
    expect(b.calls).toEqual([]);
  });

  it('a stopped host ignores relayed events', async () => {
    const { world, a, b } = await twoHosts();
    const got = listen(b.events, 'w');
    await b.cluster.stop();
    a.events.emit('w', 'idle', 1, {});
    await world.clock.settle();
    expect(got).toEqual([]);
  });
});

describe('relaying (E1, D6, E2 across hosts)', () => {
  const relayed = (world: World) =>
    world.sent
      .filter((x) => x.channel === 'turnwarden_events')
      .map((x) => JSON.parse(x.payload) as { f: string; b: [string, TurnwardenEvent[]][] });

  it('E1: events authored on one host reach the other’s listeners under the author’s ids, in order, once each; the author’s own come back to nothing', async () => {
    const { world, a, b } = await twoHosts();
    const onB = listen(b.events, 'w');
    const onA = listen(a.events, 'w');
    const emitted = [
      a.events.emit('w', 'turn_started', 2, { workerId: 1 }),
      a.events.emit('w', 'token', 2, { text: 'he' }),
      a.events.emit('w', 'token', 2, { text: 'llo' }),
      a.events.emit('w', 'tool_started', 2, { callIndex: 0, id: 'c1', name: 'echo' }),
    ];
    await world.clock.settle();
    // One notification for the tick, from a's holder.
    expect(relayed(world)).toEqual([{ f: 'a:a-uuid', b: [['w', emitted]] }]);
    expect(onB).toEqual(emitted);
    expect(onA).toEqual(emitted);
    expect(b.cluster.stats()).toMatchObject({ relayedEvents: 4, followedRows: 0, relayGaps: 0 });
    expect(a.cluster.stats().relayedEvents).toBe(0);
    // b's clock took the ids in: what b authors next comes after them.
    expect(b.events.emit('w', 'idle', 2, {}).id).toBeGreaterThan(emitted.at(-1)!.id);
    // A reconnect to b after any of them is replayed from b's ring, as on a.
    const replay: TurnwardenEvent[] = [];
    b.events.subscribe('w', (e) => void replay.push(e), { kind: 'after', id: emitted[1]!.id });
    expect(replay.slice(0, 2)).toEqual(emitted.slice(2));
  });

  it('a workstream this host holds no stream of is not kept: a reconnect to it is replay_truncated (the channel keeps nothing)', async () => {
    const { world, a, b } = await twoHosts();
    const e = a.events.emit('quiet', 'token', 1, { text: 'x' });
    await world.clock.settle();
    expect(b.events.stats().streams).toBe(0);
    const got: TurnwardenEvent[] = [];
    b.events.subscribe('quiet', (ev) => void got.push(ev), { kind: 'after', id: e.id - 1 });
    expect(got.map((ev) => ev.type)).toEqual(['replay_truncated']);
  });

  it('E2: a row too large for a notification travels as its seq and is read from the journal, delivered in its place', async () => {
    const { world, a, b } = await twoHosts();
    const onB = listen(b.events, 'w');
    world.appendRows('w', 1, 2);
    const big = 'x'.repeat(5_000);
    const rows = world.rows.get('w')!;
    (rows[1] as { message: unknown }).message = { role: 'assistant', content: big };
    const first = a.events.emit('w', 'message', 1, { seq: 1, commitKey: 'k1', message: rows[0]!.message });
    const large = a.events.emit('w', 'message', 1, { seq: 2, commitKey: 'k2', message: rows[1]!.message });
    const after = a.events.emit('w', 'idle', 1, {});
    await world.clock.settle();
    const wire = relayed(world)[0]!.b[0]![1] as unknown[];
    expect(wire[1]).toEqual({ r: 1, id: large.id, g: 1, seq: 2 });
    expect(onB).toEqual([first, large, after]);
    expect(b.cluster.stats().followedRows).toBe(2);
  });

  it('a row that cannot be read (a failed read, a row rewritten since) is a gap: listeners re-read, logged', async () => {
    const { world, a, b } = await twoHosts();
    const onB = listen(b.events, 'w');
    const before = a.events.emit('w', 'token', 1, { text: 't' });
    world.failRead = true;
    a.events.emit('w', 'message', 1, {
      seq: 9,
      commitKey: 'k9',
      message: { role: 'user', content: 'y'.repeat(3_000) },
    });
    await world.clock.settle();
    expect(onB.map((e) => [e.type, e.data])).toEqual([
      ['token', { text: 't' }],
      ['history_resync', { reason: 'replay_truncated' }],
    ]);
    // The notice takes no id of its own: the last event's.
    expect(onB[1]!.id).toBe(before.id);
    expect(b.said('relayed message not read; listeners re-read')).toHaveLength(1);
    expect(b.cluster.stats().relayGaps).toBe(1);
    // A reconnect after the last id b holds cannot be answered until the next event arrives.
    const got: TurnwardenEvent[] = [];
    b.events.subscribe('w', (e) => void got.push(e), { kind: 'after', id: before.id });
    expect(got.map((e) => e.type)).toEqual(['replay_truncated']);
    world.failRead = false;
    const next = a.events.emit('w', 'token', 1, { text: 'u' });
    await world.clock.settle();
    const again: TurnwardenEvent[] = [];
    b.events.subscribe('w', (e) => void again.push(e), { kind: 'after', id: next.id - 1 });
    expect(again).toEqual([next]);
  });

  it('an event relayed out of order (the hosts’ clocks apart) is not delivered: listeners re-read instead, never a duplicate', async () => {
    const { world, b } = await twoHosts();
    const onB = listen(b.events, 'w');
    const mine = b.events.emit('w', 'token', 1, { text: 'b' });
    await world.raw(
      'turnwarden_events',
      JSON.stringify({
        f: 'a:a-uuid',
        b: [
          ['w', [{ id: mine.id, workstreamId: 'w', type: 'token', generation: 1, data: { text: 'late' } }]],
        ],
      }),
    );
    expect(onB.map((e) => e.type)).toEqual(['token', 'history_resync']);
    expect(b.said('relayed event out of order (host clocks apart?); listeners re-read')).toHaveLength(1);
  });

  it('E1: a row whose event never came (its host stopped between the commit and the relay) is told by the next row’s: listeners re-read', async () => {
    const { world, a, b } = await twoHosts();
    const onB = listen(b.events, 'w');
    const row = (seq: number) => ({
      seq,
      commitKey: `k${seq}`,
      message: { role: 'user' as const, content: `m${seq}` },
    });
    const one = a.events.emit('w', 'message', 1, row(1));
    const two = a.events.emit('w', 'message', 1, row(2));
    await world.clock.settle();
    // Row 3's event is lost with its host; another host writes row 4.
    const four = b.events.emit('w', 'token', 1, { text: 'not a row' });
    await world.raw(
      'turnwarden_events',
      JSON.stringify({
        f: 'c:c-uuid',
        b: [['w', [{ id: four.id + 10, workstreamId: 'w', type: 'message', generation: 2, data: row(4) }]]],
      }),
    );
    expect(onB.map((e) => [e.type, (e.data as { seq?: number }).seq])).toEqual([
      ['message', 1],
      ['message', 2],
      ['token', undefined],
      ['history_resync', undefined],
      ['message', 4],
    ]);
    expect(onB.map((e) => e.id).slice(0, 2)).toEqual([one.id, two.id]);
    expect(
      b.said('relayed rows missing (their host stopped before it relayed them); listeners re-read'),
    ).toHaveLength(1);
  });

  it('D6: a close authored on one host closes the other’s listeners; a listener registering there later is closed at once', async () => {
    const { world, a, b } = await twoHosts();
    const onB = listen(b.events, 'w');
    a.events.closeWorkstream('w', { reason: 'deleted' });
    await world.clock.settle();
    expect(onB.map((e) => [e.type, e.data])).toEqual([['ws_closed', { reason: 'deleted' }]]);
    expect(b.events.listenerCount('w')).toBe(0);
    const late = listen(b.events, 'w');
    expect(late.map((e) => e.type)).toEqual(['ws_closed']);
  });

  it('E2: a history rewritten on one host makes the other’s listeners re-read', async () => {
    const { world, a, b } = await twoHosts();
    const onB = listen(b.events, 'w');
    a.events.emit('w', 'history_resync', undefined, { reason: 'rewritten' });
    await world.clock.settle();
    expect(onB.map((e) => [e.type, e.data])).toEqual([['history_resync', { reason: 'rewritten' }]]);
  });

  it('after the channel reconnected, every stream held here is told to re-read — but those of turns running here', async () => {
    const { world, a, b } = await twoHosts({ b: { runs: new Set(['mine']) } });
    const got = listen(b.events, 'w');
    const mine = listen(b.events, 'mine');
    a.events.emit('w', 'token', 1, { text: 'x' });
    await world.clock.settle();
    world.reconnect();
    expect(got.map((e) => e.type)).toEqual(['token', 'history_resync']);
    expect(got[1]!.data).toEqual({ reason: 'replay_truncated' });
    expect(mine).toEqual([]);
    expect(b.said('relayed events may have been lost; listeners re-read')).toHaveLength(1);
  });

  it('events that cannot be sent are logged; flush resolves all the same', async () => {
    const { world, a } = await twoHosts();
    world.failNotify = true;
    a.events.emit('w', 'token', 1, { text: 'x' });
    await a.cluster.published();
    expect(a.said('events not relayed')).toHaveLength(1);
  });

  it('a tick’s events go out in notifications under 8,000 bytes, several workstreams sharing one', async () => {
    const { world, a, b } = await twoHosts();
    const onB = ['w1', 'w2'].map((ws) => listen(b.events, ws));
    const sent: TurnwardenEvent[] = [];
    for (let i = 0; i < 300; i++)
      sent.push(a.events.emit(i % 2 === 0 ? 'w1' : 'w2', 'token', 1, { text: `t${i}-${'z'.repeat(40)}` }));
    await world.clock.settle();
    const payloads = world.sent.filter((x) => x.channel === 'turnwarden_events');
    expect(payloads.length).toBeGreaterThan(1);
    for (const p of payloads) expect(Buffer.byteLength(p.payload)).toBeLessThan(8_000);
    expect(onB[0]).toEqual(sent.filter((_, i) => i % 2 === 0));
    expect(onB[1]).toEqual(sent.filter((_, i) => i % 2 === 1));
  });

  it('the bound is in bytes: a tick of multi-byte tokens goes out in notifications under 8,000 bytes each, every token delivered', async () => {
    const { world, a, b } = await twoHosts();
    const onB = listen(b.events, 'w');
    const sent: TurnwardenEvent[] = [];
    for (let i = 0; i < 200; i++) sent.push(a.events.emit('w', 'token', 1, { text: '語'.repeat(40) }));
    await world.clock.settle();
    const payloads = world.sent.filter((x) => x.channel === 'turnwarden_events');
    expect(payloads.length).toBeGreaterThan(3);
    for (const p of payloads) expect(Buffer.byteLength(p.payload)).toBeLessThan(8_000);
    expect(onB).toEqual(sent);
  });

  it('relayed payloads that are not ours are dropped and logged, never delivered', async () => {
    const { world, b } = await twoHosts();
    const got = listen(b.events, 'w');
    const bad = [
      '{',
      'null',
      JSON.stringify({ f: 'a:a-uuid' }),
      JSON.stringify({ f: 'a:a-uuid', b: [['w']] }),
      JSON.stringify({ f: 'a:a-uuid', b: [['w', [{ id: -1, type: 'token', data: {} }]]] }),
      JSON.stringify({ f: 'a:a-uuid', b: [['w', [{ id: 5, type: 'not_a_type', data: {} }]]] }),
      JSON.stringify({ f: 'a:a-uuid', b: [['w', [{ id: 5, type: 'token', data: null }]]] }),
      JSON.stringify({ f: 'a:a-uuid', b: [['w', [{ r: 1, id: 5, seq: 'x' }]]] }),
    ];
    for (const payload of bad) await world.raw('turnwarden_events', payload);
    expect(got).toEqual([]);
    expect(b.said('malformed relayed events ignored')).toHaveLength(bad.length);
  });
});

describe('control messages: anything not ours is dropped, never trusted', () => {
  const base = { k: 'req', id: 'r', to: 'b:b-uuid', from: 'a:a-uuid', ws: 'w', token: 1, op: 'cancel' };
  const malformed: [string, unknown][] = [
    ['not JSON', '{'],
    ['null', null],
    ['a number', 5],
    ['an unknown kind', { ...base, k: 'nope' }],
    ['a reply without id', { k: 'rep', to: 'a:a-uuid', ok: true }],
    ['a reply with an empty id', { k: 'rep', id: '', to: 'a:a-uuid', ok: true }],
    ['a reply without to', { k: 'rep', id: 'r', ok: true }],
    ['a reply whose ok is not boolean', { k: 'rep', id: 'r', to: 'a:a-uuid', ok: 'yes' }],
    ['a request without id', { ...base, id: undefined }],
    ['a request without to', { ...base, to: undefined }],
    ['a request without from', { ...base, from: undefined }],
    ['a request without ws', { ...base, ws: undefined }],
    ['a request with a ws over 512', { ...base, ws: 'w'.repeat(513) }],
    ['a request whose token is not a number', { ...base, token: '1' }],
    ['a request of an unknown op', { ...base, op: 'explode' }],
    ['a close without waitMs', { ...base, op: 'close' }],
    ['a delete without tenantId', { ...base, op: 'delete', incarnation: 'i' }],
    ['a delete without incarnation', { ...base, op: 'delete', tenantId: 't' }],
    ['an ended without from', { k: 'ended', ws: 'w', reason: 'closed' }],
    ['an ended without ws', { k: 'ended', from: 'a:a-uuid', reason: 'closed' }],
    ['an ended with another reason', { k: 'ended', from: 'a:a-uuid', ws: 'w', reason: 'gone' }],
    ['a resync without from', { k: 'resync', ws: 'w' }],
    ['a resync without ws', { k: 'resync', from: 'a:a-uuid' }],
  ];

  it('each malformed control message is logged (its first 200 characters) and does nothing', async () => {
    const { world, b } = await twoHosts();
    world.lease('w', 'b:b-uuid', 1, 100_000);
    const got = listen(b.events, 'w');
    for (const [what, m] of malformed) {
      const payload = typeof m === 'string' ? m : JSON.stringify(m);
      const before = b.said('malformed control message ignored').length;
      const sent = world.sent.length;
      await world.raw('turnwarden_control', payload);
      await world.clock.settle();
      expect(b.said('malformed control message ignored').length, what).toBe(before + 1);
      // Nothing answered it.
      expect(world.sent.length, what).toBe(sent + 1);
    }
    expect(b.calls).toEqual([]);
    expect(got).toEqual([]);
    await world.raw('turnwarden_control', 'x'.repeat(300));
    expect(b.said('malformed control message ignored').at(-1)?.fields).toEqual({ payload: 'x'.repeat(200) });
  });

  it('an op that is none of cancel, close or delete is dropped, whatever else it carries; an id of 512 characters is one', async () => {
    const { world, b } = await twoHosts();
    const long = 'w'.repeat(512);
    world.lease(long, 'b:b-uuid', 1, 100_000);
    await world.raw(
      'turnwarden_control',
      JSON.stringify({ ...base, ws: long, op: 'explode', tenantId: 't', incarnation: 'i', waitMs: 0 }),
    );
    expect(b.calls).toEqual([]);
    expect(b.said('malformed control message ignored')).toHaveLength(1);
    await world.raw('turnwarden_control', JSON.stringify({ ...base, ws: long }));
    expect(b.calls).toEqual([[long, { op: 'cancel' }]]);
    // The end of a workstream is no control message any more (its ws_closed is relayed).
    const got = listen(b.events, 'x');
    await world.raw(
      'turnwarden_control',
      JSON.stringify({ k: 'ended', from: 'a:a-uuid', ws: 'x', reason: 'closed' }),
    );
    expect(got).toEqual([]);
    expect(b.said('malformed control message ignored')).toHaveLength(2);
  });

  it('the well-formed ones are served: a close with waitMs, a delete with tenant and incarnation', async () => {
    const { world, b } = await twoHosts();
    world.lease('w', 'b:b-uuid', 1, 100_000);
    await world.raw('turnwarden_control', JSON.stringify({ ...base, id: 'c', op: 'close', waitMs: 0 }));
    await world.raw(
      'turnwarden_control',
      JSON.stringify({ ...base, id: 'd', op: 'delete', tenantId: 't', incarnation: 'i' }),
    );
    await world.clock.settle();
    expect(b.calls).toEqual([
      ['w', { op: 'close', waitMs: 0 }],
      ['w', { op: 'delete', tenantId: 't', incarnation: 'i' }],
    ]);
    expect(b.said('malformed control message ignored')).toEqual([]);
  });

  it('a request or reply for another holder is not this host’s', async () => {
    const { world, a, b } = await twoHosts();
    world.lease('w', 'b:b-uuid', 1, 100_000);
    await world.raw('turnwarden_control', JSON.stringify({ ...base, to: 'c:c-uuid' }));
    expect(b.calls).toEqual([]);
    // A reply for another holder, with the id of a's waiting call: a keeps waiting.
    world.lease('x', 'silent:1', 1, 100_000);
    const routed = a.cluster.route('x', { op: 'cancel' });
    routed.catch(() => undefined);
    await world.clock.settle();
    const req = world.control().find((m) => m.k === 'req' && m.ws === 'x')!;
    await world.raw(
      'turnwarden_control',
      JSON.stringify({ k: 'rep', id: req.id, to: 'c:c-uuid', ok: true, result: 1 }),
    );
    await world.clock.advanceTo(RENEW);
    await world.raw(
      'turnwarden_control',
      JSON.stringify({ k: 'rep', id: req.id, to: 'a:a-uuid', ok: true, result: 2 }),
    );
    await world.clock.advanceTo(2 * RENEW);
    expect(await routed).toEqual({ ran: true, result: 2 });
  });
});

describe('the failover sweep (S7)', () => {
  it('repairs the sessions of other hosts’ expired, unreleased leases, each expiry once; skips its own and those running here', async () => {
    const world = new World();
    const a = hostIn(world, 'a', { runs: new Set(['here']), repairIfLeft: async (ws) => ws === 'debt' });
    await a.cluster.start();
    world.lease('debt', 'dead:1', 1, 0);
    world.lease('clean', 'dead:1', 2, 0);
    world.lease('own', 'a:a-uuid', 1, 0);
    world.lease('here', 'dead:1', 1, 0);
    await world.clock.advanceTo(RENEW);
    expect(a.repaired).toEqual(['debt', 'clean']);
    expect(a.cluster.stats().failovers).toBe(1);
    expect(a.said('took over a workstream whose host let its lease expire mid-turn; repaired')).toEqual([
      {
        level: 'warn',
        fields: { workstreamId: 'debt', deadHolder: 'dead:1', token: 1 },
        msg: 'took over a workstream whose host let its lease expire mid-turn; repaired',
      },
    ]);
    expect(a.said('expired lease of another host: its session holds nothing to repair')[0]?.fields).toEqual({
      workstreamId: 'clean',
      deadHolder: 'dead:1',
      token: 2,
    });
    // The same expiries again: looked at once.
    await world.clock.advanceTo(3 * RENEW);
    expect(a.repaired).toEqual(['debt', 'clean']);
    // Renewed, then expired again: looked at again.
    world.lease('clean', 'dead:1', 2, 3 * RENEW + 1);
    await world.clock.advanceTo(5 * RENEW);
    expect(a.repaired).toEqual(['debt', 'clean', 'clean']);
  });

  it('a lease another host won, or a workstream gone or closed, is left alone; any other failure is retried at the next sweep', async () => {
    const world = new World();
    let attempts = 0;
    const a = hostIn(world, 'a', {
      repairIfLeft: async (ws) => {
        if (ws === 'won')
          throw errors.leasedElsewhere('taken', {
            workstreamId: ws,
            holder: 'c:1',
            expiresAt: 0,
            retryAfterMs: 0,
          });
        if (ws === 'gone') throw errors.workstreamNotFound('gone', { workstreamId: ws });
        if (ws === 'closed') throw errors.workstreamClosed('closed', { workstreamId: ws });
        if (++attempts === 1) throw new Error('store down');
        return true;
      },
    });
    await a.cluster.start();
    for (const ws of ['won', 'gone', 'closed', 'flaky']) world.lease(ws, 'dead:1', 1, 0);
    await world.clock.advanceTo(RENEW);
    expect(a.said('expired lease of another host: left alone').map((l) => l.fields.code)).toEqual([
      ErrorCode.LEASED_ELSEWHERE,
      ErrorCode.WORKSTREAM_NOT_FOUND,
      ErrorCode.WORKSTREAM_CLOSED,
    ]);
    expect(a.said('failover repair failed; will retry')[0]?.fields).toMatchObject({ workstreamId: 'flaky' });
    await world.clock.advanceTo(2 * RENEW);
    expect(a.repaired.filter((ws) => ws === 'flaky')).toHaveLength(2);
    expect(a.repaired.filter((ws) => ws === 'won')).toHaveLength(1);
    expect(a.cluster.stats().failovers).toBe(1);
  });

  it('a sweep that fails is logged and the next one runs; a sweep still running is not started twice', async () => {
    const world = new World();
    let calls = 0;
    let release!: () => void;
    const a = hostIn(world, 'a', {
      expiredLeases: async () => {
        calls++;
        if (calls === 1) throw new Error('db down');
        if (calls === 2) await new Promise<void>((r) => (release = r));
        return [];
      },
    });
    await a.cluster.start();
    await world.clock.advanceTo(RENEW);
    expect(a.said('failover sweep failed; will retry')).toHaveLength(1);
    await world.clock.advanceTo(2 * RENEW);
    await world.clock.advanceTo(4 * RENEW);
    expect(calls).toBe(2);
    release();
    await world.clock.advanceTo(5 * RENEW);
    expect(calls).toBe(3);
  });

  it('a sweep stops at shutdown between leases', async () => {
    const world = new World();
    const a = hostIn(world, 'a', {
      repairIfLeft: async () => {
        a.cluster.beginShutdown();
        return false;
      },
    });
    await a.cluster.start();
    world.lease('one', 'dead:1', 1, 0);
    world.lease('two', 'dead:1', 1, 0);
    await world.clock.advanceTo(RENEW);
    expect(a.repaired).toEqual(['one']);
  });

  it('the expiries looked at are forgotten beyond 10,000, so memory stays bounded: then each is looked at once more', async () => {
    for (const [n, again] of [
      [10_000, 0],
      [10_001, 10_001],
    ] as const) {
      const world = new World();
      const leases = Array.from({ length: n }, (_, i) => ({
        workstreamId: `w${i}`,
        holder: 'dead:1',
        token: 1,
        acquiredAt: 0,
        expiresAt: 0,
        released: false,
      }));
      const a = hostIn(world, 'a', { expiredLeases: async () => leases });
      await a.cluster.start();
      await world.clock.advanceTo(RENEW);
      expect(a.repaired).toHaveLength(n);
      await world.clock.advanceTo(2 * RENEW);
      expect(a.repaired.length - n, String(n)).toBe(again);
    }
  });
});
