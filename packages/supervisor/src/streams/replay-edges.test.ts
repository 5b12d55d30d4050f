/**
 * E1 at its edges: a reconnect exactly at the ring's oldest retained event, at the event just
 * evicted, one before that, at the newest, and with an id no event of this process has; and
 * event ids across a restart — the new process issues ids above the old one's, and a client
 * reconnecting to it with an old id is told it may have missed events (`replay_truncated`),
 * never answered with a silent empty replay, even when the wall clock went back.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { within } from '../test-support/bounded.js';
import { script, startRuntime } from '../test-support/runtime.js';
import type { TurnwardenEvent } from './events.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
const realNow = Date.now;
const dirs: string[] = [];
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
  Date.now = realNow;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };
const withTool = script({ tools: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'done' });

/** Subscribes from `lastEventId` and collects: the replay is delivered before this resolves. */
async function from(r: Rt, lastEventId: number) {
  const got: TurnwardenEvent[] = [];
  const off = await r.tw.subscribe({ ...ref, lastEventId, listener: (e) => got.push(e) });
  return { got, off };
}

describe('E1: replay at the ring’s edges', () => {
  it('E1: at the oldest retained id the rest of the ring; at the evicted one the whole ring; before it replay_truncated; at the newest nothing; then live, nothing missed or twice', async () => {
    const LIMIT = 4;
    rt = await startRuntime({ events: { replayLimit: LIMIT } });
    await (await rt.send(withTool)).done;
    const all = [...rt.events];
    expect(all.length).toBeGreaterThan(LIMIT + 2);
    const ring = all.slice(-LIMIT);
    const evicted = all.at(-LIMIT - 1)!;
    const newest = all.at(-1)!;

    const atOldest = await from(rt, ring[0]!.id);
    expect(atOldest.got).toEqual(ring.slice(1));
    // The client saw the evicted event: everything after it is still in the ring.
    const atEvicted = await from(rt, evicted.id);
    expect(atEvicted.got).toEqual(ring);
    // One before: the evicted event itself is missing — the ring cannot say what else was.
    const beforeEvicted = await from(rt, evicted.id - 1);
    // (Ids follow the clock, so they need not be consecutive: the ring starts after the evicted one.)
    expect(ring[0]!.id).toBeGreaterThan(evicted.id);
    expect(beforeEvicted.got).toEqual([
      {
        id: newest.id,
        workstreamId: ref.workstreamId,
        type: 'replay_truncated',
        data: { after: evicted.id - 1, firstAvailable: ring[0]!.id },
      },
    ]);
    const atNewest = await from(rt, newest.id);
    expect(atNewest.got).toEqual([]);
    // An id above any this process issued: not silently nothing.
    const ahead = await from(rt, newest.id + 1_000_000);
    expect(ahead.got).toEqual([
      {
        id: newest.id,
        workstreamId: ref.workstreamId,
        type: 'replay_truncated',
        data: { after: newest.id + 1_000_000, firstAvailable: ring[0]!.id },
      },
    ]);

    // Each continues live from where its replay ended: exactly the next turn's events.
    const replayed = [atOldest, atEvicted, beforeEvicted, atNewest, ahead].map((l) => l.got.length);
    await (await rt.send('next')).done;
    const next = rt.events.slice(all.length);
    expect(next.length).toBeGreaterThan(0);
    for (const [i, l] of [atOldest, atEvicted, beforeEvicted, atNewest, ahead].entries()) {
      expect([i, l.got.slice(replayed[i])]).toEqual([i, next]);
      l.off();
    }

    // The iterator form replays the same way: from the oldest event the ring now holds.
    const oldest = rt.events.at(-LIMIT)!;
    const iterator = rt.tw.events({ ...ref, lastEventId: oldest.id });
    const read: TurnwardenEvent[] = [];
    for (let i = 1; i < LIMIT; i++)
      read.push((await within(iterator.next(), 5_000, 'a replayed event')).value);
    await iterator.return?.();
    expect(read).toEqual(rt.events.slice(-(LIMIT - 1)));
  });
});

