/**
 * Events that resume anywhere (issue 25, item 3): three runtimes with host ids on one store, their
 * events relayed (relay.ts) — by the store's channel (the default, test-support/memory-channel.ts
 * standing in for LISTEN/NOTIFY) and by Redis Streams (`@turnwarden/relay-redis`, against a real
 * `redis-server` started here). The same tests run against both; where they differ by design —
 * the channel keeps nothing, the broker keeps each workstream's recent events — each test says so.
 */
import { RedisRelay } from '@turnwarden/relay-redis';
import { type RedisServer, redisSkipReason, startRedis } from '@turnwarden/relay-redis/testing';
import { newSession, offer } from '@turnwarden/session';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TurnwardenEvent } from '../streams/events.js';
import { within } from '../test-support/bounded.js';
import { script } from '../test-support/runtime.js';
import { type Host, threeHostCluster } from '../test-support/three-hosts.js';
import type { EventRelay } from './relay.js';

const cluster = threeHostCluster();
afterEach(() => cluster.stop());

// Not the hosts' own ws-1 (every test host listens to it): nobody holds this one's stream but the test.
const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'relayed' };
const send = (rt: Host, content: string) => rt.tw.send({ ...ref, content });
const skipRedis = redisSkipReason();
if (skipRedis !== undefined)
  process.stdout.write(`relay.test.ts: the Redis relay tests skipped — ${skipRedis}\n`);

let redis: RedisServer | undefined;
beforeAll(async () => {
  if (skipRedis === undefined) redis = await startRedis();
}, 30_000);
afterAll(() => redis?.stop());

/** Each host's relay: the channel's (none given), or a Redis one with its own key prefix per test. */
type Kind = {
  readonly name: string;
  readonly broker: boolean;
  relay?: (maxLen?: number) => () => EventRelay;
};
let prefixes = 0;
const kinds: Kind[] = [
  { name: 'the store’s channel (default)', broker: false },
  {
    name: 'Redis Streams',
    broker: true,
    relay: (maxLen) => {
      const prefix = `test-${process.pid}-${++prefixes}:`;
      return () => new RedisRelay({ url: redis!.url, prefix, ...(maxLen === undefined ? {} : { maxLen }) });
    },
  },
];

/** A listener on `rt`: what it got, and promises of what it will have got. */
async function listener(rt: Host, lastEventId?: number) {
  const got: TurnwardenEvent[] = [];
  const waiters: { done: () => boolean; resolve: () => void }[] = [];
  const off = await rt.tw.subscribe({
    ...ref,
    ...(lastEventId === undefined ? {} : { lastEventId }),
    listener: (e) => {
      got.push(e);
      for (const w of waiters.splice(0)) {
        if (w.done()) w.resolve();
        else waiters.push(w);
      }
    },
  });
  const until = (done: () => boolean, what: string) =>
    within(
      done() ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ done, resolve })),
      10_000,
      what,
    );
  /** Resolves once `n` events of `type` arrived. */
  const seen = (type: string, n = 1) =>
    until(() => got.filter((x) => x.type === type).length >= n, `${n} ${type} event(s)`);
  /** Resolves once the idle of turn `generation` arrived. */
  const idleOf = (generation: number) =>
    until(
      () => got.some((x) => x.type === 'idle' && x.generation === generation),
      `turn ${generation}'s idle`,
    );
  return { got, off, seen, idleOf, until };
}

const withTool = script({ tools: [{ name: 'echo', args: { text: 'tool output' } }] }, { text: 'done' });

