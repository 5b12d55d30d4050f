import type { JournalEntry } from '@turnwarden/protocol';
import { beforeEach, describe, expect, it } from 'vitest';
import { assistant, FakeClock, toolResult, user } from './test-support/fixtures.js';
import { forEachStore, type TestStore } from './test-support/stores.js';

forEachStore((backend) => {
  let clock: FakeClock;
  let store: TestStore;

  beforeEach(async () => {
    clock = new FakeClock(10_000);
    store = await backend.open(clock);
    await store.createWorkstream({ id: 'w', tenantId: 't' });
  });

  const append = (entries: JournalEntry[], generation = 0) =>
    store.appendMessages({ workstreamId: 'w', generation, entries });
  const keys = async () => (await store.readHistory('w')).map((r) => r.commitKey);

  describe('appendMessages / readHistory', () => {
    it('assigns gap-free seqs from 1 and reads rows back in order', async () => {
      await store.nextGeneration('w');
      expect(await append([user('u1', 'hi'), assistant('a1', [], 'hello')], 1)).toEqual([1, 2]);
      clock.advance(5);
      expect(await append([user('u2')], 1)).toEqual([3]);
      const rows = await store.readHistory('w');
      expect(rows).toEqual([
        {
          workstreamId: 'w',
          seq: 1,
          commitKey: 'u1',
          generation: 1,
          message: { role: 'user', content: 'hi' },
          createdAt: 10_000,
        },
        {
          workstreamId: 'w',
          seq: 2,
          commitKey: 'a1',
          generation: 1,
          message: { role: 'assistant', content: 'hello' },
          createdAt: 10_000,
        },
        {
          workstreamId: 'w',
          seq: 3,
          commitKey: 'u2',
          generation: 1,
          message: { role: 'user', content: 'hello' },
          createdAt: 10_005,
        },
      ]);
    });

    it('round-trips tool calls and results exactly', async () => {
      const entries = [
        user('u'),
        assistant('a', ['c1', 'c2']),
        toolResult('r1', 'c1', 0),
        toolResult('r2', 'c2', 1, { effect: 'unknown', synthesized: true }),
      ];
      await append(entries);
      expect((await store.readHistory('w')).map((r) => r.message)).toEqual(entries.map((e) => e.message));
    });

    it('P1: a retry with the same key and body returns the existing seq and writes nothing', async () => {
      expect(await append([user('u1'), assistant('a1')])).toEqual([1, 2]);
      expect(await append([user('u1'), assistant('a1')])).toEqual([1, 2]);
      expect(await append([assistant('a1'), user('u2')])).toEqual([2, 3]);
      expect(await keys()).toEqual(['u1', 'a1', 'u2']);
    });

    it('P1: the same key with a different body is a COMMIT_CONFLICT and the batch writes nothing', async () => {
      await append([user('u1', 'first')]);
      await expect(append([user('u2'), user('u1', 'second')])).rejects.toMatchObject({
        code: 'COMMIT_CONFLICT',
        details: { commitKey: 'u1', seq: 1 },
      });
      expect(await keys()).toEqual(['u1']);
      expect((await store.readHistory('w'))[0]?.message).toEqual({ role: 'user', content: 'first' });
    });

    it('P1: compares bodies independently of property order and undefined optional fields', async () => {
      await append([{ commitKey: 'u', message: { role: 'user', content: 'x' } }]);
      const reordered = {
        content: 'x',
        principal: undefined,
        role: 'user',
      } as unknown as JournalEntry['message'];
      expect(await append([{ commitKey: 'u', message: reordered }])).toEqual([1]);
      await expect(
        append([{ commitKey: 'u', message: { role: 'user', content: 'x', principal: 'bob' } }]),
      ).rejects.toMatchObject({ code: 'COMMIT_CONFLICT' });
    });

    it('P1: a key repeated inside one batch is idempotent with the same body, a conflict otherwise', async () => {
      expect(await append([user('u', 'x'), user('u', 'x')])).toEqual([1, 1]);
      await expect(append([user('v', 'x'), user('v', 'y')])).rejects.toMatchObject({
        code: 'COMMIT_CONFLICT',
      });
      expect(await keys()).toEqual(['u']);
    });

    it('is all or nothing: a refusal late in the batch leaves no row and no seq gap', async () => {
      await append([user('u0')]);
      await expect(append([user('u1'), assistant('a1', ['c']), user('u2')])).rejects.toMatchObject({
        code: 'STRUCTURE_VIOLATION',
      });
      expect(await keys()).toEqual(['u0']);
      expect(await append([user('u1')])).toEqual([2]);
    });

    it('S1: refuses an extra tool result', async () => {
      await append([user('u'), assistant('a', ['c1']), toolResult('r1', 'c1', 0)]);
      await expect(append([toolResult('r1-again', 'c1', 0)])).rejects.toMatchObject({
        code: 'STRUCTURE_VIOLATION',
      });
      await expect(append([toolResult('r2', 'c1', 1)])).rejects.toMatchObject({
        code: 'STRUCTURE_VIOLATION',
      });
      expect(await keys()).toEqual(['u', 'a', 'r1']);
    });

    it('S1: refuses a foreign tool result and one with no assistant before it', async () => {
      await expect(append([toolResult('orphan', 'c1', 0)])).rejects.toMatchObject({
        code: 'STRUCTURE_VIOLATION',
      });
      await append([user('u'), assistant('a', ['c1', 'c2'])]);
      await expect(append([toolResult('x', 'other', 0)])).rejects.toMatchObject({
        code: 'STRUCTURE_VIOLATION',
      });
      // Right id, wrong occurrence.
      await expect(append([toolResult('y', 'c1', 1)])).rejects.toMatchObject({ code: 'STRUCTURE_VIOLATION' });
      expect(await keys()).toEqual(['u', 'a']);
    });

    it('S1: refuses a user, system or assistant message over an unanswered tool call', async () => {
      await append([user('u'), assistant('a', ['c1', 'c2']), toolResult('r1', 'c1', 0)]);
      await expect(append([user('u2')])).rejects.toMatchObject({ code: 'STRUCTURE_VIOLATION' });
      await expect(
        append([{ commitKey: 's', message: { role: 'system', content: 'x' } }]),
      ).rejects.toMatchObject({
        code: 'STRUCTURE_VIOLATION',
      });
      await expect(append([assistant('a2')])).rejects.toMatchObject({ code: 'STRUCTURE_VIOLATION' });
      expect(await append([toolResult('r2', 'c2', 1), user('u2')])).toEqual([4, 5]);
    });

    it('S1: counts duplicate provider call ids by occurrence', async () => {
      await append([user('u'), assistant('a', ['dup', 'dup'])]);
      expect(await append([toolResult('r0', 'dup', 0)])).toEqual([3]);
      // The same occurrence again is an extra result, even though another `dup` is open.
      await expect(append([toolResult('r0b', 'dup', 0)])).rejects.toMatchObject({
        code: 'STRUCTURE_VIOLATION',
      });
      await expect(append([user('u2')])).rejects.toMatchObject({ code: 'STRUCTURE_VIOLATION' });
      expect(await append([toolResult('r1', 'dup', 1), user('u2')])).toEqual([4, 5]);
      await expect(append([toolResult('r2', 'dup', 1)])).rejects.toMatchObject({
        code: 'STRUCTURE_VIOLATION',
      });
      expect(await keys()).toEqual(['u', 'a', 'r0', 'r1', 'u2']);
    });

    it('refuses an unknown workstream', async () => {
      await expect(
        store.appendMessages({ workstreamId: 'nope', generation: 0, entries: [user('u')] }),
      ).rejects.toMatchObject({ code: 'WORKSTREAM_NOT_FOUND' });
      await expect(store.readHistory('nope')).rejects.toMatchObject({ code: 'WORKSTREAM_NOT_FOUND' });
    });

    it('refuses a generation that was never issued, and writes nothing', async () => {
      await store.nextGeneration('w');
      await expect(append([user('u')], 2)).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        details: { field: 'generation' },
      });
      expect(await keys()).toEqual([]);
      expect(await append([user('u')], 1)).toEqual([1]);
    });

    it.each([
      ['entries', { entries: 'nope' }],
      ['entries[0].commitKey', { entries: [{ commitKey: '', message: { role: 'user', content: 'x' } }] }],
      [
        'entries[0].commitKey',
        { entries: [{ commitKey: 'k'.repeat(513), message: { role: 'user', content: 'x' } }] },
      ],
      [
        'entries[0].extra',
        { entries: [{ commitKey: 'k', message: { role: 'user', content: 'x' }, extra: 1 }] },
      ],
      [
        'entries[0].message.role',
        { entries: [{ commitKey: 'k', message: { role: 'robot', content: 'x' } }] },
      ],
      ['entries[0].message.content', { entries: [{ commitKey: 'k', message: { role: 'user' } }] }],
      [
        'entries[0].message.mood',
        { entries: [{ commitKey: 'k', message: { role: 'user', content: 'x', mood: 1 } }] },
      ],
      [
        'entries[0].message.toolCalls[0].arguments',
        {
          entries: [
            {
              commitKey: 'k',
              message: { role: 'assistant', content: '', toolCalls: [{ id: 'c', name: 'n', arguments: {} }] },
            },
          ],
        },
      ],
      [
        'entries[0].message.callIndex',
        {
          entries: [
            {
              commitKey: 'k',
              message: {
                role: 'tool',
                toolCallId: 'c',
                callIndex: -1,
                name: 'n',
                content: '',
                isError: false,
                effect: 'applied',
              },
            },
          ],
        },
      ],
      [
        'entries[0].message.effect',
        {
          entries: [
            {
              commitKey: 'k',
              message: {
                role: 'tool',
                toolCallId: 'c',
                callIndex: 0,
                name: 'n',
                content: '',
                isError: false,
                effect: 'maybe',
              },
            },
          ],
        },
      ],
      ['generation', { generation: -1, entries: [] }],
      ['fencingToken', { fencingToken: 0, entries: [] }],
      ['input.seqs', { seqs: [], entries: [] }],
    ])('T5: refuses a malformed request (%s) with INVALID_INPUT and writes nothing', async (field, patch) => {
      const input = { workstreamId: 'w', generation: 0, ...patch };
      await expect(store.appendMessages(input as never)).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        details: { field },
      });
      expect(await keys()).toEqual([]);
    });

    it('an empty batch is accepted and writes nothing', async () => {
      expect(await append([])).toEqual([]);
      expect(await keys()).toEqual([]);
    });
  });
});
