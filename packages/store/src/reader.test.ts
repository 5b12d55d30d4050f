/**
 * The history reader other threads read a turn's context through (reader.ts): it keeps each
 * workstream's rows between reads and reads only the rows after those it holds — while they are
 * still the history's prefix. Every read must equal the store's own `readHistory`.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type HistoryReader, type HistoryReaderOptions, openHistoryReader } from './reader.js';
import { assistant, FakeClock, user } from './test-support/fixtures.js';
import { forEachStore, type TestStore } from './test-support/stores.js';

forEachStore((backend) => {
  let store: TestStore;
  let reader: HistoryReader | undefined;
  let generation = 0;

  const open = async (options: { cacheBytes?: number } = {}) => {
    const spec = store.historyReader?.();
    if (spec === undefined) throw new Error('the test store has no history reader');
    reader = await openHistoryReader({ ...(spec.options as HistoryReaderOptions), ...options });
    return reader;
  };
  const append = async (workstreamId: string, ...keys: string[]) => {
    generation = await store.nextGeneration(workstreamId);
    await store.appendMessages({
      workstreamId,
      generation,
      entries: keys.map((k, i) => (i % 2 === 0 ? user(k, `say ${k}`) : assistant(k, [], `answer ${k}`))),
    });
  };
  const same = async (r: HistoryReader, workstreamId: string) => {
    const read = await r.readHistory(workstreamId);
    expect(read).toEqual(await store.readHistory(workstreamId));
    return read;
  };

  beforeEach(async () => {
    store = await backend.database().open(new FakeClock(1_000));
    await store.createWorkstream({ id: 'w', tenantId: 't' });
    await append('w', 'u1', 'a1', 'u2', 'a2');
  });
  afterEach(async () => {
    await reader?.close();
    reader = undefined;
  });

  describe('the history reader keeps rows between reads', () => {
    it('reads only the rows after those it holds, and answers what the store answers', async () => {
      const r = await open();
      expect((await same(r, 'w')).map((x) => x.commitKey)).toEqual(['u1', 'a1', 'u2', 'a2']);
      await append('w', 'u3', 'a3');
      expect((await same(r, 'w')).map((x) => x.seq)).toEqual([1, 2, 3, 4, 5, 6]);
      await same(r, 'w'); // nothing new
      expect(r.stats()).toMatchObject({ full: 1, incremental: 2, rowsRead: 6, rowsKept: 6 });
      expect(r.stats().bytesKept).toBeGreaterThan(6 * 200);
      // What a caller does with an answer never reaches what is kept.
      (await r.readHistory('w')).length = 0;
      expect(await r.readHistory('w')).toHaveLength(6);
    });

    it('L8: a compaction replaced the first row and renumbered the rest — the whole history is read again', async () => {
      const r = await open();
      await same(r, 'w');
      await append('w', 'u3', 'a3');
      await store.compactHistory({
        workstreamId: 'w',
        generation,
        throughSeq: 2,
        summary: { commitKey: 'c1', message: { role: 'system', content: 'summary' } },
      });
      expect((await same(r, 'w')).map((x) => x.commitKey)).toEqual(['c1', 'u2', 'a2', 'u3', 'a3']);
      expect(r.stats()).toMatchObject({ full: 2, incremental: 0 });
      // A compaction of the first row alone renumbers nothing: only the first row tells.
      await store.compactHistory({
        workstreamId: 'w',
        generation,
        throughSeq: 1,
        summary: { commitKey: 'c2', message: { role: 'system', content: 'shorter' } },
      });
      expect((await same(r, 'w')).map((x) => x.commitKey)).toEqual(['c2', 'u2', 'a2', 'u3', 'a3']);
      expect(r.stats()).toMatchObject({ full: 3, incremental: 0 });
    });

    it('L8: a rewind removed the last row held — the whole history is read again, also once new rows fill its seq', async () => {
      const r = await open();
      await same(r, 'w');
      await store.truncateHistory({ workstreamId: 'w', generation, fromSeq: 3, fromKey: 'u2' });
      expect((await same(r, 'w')).map((x) => x.commitKey)).toEqual(['u1', 'a1']);
      await store.truncateHistory({ workstreamId: 'w', generation, fromSeq: 2, fromKey: 'a1' });
      await append('w', 'x1', 'x2');
      // Seq 2 is held again — by another row: its key and body differ.
      expect((await same(r, 'w')).map((x) => x.commitKey)).toEqual(['u1', 'x1', 'x2']);
      expect(r.stats()).toMatchObject({ full: 3, incremental: 0 });
      // Written again under the same key, with another body: the body tells.
      await store.truncateHistory({ workstreamId: 'w', generation, fromSeq: 3, fromKey: 'x2' });
      await append('w', 'x2');
      expect((await same(r, 'w')).map((x) => x.message.role)).toEqual(['user', 'user', 'user']);
      expect(r.stats()).toMatchObject({ full: 4, incremental: 0 });
    });

    it('D4: a workstream deleted and created again under its id is another history, even with the same rows', async () => {
      const r = await open();
      await same(r, 'w');
      // Deleted and created again between two reads; its rows at the ends held are the same.
      expect(await store.deleteWorkstream('w')).toBe(true);
      await store.createWorkstream({ id: 'w', tenantId: 't' });
      await append('w', 'u1', 'a1', 'x1', 'a2', 'u9');
      expect((await same(r, 'w')).map((x) => x.commitKey)).toEqual(['u1', 'a1', 'x1', 'a2', 'u9']);
      expect(await store.deleteWorkstream('w')).toBe(true);
      expect(await r.readHistory('w')).toEqual([]);
      await store.createWorkstream({ id: 'w', tenantId: 't' });
      expect(await same(r, 'w')).toEqual([]);
      await append('w', 'u1', 'a1', 'u2', 'a2');
      await append('w', 'u9');
      expect((await same(r, 'w')).map((x) => x.commitKey)).toEqual(['u1', 'a1', 'u2', 'a2', 'u9']);
      expect(r.stats()).toMatchObject({ incremental: 0 });
    });

    it('keeps at most cacheBytes of rows across workstreams, the least recently read evicted first', async () => {
      await store.createWorkstream({ id: 'v', tenantId: 't' });
      await append('v', 'v1', 'v2', 'v3');
      // What each history weighs, as the budget counts it.
      const probe = await open();
      await probe.readHistory('w');
      const w = probe.stats().bytesKept;
      await probe.readHistory('v');
      const v = probe.stats().bytesKept - w;
      await probe.close();
      const r = await open({ cacheBytes: w + v });
      await same(r, 'w'); // 4 kept
      await same(r, 'v'); // 7 kept
      await same(r, 'w'); // w the most recent now
      expect(r.stats()).toMatchObject({ full: 2, incremental: 1, rowsKept: 7 });
      await append('v', 'v4'); // v would hold 4: w's 4 go
      await same(r, 'v');
      expect(r.stats()).toMatchObject({ full: 2, incremental: 2, rowsKept: 4 });
      await same(r, 'w');
      expect(r.stats()).toMatchObject({ full: 3, rowsKept: 4 });
      // A history longer than the budget is read whole every time and never kept.
      const small = await openHistoryReader({
        ...(store.historyReader!()!.options as HistoryReaderOptions),
        cacheBytes: w - 1,
      });
      try {
        await small.readHistory('w');
        await small.readHistory('w');
        expect(small.stats()).toMatchObject({ full: 2, rowsKept: 0 });
      } finally {
        await small.close();
      }
    });

    it('reads asked for at once are answered one after another, each whole and right', async () => {
      await store.createWorkstream({ id: 'v', tenantId: 't' });
      await append('v', 'v1', 'v2', 'v3');
      const r = await open();
      const reads = await Promise.all([
        r.readHistory('w'),
        r.readHistory('v'),
        r.readHistory('w'),
        r.readHistory('nope'),
        r.readHistory('v'),
      ]);
      expect(reads.map((rows) => rows.map((x) => x.commitKey).join(','))).toEqual([
        'u1,a1,u2,a2',
        'v1,v2,v3',
        'u1,a1,u2,a2',
        '',
        'v1,v2,v3',
      ]);
      expect(r.stats()).toMatchObject({ full: 2, incremental: 2 });
    });
  });
});