describe.each(kinds)('events relayed between hosts: $name', (kind) => {
  const skip = kind.broker && skipRedis !== undefined;
  const start = (options: Parameters<typeof cluster.start>[0] = {}) =>
    cluster.start(options, undefined, kind.relay?.());

  it.skipIf(skip)(
    'E1: a listener on another host receives every event of a turn — tokens, tool progress, rows, its end — under the ids its author gave them, in order',
    async () => {
      const { a, b } = await start();
      await a.tw.createWorkstream(ref);
      const onA = await listener(a);
      const onB = await listener(b);
      await (await send(a, withTool)).done;
      await onA.seen('idle');
      await onB.seen('idle');
      expect(onA.got.map((e) => e.type)).toEqual(
        expect.arrayContaining([
          'turn_started',
          'tool_started',
          'tool_finished',
          'message',
          'stream_end',
          'idle',
        ]),
      );
      expect(onB.got).toEqual(onA.got);
      expect(b.tw.stats().cluster?.relayedEvents).toBeGreaterThanOrEqual(onA.got.length);
    },
  );

  it.skipIf(skip)(
    'E1: a client that read part of a turn on one host resumes by its last event id on another that holds the stream: the rest, no gap, no duplicate',
    async () => {
      const { a, b } = await start();
      await a.tw.createWorkstream(ref);
      const client = await listener(a);
      const other = await listener(b);
      await (await send(a, withTool)).done;
      await client.seen('idle');
      await other.seen('idle');
      for (const k of [0, 2, client.got.length - 2, client.got.length - 1]) {
        const resumed = await listener(b, client.got[k]!.id);
        expect([k, resumed.got]).toEqual([k, client.got.slice(k + 1)]);
        resumed.off();
      }
    },
  );

  it.skipIf(skip)(
    kind.broker
      ? 'E1: on a host that held no stream of the workstream, the broker replays what the client missed'
      : 'E1: on a host that held no stream of the workstream, the channel (which keeps nothing) answers replay_truncated, never an empty replay',
    async () => {
      const { a, c } = await start();
      await a.tw.createWorkstream(ref);
      const client = await listener(a);
      await (await send(a, withTool)).done;
      await client.seen('idle');
      const k = 1;
      const resumed = await listener(c, client.got[k]!.id);
      if (kind.broker) expect(resumed.got).toEqual(client.got.slice(k + 1));
      else expect(resumed.got.map((e) => e.type)).toEqual(['replay_truncated']);
      // Either way it goes on live: the next turn's events, as the author gave them.
      const before = resumed.got.length;
      await (await send(a, 'next')).done;
      await client.idleOf(2);
      await resumed.idleOf(2);
      if (kind.broker) {
        const firstIdle = client.got.findIndex((e) => e.type === 'idle');
        expect(resumed.got.slice(before)).toEqual(client.got.slice(firstIdle + 1));
      } else {
        // Live from where its stream began here: the end of what the client read, with the ids
        // it was read under (possibly the first turn's last events, still on their way).
        const live = resumed.got.slice(before);
        expect(live).toEqual(client.got.slice(client.got.length - live.length));
        expect(live.filter((e) => e.generation === 2)).toEqual(client.got.filter((e) => e.generation === 2));
      }
    },
  );

  it.skipIf(skip)(
    kind.broker
      ? 'E1: on a host whose ring of the workstream began after the client’s id (another client listens there), the broker bridges the two: replayed whole'
      : 'E1: on a host whose ring of the workstream began after the client’s id, the channel answers replay_truncated',
    async () => {
      // Rings of four events: c's no longer reaches the client's id.
      const { a, c } = await start({ events: { replayLimit: 4 } });
      await a.tw.createWorkstream(ref);
      const client = await listener(a);
      await (await send(a, withTool)).done;
      await client.idleOf(1);
      // Another client on c from now on: c's ring begins here.
      const other = await listener(c);
      await (await send(a, 'second')).done;
      await client.idleOf(2);
      await other.idleOf(2);
      const k = 1;
      const resumed = await listener(c, client.got[k]!.id);
      if (kind.broker) expect(resumed.got).toEqual(client.got.slice(k + 1));
      else expect(resumed.got.map((e) => e.type)).toEqual(['replay_truncated']);
    },
  );

  it.skipIf(skip)(
    'C3 E1: turns on two hosts one after the other reach a third host’s listener whole and in order: every id above the one before, each turn’s stream_end and idle before the next turn’s first event',
    async () => {
      const { a, b, c } = await start();
      await a.tw.createWorkstream(ref);
      const onC = await listener(c);
      await (await send(a, 'first')).done;
      await (await send(b, 'second')).done;
      await (await send(a, 'third')).done;
      await onC.seen('idle', 3);
      const ids = onC.got.map((e) => e.id);
      expect(ids).toEqual([...ids].sort((x, y) => x - y));
      expect(new Set(ids).size).toBe(ids.length);
      expect(onC.got.some((e) => e.type === 'history_resync' || e.type === 'replay_truncated')).toBe(false);
      const ends = onC.got.filter((e) => ['turn_started', 'stream_end', 'idle'].includes(e.type));
      expect(ends.map((e) => e.type)).toEqual([
        'turn_started',
        'stream_end',
        'idle',
        'turn_started',
        'stream_end',
        'idle',
        'turn_started',
        'stream_end',
        'idle',
      ]);
      // Each host's result names where it ran.
      expect(c.tw.stats().cluster?.relayGaps).toBe(0);
    },
  );

  it.skipIf(skip)(
    'E1: a host that stopped without handing its lease over (rows journaled, never relayed): the host that takes over tells every listener, on every host, to re-read before any event of its own — a reconnect from before is told too',
    async () => {
      const { a, b, c, store } = await start();
      await a.tw.createWorkstream(ref);
      const onA = await listener(a);
      await (await send(a, 'first')).done;
      await onA.idleOf(1);
      // Listening on c from now on: its stream begins after the first turn, so it cannot tell
      // from a row's seq that rows before it never came.
      const onC = await listener(c);
      // A host that died mid-turn: its rows and machine journaled under its lease, which it never
      // released, and nothing of it relayed (it was killed before its tick's events went out).
      const key = `${ref.tenantId}/${ref.workstreamId}`;
      const generation = await store.nextGeneration(key);
      const lease = (await store.acquireLease(key, 'host-z:dead', 100))!;
      await store.appendMessages({
        workstreamId: key,
        generation,
        fencingToken: lease.token,
        entries: [
          { commitKey: `g${generation}:u`, message: { role: 'user', content: 'lost' } },
          {
            commitKey: `g${generation}:a0`,
            message: {
              role: 'assistant',
              content: '',
              toolCalls: [{ id: 'c1', name: 'echo', arguments: '{}' }],
            },
          },
        ],
        session: offer(newSession(key), { type: 'CLAIM', generation })!,
      });
      // Its lease runs out (the store's clock is the real one here).
      while (Date.now() <= lease.expiresAt) await new Promise((r) => setTimeout(r, 10));
      // Taken over (by b's claim, or a host's failover sweep): repaired, then b's turn.
      const next = await send(b, 'after');
      expect((await within(next.done, 10_000, 'the turn after the takeover')).status).toBe('completed');
      await onC.until(
        () => onC.got.some((e) => e.type === 'idle' && e.generation === next.generation),
        'c hears the turn',
      );
      const told = (got: readonly TurnwardenEvent[]) => {
        const at = got.findIndex((e) => e.type === 'history_resync');
        const firstRow = got.findIndex((e) => e.type === 'message' && e.data.seq > 2);
        return { told: at >= 0 && at < firstRow, reason: got[at]?.data };
      };
      expect(told(onC.got)).toEqual({ told: true, reason: { reason: 'replay_truncated' } });
      // A client that had read up to the first turn's end reconnects, to the host that ran it.
      const lastOfFirst = onA.got.find((e) => e.type === 'idle' && e.generation === 1)!.id;
      const resumed = await listener(a, lastOfFirst);
      await resumed.until(
        () => resumed.got.some((e) => e.type === 'idle' && e.generation === next.generation),
        'the reconnect reaches the turn after',
      );
      expect(told(resumed.got)).toEqual({ told: true, reason: { reason: 'replay_truncated' } });
      expect(c.tw.stats().cluster?.relayGaps).toBe(0);
    },
  );

  it.skipIf(skip)('D6: a close on one host closes the listeners on the others', async () => {
    const { a, b, c } = await start();
    await a.tw.createWorkstream(ref);
    const onA = await listener(a);
    const onC = await listener(c);
    await b.tw.close({ ...ref });
    await onA.seen('ws_closed');
    await onC.seen('ws_closed');
    expect(onC.got.map((e) => e.type)).toEqual(onA.got.map((e) => e.type));
    expect(onC.got.at(-1)).toMatchObject({ type: 'ws_closed', data: { reason: 'closed' } });
  });
});

