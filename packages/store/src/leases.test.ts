import { beforeEach, describe, expect, it } from 'vitest';
import { assistant, FakeClock, user } from './test-support/fixtures.js';
import { forEachStore, type TestStore } from './test-support/stores.js';

forEachStore((backend) => {
  let clock: FakeClock;
  let store: TestStore;

  beforeEach(async () => {
    clock = new FakeClock(100_000);
    store = await backend.open(clock);
    await store.createWorkstream({ id: 'w', tenantId: 't' });
  });

  describe('turn leases', () => {
    it('grants token 1 first and refuses another holder while the lease is live', async () => {
      expect(await store.getLease('w')).toBeUndefined();
      const lease = await store.acquireLease('w', 'host-a', 1_000);
      expect(lease).toEqual({
        workstreamId: 'w',
        holder: 'host-a',
        token: 1,
        acquiredAt: 100_000,
        expiresAt: 101_000,
        released: false,
      });
      clock.advance(999);
      expect(await store.acquireLease('w', 'host-b', 1_000)).toBeUndefined();
      expect(await store.getLease('w')).toEqual(lease);
    });

    it('S7 P6: replacing takes over a live lease of an earlier process of the same host only, with a new token', async () => {
      const dead = (await store.acquireLease('w', 'host-a:old', 60_000))!;
      clock.advance(10);
      // Another host's process, or no takeover asked: the live lease is respected.
      expect(await store.acquireLease('w', 'host-b:new', 60_000, { replacing: 'host-b:' })).toBeUndefined();
      expect(await store.acquireLease('w', 'host-a:new', 60_000)).toBeUndefined();
      // `host-ab:` is not `host-a:`: the prefix includes the separator.
      expect(await store.acquireLease('w', 'host-ab:new', 60_000, { replacing: 'host-ab:' })).toBeUndefined();
      const taken = (await store.acquireLease('w', 'host-a:new', 60_000, { replacing: 'host-a:' }))!;
      expect(taken).toMatchObject({ holder: 'host-a:new', token: dead.token + 1, released: false });
      // The dead process's token is fenced: it can neither refresh nor release.
      expect(await store.refreshLease('w', 'host-a:old', dead.token, 60_000)).toBe(false);
      expect(await store.releaseLease('w', 'host-a:old', dead.token)).toBe(false);
    });

    it('E1: an acquisition that took over another holder’s unreleased lease — expired, or an earlier process’s replaced — names it (tookOverFrom); after a release, or its own, it does not', async () => {
      const first = (await store.acquireLease('w', 'host-a:1', 1_000))!;
      expect(first.tookOverFrom).toBeUndefined();
      // Its own lease again (still live): no takeover.
      expect((await store.acquireLease('w', 'host-a:1', 1_000))?.tookOverFrom).toBeUndefined();
      clock.advance(1_001);
      const taken = (await store.acquireLease('w', 'host-b:1', 1_000))!;
      expect(taken).toMatchObject({ holder: 'host-b:1', tookOverFrom: 'host-a:1' });
      // Not stored: a read of the lease never says it.
      expect(await store.getLease('w')).not.toHaveProperty('tookOverFrom');
      const replaced = await store.acquireLease('w', 'host-b:2', 1_000, { replacing: 'host-b:' });
      expect(replaced).toMatchObject({ holder: 'host-b:2', tookOverFrom: 'host-b:1' });
      expect(await store.releaseLease('w', 'host-b:2', replaced!.token)).toBe(true);
      const handed = await store.acquireLease('w', 'host-c:1', 1_000);
      expect(handed).toMatchObject({ holder: 'host-c:1' });
      expect(handed).not.toHaveProperty('tookOverFrom');
    });

    it('T4: tenantLimit bounds the live leases of a tenant (its key prefix) across holders: CAPACITY_EXHAUSTED, nothing taken', async () => {
      for (const id of ['t/a', 't/b', 't/c', 'u/a', 'tt/a'])
        await store.createWorkstream({ id, tenantId: id.split('/')[0]! });
      const a = (await store.acquireLease('t/a', 'host-a:1', 1_000, { tenantLimit: 2 }))!;
      clock.advance(100);
      expect(await store.acquireLease('t/b', 'host-b:1', 1_000, { tenantLimit: 2 })).toBeDefined();
      const refused = await store
        .acquireLease('t/c', 'host-c:1', 1_000, { tenantLimit: 2 })
        .catch((e: unknown) => e);
      // retryAfterMs: until the first of them ends unless renewed (t/a's, 900 ms from now).
      expect(refused).toMatchObject({
        code: 'CAPACITY_EXHAUSTED',
        retryable: true,
        details: { reason: 'tenant_active', tenantId: 't', retryAfterMs: 900 },
      });
      expect(await store.getLease('t/c')).toBeUndefined();
      // Other tenants (a tenant whose id starts with this one's included) are not counted.
      expect(await store.acquireLease('u/a', 'host-c:1', 1_000, { tenantLimit: 1 })).toBeDefined();
      expect(await store.acquireLease('tt/a', 'host-c:1', 1_000, { tenantLimit: 1 })).toBeDefined();
      // Its own lease taken again is not counted against itself; without a limit nothing is counted.
      expect(await store.acquireLease('t/a', 'host-a:1', 1_000, { tenantLimit: 2 })).toBeDefined();
      expect(await store.acquireLease('t/c', 'host-c:1', 1_000)).toBeDefined();
      await store.releaseLease('t/c', 'host-c:1', (await store.getLease('t/c'))!.token);
      // A released lease frees its place; so does an expired one.
      await store.releaseLease('t/a', 'host-a:1', (await store.getLease('t/a'))!.token);
      expect(await store.acquireLease('t/c', 'host-c:1', 1_000, { tenantLimit: 2 })).toBeDefined();
      clock.advance(1_000);
      expect(await store.acquireLease('t/a', 'host-a:1', 1_000, { tenantLimit: 1 })).toBeDefined();
      expect(a.token).toBe(1);
      await expect(store.acquireLease('t/a', 'host-a:1', 1_000, { tenantLimit: 0 })).rejects.toMatchObject({
        code: 'INVALID_INPUT',
      });
    });

    it('T5: replacing must be a prefix of the holder: a host cannot take over another host’s leases', async () => {
      await expect(
        store.acquireLease('w', 'host-b:new', 1_000, { replacing: 'host-a:' }),
      ).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        details: { field: 'replacing' },
      });
      expect(await store.getLease('w')).toBeUndefined();
    });

    it('token strictly increases over acquire/release/expire-reclaim cycles and is kept after release', async () => {
      const tokens: number[] = [];
      const take = async (holder: string) => {
        const lease = await store.acquireLease('w', holder, 1_000);
        expect(lease).toBeDefined();
        tokens.push(lease!.token);
        return lease!;
      };
      const a1 = await take('host-a');
      expect(await store.releaseLease('w', 'host-a', a1.token)).toBe(true);
      expect(await store.getLease('w')).toMatchObject({ token: a1.token, released: true });
      const b1 = await take('host-b');
      clock.advance(1_000); // b1 expires exactly now
      const a2 = await take('host-a'); // reclaims the expired lease
      await take('host-a'); // the same holder re-acquiring still gets a new token
      expect(await store.releaseLease('w', 'host-b', b1.token)).toBe(false);
      expect(await store.releaseLease('w', 'host-a', a2.token)).toBe(false);
      expect(tokens).toEqual([1, 2, 3, 4]);
    });

    it('keeps the token sequence across a reopen of the database', async () => {
      const db = backend.database();
      const first = await db.open(clock);
      await first.createWorkstream({ id: 'w', tenantId: 't' });
      const lease = (await first.acquireLease('w', 'h', 1_000))!;
      await first.releaseLease('w', 'h', lease.token);
      await first.close();
      const second = await db.open(clock);
      expect((await second.acquireLease('w', 'h', 1_000))?.token).toBe(lease.token + 1);
    });

    it('refresh extends a live lease of the right holder and token only', async () => {
      const lease = (await store.acquireLease('w', 'host-a', 1_000))!;
      clock.advance(500);
      expect(await store.refreshLease('w', 'host-b', lease.token, 1_000)).toBe(false);
      expect(await store.refreshLease('w', 'host-a', lease.token + 1, 1_000)).toBe(false);
      expect(await store.refreshLease('nope', 'host-a', lease.token, 1_000)).toBe(false);
      expect((await store.getLease('w'))?.expiresAt).toBe(101_000);
      expect(await store.refreshLease('w', 'host-a', lease.token, 1_000)).toBe(true);
      expect((await store.getLease('w'))?.expiresAt).toBe(101_500);
    });

    it('refresh is refused for a superseded token, a released lease and after expiry', async () => {
      const old = (await store.acquireLease('w', 'host-a', 1_000))!;
      const current = (await store.acquireLease('w', 'host-a', 1_000))!;
      expect(await store.refreshLease('w', 'host-a', old.token, 1_000)).toBe(false);

      clock.advance(1_000); // expired, not reclaimed by anyone
      expect(await store.refreshLease('w', 'host-a', current.token, 1_000)).toBe(false);
      expect(await store.getLease('w')).toMatchObject({ token: current.token, expiresAt: 101_000 });

      const next = (await store.acquireLease('w', 'host-a', 1_000))!;
      expect(await store.releaseLease('w', 'host-a', next.token)).toBe(true);
      expect(await store.refreshLease('w', 'host-a', next.token, 1_000)).toBe(false);
      expect(await store.releaseLease('w', 'host-a', next.token)).toBe(false);
    });

    it('an expired lease may still be released by its holder', async () => {
      const lease = (await store.acquireLease('w', 'host-a', 1_000))!;
      clock.advance(5_000);
      expect(await store.releaseLease('w', 'host-a', lease.token)).toBe(true);
      expect(await store.expiredLeases()).toEqual([]);
    });

    it('expiredLeases lists unreleased leases whose expiry has passed', async () => {
      await store.createWorkstream({ id: 'x', tenantId: 't' });
      await store.createWorkstream({ id: 'y', tenantId: 't' });
      await store.acquireLease('w', 'h', 1_000);
      const x = (await store.acquireLease('x', 'h', 1_000))!;
      await store.acquireLease('y', 'h', 5_000);
      await store.releaseLease('x', 'h', x.token);
      expect(await store.expiredLeases()).toEqual([]);
      clock.advance(1_000);
      expect((await store.expiredLeases()).map((l) => [l.workstreamId, l.token])).toEqual([['w', 1]]);
      expect((await store.stats()).liveLeases).toBe(1);
    });

    it('validates lease arguments and refuses unknown workstreams', async () => {
      await expect(store.acquireLease('nope', 'h', 1_000)).rejects.toMatchObject({
        code: 'WORKSTREAM_NOT_FOUND',
      });
      await expect(store.acquireLease('w', '', 1_000)).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        details: { field: 'holder' },
      });
      await expect(store.acquireLease('w', 'h', 0)).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        details: { field: 'ttlMs' },
      });
      await expect(store.acquireLease('w', 'h', 1.5)).rejects.toMatchObject({ code: 'INVALID_INPUT' });
      await expect(store.refreshLease('w', 'h', 0, 1_000)).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        details: { field: 'token' },
      });
      expect(await store.getLease('w')).toBeUndefined();
    });
  });

  describe('fencing (P6)', () => {
    const write = (token: number, key: string) =>
      store.appendMessages({ workstreamId: 'w', generation: 0, fencingToken: token, entries: [user(key)] });
    const keys = async () => (await store.readHistory('w')).map((r) => r.commitKey);

    it('P6: a write with a stale token after re-acquisition is refused and writes nothing', async () => {
      const first = (await store.acquireLease('w', 'host-a', 1_000))!;
      expect(await write(first.token, 'k1')).toEqual([1]);
      clock.advance(1_000);
      const second = (await store.acquireLease('w', 'host-b', 1_000))!;
      expect(second.token).toBe(first.token + 1);
      await expect(write(first.token, 'k2')).rejects.toMatchObject({
        code: 'FENCED',
        message: `write to workstream w with fencing token ${first.token} refused: superseded`,
        details: { reason: 'superseded', fencingToken: first.token, currentToken: second.token },
      });
      // Even a batch whose rows are fine structurally, and an idempotent retry, are refused whole.
      await expect(
        store.appendMessages({
          workstreamId: 'w',
          generation: 0,
          fencingToken: first.token,
          entries: [user('k1'), user('k3')],
        }),
      ).rejects.toMatchObject({ code: 'FENCED' });
      expect(await keys()).toEqual(['k1']);
      expect(await write(second.token, 'k2')).toEqual([2]);
      // Each row records the token it was written under: they never decrease along the seqs.
      await store.appendMessages({ workstreamId: 'w', generation: 0, entries: [user('k3')] });
      expect((await store.readHistory('w')).map((r) => r.fencingToken)).toEqual([
        first.token,
        second.token,
        undefined,
      ]);
    });

    it('P6: a write is fenced with no lease, a released lease, a lapsed lease or a token never issued', async () => {
      await expect(write(1, 'a')).rejects.toMatchObject({
        code: 'FENCED',
        message: 'write to workstream w with fencing token 1 refused: no lease',
        details: { reason: 'no_lease' },
      });
      const lease = (await store.acquireLease('w', 'h', 1_000))!;
      await expect(write(lease.token + 1, 'b')).rejects.toMatchObject({
        details: { reason: 'unknown_token' },
      });
      clock.advance(1_000);
      await expect(write(lease.token, 'c')).rejects.toMatchObject({
        code: 'FENCED',
        details: { reason: 'expired' },
      });
      await store.releaseLease('w', 'h', lease.token);
      await expect(write(lease.token, 'd')).rejects.toMatchObject({
        code: 'FENCED',
        details: { reason: 'released' },
      });
      expect(await keys()).toEqual([]);
    });

    it('P6: a refreshed lease keeps its writes admitted past the original expiry', async () => {
      const lease = (await store.acquireLease('w', 'h', 1_000))!;
      clock.advance(900);
      expect(await store.refreshLease('w', 'h', lease.token, 1_000)).toBe(true);
      clock.advance(900);
      expect(await write(lease.token, 'k')).toEqual([1]);
    });

    it('P6: fencing holds across two connections to one database', async () => {
      const db = backend.database();
      const a = await db.open(clock);
      const b = await db.open(clock);
      await a.createWorkstream({ id: 'w', tenantId: 't' });
      const leaseA = (await a.acquireLease('w', 'host-a', 1_000))!;
      expect(await b.acquireLease('w', 'host-b', 1_000)).toBeUndefined();
      await a.appendMessages({
        workstreamId: 'w',
        generation: 0,
        fencingToken: leaseA.token,
        entries: [user('u'), assistant('x')],
      });
      clock.advance(1_000);
      const leaseB = (await b.acquireLease('w', 'host-b', 1_000))!;
      expect(leaseB.token).toBe(leaseA.token + 1);
      await expect(
        a.appendMessages({
          workstreamId: 'w',
          generation: 0,
          fencingToken: leaseA.token,
          entries: [user('late')],
        }),
      ).rejects.toMatchObject({ code: 'FENCED' });
      expect((await b.readHistory('w')).map((r) => r.commitKey)).toEqual(['u', 'x']);
    });
  });
});
