import { ErrorCode } from '@turnwarden/protocol';
import { beforeEach, describe, expect, it } from 'vitest';
import { assistant, FakeClock, refusal, toolResult, user } from './test-support/fixtures.js';
import { forEachStore, type TestStore } from './test-support/stores.js';

const summary = (key = 'c1', content = 'summary of earlier turns') => ({
  commitKey: key,
  message: { role: 'system' as const, content },
});

forEachStore((backend) => {
  let store: TestStore;

  beforeEach(async () => {
    store = await backend.open(new FakeClock(1_000));
    await store.createWorkstream({ id: 'w', tenantId: 't' });
    await store.nextGeneration('w');
    await store.appendMessages({
      workstreamId: 'w',
      generation: 1,
      entries: [
        user('u1', 'first'),
        assistant('a1', ['x', 'y']),
        toolResult('t1', 'x', 0),
        toolResult('t2', 'y', 1),
        assistant('a2', [], 'answer'),
        user('u2', 'second'),
        assistant('a3', [], 'answer 2'),
      ],
    });
  });

  describe('compactHistory', () => {
    it('L8: replaces the prefix with one summary row, renumbers the rest and keeps their keys', async () => {
      expect(
        await store.compactHistory({ workstreamId: 'w', generation: 1, throughSeq: 5, summary: summary() }),
      ).toEqual({
        removed: 5,
      });
      const rows = await store.readHistory('w');
      expect(rows.map((r) => [r.seq, r.commitKey, r.message.role])).toEqual([
        [1, 'c1', 'system'],
        [2, 'u2', 'user'],
        [3, 'a3', 'assistant'],
      ]);
      // Idempotent on the summary's commit key; a different body under it is a conflict.
      expect(
        await store.compactHistory({ workstreamId: 'w', generation: 1, throughSeq: 2, summary: summary() }),
      ).toEqual({
        removed: 0,
      });
      const e = await refusal(
        store.compactHistory({
          workstreamId: 'w',
          generation: 1,
          throughSeq: 2,
          summary: summary('c1', 'other'),
        }),
      );
      expect(e.code).toBe(ErrorCode.COMMIT_CONFLICT);
      // Appends continue after the renumbered tail.
      expect(await store.appendMessages({ workstreamId: 'w', generation: 1, entries: [user('u3')] })).toEqual(
        [4],
      );
    });

    it('S1: refuses a cut that would separate tool calls from their results, writing nothing', async () => {
      // Through the assistant row (both calls cut off), and between its two results.
      for (const throughSeq of [2, 3]) {
        const e = await refusal(
          store.compactHistory({ workstreamId: 'w', generation: 1, throughSeq, summary: summary() }),
        );
        expect(e.code).toBe(ErrorCode.STRUCTURE_VIOLATION);
      }
      expect((await store.readHistory('w')).map((r) => r.commitKey)).toEqual([
        'u1',
        'a1',
        't1',
        't2',
        'a2',
        'u2',
        'a3',
      ]);
    });

    it('P6: refuses a rewrite from a superseded lease holder', async () => {
      const first = await store.acquireLease('w', 'h', 10_000);
      await store.releaseLease('w', 'h', first!.token);
      await store.acquireLease('w', 'h2', 10_000);
      const e = await refusal(
        store.compactHistory({
          workstreamId: 'w',
          generation: 1,
          fencingToken: first!.token,
          throughSeq: 4,
          summary: summary(),
        }),
      );
      expect(e.code).toBe(ErrorCode.FENCED);
      expect(await store.readHistory('w')).toHaveLength(7);
    });

    it('refuses a non-system summary and an out-of-range cut', async () => {
      const bad = { commitKey: 'c2', message: { role: 'user' as const, content: 'x' } };
      expect(
        (
          await refusal(
            store.compactHistory({ workstreamId: 'w', generation: 1, throughSeq: 4, summary: bad }),
          )
        ).code,
      ).toBe(ErrorCode.INVALID_INPUT);
      expect(
        (
          await refusal(
            store.compactHistory({ workstreamId: 'w', generation: 1, throughSeq: 8, summary: summary() }),
          )
        ).code,
      ).toBe(ErrorCode.INVALID_INPUT);
    });
  });

  describe('compactHistory at the bounds of the cut', () => {
    it('a cut through seq 1 replaces the first row alone; through the last row, the whole history; 0 and past the end are refused, naming throughSeq, with nothing written', async () => {
      const shape = async () => (await store.readHistory('w')).map((r) => [r.seq, r.commitKey]);
      const compact = (throughSeq: number, key: string) =>
        store.compactHistory({ workstreamId: 'w', generation: 1, throughSeq, summary: summary(key) });
      const before = await shape();
      for (const throughSeq of [0, -1, 8]) {
        const e = await refusal(compact(throughSeq, `c${throughSeq}`));
        expect([throughSeq, e.code, e.details?.field]).toEqual([
          throughSeq,
          ErrorCode.INVALID_INPUT,
          'throughSeq',
        ]);
      }
      expect(await shape()).toEqual(before);
      expect(await compact(1, 'c1')).toEqual({ removed: 1 });
      expect((await shape()).slice(0, 3)).toEqual([
        [1, 'c1'],
        [2, 'a1'],
        [3, 't1'],
      ]);
      // Seven rows now: the summary and six. Through the last: one summary row is all that is left.
      expect(await compact(7, 'c2')).toEqual({ removed: 7 });
      expect(await shape()).toEqual([[1, 'c2']]);
    });
  });

  describe('truncateHistory (rewind)', () => {
    const keys = async () => (await store.readHistory('w')).map((r) => r.commitKey);

    it('C6: drops the rows from the cut on; a retry of an applied rewind drops nothing more', async () => {
      const cut = { workstreamId: 'w', generation: 1, fromSeq: 6, fromKey: 'u2' };
      expect(await store.truncateHistory(cut)).toEqual({ removed: 2 });
      expect(await keys()).toEqual(['u1', 'a1', 't1', 't2', 'a2']);
      // Its acknowledgement lost, the rewind is retried: the history already ends before the cut.
      expect(await store.truncateHistory(cut)).toEqual({ removed: 0 });
      expect(await keys()).toEqual(['u1', 'a1', 't1', 't2', 'a2']);
      // Appends continue after the kept rows.
      expect(await store.appendMessages({ workstreamId: 'w', generation: 1, entries: [user('u3')] })).toEqual(
        [6],
      );
      // The same retry once the history has moved on is a conflict, not a second drop.
      const e = await refusal(store.truncateHistory(cut));
      expect(e.code).toBe(ErrorCode.COMMIT_CONFLICT);
      expect(e.details).toMatchObject({ fromSeq: 6, fromKey: 'u2', lastSeq: 6 });
      expect(await keys()).toEqual(['u1', 'a1', 't1', 't2', 'a2', 'u3']);
    });

    it('S1: refuses a cut that would leave a call without its result, and a cut the history does not hold', async () => {
      // Between the assistant's calls and their results.
      const split = await refusal(
        store.truncateHistory({ workstreamId: 'w', generation: 1, fromSeq: 3, fromKey: 't1' }),
      );
      expect(split.code).toBe(ErrorCode.STRUCTURE_VIOLATION);
      // A key at another seq, and an unknown key.
      for (const [fromSeq, fromKey] of [
        [5, 'u2'],
        [2, 'nope'],
      ] as const) {
        const e = await refusal(
          store.truncateHistory({ workstreamId: 'w', generation: 1, fromSeq, fromKey }),
        );
        expect(e.code).toBe(ErrorCode.COMMIT_CONFLICT);
      }
      expect(await keys()).toHaveLength(7);
    });

    it('P6: refuses a rewind from a superseded lease holder', async () => {
      const first = await store.acquireLease('w', 'h', 10_000);
      await store.releaseLease('w', 'h', first!.token);
      await store.acquireLease('w', 'h2', 10_000);
      const e = await refusal(
        store.truncateHistory({
          workstreamId: 'w',
          generation: 1,
          fencingToken: first!.token,
          fromSeq: 6,
          fromKey: 'u2',
        }),
      );
      expect(e.code).toBe(ErrorCode.FENCED);
      expect(await keys()).toHaveLength(7);
    });
  });
});
