/**
 * `readHistoryPage` on every store: keyset pages by seq that tile the history exactly, a page
 * read after a rewrite reads the history as it is then, an unknown workstream is
 * WORKSTREAM_NOT_FOUND, and a page out of its bounds is refused before anything is read.
 */
import { ErrorCode, type JournalEntry } from '@turnwarden/protocol';
import { beforeEach, describe, expect, it } from 'vitest';
import { assistant, FakeClock, refusal, user } from './test-support/fixtures.js';
import { forEachStore, type TestStore } from './test-support/stores.js';

/** `n` turns of a user row and an answer: keys u1 a1 u2 a2 … */
const turns = (n: number, from = 1): JournalEntry[] =>
  Array.from({ length: n }, (_, i) => [user(`u${from + i}`), assistant(`a${from + i}`, [], 'ok')]).flat();

forEachStore((backend) => {
  let store: TestStore;

  beforeEach(async () => {
    store = await backend.open(new FakeClock(1_000));
    await store.createWorkstream({ id: 'w', tenantId: 't' });
    await store.nextGeneration('w');
  });

  const append = (entries: JournalEntry[]) =>
    store.appendMessages({ workstreamId: 'w', generation: 1, entries });
  const page = async (afterSeq: number, limit: number) =>
    (await store.readHistoryPage('w', { afterSeq, limit })).map((r) => r.seq);
  /** Every page of `limit` from the start, until a short one. */
  const allPages = async (limit: number) => {
    const pages: number[][] = [];
    let after = 0;
    for (;;) {
      const seqs = await page(after, limit);
      pages.push(seqs);
      if (seqs.length < limit) return pages;
      after = seqs.at(-1)!;
    }
  };

  describe('readHistoryPage', () => {
    it('pages of any size tile the history exactly: in seq order, nothing twice, nothing left out', async () => {
      await append(turns(4)); // seqs 1..8
      const whole = await store.readHistory('w');
      expect(await allPages(3)).toEqual([
        [1, 2, 3],
        [4, 5, 6],
        [7, 8],
      ]);
      expect(await allPages(4)).toEqual([[1, 2, 3, 4], [5, 6, 7, 8], []]);
      expect((await allPages(1)).flat()).toEqual(whole.map((r) => r.seq));
      expect(await allPages(10_000)).toEqual([[1, 2, 3, 4, 5, 6, 7, 8]]);
      // The rows are the history's rows, not just their seqs.
      const rows = [
        ...(await store.readHistoryPage('w', { afterSeq: 0, limit: 5 })),
        ...(await store.readHistoryPage('w', { afterSeq: 5, limit: 5 })),
      ];
      expect(rows).toEqual(whole);
      // After the last row, or past it: an empty page, not a refusal.
      expect(await page(8, 5)).toEqual([]);
      expect(await page(1_000, 5)).toEqual([]);
    });

    it('a page after a compaction reads the renumbered history; after a rewind, the rows that took the dropped seqs', async () => {
      await append(turns(3)); // u1 a1 u2 a2 u3 a3
      const first = await store.readHistoryPage('w', { afterSeq: 0, limit: 2 });
      expect(first.map((r) => r.commitKey)).toEqual(['u1', 'a1']);
      // Compaction: rows 1..4 become the summary at 1; u3 a3 are renumbered 2, 3.
      await store.compactHistory({
        workstreamId: 'w',
        generation: 1,
        throughSeq: 4,
        summary: { commitKey: 's', message: { role: 'system', content: 'summary' } },
      });
      const next = await store.readHistoryPage('w', { afterSeq: 2, limit: 2 });
      expect(next.map((r) => [r.seq, r.commitKey])).toEqual([[3, 'a3']]);
      // Rewind: seqs 2, 3 dropped; the next rows take them.
      await store.truncateHistory({ workstreamId: 'w', generation: 1, fromSeq: 2, fromKey: 'u3' });
      await append(turns(1, 9)); // u9 a9 at 2, 3
      const after = await store.readHistoryPage('w', { afterSeq: 2, limit: 2 });
      expect(after.map((r) => [r.seq, r.commitKey])).toEqual([[3, 'a9']]);
      expect((await store.readHistory('w')).map((r) => r.commitKey)).toEqual(['s', 'u9', 'a9']);
    });

    it('an unknown workstream is WORKSTREAM_NOT_FOUND; one with no rows, an empty page', async () => {
      const e = await refusal(store.readHistoryPage('nope', { afterSeq: 0, limit: 10 }));
      expect(e.code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
      expect(e.details).toEqual({ workstreamId: 'nope' });
      expect(await page(0, 10)).toEqual([]);
    });

    it('T5: a page out of its bounds is INVALID_INPUT naming the field, refused before anything is read', async () => {
      await append(turns(1));
      const bad: [unknown, string][] = [
        [{ afterSeq: 0, limit: 0 }, 'page.limit'],
        [{ afterSeq: 0, limit: 10_001 }, 'page.limit'],
        [{ afterSeq: 0, limit: 1.5 }, 'page.limit'],
        [{ afterSeq: 0, limit: '10' }, 'page.limit'],
        [{ afterSeq: 0 }, 'page.limit'],
        [{ afterSeq: -1, limit: 10 }, 'page.afterSeq'],
        [{ afterSeq: 0.5, limit: 10 }, 'page.afterSeq'],
        [{ limit: 10 }, 'page.afterSeq'],
        [{ afterSeq: 0, limit: 10, offset: 3 }, 'page.offset'],
        [null, 'page'],
        [[0, 10], 'page'],
      ];
      for (const [query, field] of bad) {
        for (const workstreamId of ['w', 'nope']) {
          // Refused before anything is read: an unknown workstream is not looked up.
          const e = await refusal(store.readHistoryPage(workstreamId, query as never));
          expect([workstreamId, query, e.code, e.details]).toEqual([
            workstreamId,
            query,
            ErrorCode.INVALID_INPUT,
            { field },
          ]);
        }
      }
      const e = await refusal(store.readHistoryPage('bad id', { afterSeq: 0, limit: 1 }));
      expect([e.code, e.details]).toEqual([ErrorCode.INVALID_INPUT, { field: 'workstreamId' }]);
      // The bounds themselves are pages.
      expect(await page(0, 1)).toEqual([1]);
    });
  });
});
