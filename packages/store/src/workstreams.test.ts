import { describe, expect, it } from 'vitest';
import { assistant, FakeClock, toolResult, user } from './test-support/fixtures.js';
import { forEachStore } from './test-support/stores.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

forEachStore((backend) => {
  describe('workstreams', () => {
    it('creates an open workstream with generation 0 and a fresh incarnation (D1)', async () => {
      const clock = new FakeClock(42_000);
      const store = await backend.open(clock);
      const created = await store.createWorkstream({ id: 'ws-1', tenantId: 'acme' });
      expect(created).toEqual({
        id: 'ws-1',
        tenantId: 'acme',
        incarnation: expect.stringMatching(UUID),
        generation: 0,
        status: 'open',
        createdAt: 42_000,
      });
      expect(await store.getWorkstream('ws-1')).toEqual(created);
      expect(await store.getWorkstream('ws-2')).toBeUndefined();
    });

    it('keeps a workstream’s double-texting default, and refuses one it does not know (issue 26)', async () => {
      const store = await backend.open(new FakeClock());
      const created = await store.createWorkstream({ id: 'dt', tenantId: 't', doubleTexting: 'interrupt' });
      expect(created.doubleTexting).toBe('interrupt');
      expect((await store.getWorkstream('dt'))?.doubleTexting).toBe('interrupt');
      expect((await store.listWorkstreams({ tenantId: 't' }))[0]?.doubleTexting).toBe('interrupt');
      await expect(
        store.createWorkstream({ id: 'dt2', tenantId: 't', doubleTexting: 'shout' as never }),
      ).rejects.toMatchObject({ code: 'INVALID_INPUT', details: { field: 'doubleTexting' } });
      expect(await store.getWorkstream('dt2')).toBeUndefined();
    });

    it('mints a different incarnation for each creation of the same id (D1)', async () => {
      const a = await (await backend.open(new FakeClock())).createWorkstream({ id: 'same', tenantId: 't' });
      const b = await (await backend.open(new FakeClock())).createWorkstream({ id: 'same', tenantId: 't' });
      expect(a.incarnation).not.toBe(b.incarnation);
    });

    it('refuses an existing id, open or closed, with WORKSTREAM_EXISTS and keeps the original', async () => {
      const store = await backend.open(new FakeClock());
      const original = await store.createWorkstream({ id: 'w', tenantId: 't1' });
      await expect(store.createWorkstream({ id: 'w', tenantId: 't2' })).rejects.toMatchObject({
        code: 'WORKSTREAM_EXISTS',
        message: 'workstream w already exists',
        details: { workstreamId: 'w' },
      });
      await store.closeWorkstream('w');
      await expect(store.createWorkstream({ id: 'w', tenantId: 't1' })).rejects.toMatchObject({
        code: 'WORKSTREAM_EXISTS',
      });
      expect(await store.getWorkstream('w')).toMatchObject({
        tenantId: 't1',
        incarnation: original.incarnation,
      });
    });

    it.each([
      ['empty', { id: '', tenantId: 't' }, 'id'],
      ['two slashes', { id: 't/a/b', tenantId: 't' }, 'id'],
      ['empty tenant part', { id: '/b', tenantId: 't' }, 'id'],
      ['another tenant’s key', { id: 'a/b', tenantId: 't' }, 'id'],
      ['space', { id: 'a b', tenantId: 't' }, 'id'],
      ['non-ASCII', { id: 'café', tenantId: 't' }, 'id'],
      ['129 chars', { id: 'x'.repeat(129), tenantId: 't' }, 'id'],
      ['number', { id: 7, tenantId: 't' }, 'id'],
      ['bad tenant', { id: 'w', tenantId: 'a b' }, 'tenantId'],
      ['missing tenant', { id: 'w' }, 'tenantId'],
      ['unknown field', { id: 'w', tenantId: 't', extra: 1 }, 'input.extra'],
    ])('T5: refuses a bad id (%s) with INVALID_INPUT and writes nothing', async (_, input, field) => {
      const store = await backend.open(new FakeClock());
      await expect(store.createWorkstream(input as never)).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        details: { field },
      });
      expect(await store.listWorkstreams()).toEqual([]);
      expect((await store.stats()).workstreams).toBe(0);
    });

    it('P5 P6: deletes a workstream and its history; writes to it are refused; the id is free again and fencing tokens keep increasing', async () => {
      const store = await backend.open(new FakeClock());
      const first = await store.createWorkstream({ id: 'w', tenantId: 't' });
      await store.nextGeneration('w');
      await store.appendMessages({ workstreamId: 'w', generation: 1, entries: [user('u1')] });
      const old = await store.acquireLease('w', 'h', 10_000);
      // Another incarnation's delete leaves it alone.
      expect(await store.deleteWorkstream('w', 'not-this-one')).toBe(false);
      expect(await store.readHistory('w')).toHaveLength(1);
      expect(await store.deleteWorkstream('w', first.incarnation)).toBe(true);
      expect(await store.getWorkstream('w')).toBeUndefined();
      expect(await store.deleteWorkstream('w')).toBe(false);
      // The deleted workstream's writer is refused: its workstream is gone.
      const write = { workstreamId: 'w', generation: 1, fencingToken: old!.token, entries: [user('u2')] };
      await expect(store.appendMessages(write)).rejects.toMatchObject({ code: 'WORKSTREAM_NOT_FOUND' });
      await expect(store.readHistory('w')).rejects.toMatchObject({ code: 'WORKSTREAM_NOT_FOUND' });
      // A new incarnation under the same id starts empty; its lease fences the old writer.
      const second = await store.createWorkstream({ id: 'w', tenantId: 't' });
      expect(second.incarnation).not.toBe(first.incarnation);
      expect(await store.readHistory('w')).toEqual([]);
      await store.releaseLease('w', 'h', old!.token);
      const next = await store.acquireLease('w', 'h2', 10_000);
      expect(next!.token).toBeGreaterThan(old!.token);
      await store.nextGeneration('w');
      await expect(store.appendMessages(write)).rejects.toMatchObject({ code: 'FENCED' });
      expect(await store.readHistory('w')).toEqual([]);
    });

    it("lists a tenant's workstreams by id, a page at a time (keyset paging)", async () => {
      const store = await backend.open(new FakeClock());
      for (const id of ['c', 'a', 'e', 'b', 'd']) await store.createWorkstream({ id, tenantId: 't1' });
      await store.createWorkstream({ id: 'x', tenantId: 't2' });
      const page1 = await store.listWorkstreams({ tenantId: 't1', limit: 2 });
      expect(page1.map((w) => w.id)).toEqual(['a', 'b']);
      const page2 = await store.listWorkstreams({ tenantId: 't1', limit: 2, afterId: 'b' });
      expect(page2.map((w) => w.id)).toEqual(['c', 'd']);
      const page3 = await store.listWorkstreams({ tenantId: 't1', limit: 2, afterId: 'd' });
      expect(page3.map((w) => w.id)).toEqual(['e']);
      await expect(store.listWorkstreams({ tenantId: 't1', limit: 0 })).rejects.toMatchObject({
        code: 'INVALID_INPUT',
      });
    });

    it('T5: accepts the full id alphabet up to 128 characters', async () => {
      const store = await backend.open(new FakeClock());
      const id = `Az09._:-${'y'.repeat(120)}`;
      expect(id).toHaveLength(128);
      await store.createWorkstream({ id, tenantId: 't' });
      expect(await store.getWorkstream(id)).toMatchObject({ id });
    });

    it('T2: a workstream is kept by its key, <tenant>/<id>: two tenants’ keys of one id are two workstreams', async () => {
      const store = await backend.open(new FakeClock());
      await store.createWorkstream({ id: 't1/w', tenantId: 't1' });
      await store.createWorkstream({ id: 't2/w', tenantId: 't2' });
      expect((await store.listWorkstreams()).map((w) => [w.id, w.tenantId])).toEqual([
        ['t1/w', 't1'],
        ['t2/w', 't2'],
      ]);
      expect((await store.listWorkstreams({ tenantId: 't2' })).map((w) => w.id)).toEqual(['t2/w']);
      await expect(store.createWorkstream({ id: 't1/w', tenantId: 't1' })).rejects.toMatchObject({
        code: 'WORKSTREAM_EXISTS',
      });
    });

    it('T5: refuses a bad id on reads and lease calls too', async () => {
      const store = await backend.open(new FakeClock());
      await expect(store.getWorkstream('../x/y')).rejects.toMatchObject({ code: 'INVALID_INPUT' });
      await expect(store.readHistory('')).rejects.toMatchObject({ code: 'INVALID_INPUT' });
      await expect(store.acquireLease('a b', 'h', 1000)).rejects.toMatchObject({ code: 'INVALID_INPUT' });
    });

    it('lists by tenant and status, ordered by id', async () => {
      const store = await backend.open(new FakeClock());
      for (const [id, tenantId] of [
        ['c', 't1'],
        ['a', 't1'],
        ['b', 't2'],
      ] as const) {
        await store.createWorkstream({ id, tenantId });
      }
      await store.closeWorkstream('c');
      expect((await store.listWorkstreams()).map((w) => w.id)).toEqual(['a', 'b', 'c']);
      expect((await store.listWorkstreams({ tenantId: 't1' })).map((w) => w.id)).toEqual(['a', 'c']);
      expect((await store.listWorkstreams({ tenantId: 't1', status: 'open' })).map((w) => w.id)).toEqual([
        'a',
      ]);
      expect((await store.listWorkstreams({ status: 'closed' })).map((w) => w.id)).toEqual(['c']);
      await expect(store.listWorkstreams({ status: 'gone' } as never)).rejects.toMatchObject({
        code: 'INVALID_INPUT',
      });
    });

    it('nextGeneration increments durably and refuses unknown or closed workstreams', async () => {
      const db = backend.database();
      const store = await db.open(new FakeClock());
      await store.createWorkstream({ id: 'w', tenantId: 't' });
      expect(await store.nextGeneration('w')).toBe(1);
      expect(await store.nextGeneration('w')).toBe(2);
      await store.close();
      const reopened = await db.open(new FakeClock());
      expect(await reopened.nextGeneration('w')).toBe(3);
      expect(await reopened.getWorkstream('w')).toMatchObject({ generation: 3 });
      await expect(reopened.nextGeneration('nope')).rejects.toMatchObject({ code: 'WORKSTREAM_NOT_FOUND' });
      await reopened.closeWorkstream('w');
      await expect(reopened.nextGeneration('w')).rejects.toMatchObject({ code: 'WORKSTREAM_CLOSED' });
      expect(await reopened.getWorkstream('w')).toMatchObject({ generation: 3 });
    });

    it('close is terminal and idempotent, and refuses new leases and writes', async () => {
      const clock = new FakeClock(1_000);
      const store = await backend.open(clock);
      await store.createWorkstream({ id: 'w', tenantId: 't' });
      clock.advance(500);
      expect(await store.closeWorkstream('w')).toMatchObject({ status: 'closed', closedAt: 1_500 });
      clock.advance(500);
      expect(await store.closeWorkstream('w')).toMatchObject({ status: 'closed', closedAt: 1_500 });
      await expect(store.closeWorkstream('nope')).rejects.toMatchObject({ code: 'WORKSTREAM_NOT_FOUND' });
      await expect(store.acquireLease('w', 'h', 1_000)).rejects.toMatchObject({ code: 'WORKSTREAM_CLOSED' });
      await expect(
        store.appendMessages({ workstreamId: 'w', generation: 0, entries: [user('k')] }),
      ).rejects.toMatchObject({ code: 'WORKSTREAM_CLOSED' });
      expect(await store.readHistory('w')).toEqual([]);
    });

    it('close is refused with TOOL_CLEANUP_PENDING while tool calls have no result', async () => {
      const store = await backend.open(new FakeClock());
      await store.createWorkstream({ id: 'w', tenantId: 't' });
      await store.appendMessages({
        workstreamId: 'w',
        generation: 0,
        entries: [user('u'), assistant('a', ['c1'])],
      });
      await expect(store.closeWorkstream('w')).rejects.toMatchObject({ code: 'TOOL_CLEANUP_PENDING' });
      expect(await store.getWorkstream('w')).toMatchObject({ status: 'open' });
      await store.appendMessages({ workstreamId: 'w', generation: 0, entries: [toolResult('r', 'c1', 0)] });
      expect(await store.closeWorkstream('w')).toMatchObject({ status: 'closed' });
    });
  });
});
