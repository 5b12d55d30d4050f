/**
 * T2 for every call: another tenant's workstream is exactly a workstream that does not exist —
 * the same code, the same words, the same details — and the call changes nothing: no row, no
 * store write, no event to the owner's listeners, no lifecycle event, no listener left behind.
 * The table is checked against the runtime's methods, so a call added without a row fails here.
 *
 * Subscriptions register before ownership is known (so nothing emitted after the call is missed);
 * they must deliver nothing — not a replay from the ring, not a live event — until it is, and
 * nothing at all to another tenant, however long the ownership read takes.
 */
import { ErrorCode, isTurnwardenError, TurnwardenError, workstreamKey } from '@turnwarden/protocol';
import { openSqliteStore, type SqliteStore, type Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { Turnwarden, type TurnwardenEvent } from './index.js';
import type { WorkstreamLifecycleEvent } from './streams/lifecycle-feed.js';
import { refusal, within } from './test-support/bounded.js';
import { interceptStore } from './test-support/intercept.js';
import { script, startRuntime } from './test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const owner = { tenantId: 'tenant-a', principal: 'user-a' } as const;
const other = { tenantId: 'tenant-b', principal: 'user-b' } as const;
const WS = 'ws-1';
const MISSING = 'ws-missing';

/** Store methods that only read; any other call is a write (a new method counts as one). */
const READS = new Set([
  'getWorkstream',
  'readHistory',
  'readHistoryAfter',
  'readHistoryPage',
  'listWorkstreams',
  'getLease',
  'expiredLeases',
  'listWorkstreamsWithOpenToolCalls',
  'stats',
]);

/**
 * `inner` counting its writes, whose next `getWorkstream` — once `hold()` is called — waits
 * until `release()`: an ownership check still on its way. Held reads are released in order.
 */
function watchedStore(inner: Store) {
  const writes: string[] = [];
  let holding: (() => void) | undefined;
  const gates: (() => void)[] = [];
  const store = new Proxy(inner, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof value !== 'function') return value;
      const fn = value as (...a: unknown[]) => unknown;
      return (...args: unknown[]) => {
        if (typeof key === 'string' && !READS.has(key) && key !== 'close') writes.push(key);
        if (key !== 'getWorkstream' || holding === undefined) return fn.apply(target, args);
        const entered = holding;
        holding = undefined;
        const gate = new Promise<void>((resolve) => gates.push(resolve));
        entered();
        return gate.then(() => fn.apply(target, args));
      };
    },
  });
  return {
    store,
    writes,
    /** Holds the next ownership read; resolves once it has arrived. */
    hold: () =>
      new Promise<void>((resolve) => {
        holding = resolve;
      }),
    /** Lets the oldest held read go. */
    release: () => gates.shift()?.(),
  };
}

/** A refusal in a form two ids can be compared by: the id is replaced by `ID` everywhere. */
function shape(e: TurnwardenError, id: string) {
  const out = (s: string) => s.split(id).join('ID');
  return {
    code: e.code,
    retryable: e.retryable,
    message: out(e.message),
    details: e.details === undefined ? undefined : JSON.parse(out(JSON.stringify(e.details))),
  };
}

/** The typed refusal `p` rejects with; fails the test naming the call when it does anything else. */
async function refusedBy(name: string, p: Promise<unknown>): Promise<TurnwardenError> {
  const e = await p.then(
    () => 'resolved',
    (err: unknown) => err,
  );
  if (!isTurnwardenError(e)) expect.fail(`${name}: expected a typed refusal, got ${String(e)}`);
  return e;
}

/** A handoff token naming the other tenant's workstream `id` (its key), as if forged. */
const forgedHandoff = (id: string) =>
  Buffer.from(JSON.stringify({ w: workstreamKey(other.tenantId, id), p: 0, s: 0 })).toString('base64url');

/** The runtime's methods that are not calls on a tenant's data, and its internals. */
const NOT_TENANT_CALLS = new Set([
  'constructor',
  'stats',
  'shutdown',
  'doShutdown',
  'handle',
  'tracked',
  'assertOpen',
  'owned',
  'follow',
  'register', // follow's body, after a cluster's catch-up
  'deleteOwned', // deleteWorkstream's body, after its announcement (C7)
  'decide', // approve's and deny's body
]);

