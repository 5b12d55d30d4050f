/**
 * The Redis Streams relay on its own, against a real `redis-server` started here: what it
 * writes, what a follower reads back and in what order, and the bounds on what it keeps. The
 * runtime's side — the same event tests as the default relay — is in the supervisor
 * (packages/supervisor/src/cluster/relay.test.ts).
 */
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisRelay, type RelayEvent, type RelaySink } from './index.js';
import { type RedisServer, redisSkipReason, startRedis } from './testing.js';

const skip = redisSkipReason();
if (skip !== undefined) process.stdout.write(`relay-redis: tests skipped — ${skip}\n`);

let server: RedisServer | undefined;
beforeAll(async () => {
  if (skip === undefined) server = await startRedis();
}, 30_000);
afterAll(() => server?.stop());

const open: RedisRelay[] = [];
afterEach(async () => {
  for (const r of open.splice(0)) await r.close();
});

let prefixes = 0;
type Ev = RelayEvent & { readonly type: string; readonly data: Record<string, unknown> };
/** Event ids are microseconds of the wall clock (older than the retention: trimmed at once). */
const T = Date.now() * 1000;
const ev = (n: number, text = `t${n}`): Ev => ({ id: T + n, type: 'token', data: { text } });
const ns = (events: readonly RelayEvent[]) => events.map((e) => e.id - T);

/** A relay started as host `from`, and what its sink received. */
async function host(from: string, prefix: string, options: { maxLen?: number; retentionMs?: number } = {}) {
  const got: { from: string; workstreamId: string; events: RelayEvent[] }[] = [];
  const gaps: (string | undefined)[] = [];
  const waiters: (() => void)[] = [];
  const sink: RelaySink = {
    events: (b) => {
      got.push({ from: b.from, workstreamId: b.workstreamId, events: [...b.events] });
      for (const w of waiters.splice(0)) w();
    },
    gap: (ws) => {
      gaps.push(ws);
      for (const w of waiters.splice(0)) w();
    },
  };
  const relay = new RedisRelay({ url: server!.url, prefix, ...options });
  open.push(relay);
  await relay.start(from, sink);
  /** Resolves once `done()` holds, checked on every delivery (bounded: rejects after 5 s). */
  const until = (done: () => boolean, what: string) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`not within 5 s: ${what}`)), 5_000);
      const check = () => {
        if (!done()) return void waiters.push(check);
        clearTimeout(timer);
        resolve();
      };
      check();
    });
  /** Resolves once the sink holds `n` events of other hosts. */
  const received = (n: number) => until(() => theirs().length >= n, `${n} events`);
  const theirs = () => got.filter((b) => b.from !== from).flatMap((b) => b.events);
  return { relay, got, gaps, received, theirs, until };
}

