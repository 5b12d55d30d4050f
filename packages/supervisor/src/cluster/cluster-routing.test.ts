/**
 * Routing's fallbacks and bounds (cluster.ts), on virtual time: the hosts' timers (lease
 * renewal, the routing's waits, a soft close's wait, the sweeps) and the store's wall clock
 * (lease expiry) move only when the test moves them, so a bound is asserted in exact virtual
 * milliseconds, whatever the machine's load. Between steps the work the timers started runs to
 * its end (the store and the channel answer within a few event-loop turns; the routing reads
 * only, so a store that delays writes does not shift it).
 *
 * - A call routed to a holder that stopped renewing (it died) runs here once the lease lapses
 *   unanswered: never before the lease expired, and within TTL + a renewal period (+ waitMs for
 *   a soft close) of the call (docs/cluster.md).
 * - A routed soft close waits for the holder's answer: the holder's TIMEOUT after waitMs comes
 *   back as that TIMEOUT at once; an answer that never comes ends it within waitMs + four
 *   TTL-and-period rounds — waitMs once, not once per round.
 */
import { ErrorCode, openToolCalls, type TurnwardenError, workstreamKey } from '@turnwarden/protocol';
import { newSession, offer } from '@turnwarden/session';
import { type Lease, openSqliteStore, type Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import type { Timers } from '../liveness/timers.js';
import { within } from '../test-support/bounded.js';
import { MemoryChannelBus } from '../test-support/memory-channel.js';
import { nextEvent, script, startRuntime } from '../test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;

const TTL = 3_000;
const RENEW = 50;
const LEASE = { ttlMs: TTL, renewMs: RENEW };

/** Virtual time for the hosts' timers and the store's clock. */
class VirtualTime {
  now = Date.now();
  private next = 0;
  private readonly timers = new Map<number, { at: number; every: number | undefined; fn: () => void }>();
  private readonly paused = new Set<number>();

  readonly api: Timers = {
    every: (ms, fn) => this.add(ms, fn, ms),
    after: (ms, fn) => this.add(ms, fn, undefined),
  };

  private add(ms: number, fn: () => void, every: number | undefined): () => void {
    const id = ++this.next;
    this.timers.set(id, { at: this.now + ms, every, fn });
    return () => {
      this.timers.delete(id);
    };
  }

  /** Holds every periodic timer of this period registered so far (it never fires). */
  pauseEvery(ms: number): number {
    let n = 0;
    for (const [id, t] of this.timers) {
      if (t.every === ms) {
        this.paused.add(id);
        n++;
      }
    }
    return n;
  }

  /** Lets the work started so far run (the store, the channel, the mailboxes answer in a few turns). */
  private async settle(): Promise<void> {
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
  }

  /** Moves time forward by `step`, firing every due timer in order and letting its work run. */
  private async step(step: number): Promise<void> {
    this.now += step;
    for (;;) {
      let due: [number, { at: number; every: number | undefined; fn: () => void }] | undefined;
      for (const entry of this.timers) {
        if (this.paused.has(entry[0]) || entry[1].at > this.now) continue;
        if (due === undefined || entry[1].at < due[1].at) due = entry;
      }
      if (due === undefined) break;
      const [id, t] = due;
      if (t.every === undefined) this.timers.delete(id);
      else t.at += t.every;
      t.fn();
      await this.settle();
    }
    await this.settle();
  }

  /**
   * Runs time in steps of `stepMs` until `done()` holds; returns the virtual time it first held
   * at, or undefined if it did not within `maxMs`.
   */
  async until(done: () => boolean, maxMs: number, stepMs = 10): Promise<number | undefined> {
    const end = this.now + maxMs;
    await this.settle();
    while (!done()) {
      if (this.now >= end) return undefined;
      await this.step(stepMs);
    }
    return this.now;
  }
}

/** A promise's outcome, observable without awaiting it. */
function watch<T>(p: Promise<T>) {
  const state: { settled: boolean; value?: T; error?: TurnwardenError; done: Promise<unknown> } = {
    settled: false,
    done: p.catch(() => undefined),
  };
  p.then(
    (value) => {
      state.settled = true;
      state.value = value;
    },
    (error: TurnwardenError) => {
      state.settled = true;
      state.error = error;
    },
  );
  return state;
}

const running: Rt[] = [];
let store: Store | undefined;
afterEach(async () => {
  for (const rt of running.splice(0)) await rt.tw.shutdown();
  await store?.close();
  store = undefined;
});

const ref = (workstreamId: string) => ({ tenantId: 'tenant-a', principal: 'user-a', workstreamId });

/**
 * What a host that died holding `id`'s lease left: the lease (`ttlMs` from now), and — when
 * `midTurn` — the user row, a tool call and the claimed machine.
 */
async function deadHostLeft(s: Store, workstreamId: string, midTurn: boolean): Promise<Lease> {
  const id = workstreamKey('tenant-a', workstreamId);
  await s.createWorkstream({ id, tenantId: 'tenant-a' });
  const generation = await s.nextGeneration(id);
  const lease = (await s.acquireLease(id, 'host-z:dead', TTL))!;
  if (midTurn) {
    await s.appendMessages({
      workstreamId: id,
      generation,
      fencingToken: lease.token,
      entries: [
        { commitKey: `g${generation}:u`, message: { role: 'user', content: 'hi' } },
        {
          commitKey: `g${generation}:a1`,
          message: {
            role: 'assistant',
            content: '',
            toolCalls: [{ id: 'c1', name: 'echo', arguments: '{}' }],
          },
        },
      ],
      session: offer(newSession(id), { type: 'CLAIM', generation })!,
    });
  }
  return lease;
}

describe('routing to a holder that stopped renewing (virtual time)', () => {
  it('S7 C5: a cancel, a delete and a soft close routed to a dead holder run here once its lease lapsed unanswered — not before it expired, within TTL + a renewal period (+ waitMs) of the call', async () => {
    const vt = new VirtualTime();
    store = openSqliteStore({ path: ':memory:', now: () => vt.now });
    const bus = new MemoryChannelBus();
    // ws-1 and ws-2 mid-turn, ws-3 idle; every lease the dead host's, taken now.
    const dead = new Map<string, Lease>();
    dead.set('ws-1', await deadHostLeft(store, 'ws-1', true));
    dead.set('ws-2', await deadHostLeft(store, 'ws-2', true));
    dead.set('ws-3', await deadHostLeft(store, 'ws-3', false));
    const b = await startRuntime(
      { store: bus.view(store), hostId: 'host-b', lease: LEASE, timers: vt.api },
      { existing: true },
    );
    running.push(b);
    // The failover sweep (every renewMs) is held: the routing alone brings the calls here.
    expect(vt.pauseEvery(RENEW)).toBe(1);
    // Part of the dead lease's life has gone by when the calls are made.
    await vt.until(() => false, 500);
    const calledAt = vt.now;
    const WAIT = 1_000;
    const { incarnation } = await b.tw.getWorkstream(ref('ws-2'));
    const cancel = watch(b.tw.cancel(ref('ws-1')));
    const del = watch(b.tw.deleteWorkstream({ ...ref('ws-2'), incarnation }));
    const close = watch(b.tw.close({ ...ref('ws-3'), waitMs: WAIT }));
    const fallbacks = () => b.tw.stats().cluster?.routedFallbacks ?? 0;

    // Cancel and delete: both fall back together, once TTL + a period passed unanswered.
    const twoAt = await vt.until(() => fallbacks() >= 2, 4 * (TTL + RENEW) + WAIT);
    expect(twoAt, 'the cancel and the delete fell back').toBeDefined();
    expect(b.tw.stats().cluster).toMatchObject({ routedOut: 3, routedFallbacks: 2 });
    for (const id of ['ws-1', 'ws-2']) expect(twoAt!).toBeGreaterThanOrEqual(dead.get(id)!.expiresAt);
    expect(twoAt! - calledAt).toBeGreaterThanOrEqual(TTL);
    expect(twoAt! - calledAt).toBeLessThanOrEqual(TTL + 2 * RENEW);
    // The soft close waits its waitMs on top, once.
    expect(close.settled).toBe(false);
    const threeAt = await vt.until(() => fallbacks() >= 3, 4 * (TTL + RENEW) + WAIT);
    expect(threeAt, 'the soft close fell back').toBeDefined();
    expect(threeAt! - calledAt).toBeGreaterThanOrEqual(TTL + WAIT);
    expect(threeAt! - calledAt).toBeLessThanOrEqual(TTL + 2 * RENEW + WAIT);
    expect(
      b.logged(
        'the lease holder did not answer and its lease lapsed or changed hands: running the call here',
      ),
    ).toHaveLength(3);

    // Each ran here as if called here.
    // What runs here then (the cancel's repair, the delete, the close) needs no timer: real time.
    await within(Promise.all([cancel.done, del.done, close.done]), 20_000, 'the calls run here');
    expect(cancel.error).toBeUndefined();
    expect(cancel.value).toBe(true);
    const rows = (await b.tw.history(ref('ws-1'))).rows;
    expect(openToolCalls(rows)).toEqual([]);
    expect(rows.at(-1)?.message).toMatchObject({ role: 'tool', effect: 'unknown', synthesized: true });
    expect(del.error).toBeUndefined();
    expect(await store.getWorkstream('tenant-a/ws-2')).toBeUndefined();
    expect(close.error).toBeUndefined();
    expect((await store.getWorkstream('tenant-a/ws-3'))?.status).toBe('closed');
  }, 60_000);

  it('S7: a routed cancel does not run here while the silent holder keeps renewing; it ends in TIMEOUT after four TTL-and-period rounds, writing nothing', async () => {
    const vt = new VirtualTime();
    store = openSqliteStore({ path: ':memory:', now: () => vt.now });
    const bus = new MemoryChannelBus();
    const lease = await deadHostLeft(store, 'ws-1', true);
    const rowsBefore = await store.readHistory('tenant-a/ws-1');
    const b = await startRuntime(
      { store: bus.view(store), hostId: 'host-b', lease: LEASE, timers: vt.api },
      { existing: true },
    );
    running.push(b);
    vt.pauseEvery(RENEW);
    const calledAt = vt.now;
    const cancel = watch(b.tw.cancel(ref('ws-1')));
    // The holder is alive but does not answer (a partition of the channel only): it renews.
    let renewedAt = vt.now;
    const endedAt = await vt.until(
      () => {
        if (vt.now - renewedAt >= RENEW) {
          renewedAt = vt.now;
          void store!.refreshLease('tenant-a/ws-1', 'host-z:dead', lease.token, TTL);
        }
        return cancel.settled;
      },
      5 * (TTL + RENEW),
    );
    expect(endedAt, 'the cancel ended').toBeDefined();
    expect(cancel.error?.code).toBe(ErrorCode.TIMEOUT);
    expect(cancel.error?.details).toMatchObject({ workstreamId: 'ws-1', hostId: 'host-z' });
    expect(endedAt! - calledAt).toBeGreaterThanOrEqual(4 * (TTL + RENEW));
    expect(endedAt! - calledAt).toBeLessThanOrEqual(4 * (TTL + RENEW) + RENEW);
    // The lease is still the holder's.
    expect((await store.getLease('tenant-a/ws-1'))?.holder).toBe('host-z:dead');
    expect(b.tw.stats().cluster?.routedFallbacks).toBe(0);
    expect(await store.readHistory('tenant-a/ws-1')).toEqual(rowsBefore);
  }, 60_000);
});

describe('calls that are not routed', () => {
  it('S7 C5: once the holder released its lease (its turn ended), a cancel and a close on another host run there at once, unrouted', async () => {
    const vt = new VirtualTime();
    store = openSqliteStore({ path: ':memory:', now: () => vt.now });
    const bus = new MemoryChannelBus();
    const a = await startRuntime({ store: bus.view(store), hostId: 'host-a', lease: LEASE, timers: vt.api });
    const b = await startRuntime(
      { store: bus.view(store), hostId: 'host-b', lease: LEASE, timers: vt.api },
      { existing: true },
    );
    running.push(a, b);
    // The turn itself needs no timer: it runs on real time.
    const turn = await a.send(script({ text: 'done' }));
    expect((await within(turn.done, 20_000, 'the turn on host A')).status).toBe('completed');
    const lease = (await store.getLease('tenant-a/ws-1'))!;
    expect(lease).toMatchObject({ released: true });
    expect(lease.holder.startsWith('host-a:')).toBe(true);
    // No virtual time passes: a call that waited for a routed answer would never end.
    const cancel = watch(b.tw.cancel(ref('ws-1')));
    await within(cancel.done, 20_000, 'the cancel answers at once');
    expect(cancel.error).toBeUndefined();
    expect(cancel.value).toBe(false); // an idle, clean workstream: nothing to do (C5)
    const close = watch(b.tw.close({ ...ref('ws-1'), waitMs: 1_000 }));
    await within(close.done, 20_000, 'the close answers at once');
    expect(close.error).toBeUndefined();
    expect(b.tw.stats().cluster).toMatchObject({ routedOut: 0, routedFallbacks: 0 });
    expect(a.tw.stats().cluster?.routedIn).toBe(0);
    expect((await store.getWorkstream('tenant-a/ws-1'))?.status).toBe('closed');
  }, 60_000);
});

describe('a soft close routed to the holder (virtual time)', () => {
  const LONG_TOOL = script({ tools: [{ name: 'heartbeat', args: { ms: 60_000, everyMs: 20 } }] });
  const WAIT = 2_000;

  async function twoHosts(vt: VirtualTime) {
    store = openSqliteStore({ path: ':memory:', now: () => vt.now });
    const bus = new MemoryChannelBus();
    const a = await startRuntime({ store: bus.view(store), hostId: 'host-a', lease: LEASE, timers: vt.api });
    const b = await startRuntime(
      { store: bus.view(store), hostId: 'host-b', lease: LEASE, timers: vt.api },
      { existing: true },
    );
    running.push(a, b);
    const turn = await a.send(LONG_TOOL);
    await nextEvent(a.tw, 'ws-1', 'tool_started');
    return { a, b, bus, turn };
  }

  it('C2: the holder’s TIMEOUT after waitMs comes back as that TIMEOUT, once waitMs passed and within a renewal period of it; the turn runs on', async () => {
    const vt = new VirtualTime();
    const { a, b, turn } = await twoHosts(vt);
    const calledAt = vt.now;
    const close = watch(b.tw.close({ ...ref('ws-1'), waitMs: WAIT }));
    const at = await vt.until(() => close.settled, 4 * (TTL + RENEW + WAIT));
    expect(at, 'the routed close answered').toBeDefined();
    expect(close.error).toMatchObject({ code: ErrorCode.TIMEOUT, details: { waitMs: WAIT } });
    expect(close.error?.message).toContain(`timed out after ${WAIT} ms`);
    expect(at! - calledAt).toBeGreaterThanOrEqual(WAIT);
    expect(at! - calledAt).toBeLessThanOrEqual(WAIT + RENEW);
    expect(a.logged('soft close timed out; the turn keeps running')).toHaveLength(1);
    expect(b.tw.stats().cluster).toMatchObject({ routedOut: 1, routedFallbacks: 0 });
    expect(a.tw.stats().activeTurns).toBe(1);
    // The cancelled tool unwinds on real time (no grace timer is needed).
    await within(a.tw.cancel(ref('ws-1')), 20_000, 'the cancel on host A');
    expect((await within(turn.done, 20_000, 'the cancelled turn')).abortReason).toBe('cancel');
  }, 60_000);

  it('C2: a holder that renews but whose answer never arrives: the routed soft close ends in TIMEOUT within waitMs + four TTL-and-period rounds — waitMs counted once, not per round', async () => {
    const vt = new VirtualTime();
    const { a, b, bus, turn } = await twoHosts(vt);
    const calledAt = vt.now;
    const close = watch(b.tw.close({ ...ref('ws-1'), waitMs: WAIT }));
    // The request reaches the holder; from then on the channel drops everything (its answer too).
    const heard = await vt.until(() => a.logged('soft close waiting for the running turn').length > 0, WAIT);
    expect(heard, 'the holder received the close').toBeDefined();
    bus.dropping = true;
    const at = await vt.until(() => close.settled, 4 * (TTL + RENEW + WAIT) + TTL);
    bus.dropping = false;
    expect(at, 'the routed close ended').toBeDefined();
    expect(close.error).toMatchObject({
      code: ErrorCode.TIMEOUT,
      details: { workstreamId: 'ws-1', hostId: 'host-a' },
    });
    // It waited for the holder's own waitMs and four rounds of a renewed, silent lease, no more.
    expect(at! - calledAt).toBeGreaterThanOrEqual(WAIT + 4 * (TTL + RENEW));
    expect(at! - calledAt).toBeLessThanOrEqual(WAIT + 4 * (TTL + RENEW) + RENEW);
    // The holder never stopped renewing: nothing ran here.
    expect(b.tw.stats().cluster?.routedFallbacks).toBe(0);
    expect(a.tw.stats().activeTurns).toBe(1);
    // The cancelled tool unwinds on real time (no grace timer is needed).
    await within(a.tw.cancel(ref('ws-1')), 20_000, 'the cancel on host A');
    expect((await within(turn.done, 20_000, 'the cancelled turn')).abortReason).toBe('cancel');
  }, 60_000);
});
