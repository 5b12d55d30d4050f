/**
 * Start-up recovery (S7) of every state a killed process can leave a session in. The store is
 * written here as the dead process's writes left it — its lease, the user row with the claimed
 * snapshot, the snapshots of the machine's later steps, the rows that landed — for one
 * workstream per state: claimed, streaming (before and after its answer landed), tool-debt with
 * open calls, force-abandoning.pending and force-abandoning.repairing. A runtime then starts on
 * that store and must bring each to idle through force-abandoning, under a lease of its own,
 * with a synthesized `unknown` result for every call still open (S2: after a crash no call is
 * provably unstarted), before any new turn; the first send on each is accepted.
 *
 * The lease the dead process left: expired; live and held by this host's predecessor (a stable
 * hostId: taken over at start); live and held by another process (the repair waits for its
 * expiry). The stores get an injected wall clock (`skew`), so a lease expires when the test
 * says; the recovery's retry timer is held by the test and fired once the lease has expired.
 * On PostgreSQL (TURNWARDEN_TEST_STORE=postgres) the same runs against a schema of its own.
 */

import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ErrorCode,
  type HistoryRow,
  type JournalEntry,
  keyWorkstreamId,
  openToolCalls,
  type SessionSnapshotData,
} from '@turnwarden/protocol';
import { newSession, offer, stateOf } from '@turnwarden/session';
import { type Lease, openPostgresStore, openSqliteStore, type Store } from '@turnwarden/store';
import { startPostgres } from '@turnwarden/store/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { nodeTimers, type Timers } from '../liveness/timers.js';
import { refusal, within } from '../test-support/bounded.js';
import { POSTGRES, script, startRuntime } from '../test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;

/** A settable skew on the wall clock every store of the test reads (lease expiry, P6). */
class Skew {
  ms = 0;
  readonly now = (): number => Date.now() + this.ms;
}

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