describe.skipIf(skip !== undefined)('the Redis Streams relay', () => {
  it('appends each event under its own id; a follower gets another host’s events in order, live, each once', async () => {
    const prefix = `p${++prefixes}:`;
    const a = await host('a:1', prefix);
    const b = await host('b:1', prefix);
    expect(await b.relay.follow('t/w', T)).toBe(true);
    const sent = [ev(100), ev(101), ev(205)];
    a.relay.publish([{ workstreamId: 't/w', events: sent }]);
    await a.relay.flush();
    await b.received(3);
    expect(b.theirs()).toEqual(sent);
    // In Redis: one entry per event, id 0-<event id>.
    const redis = new Redis(server!.url);
    const entries = (await redis.xrange(`${prefix}t/w`, '-', '+')) as [string, string[]][];
    redis.disconnect();
    expect(entries.map(([id]) => id)).toEqual([100, 101, 205].map((n) => `0-${T + n}`));
    expect(entries[0]![1]).toEqual(['f', 'a:1', 'e', JSON.stringify(sent[0])]);
    // Not followed: nothing of another workstream.
    a.relay.publish([{ workstreamId: 't/other', events: [ev(300)] }]);
    a.relay.publish([{ workstreamId: 't/w', events: [ev(301)] }]);
    await a.relay.flush();
    await b.received(4);
    expect(ns(b.theirs())).toEqual([100, 101, 205, 301]);
  });

  it('follow replays what it keeps after an id, then goes on live; after an unfollow nothing more comes', async () => {
    const prefix = `p${++prefixes}:`;
    const a = await host('a:1', prefix);
    a.relay.publish([{ workstreamId: 't/w', events: [10, 20, 30].map((n) => ev(n)) }]);
    await a.relay.flush();
    const b = await host('b:1', prefix);
    expect(await b.relay.follow('t/w', T + 10)).toBe(true);
    expect(ns(b.theirs())).toEqual([20, 30]);
    a.relay.publish([{ workstreamId: 't/w', events: [ev(40)] }]);
    await a.relay.flush();
    await b.received(3);
    b.relay.unfollow('t/w');
    a.relay.publish([{ workstreamId: 't/w', events: [ev(50)] }]);
    await a.relay.flush();
    // A third host following from the start sees 50: it was written; b no longer reads.
    const c = await host('c:1', prefix);
    expect(await c.relay.follow('t/w', T)).toBe(true);
    expect(ns(c.theirs())).toEqual([10, 20, 30, 40, 50]);
    expect(ns(b.theirs())).toEqual([20, 30, 40]);
  });

  it('an id older than what it keeps (maxLen trimmed past it) is refused: follow resolves false; the rest still comes', async () => {
    const prefix = `p${++prefixes}:`;
    const a = await host('a:1', prefix, { maxLen: 10 });
    a.relay.publish([{ workstreamId: 't/w', events: Array.from({ length: 400 }, (_, i) => ev(i + 1)) }]);
    await a.relay.flush();
    const b = await host('b:1', prefix);
    expect(await b.relay.follow('t/w', T + 5)).toBe(false);
    const kept = ns(b.theirs());
    expect(kept.length).toBeGreaterThanOrEqual(10);
    expect(kept.at(-1)).toBe(400);
    // From the first kept one on (or the last one) it is complete.
    const c = await host('c:1', prefix);
    expect(await c.relay.follow('t/w', T + kept[0]! - 1)).toBe(true);
    const d = await host('d:1', prefix);
    expect(await d.relay.follow('t/w', T + 400)).toBe(true);
    expect(d.theirs()).toEqual([]);
  });

  it('a live follower that falls behind the trimming (a burst longer than maxLen) is told of the gap, never left with a silent hole', async () => {
    const prefix = `p${++prefixes}:`;
    const a = await host('a:1', prefix, { maxLen: 10 });
    const b = await host('b:1', prefix);
    expect(await b.relay.follow('t/w', T)).toBe(true);
    a.relay.publish([{ workstreamId: 't/w', events: Array.from({ length: 3_000 }, (_, i) => ev(i + 1)) }]);
    await a.relay.flush();
    a.relay.publish([{ workstreamId: 't/w', events: [ev(5_000)] }]);
    await a.relay.flush();
    await b.until(() => b.theirs().some((e) => e.id === T + 5_000), 'the last event');
    const got = b.theirs().length;
    // Redis kept about 10 of the burst: the follower cannot have had them all.
    expect(got).toBeLessThan(3_001);
    expect(b.gaps).toContain('t/w');
    // What it got is in order, each once.
    const ids = ns(b.theirs());
    expect(ids).toEqual([...new Set(ids)].sort((x, y) => x - y));
  });

  it('a stream it has never seen: complete for a recent id (nothing was written), refused for one older than the retention', async () => {
    const prefix = `p${++prefixes}:`;
    const b = await host('b:1', prefix, { retentionMs: 60_000 });
    const now = Date.now() * 1000;
    expect(await b.relay.follow('t/new', now - 1_000)).toBe(true);
    expect(await b.relay.follow('t/old', now - 120_000_000)).toBe(false);
  });

  it('an event refused by Redis (at or below the stream’s last id: hosts’ clocks apart) becomes a gap entry its followers are told of', async () => {
    const prefix = `p${++prefixes}:`;
    const a = await host('a:1', prefix);
    const b = await host('b:1', prefix);
    expect(await b.relay.follow('t/w', T)).toBe(true);
    a.relay.publish([{ workstreamId: 't/w', events: [ev(500)] }]);
    await a.relay.flush();
    // Another author whose clock is behind.
    const late = await host('c:1', prefix);
    late.relay.publish([{ workstreamId: 't/w', events: [ev(400), ev(401)] }]);
    // Flushed: the refusal was answered — a gap entry, above the stream's last id.
    await late.relay.flush();
    const redis = new Redis(server!.url);
    const entries = (await redis.xrange(`${prefix}t/w`, '-', '+')) as [string, string[]][];
    redis.disconnect();
    expect(entries.map(([id, f]) => [id, f[2]])).toEqual([
      [`0-${T + 500}`, 'e'],
      [`0-${T + 501}`, 'g'],
    ]);
    await b.until(() => b.gaps.length > 0, 'the gap');
    expect(b.gaps).toEqual(['t/w']);
    expect(ns(b.theirs())).toEqual([500]);
  });

  it('refuses options out of range', () => {
    expect(() => new RedisRelay({ maxLen: 0 })).toThrow(TypeError);
    expect(() => new RedisRelay({ retentionMs: 10 })).toThrow(TypeError);
  });
});
