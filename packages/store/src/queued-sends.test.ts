import { beforeEach, describe, expect, it } from 'vitest';
import { queuedCommitKey } from './queued-sends.js';
import { FakeClock, user } from './test-support/fixtures.js';
import { forEachStore, type TestStore } from './test-support/stores.js';

const send = (over: Partial<Parameters<TestStore['enqueueSend']>[0]> = {}) => ({
  workstreamId: 't/w',
  principal: 'alice',
  body: '{"content":"hi"}',
  origin: 'host-b:1',
  max: 3,
  retryAfterMs: 50,
  ...over,
});

forEachStore((backend) => {
  let clock: FakeClock;
  let store: TestStore;

  beforeEach(async () => {
    clock = new FakeClock(100_000);
    store = await backend.open(clock);
    await store.createWorkstream({ id: 't/w', tenantId: 't' });
  });

  describe('sends queued durably (issue 25)', () => {
    it('C7 T4: queues in order, bounded by max (QUEUE_FULL, nothing written), on an open workstream only', async () => {
      const a = await store.enqueueSend(send({ body: '{"content":"1"}' }));
      const b = await store.enqueueSend(send({ body: '{"content":"2"}' }));
      const c = await store.enqueueSend(send({ body: '{"content":"3"}' }));
      expect(a).toMatchObject({
        workstreamId: 't/w',
        principal: 'alice',
        origin: 'host-b:1',
        state: 'waiting',
        createdAt: 100_000,
      });
      expect(a.id < b.id && b.id < c.id).toBe(true);
      await expect(store.enqueueSend(send())).rejects.toMatchObject({
        code: 'QUEUE_FULL',
        details: { limit: 3, retryAfterMs: 50 },
      });
      expect((await store.readQueuedSends([a.id, b.id, c.id, c.id + 1])).map((q) => q.body)).toEqual([
        '{"content":"1"}',
        '{"content":"2"}',
        '{"content":"3"}',
      ]);
      expect((await store.nextQueuedSend('t/w'))?.id).toBe(a.id);
      expect(await store.countQueuedSends('t/w')).toBe(3);
      await expect(store.enqueueSend(send({ workstreamId: 't/none' }))).rejects.toMatchObject({
        code: 'WORKSTREAM_NOT_FOUND',
      });
      await store.createWorkstream({ id: 't/x', tenantId: 't' });
      await store.closeWorkstream('t/x');
      await expect(store.enqueueSend(send({ workstreamId: 't/x' }))).rejects.toMatchObject({
        code: 'WORKSTREAM_CLOSED',
      });
    });

    it('P6: only the live lease holder takes a waiting send, once; a taken one no longer counts toward max', async () => {
      const q = await store.enqueueSend(send({ max: 1 }));
      const take = (holder: string, token: number) =>
        store.takeQueuedSend({ id: q.id, workstreamId: 't/w', holder, token, generation: 1 });
      // No lease, another holder, a released or lapsed lease: nothing taken.
      expect(await take('host-a:1', 1)).toBe(false);
      const lease = (await store.acquireLease('t/w', 'host-a:1', 1_000))!;
      expect(await take('host-c:1', lease.token)).toBe(false);
      expect(await take('host-a:1', lease.token + 1)).toBe(false);
      clock.advance(1_000);
      expect(await take('host-a:1', lease.token)).toBe(false);
      const live = (await store.acquireLease('t/w', 'host-a:1', 1_000))!;
      expect(await take('host-a:1', live.token)).toBe(true);
      expect(await take('host-a:1', live.token)).toBe(false);
      expect(await store.nextQueuedSend('t/w')).toBeUndefined();
      const [taken] = await store.readQueuedSends([q.id]);
      expect(taken).toMatchObject({ state: 'taken', token: live.token, generation: 1 });
      await store.enqueueSend(send({ max: 1 }));
      // Finished by the token it was taken under only.
      expect(await store.finishQueuedSend(q.id, live.token + 1, '{"r":1}')).toBe(false);
      expect(await store.finishQueuedSend(q.id, live.token, '{"r":1}')).toBe(true);
      expect((await store.readQueuedSends([q.id]))[0]).toMatchObject({ state: 'done', outcome: '{"r":1}' });
      expect(await store.finishQueuedSend(q.id, live.token, '{"r":2}')).toBe(false);
    });

    it('C7: a revoke answers every waiting send (not a taken one); a withdrawn one is no longer taken', async () => {
      const a = await store.enqueueSend(send());
      const b = await store.enqueueSend(send());
      const c = await store.enqueueSend(send());
      const lease = (await store.acquireLease('t/w', 'host-a:1', 1_000))!;
      expect(
        await store.takeQueuedSend({
          id: a.id,
          workstreamId: 't/w',
          holder: 'host-a:1',
          token: lease.token,
          generation: 1,
        }),
      ).toBe(true);
      expect(await store.withdrawQueuedSend(c.id)).toBe(true);
      expect(await store.withdrawQueuedSend(c.id, '{"error":1}')).toBe(false);
      const d = await store.enqueueSend(send());
      expect(await store.withdrawQueuedSend(d.id, '{"error":1}')).toBe(true);
      expect((await store.readQueuedSends([d.id]))[0]).toMatchObject({
        state: 'withdrawn',
        outcome: '{"error":1}',
      });
      expect(await store.withdrawQueuedSend(a.id)).toBe(false);
      const revoked = await store.revokeQueuedSends('t/w', '{"reason":"cancel"}');
      expect(revoked.map((r) => [r.id, r.state, r.outcome])).toEqual([
        [b.id, 'revoked', '{"reason":"cancel"}'],
      ]);
      expect(await store.revokeQueuedSends('t/w', '{}')).toEqual([]);
      expect((await store.readQueuedSends([a.id, b.id, c.id])).map((r) => r.state)).toEqual([
        'taken',
        'revoked',
        'withdrawn',
      ]);
      // Bounded (M3: an interrupt's own send, and those after it, are kept): only ids before it.
      const e = await store.enqueueSend(send());
      const f = await store.enqueueSend(send());
      const g = await store.enqueueSend(send());
      expect((await store.revokeQueuedSends('t/w', '{}', f.id)).map((r) => r.id)).toEqual([e.id]);
      expect((await store.readQueuedSends([e.id, f.id, g.id])).map((r) => r.state)).toEqual([
        'revoked',
        'waiting',
        'waiting',
      ]);
      expect((await store.revokeQueuedSends('t/w', '{}')).map((r) => r.id)).toEqual([f.id, g.id]);
      // Answered rows are forgotten on request; a taken one is kept.
      await store.dropQueuedSends([a.id, b.id, c.id]);
      expect((await store.readQueuedSends([a.id, b.id, c.id])).map((r) => r.id)).toEqual([a.id]);
    });

    it('S7: a dead holder’s taken sends: the one whose turn began is done, the other waits again, in its place', async () => {
      const a = await store.enqueueSend(send());
      const b = await store.enqueueSend(send());
      const c = await store.enqueueSend(send());
      const lease = (await store.acquireLease('t/w', 'host-a:1', 1_000))!;
      const take = (id: number, generation: number) =>
        store.takeQueuedSend({ id, workstreamId: 't/w', holder: 'host-a:1', token: lease.token, generation });
      expect(await take(a.id, 1)).toBe(true);
      // Its turn began: the user row under its commit key is durable.
      expect(await store.nextGeneration('t/w')).toBe(1);
      await store.appendMessages({
        workstreamId: 't/w',
        generation: 1,
        fencingToken: lease.token,
        entries: [user(queuedCommitKey(a.id), 'one')],
      });
      expect(await take(b.id, 2)).toBe(true);
      // While the holder's lease is live, nobody reclaims them.
      expect(await store.reclaimQueuedSends('t/w', lease.token, '{"lost":true}')).toEqual([]);
      // The holder dies; once its lease lapsed, the sweep reclaims: a's turn began, b's did not.
      clock.advance(1_000);
      const changed = await store.reclaimQueuedSends('t/w', lease.token, '{"lost":true}');
      expect(changed.map((r) => [r.id, r.state]).sort()).toEqual(
        [
          [a.id, 'done'],
          [b.id, 'waiting'],
        ].sort(),
      );
      expect((await store.readQueuedSends([a.id]))[0]).toMatchObject({ outcome: '{"lost":true}' });
      // b waits again ahead of c; the late holder can no longer finish it.
      expect((await store.nextQueuedSend('t/w'))?.id).toBe(b.id);
      expect(await store.finishQueuedSend(b.id, lease.token, '{}')).toBe(false);
      const next = (await store.acquireLease('t/w', 'host-c:1', 1_000))!;
      expect(
        await store.takeQueuedSend({
          id: b.id,
          workstreamId: 't/w',
          holder: 'host-c:1',
          token: next.token,
          generation: 2,
        }),
      ).toBe(true);
      expect(await store.reclaimQueuedSends('t/w', lease.token, '{}')).toEqual([]);
      expect((await store.readQueuedSends([c.id]))[0]?.state).toBe('waiting');
    });

    it('S7: every lease acquisition answers the sends an earlier holder took and left unanswered (it finishes them before it releases)', async () => {
      const a = await store.enqueueSend(send());
      const b = await store.enqueueSend(send());
      const first = (await store.acquireLease('t/w', 'host-a:1', 1_000))!;
      const take = (id: number, generation: number) =>
        store.takeQueuedSend({ id, workstreamId: 't/w', holder: 'host-a:1', token: first.token, generation });
      expect(await store.nextGeneration('t/w')).toBe(1);
      expect(await take(a.id, 1)).toBe(true);
      await store.appendMessages({
        workstreamId: 't/w',
        generation: 1,
        fencingToken: first.token,
        entries: [user(queuedCommitKey(a.id), 'one')],
      });
      expect(await take(b.id, 2)).toBe(true);
      // Released without answering them (it stopped between its release and its answer, say).
      expect(await store.releaseLease('t/w', 'host-a:1', first.token)).toBe(true);
      // The next acquisition, by any holder, answers them in the same transaction.
      await store.acquireLease('t/w', 'host-b:1', 1_000);
      expect((await store.readQueuedSends([a.id, b.id])).map((r) => [r.state, r.outcome ?? null])).toEqual([
        ['done', '{"lost":true}'],
        ['waiting', null],
      ]);
    });

    it('D1: deleting the workstream deletes its queued sends', async () => {
      const a = await store.enqueueSend(send());
      expect(await store.deleteWorkstream('t/w')).toBe(true);
      expect(await store.readQueuedSends([a.id])).toEqual([]);
    });

    it('T4: maxPerTenant bounds the sends of a tenant waiting on all its workstreams together (QUEUE_FULL, nothing written)', async () => {
      await store.createWorkstream({ id: 't/x', tenantId: 't' });
      await store.createWorkstream({ id: 'tt/y', tenantId: 'tt' });
      await store.enqueueSend(send({ maxPerTenant: 2 }));
      await store.enqueueSend(send({ workstreamId: 't/x', maxPerTenant: 2 }));
      await expect(store.enqueueSend(send({ workstreamId: 't/x', maxPerTenant: 2 }))).rejects.toMatchObject({
        code: 'QUEUE_FULL',
        retryable: true,
        details: { limit: 2, retryAfterMs: 50 },
      });
      expect(await store.countQueuedSends('t/x')).toBe(1);
      // Another tenant (whose id begins with this one's) is counted apart; without the bound, none.
      expect(await store.enqueueSend(send({ workstreamId: 'tt/y', maxPerTenant: 1 }))).toMatchObject({
        state: 'waiting',
      });
      expect(await store.enqueueSend(send({ workstreamId: 't/x' }))).toMatchObject({ state: 'waiting' });
      // An answered send frees its place.
      await store.revokeQueuedSends('t/w', '{}');
      expect(await store.enqueueSend(send({ maxPerTenant: 3 }))).toMatchObject({ state: 'waiting' });
    });

    it('T5: bad input is INVALID_INPUT and writes nothing', async () => {
      await expect(store.enqueueSend(send({ max: 0 }))).rejects.toMatchObject({ code: 'INVALID_INPUT' });
      await expect(store.enqueueSend(send({ body: '' }))).rejects.toMatchObject({ code: 'INVALID_INPUT' });
      await expect(store.readQueuedSends([0])).rejects.toMatchObject({ code: 'INVALID_INPUT' });
      await expect(
        store.takeQueuedSend({ id: 1, workstreamId: 't/w', holder: 'h', token: 0, generation: 1 }),
      ).rejects.toMatchObject({ code: 'INVALID_INPUT' });
      expect(await store.nextQueuedSend('t/w')).toBeUndefined();
    });
  });
});
