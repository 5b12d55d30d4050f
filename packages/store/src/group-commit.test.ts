/** appendMany: group commit with each batch all-or-nothing on its own (P1, P2, P6). */
import { beforeEach, describe, expect, it } from 'vitest';
import { assistant, FakeClock, toolResult, user } from './test-support/fixtures.js';
import { forEachStore, type TestStore } from './test-support/stores.js';

forEachStore((backend) => {
  let store: TestStore;

  beforeEach(async () => {
    store = await backend.open(new FakeClock(10_000));
    for (const id of ['a', 'b', 'c', 'd']) {
      await store.createWorkstream({ id, tenantId: 't' });
      await store.nextGeneration(id);
    }
  });

  const roles = async (id: string) => (await store.readHistory(id)).map((r) => r.commitKey);

  describe('group commit (appendMany)', () => {
    it('P2: batches of several workstreams commit together, each batch in order, a workstream’s two batches in submission order', async () => {
      const out = await store.appendMany([
        { workstreamId: 'a', generation: 1, entries: [user('a-u'), assistant('a-a')] },
        { workstreamId: 'b', generation: 1, entries: [user('b-u')] },
        { workstreamId: 'a', generation: 1, entries: [user('a-u2')] },
      ]);
      expect(out).toEqual([{ seqs: [1, 2] }, { seqs: [1] }, { seqs: [3] }]);
      expect(await roles('a')).toEqual(['a-u', 'a-a', 'a-u2']);
      expect(await roles('b')).toEqual(['b-u']);
    });

    it('P1 P6 S1: a refused batch — fenced, conflicting, structurally invalid, malformed — is rolled back alone and reported in its slot', async () => {
      await store.appendMessages({ workstreamId: 'c', generation: 1, entries: [user('c-u', 'first')] });
      const old = (await store.acquireLease('b', 'h', 60_000))!;
      await store.releaseLease('b', 'h', old.token);
      await store.acquireLease('b', 'h2', 60_000); // `old.token` is superseded
      const out = await store.appendMany([
        { workstreamId: 'a', generation: 1, entries: [user('a-u')] },
        { workstreamId: 'b', generation: 1, fencingToken: old.token, entries: [user('b-u')] },
        { workstreamId: 'c', generation: 1, entries: [user('c-u', 'another body')] },
        // A result for a call nobody made (S1), after a row that would be fine on its own.
        { workstreamId: 'd', generation: 1, entries: [user('d-u'), toolResult('d-t', 'nope', 0)] },
        { workstreamId: 'a', generation: 'x' as never, entries: [user('a-bad')] },
        { workstreamId: 'a', generation: 1, entries: [assistant('a-a')] },
      ]);
      expect(out.map((o) => ('seqs' in o ? o.seqs : o.error.code))).toEqual([
        [1],
        'FENCED',
        'COMMIT_CONFLICT',
        'STRUCTURE_VIOLATION',
        'INVALID_INPUT',
        [2],
      ]);
      expect(await roles('a')).toEqual(['a-u', 'a-a']);
      expect(await roles('b')).toEqual([]);
      expect((await store.readHistory('c')).map((r) => r.message.content)).toEqual(['first']);
      // The whole of d's batch was rolled back, its valid first row included.
      expect(await roles('d')).toEqual([]);
    });

    it('P1: a batch retried after a lost acknowledgement returns the rows already written', async () => {
      const input = { workstreamId: 'a', generation: 1, entries: [user('a-u'), assistant('a-a')] };
      expect(await store.appendMany([input])).toEqual([{ seqs: [1, 2] }]);
      expect(await store.appendMany([input])).toEqual([{ seqs: [1, 2] }]);
      expect(await roles('a')).toEqual(['a-u', 'a-a']);
    });

    it('T5: inputs must be an array; nothing is written', async () => {
      await expect(store.appendMany({} as never)).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        details: { field: 'inputs' },
      });
      expect(await roles('a')).toEqual([]);
    });
  });
});
