/**
 * `readHistoryTail` on every store (S1): the rows from the last message that is not a tool
 * result on — all that an open call can be found in. A claim with the shared model threads reads
 * only this, so a tail that leaves out an open call (or cuts a call from its results) would let a
 * turn start over unanswered calls.
 */
import { ErrorCode, type JournalEntry } from '@turnwarden/protocol';
import { beforeEach, describe, expect, it } from 'vitest';
import { assistant, FakeClock, refusal, toolResult, user } from './test-support/fixtures.js';
import { forEachStore, type TestStore } from './test-support/stores.js';

forEachStore((backend) => {
  let store: TestStore;

  beforeEach(async () => {
    store = await backend.open(new FakeClock(1_000));
    await store.createWorkstream({ id: 'w', tenantId: 't' });
    await store.nextGeneration('w');
  });

  const append = (entries: JournalEntry[]) =>
    store.appendMessages({ workstreamId: 'w', generation: 1, entries });
  const tail = async () => (await store.readHistoryTail!('w')).map((r) => [r.seq, r.commitKey]);

  describe('readHistoryTail', () => {
    it('S1: an empty history has an empty tail; a user row is its own tail', async () => {
      expect(await tail()).toEqual([]);
      await append([user('u1')]);
      expect(await tail()).toEqual([[1, 'u1']]);
    });

    it('S1: from the assistant row with calls through every result after it — an open call is in it', async () => {
      await append([user('u1'), assistant('a1', ['c1', 'c2'])]);
      // Both calls open: the tail is the assistant row that holds them.
      expect(await tail()).toEqual([[2, 'a1']]);
      await append([toolResult('t1', 'c1', 0)]);
      expect(await tail()).toEqual([
        [2, 'a1'],
        [3, 't1'],
      ]);
      await append([toolResult('t2', 'c2', 1)]);
      expect(await tail()).toEqual([
        [2, 'a1'],
        [3, 't1'],
        [4, 't2'],
      ]);
      // The next message that is not a tool result starts the tail again.
      await append([assistant('a2', [], 'done')]);
      expect(await tail()).toEqual([[5, 'a2']]);
      await append([user('u2')]);
      expect(await tail()).toEqual([[6, 'u2']]);
    });

    it('the tail is the end of the whole history, row for row', async () => {
      await append([user('u1'), assistant('a1', ['c1']), toolResult('t1', 'c1', 0)]);
      const whole = await store.readHistory('w');
      expect(await store.readHistoryTail!('w')).toEqual(whole.slice(1));
    });

    it('an unknown workstream is WORKSTREAM_NOT_FOUND; a malformed id is INVALID_INPUT', async () => {
      expect((await refusal(store.readHistoryTail!('nope'))).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
      expect((await refusal(store.readHistoryTail!('bad id!'))).code).toBe(ErrorCode.INVALID_INPUT);
    });
  });
});