describe('E1 E3: replay after idle rings were dropped', () => {
  it('E1 E3: the least recently active idle rings are dropped beyond maxIdleStreams; a reconnect to a kept one replays, to a dropped one replay_truncated', async () => {
    rt = await startRuntime({ events: { maxIdleStreams: 2 } });
    const { tw } = rt;
    const on = (workstreamId: string) => ({ tenantId: 'tenant-a', principal: 'user-a', workstreamId });
    const turn = async (workstreamId: string, content: string) =>
      (await tw.send({ ...on(workstreamId), content })).done;
    for (const id of ['a', 'b', 'c']) await tw.createWorkstream(on(id));
    await turn('a', 'first of a');
    await turn('b', 'first of b');
    // The stream position now (a history read's handoff holds it): a client of a and b saw up to here.
    const { p } = JSON.parse(Buffer.from((await tw.history(ref)).handoff, 'base64url').toString()) as {
      p: number;
    };
    // a is active again, so b is now the least recently active; c's ring makes three idle ones.
    await turn('a', 'second of a');
    await tw.history(on('c'));
    const got = async (workstreamId: string) => {
      const events: TurnwardenEvent[] = [];
      const off = await tw.subscribe({
        ...on(workstreamId),
        lastEventId: p,
        listener: (e) => events.push(e),
      });
      off();
      return events;
    };
    const a = await got('a');
    expect(a.map((e) => e.type)).toContain('stream_end');
    expect(a.every((e) => e.id > p && e.workstreamId === 'a')).toBe(true);
    expect((await got('b')).map((e) => e.type)).toEqual(['replay_truncated']);
  });
});

describe('E1: event ids across a restart', () => {
  /** A runtime on a SQLite file that outlives it; its listener saw every event. */
  async function runtimeOn(path: string, existing: boolean) {
    return startRuntime({ store: { path } }, { existing });
  }

  /**
   * The wall clock from `at` on, advancing a millisecond per real second: the restart below takes
   * a known wall-clock time, however loaded the machine (ids are microseconds of it, E1).
   */
  function wallClockAt(at: number): void {
    const started = performance.now();
    Date.now = () => Math.floor(at + (performance.now() - started) / 1_000);
  }

  for (const clock of ['moved on 1 ms', 'stepped back an hour'] as const) {
    it(`E1: a restarted process (wall clock ${clock}) answers a reconnect with an old id, or an old handoff, by replay_truncated / history_resync`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'turnwarden-ids-'));
      dirs.push(dir);
      const path = join(dir, 'store.db');
      const t0 = realNow();
      wallClockAt(t0);
      rt = await runtimeOn(path, false);
      await (await rt.send(withTool)).done;
      const old = [...rt.events];
      const oldNewest = old.at(-1)!.id;
      const oldHandoff = (await rt.tw.history(ref)).handoff;
      await rt.tw.shutdown();
      rt = undefined;

      // A fast restart (a millisecond later: fewer ms than the old process issued events), or
      // one after the wall clock was set back.
      wallClockAt(clock === 'moved on 1 ms' ? t0 + 1 : t0 - 3_600_000);
      rt = await runtimeOn(path, true);
      // Reconnects with what clients of the old process saw: its newest id, an older one.
      const reconnects = await Promise.all([from(rt, oldNewest), from(rt, old[0]!.id)]);
      const resync: TurnwardenEvent[] = [];
      const offResync = await rt.tw.subscribe({
        ...ref,
        handoff: oldHandoff,
        listener: (e) => resync.push(e),
      });
      for (const [i, r] of reconnects.entries()) {
        expect([i, r.got.map((e) => e.type)]).toEqual([i, ['replay_truncated']]);
        expect(r.got[0]).toMatchObject({ data: { after: i === 0 ? oldNewest : old[0]!.id } });
      }
      expect(resync).toEqual([
        expect.objectContaining({ type: 'history_resync', data: { reason: 'replay_truncated' } }),
      ]);
      // Then live: the new process's turn reaches each of them, in order.
      await (await rt.send('after the restart')).done;
      const fresh = rt.events;
      expect(fresh.length).toBeGreaterThan(0);
      for (const r of reconnects) expect(r.got.slice(1)).toEqual(fresh);
      for (const r of reconnects) r.off();
      offResync();
      const ids = fresh.map((e) => e.id);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
      if (clock === 'moved on 1 ms') {
        // The new process continues above every id the old one issued: its ids start at the
        // wall clock in microseconds (a process-local clock would start over in a new process).
        expect(Math.min(...ids)).toBeGreaterThan(oldNewest);
        expect(Math.min(...ids)).toBeGreaterThan((t0 + 1) * 1_000);
      }
    });
  }
});