describe('the Redis relay’s bound', () => {
  it.skipIf(skipRedis !== undefined)(
    'E1: a reconnect older than what the broker keeps (maxLen) is replay_truncated, then live',
    async () => {
      const { a, c } = await cluster.start({}, undefined, kinds[1]!.relay!(4));
      await a.tw.createWorkstream(ref);
      const client = await listener(a);
      await (await send(a, withTool)).done;
      await client.seen('idle');
      // Enough events that Redis trims whole nodes (approximate MAXLEN) past the first ones.
      for (let i = 0; i < 60; i++) await (await send(a, `more ${i}`)).done;
      await client.seen('idle', 61);
      const resumed = await listener(c, client.got[0]!.id);
      expect(resumed.got.map((e) => e.type)).toEqual(['replay_truncated']);
    },
  );
});

describe('a turn’s end and the relay (C3 across hosts)', () => {
  /** A relay that records what it is given and whose flush the test releases. */
  function heldRelay() {
    const published: TurnwardenEvent[] = [];
    let release = () => {};
    let flushing = () => {};
    const flushed = new Promise<void>((r) => {
      flushing = r;
    });
    const relay: EventRelay = {
      broadcast: true,
      start: async () => {},
      publish: (batches) => {
        for (const b of batches) published.push(...b.events);
      },
      flush: () => {
        flushing();
        return new Promise<void>((r) => {
          release = r;
        });
      },
      follow: async () => false,
      unfollow: () => {},
      read: async () => undefined,
      close: async () => {},
    };
    return { relay, published, flushed, release: () => release() };
  }

  it('C3: stream_end and idle are in the relay before the turn’s lease is released, so no next holder’s event can come before them', async () => {
    const held = [heldRelay(), heldRelay(), heldRelay()];
    let k = 0;
    const { a, store } = await cluster.start({}, undefined, () => held[k++]!.relay);
    await a.tw.createWorkstream(ref);
    const onA = await listener(a);
    const turn = await send(a, 'hello');
    const mine = held[0]!;
    await within(mine.flushed, 10_000, 'the turn’s end flushes the relay');
    // Held: the end's events are published, the lease is still the turn's.
    expect(mine.published.slice(-2).map((e) => e.type)).toEqual(['stream_end', 'idle']);
    expect(onA.got.slice(-2).map((e) => e.type)).toEqual(['stream_end', 'idle']);
    const key = `${ref.tenantId}/${ref.workstreamId}`;
    expect((await store.getLease(key))?.released).toBe(false);
    mine.release();
    expect((await within(turn.done, 10_000, 'the turn ends')).status).toBe('completed');
    expect((await store.getLease(key))?.released).toBe(true);
  });
});