describe('T2: another tenant, on every call', () => {
  it('T2: every call on another tenant’s workstream is refused exactly as on one that does not exist, and changes nothing', async () => {
    const watched = watchedStore(openSqliteStore({ path: ':memory:' }));
    rt = await startRuntime({ store: watched.store, events: { replayLimit: 8 } });
    const { tw } = rt;
    const ref = { ...owner, workstreamId: WS };
    await (await rt.send(script({ tools: [{ name: 'echo', args: { text: 'secret' } }] }, { text: 'ok' })))
      .done;
    const { incarnation } = await tw.getWorkstream(ref);
    const firstId = rt.events[0]!.id;
    // The owner's cursor, as if it had leaked, made to name the workstream the call names (its
    // key: the caller's tenant and the id), so that the call reaches the ownership check.
    const leaked = (await tw.history({ ...ref, limit: 1 })).nextCursor!;
    const cursorFor = (id: string) =>
      Buffer.from(
        JSON.stringify({
          ...JSON.parse(Buffer.from(leaked, 'base64url').toString()),
          w: workstreamKey(other.tenantId, id),
        }),
      ).toString('base64url');
    const ownerFeed: WorkstreamLifecycleEvent[] = [];
    tw.subscribeWorkstreams({ ...owner, listener: (e) => ownerFeed.push(e) });

    // Heard by the other tenant's subscriptions, if anything ever reaches them.
    const heard: unknown[] = [];
    const listener = (e: TurnwardenEvent) => heard.push(['subscribe', e]);
    const read = async (input: object) => {
      const iterator = tw.events(input as never);
      const first = await refusal(iterator.next());
      // Ended by the refusal: a second read is done at once, never an event.
      const second = await within(iterator.next(), 5_000, 'the refused iterator ends');
      if (!second.done) heard.push(['events', second.value]);
      throw first;
    };
    /** Every call that names a workstream, as another tenant would make it. */
    const calls = {
      getWorkstream: (id: string) => tw.getWorkstream({ ...other, workstreamId: id }),
      status: (id: string) => tw.status({ ...other, workstreamId: id }),
      history: (id: string) => tw.history({ ...other, workstreamId: id }),
      'history limit': (id: string) => tw.history({ ...other, workstreamId: id, limit: 1 }),
      'history cursor': (id: string) => tw.history({ ...other, workstreamId: id, cursor: cursorFor(id) }),
      subscribe: (id: string) => tw.subscribe({ ...other, workstreamId: id, listener }),
      'subscribe lastEventId 0': (id: string) =>
        tw.subscribe({ ...other, workstreamId: id, lastEventId: 0, listener }),
      'subscribe lastEventId before the ring': (id: string) =>
        tw.subscribe({ ...other, workstreamId: id, lastEventId: firstId - 1, listener }),
      'subscribe handoff': (id: string) =>
        tw.subscribe({ ...other, workstreamId: id, handoff: forgedHandoff(id), listener }),
      events: (id: string) => read({ ...other, workstreamId: id }),
      'events lastEventId': (id: string) => read({ ...other, workstreamId: id, lastEventId: firstId - 1 }),
      'events handoff': (id: string) => read({ ...other, workstreamId: id, handoff: forgedHandoff(id) }),
      send: (id: string) => tw.send({ ...other, workstreamId: id, content: 'hijack' }),
      compact: (id: string) => tw.compact({ ...other, workstreamId: id, throughSeq: 2, summary: 'stolen' }),
      rewind: (id: string) => tw.rewind({ ...other, workstreamId: id, turns: 1 }),
      cancel: (id: string) => tw.cancel({ ...other, workstreamId: id }),
      approve: (id: string) =>
        tw.approve({
          ...other,
          workstreamId: id,
          token: `apr.1.0.${'0'.repeat(8)}-0000-0000-0000-${'0'.repeat(12)}`,
        }),
      deny: (id: string) =>
        tw.deny({
          ...other,
          workstreamId: id,
          token: `apr.1.0.${'0'.repeat(8)}-0000-0000-0000-${'0'.repeat(12)}`,
        }),
      close: (id: string) => tw.close({ ...other, workstreamId: id }),
      'close waitMs': (id: string) => tw.close({ ...other, workstreamId: id, waitMs: 1_000 }),
      // The right incarnation, as if it had leaked: still not found.
      deleteWorkstream: (id: string) => tw.deleteWorkstream({ ...other, workstreamId: id, incarnation }),
    } satisfies Record<string, (id: string) => Promise<unknown>>;

    const snapshot = async () => ({
      details: await tw.getWorkstream(ref),
      status: await tw.status(ref),
      rows: await rt!.history(),
      listed: (await tw.listWorkstreams(owner)).items,
      // The host's memory of streams is not the tenant's data: a refused subscription to a
      // missing id may leave an empty ring (bounded, E3). Listeners and buffered events are.
      stats: (({ activeTurns, watchdog, pool, admission, isolation, journal, events, ...counters }) => ({
        counters,
        admission,
        listeners: events.listeners,
        buffered: events.buffered,
        journal,
      }))(tw.stats()),
    });
    const before = await snapshot();
    const eventsBefore = rt.events.length;
    const writesBefore = watched.writes.length;

    for (const [name, call] of Object.entries(calls)) {
      const theirs = await refusedBy(`${name} on another tenant's workstream`, call(WS));
      const missing = await refusedBy(`${name} on a missing workstream`, call(MISSING));
      expect({ name, ...shape(theirs, WS) }, name).toEqual({ name, ...shape(missing, MISSING) });
      expect([name, theirs.code]).toEqual([name, ErrorCode.WORKSTREAM_NOT_FOUND]);
    }

    // Nothing was written, changed, emitted or left registered.
    expect(watched.writes.slice(writesBefore)).toEqual([]);
    expect(await snapshot()).toEqual(before);
    expect(rt.events.length).toBe(eventsBefore);
    expect(ownerFeed).toEqual([]);
    expect(heard).toEqual([]);
    // Only the owner's own listener (startRuntime's) is registered.
    expect(tw.stats().events.listeners).toBe(1);

    // The calls that name no workstream: the other tenant sees none of the owner's.
    const otherFeed: WorkstreamLifecycleEvent[] = [];
    tw.subscribeWorkstreams({ ...other, listener: (e) => otherFeed.push(e) });
    expect((await tw.listWorkstreams(other)).items).toEqual([]);
    expect((await tw.listWorkstreams({ ...other, status: 'open' })).items).toEqual([]);
    // (The other tenant may create an id the owner uses: its own workstream — tenancy-keys.test.ts.)
    // The owner's lifecycle reaches the owner's feed only.
    const made = await tw.createWorkstream({ ...owner, workstreamId: 'ws-2' });
    await tw.close({ ...owner, workstreamId: 'ws-2' });
    await tw.deleteWorkstream({ ...owner, workstreamId: 'ws-2', incarnation: made.incarnation });
    expect(ownerFeed.map((e) => [e.type, e.workstreamId, e.reason])).toEqual([
      ['ws_created', 'ws-2', undefined],
      ['ws_closed', 'ws-2', 'closed'],
      ['ws_closed', 'ws-2', 'deleted'],
    ]);
    expect(otherFeed).toEqual([]);

    // The owner's next turn reaches none of the refused subscriptions.
    await (await rt.send('still mine')).done;
    expect(heard).toEqual([]);
    expect(tw.stats().events.listeners).toBe(1);
    expect((await rt.history()).map((r) => r.message.content)).toEqual([
      ...before.rows.map((r) => r.message.content),
      'still mine',
      'echo: still mine',
    ]);

    // Every call of the runtime is in the table (or names no workstream and was checked above).
    const methods = Object.getOwnPropertyNames(Turnwarden.prototype).filter((m) => !NOT_TENANT_CALLS.has(m));
    const covered = new Set([
      ...Object.keys(calls).map((k) => k.split(' ')[0]!),
      'listWorkstreams',
      'subscribeWorkstreams',
      'createWorkstream',
    ]);
    expect(methods.filter((m) => !covered.has(m))).toEqual([]);
  });

  it('T2: a subscription whose ownership check is still on its way delivers nothing — no replay, no live event — and another tenant’s never does', async () => {
    const watched = watchedStore(openSqliteStore({ path: ':memory:' }));
    rt = await startRuntime({ store: watched.store });
    const { tw } = rt;
    await (await rt.send(script({ tools: [{ name: 'echo', args: { text: 'secret' } }] }, { text: 'ok' })))
      .done;
    const firstId = rt.events[0]!.id;
    const whole = [...rt.events];

    for (const from of [{}, { lastEventId: 0 }, { lastEventId: firstId - 1 }] as const) {
      const label = JSON.stringify(from);
      // The other tenant's subscription, its ownership read held.
      const theirs: TurnwardenEvent[] = [];
      const held = watched.hold();
      const refused = tw.subscribe({ ...other, workstreamId: WS, ...from, listener: (e) => theirs.push(e) });
      refused.catch(() => undefined);
      await held;
      // The owner's own, held the same way: registered, but nothing delivered before it is verified.
      const mine: TurnwardenEvent[] = [];
      const ownHeld = watched.hold();
      const accepted = tw.subscribe({ ...owner, workstreamId: WS, ...from, listener: (e) => mine.push(e) });
      await ownHeld;
      // Live events meanwhile: a whole turn of the owner's.
      const before = rt.events.length;
      await (await rt.send(`turn while ${label} waits`)).done;
      const live = rt.events.slice(before);
      expect(live.length).toBeGreaterThan(0);
      expect([label, theirs, mine]).toEqual([label, [], []]);
      // The other tenant's check answers first: refused, having received nothing.
      watched.release();
      expect((await refusal(refused)).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
      expect([label, theirs]).toEqual([label, []]);
      // The owner's answers: what it was owed, in order — the replay it asked for, then the live turn.
      watched.release();
      const off = await accepted;
      const replay = 'lastEventId' in from ? (from.lastEventId === 0 ? 'truncated' : whole) : [];
      if (replay === 'truncated') {
        expect(mine[0]).toMatchObject({ type: 'replay_truncated', data: { after: 0 } });
        expect(mine.slice(1)).toEqual(live);
      } else {
        expect(mine).toEqual([...replay, ...live]);
      }
      off();
      whole.push(...live);
      // The other tenant's refused listener is gone; the owner's own (startRuntime's) stays.
      expect(tw.stats().events.listeners).toBe(1);
    }

    // The iterator form, its first read waiting on the held check: it rejects and ends, empty.
    const held = watched.hold();
    const iterator = tw.events({ ...other, workstreamId: WS, lastEventId: firstId - 1 });
    const first = iterator.next();
    first.catch(() => undefined);
    await held;
    await (await rt.send('a turn while the iterator waits')).done;
    watched.release();
    expect((await refusal(first)).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect(await within(iterator.next(), 5_000, 'the refused iterator ends')).toEqual({
      value: undefined,
      done: true,
    });
    expect(tw.stats().events.listeners).toBe(1);
  });

  it('T2: another tenant presenting the right incarnation of a workstream whose delete is pending is refused as for a missing id, and retires nothing', async () => {
    let lose = false;
    const store = interceptStore(openSqliteStore({ path: ':memory:' }) as SqliteStore, {
      // The delete happens, its acknowledgement is lost (D2): the tombstone stays up.
      deleteWorkstream: async (original, ...args) => {
        const done = await original(...args);
        if (lose) {
          lose = false;
          throw new TurnwardenError(ErrorCode.STORE_ERROR, 'injected: the delete was not acknowledged');
        }
        return done;
      },
    });
    rt = await startRuntime({ store });
    const { tw } = rt;
    const ref = { ...owner, workstreamId: WS };
    const { incarnation } = await tw.getWorkstream(ref);
    lose = true;
    expect((await refusal(tw.deleteWorkstream({ ...ref, incarnation }))).code).toBe(ErrorCode.STORE_ERROR);
    const eventsBefore = rt.events.length;
    for (const who of [other, { ...owner, principal: 'user-a2' }]) {
      const presented = who.tenantId === owner.tenantId ? 'wrong-incarnation' : incarnation;
      const theirs = await refusal(tw.deleteWorkstream({ ...who, workstreamId: WS, incarnation: presented }));
      const missing = await refusal(
        tw.deleteWorkstream({ ...who, workstreamId: MISSING, incarnation: presented }),
      );
      expect(shape(theirs, WS)).toEqual(shape(missing, MISSING));
      expect(theirs.code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    }
    // The other tenant's call retired nothing: the owner's listener heard no ws_closed from it.
    expect(rt.events.length).toBe(eventsBefore);
    // The owner's retry finishes the delete, once.
    await tw.deleteWorkstream({ ...ref, incarnation });
    expect(rt.events.filter((e) => e.type === 'ws_closed')).toEqual([
      expect.objectContaining({ data: { reason: 'deleted' } }),
    ]);
  });
});