/** One database; every `open` is another connection to it (the dead process's, the new runtime's). */
async function database(skew: Skew): Promise<{ open(): Promise<Store> }> {
  if (POSTGRES) {
    const pg = await startPostgres();
    if ('skip' in pg) throw new Error(`TURNWARDEN_TEST_STORE=postgres, but ${pg.skip}`);
    const schema = `r${process.pid}_${randomBytes(4).toString('hex')}`;
    return {
      open: async () => {
        const s = await openPostgresStore({
          connectionString: pg.url,
          schema,
          now: skew.now,
          maxConnections: 4,
        });
        cleanup.push(() => s.close());
        return s;
      },
    };
  }
  const dir = mkdtempSync(join(tmpdir(), 'turnwarden-recovery-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'turnwarden.db');
  return {
    open: async () => {
      const s = openSqliteStore({ path, now: skew.now });
      cleanup.push(() => s.close());
      return s;
    },
  };
}

/** The states a killed process leaves, one workstream each (ws-1 is the one startRuntime subscribes to). */
const KINDS = [
  { id: 'tenant-a/ws-1', kind: 'claimed', open: 0, first: 'claimed' },
  { id: 'tenant-a/ws-2', kind: 'streaming', open: 0, first: 'streaming' },
  // The answer (one call) landed; the tool-debt snapshot that follows it did not (S6's window).
  { id: 'tenant-a/ws-3', kind: 'streaming-answered', open: 1, first: 'streaming' },
  // Three calls; the first answered, the second running when the process died.
  { id: 'tenant-a/ws-4', kind: 'tool-debt', open: 2, first: 'tool-debt' },
  // The abort committed (the watchdog), the process died before the repair.
  { id: 'tenant-a/ws-5', kind: 'pending', open: 2, first: undefined },
  // …or while the repair ran: a persisted snapshot carries no child actor, so nothing runs it.
  { id: 'tenant-a/ws-6', kind: 'repairing', open: 2, first: undefined },
] as const;
type Kind = (typeof KINDS)[number];

const call = (i: number) => ({ id: `call-${i}`, name: 'echo', arguments: JSON.stringify({ text: `t${i}` }) });

/** Writes what a killed process left of one turn of `k.id` under `lease`, as its supervisor writes it. */
async function leave(dead: Store, k: Kind, holder: string, ttlMs: number): Promise<Lease> {
  const { id } = k;
  await dead.createWorkstream({ id, tenantId: 'tenant-a' });
  const generation = await dead.nextGeneration(id);
  const lease = (await dead.acquireLease(id, holder, ttlMs))!;
  const fencingToken = lease.token;
  const append = (entries: JournalEntry[], session?: SessionSnapshotData) =>
    dead.appendMessages({
      workstreamId: id,
      generation,
      fencingToken,
      entries,
      ...(session === undefined ? {} : { session }),
    });
  const save = (session: SessionSnapshotData) =>
    dead.saveSession({ workstreamId: id, fencingToken, session });
  const claimed = offer(newSession(id), { type: 'CLAIM', generation })!;
  await append(
    [{ commitKey: `g${generation}:u`, message: { role: 'user', content: 'hi', principal: 'user-a' } }],
    claimed,
  );
  if (k.kind === 'claimed') return lease;
  const streaming = offer(claimed, { type: 'STREAM' })!;
  await save(streaming);
  if (k.kind === 'streaming') return lease;
  const calls = k.kind === 'streaming-answered' ? 1 : 3;
  await append([
    {
      commitKey: `g${generation}:a1`,
      message: {
        role: 'assistant',
        content: '',
        toolCalls: Array.from({ length: calls }, (_, i) => call(i)),
      },
    },
  ]);
  if (k.kind === 'streaming-answered') return lease;
  const debt = (openCalls: number[]): SessionSnapshotData => ({
    ...streaming,
    value: 'tool-debt',
    context: { ...(streaming.context as object), openCalls },
  });
  await save(debt([0, 1, 2]));
  await append([
    {
      commitKey: `g${generation}:a1:t0`,
      message: {
        role: 'tool',
        toolCallId: 'call-0',
        callIndex: 0,
        name: 'echo',
        content: 't0',
        isError: false,
        effect: 'applied',
      },
    },
  ]);
  await save(debt([1, 2]));
  if (k.kind === 'tool-debt') return lease;
  const pending = offer(debt([1, 2]), { type: 'ABORT', reason: 'watchdog' })!;
  expect(stateOf(pending)).toBe('force-abandoning');
  await save(k.kind === 'pending' ? pending : { ...pending, value: { 'force-abandoning': 'repairing' } });
  return lease;
}

/** The API's name of a workstream the store and the logs name by key (T2). */
const ref = (key: string) => ({
  tenantId: 'tenant-a',
  principal: 'user-a',
  workstreamId: keyWorkstreamId(key),
});

/** `after` timers of at least `minMs` are held for the test to fire (the recovery's retry); the rest run. */
function heldTimers(minMs: number) {
  const held: { ms: number; fn: () => void }[] = [];
  const timers: Timers = {
    every: nodeTimers.every,
    after(ms, fn) {
      if (ms < minMs) return nodeTimers.after(ms, fn);
      const entry = { ms, fn };
      held.push(entry);
      return () => {
        const i = held.indexOf(entry);
        if (i >= 0) held.splice(i, 1);
      };
    },
  };
  return {
    timers,
    held,
    fireAll() {
      for (const { fn } of held.splice(0)) fn();
    },
  };
}

/** Resolves once `msg` has been logged `n` times (log lines are written on this thread: no gap). */
async function loggedTimes(rt: Rt, msg: string, n: number, what: string): Promise<void> {
  while (rt.logged(msg).length < n) await within(rt.waitForLog(msg), 15_000, what);
}

/** This runtime's lease holder, as its start logged it. */
const holderOf = (rt: Rt): string => String(rt.logged('turnwarden supervisor started')[0]?.holder);

const STILL_LEASED =
  'session left mid-turn by an earlier process is still leased; repairing when the lease expires';
const REPAIRED_LATER = 'session left mid-turn by an earlier process repaired';

/**
 * What every recovered session must look like: idle in memory and durably, reached through
 * force-abandoning by the machine, a synthesized `unknown` result for each call left open and
 * nothing else changed, written under this runtime's lease (released), and the first send accepted.
 */
async function expectRecovered(
  rt: Rt,
  store: Store,
  before: Map<string, HistoryRow[]>,
  dead: Map<string, Lease>,
) {
  for (const k of KINDS) {
    const { id } = k;
    expect(await rt.tw.status(ref(id)), id).toMatchObject({ state: 'idle', cleanupPending: false });
    const durable = (await store.getWorkstream(id))!.session!;
    expect(stateOf(durable), `${id}: the durable snapshot`).toBe('idle');
    const steps = rt
      .logged('session transition')
      .filter((l) => l.workstreamId === id)
      .map((l) => `${String(l.from)} --${String(l.via)}--> ${String(l.to)}`);
    expect(steps, `${id} (${k.kind})`).toEqual([
      ...(k.first === undefined ? [] : [`${k.first} --ABORT--> force-abandoning.pending`]),
      'force-abandoning.pending --REPAIR--> force-abandoning.repairing',
      'force-abandoning.repairing --xstate.done.actor.repair--> idle',
    ]);
    // The durable rows (the store names the workstream by key, as it did the dead process's rows).
    const rows = await store.readHistory(id);
    expect(openToolCalls(rows), id).toEqual([]);
    // The rows the dead process wrote are untouched; only the synthesized results follow them.
    const kept = before.get(id)!;
    expect(rows.slice(0, kept.length), id).toEqual(kept);
    const added = rows.slice(kept.length);
    const openBefore = openToolCalls(kept);
    expect(openBefore, id).toHaveLength(k.open);
    expect(
      added.map((r) => r.message),
      `${id}: one unknown result per open call`,
    ).toEqual(
      openBefore.map((o) =>
        expect.objectContaining({
          role: 'tool',
          toolCallId: o.call.id,
          callIndex: o.callIndex,
          effect: 'unknown',
          synthesized: true,
          isError: true,
          content: expect.stringContaining('interrupted by a crash'),
        }),
      ),
    );
    // Written under a lease of this runtime's, which fenced the dead one (P6), and released.
    const lease = (await store.getLease(id))!;
    expect(lease.token, id).toBeGreaterThan(dead.get(id)!.token);
    expect(lease.holder, id).toBe(holderOf(rt));
    expect(lease.released, id).toBe(true);
    for (const r of added) expect(r.fencingToken, id).toBeGreaterThan(dead.get(id)!.token);
    const repairedLog = rt.logged('repaired a session left with debt').filter((l) => l.workstreamId === id);
    expect(
      repairedLog.map((l) => l.count),
      id,
    ).toEqual([k.open]);
  }
  // The first send on each is accepted and completes.
  for (const k of KINDS) {
    const next = await rt.tw.send({ ...ref(k.id), content: script({ text: `back on ${k.id}` }) });
    expect((await within(next.done, 15_000, `the first turn on ${k.id}`)).status, k.id).toBe('completed');
  }
}

async function leaveAll(dead: Store, holder: string, ttlMs: number) {
  const leases = new Map<string, Lease>();
  const before = new Map<string, HistoryRow[]>();
  for (const k of KINDS) {
    leases.set(k.id, await leave(dead, k, holder, ttlMs));
    before.set(k.id, await dead.readHistory(k.id));
  }
  return { leases, before };
}

describe('start-up recovery of sessions a killed process left mid-turn', () => {
  it('S7 S2: with the dead process’s lease expired, each state — claimed, streaming, answered, tool-debt, force-abandoning.pending and .repairing — is repaired at start through force-abandoning; the first send is accepted', async () => {
    const skew = new Skew();
    const db = await database(skew);
    const dead = await db.open();
    // The dead process's clock: a minute ago, so its 1 s leases are long expired now.
    skew.ms = -60_000;
    const { leases, before } = await leaveAll(dead, 'tw-dead-process', 1_000);
    skew.ms = 0;
    const store = await db.open();
    const rt = await within(startRuntime({ store }, { existing: true }), 30_000, 'the runtime starts');
    cleanup.push(() => rt.tw.shutdown());
    expect(rt.logged(STILL_LEASED)).toEqual([]);
    expect(rt.logged('sessions left mid-turn by an earlier process repaired')).toMatchObject([
      { repaired: KINDS.length },
    ]);
    await expectRecovered(rt, store, before, leases);
  }, 90_000);

  it('S7 S2 P6: with a live lease of this host’s dead predecessor (the same hostId), every state is taken over and repaired at start, under a new token', async () => {
    const skew = new Skew();
    const db = await database(skew);
    const dead = await db.open();
    const { leases, before } = await leaveAll(dead, 'host-a:dead-process', 60_000);
    const store = await db.open();
    const rt = await within(
      startRuntime({ store, hostId: 'host-a' }, { existing: true }),
      30_000,
      'the runtime starts',
    );
    cleanup.push(() => rt.tw.shutdown());
    // Nothing was deferred to the leases' expiry, a minute away.
    expect(rt.logged(STILL_LEASED)).toEqual([]);
    expect(holderOf(rt).startsWith('host-a:')).toBe(true);
    await expectRecovered(rt, store, before, leases);
  }, 90_000);

  it('S7 S2 P6: with a live lease of another process, nothing is written until it expires; then the scheduled repair brings every state to idle, without a call', async () => {
    const skew = new Skew();
    const db = await database(skew);
    const dead = await db.open();
    const { leases, before } = await leaveAll(dead, 'tw-other-process', 60_000);
    const store = await db.open();
    const held = heldTimers(50_000);
    const startedAt = Date.now();
    const rt = await within(
      startRuntime({ store, timers: held.timers }, { existing: true }),
      30_000,
      'the runtime starts',
    );
    const doneAt = Date.now();
    cleanup.push(() => rt.tw.shutdown());
    // Each is scheduled for its lease's expiry (plus a margin), not before.
    const scheduled = rt.logged(STILL_LEASED);
    expect(scheduled.map((l) => l.workstreamId).sort()).toEqual(KINDS.map((k) => k.id));
    for (const l of scheduled) {
      const expiresAt = leases.get(String(l.workstreamId))!.expiresAt;
      expect(l.retryInMs).toBeGreaterThanOrEqual(expiresAt - doneAt);
      expect(l.retryInMs).toBeLessThanOrEqual(expiresAt - startedAt + 50);
    }
    expect(held.held.map((h) => h.ms).sort()).toEqual(scheduled.map((l) => l.retryInMs).sort());
    // Until then nobody writes into the turn another process may still hold (P6).
    for (const k of KINDS) {
      expect(await store.readHistory(k.id), k.id).toEqual(before.get(k.id));
      expect((await rt.tw.status(ref(k.id))).state, k.id).not.toBe('idle');
    }
    const e = await refusal(rt.tw.send({ ...ref('tenant-a/ws-2'), content: script({ text: 'too early' }) }));
    expect(e.code).toBe(ErrorCode.LEASED_ELSEWHERE);
    expect(e.details).toMatchObject({ workstreamId: 'ws-2', holder: 'tw-other-process' });
    expect(await store.readHistory('tenant-a/ws-2')).toEqual(before.get('tenant-a/ws-2'));
    // The leases expire; the held retries fire.
    skew.ms = 61_000;
    held.fireAll();
    await loggedTimes(rt, REPAIRED_LATER, KINDS.length, 'the scheduled repairs');
    expect(held.held).toEqual([]);
    await expectRecovered(rt, store, before, leases);
  }, 90_000);

  it('S7: a lease another process keeps renewing is retried at most three times, then left with a warning; shutdown cancels a retry still pending', async () => {
    const skew = new Skew();
    const db = await database(skew);
    const dead = await db.open();
    const lease = await leave(dead, KINDS[1], 'tw-alive-elsewhere', 60_000);
    // startRuntime subscribes to ws-1: a clean, idle one here.
    await dead.createWorkstream({ id: 'tenant-a/ws-1', tenantId: 'tenant-a' });
    const before = await dead.readHistory('tenant-a/ws-2');
    const store = await db.open();
    const held = heldTimers(50_000);
    const rt = await within(
      startRuntime({ store, timers: held.timers }, { existing: true }),
      30_000,
      'the runtime starts',
    );
    let shut = false;
    cleanup.push(() => (shut ? undefined : rt.tw.shutdown()));
    expect(rt.logged(STILL_LEASED)).toHaveLength(1);
    // The other process is alive: each retry finds its lease live (it renews it). Each attempt
    // ends in one log line: rescheduled, or given up.
    const given = 'session left with debt not repaired at start';
    const attempts = () => rt.logged(STILL_LEASED).length + rt.logged(given).length;
    for (let attempt = 2; attempt <= 3; attempt++) {
      expect(held.held).toHaveLength(1);
      expect(await dead.refreshLease('tenant-a/ws-2', 'tw-alive-elsewhere', lease.token, 60_000)).toBe(true);
      held.fireAll();
      while (attempts() < attempt) {
        await within(
          Promise.race([rt.waitForLog(STILL_LEASED), rt.waitForLog(given)]),
          15_000,
          `attempt ${attempt} ends`,
        );
      }
    }
    expect(rt.logged(given)).toHaveLength(1);
    expect(rt.logged(given)[0]).toMatchObject({
      workstreamId: 'tenant-a/ws-2',
      err: { code: 'LEASED_ELSEWHERE' },
    });
    expect(rt.logged(STILL_LEASED)).toHaveLength(2);
    expect(held.held).toEqual([]);
    expect(await store.readHistory('tenant-a/ws-2')).toEqual(before);
    expect((await store.getLease('tenant-a/ws-2'))?.holder).toBe('tw-alive-elsewhere');

    // Another runtime, another scheduled repair: shutdown cancels it.
    const rt2 = await startRuntime({ store, timers: held.timers }, { existing: true });
    expect(held.held).toHaveLength(1);
    await rt2.tw.shutdown();
    expect(held.held).toEqual([]);
    await rt.tw.shutdown();
    shut = true;
  }, 90_000);
});
