/**
 * The session snapshot a workstream carries is fenced like its rows (P6): `saveSession`, a
 * batch's `session` in `appendMessages` and each batch of a group commit (`appendMany`) store it
 * only when the write is accepted — checked in the transaction of the write — and a refused
 * write leaves the snapshot as it was. A killed or paused holder's late snapshot must never
 * overwrite what the new holder wrote (its recovery reads the machine from it, S7).
 */
import type { SessionSnapshotData } from '@turnwarden/protocol';
import { beforeEach, describe, expect, it } from 'vitest';
import { assistant, FakeClock, toolResult, user } from './test-support/fixtures.js';
import { forEachStore, type TestStore } from './test-support/stores.js';
import type { AppendInput } from './types.js';

/** A snapshot-shaped value the store keeps as given; `mark` tells one from another. */
const snap = (value: unknown, mark: string): SessionSnapshotData => ({
  value,
  status: 'active',
  context: { mark },
  children: {},
});

forEachStore((backend) => {
  let store: TestStore;
  let clock: FakeClock;

  beforeEach(async () => {
    clock = new FakeClock(50_000);
    store = await backend.open(clock);
    for (const id of ['a', 'b', 'c']) {
      await store.createWorkstream({ id, tenantId: 't' });
      await store.nextGeneration(id);
    }
  });

  const sessionOf = async (id: string) => (await store.getWorkstream(id))?.session;
  const keys = async (id: string) => (await store.readHistory(id)).map((r) => r.commitKey);

  describe('the fencing of session snapshots', () => {
    it('P6: saveSession with a superseded token is refused FENCED and leaves the new holder’s snapshot', async () => {
      const dead = (await store.acquireLease('a', 'host-a:1', 1_000))!;
      await store.saveSession({
        workstreamId: 'a',
        fencingToken: dead.token,
        session: snap('streaming', 'dead'),
      });
      expect(await sessionOf('a')).toEqual(snap('streaming', 'dead'));
      clock.advance(1_000);
      const live = (await store.acquireLease('a', 'host-b:1', 1_000))!;
      await store.saveSession({
        workstreamId: 'a',
        fencingToken: live.token,
        session: snap('idle', 'repaired'),
      });
      // The first holder resumes and writes the snapshot it had: refused, nothing changes.
      await expect(
        store.saveSession({
          workstreamId: 'a',
          fencingToken: dead.token,
          session: snap('tool-debt', 'late'),
        }),
      ).rejects.toMatchObject({
        code: 'FENCED',
        details: {
          workstreamId: 'a',
          fencingToken: dead.token,
          reason: 'superseded',
          currentToken: live.token,
        },
      });
      expect(await sessionOf('a')).toEqual(snap('idle', 'repaired'));
      // The live token still writes.
      await store.saveSession({
        workstreamId: 'a',
        fencingToken: live.token,
        session: snap('claimed', 'next'),
      });
      expect(await sessionOf('a')).toEqual(snap('claimed', 'next'));
    });

    it('P6: saveSession is fenced with no lease, a token never issued, a lapsed and a released lease; nothing is stored', async () => {
      const before = snap('idle', 'before');
      await store.saveSession({ workstreamId: 'a', session: before }); // unfenced: written as given
      expect(await sessionOf('a')).toEqual(before);
      const refused = (token: number, reason: string) =>
        expect(
          store.saveSession({ workstreamId: 'a', fencingToken: token, session: snap('claimed', reason) }),
        ).rejects.toMatchObject({ code: 'FENCED', details: { reason } });
      await refused(1, 'no_lease');
      const lease = (await store.acquireLease('a', 'h', 1_000))!;
      await refused(lease.token + 1, 'unknown_token');
      clock.advance(999);
      // One millisecond before expiry it is live …
      await store.saveSession({
        workstreamId: 'a',
        fencingToken: lease.token,
        session: snap('claimed', 'live'),
      });
      expect(await sessionOf('a')).toEqual(snap('claimed', 'live'));
      // … at expiry it is not (live while now < expiresAt).
      clock.advance(1);
      await refused(lease.token, 'expired');
      const again = (await store.acquireLease('a', 'h', 1_000))!;
      await store.releaseLease('a', 'h', again.token);
      await refused(again.token, 'released');
      expect(await sessionOf('a')).toEqual(snap('claimed', 'live'));
    });

    it('P6: saveSession refuses a missing or closed workstream with its typed error', async () => {
      await expect(
        store.saveSession({ workstreamId: 'nope', session: snap('idle', 'x') }),
      ).rejects.toMatchObject({
        code: 'WORKSTREAM_NOT_FOUND',
      });
      await store.closeWorkstream('c', snap('closed', 'final'));
      await expect(
        store.saveSession({ workstreamId: 'c', session: snap('idle', 'x') }),
      ).rejects.toMatchObject({
        code: 'WORKSTREAM_CLOSED',
      });
      expect(await sessionOf('c')).toEqual(snap('closed', 'final'));
    });

    it('P6: a fenced saveSession holds across two connections to one database (a paused host and the new holder)', async () => {
      const db = backend.database();
      const paused = await db.open(clock);
      const taker = await db.open(clock);
      await paused.createWorkstream({ id: 'w', tenantId: 't' });
      const old = (await paused.acquireLease('w', 'host-a:1', 1_000))!;
      await paused.saveSession({
        workstreamId: 'w',
        fencingToken: old.token,
        session: snap('tool-debt', 'a'),
      });
      clock.advance(1_000);
      const next = (await taker.acquireLease('w', 'host-b:1', 1_000))!;
      await taker.saveSession({ workstreamId: 'w', fencingToken: next.token, session: snap('idle', 'b') });
      await expect(
        paused.saveSession({ workstreamId: 'w', fencingToken: old.token, session: snap('idle', 'a-late') }),
      ).rejects.toMatchObject({ code: 'FENCED', details: { reason: 'superseded' } });
      expect((await taker.getWorkstream('w'))?.session).toEqual(snap('idle', 'b'));
      expect((await paused.getWorkstream('w'))?.session).toEqual(snap('idle', 'b'));
    });

    it('P6 P1 S1: appendMessages stores its snapshot only with its rows: a fenced, conflicting or structurally refused batch leaves it', async () => {
      const lease = (await store.acquireLease('a', 'h', 60_000))!;
      await store.appendMessages({
        workstreamId: 'a',
        generation: 1,
        fencingToken: lease.token,
        entries: [user('u1', 'first')],
        session: snap('claimed', 'with-u1'),
      });
      expect(await sessionOf('a')).toEqual(snap('claimed', 'with-u1'));
      const refusedWith = async (code: string, input: Partial<AppendInput>) => {
        await expect(
          store.appendMessages({ workstreamId: 'a', generation: 1, entries: [], ...input }),
        ).rejects.toMatchObject({ code });
        expect(await sessionOf('a')).toEqual(snap('claimed', 'with-u1'));
        expect(await keys('a')).toEqual(['u1']);
      };
      await refusedWith('FENCED', {
        fencingToken: lease.token + 1,
        entries: [assistant('a1')],
        session: snap('idle', 'unknown-token'),
      });
      await refusedWith('COMMIT_CONFLICT', {
        fencingToken: lease.token,
        entries: [user('u1', 'another body')],
        session: snap('idle', 'conflict'),
      });
      await refusedWith('STRUCTURE_VIOLATION', {
        fencingToken: lease.token,
        entries: [toolResult('t0', 'nobody-called', 0)],
        session: snap('idle', 'structure'),
      });
      await refusedWith('INVALID_INPUT', {
        fencingToken: lease.token,
        entries: [assistant('a1')],
        session: snap('idle', 'generation'),
        generation: 2, // never issued
      });
      clock.advance(60_000);
      await refusedWith('FENCED', {
        fencingToken: lease.token,
        entries: [assistant('a1')],
        session: snap('idle', 'expired'),
      });
    });

    it('P2: a batch without a snapshot leaves the stored one, alone or in a group commit beside one that carries its own', async () => {
      await store.saveSession({ workstreamId: 'a', session: snap('idle', 'kept') });
      await store.saveSession({ workstreamId: 'b', session: snap('idle', 'b-before') });
      await store.appendMessages({ workstreamId: 'a', generation: 1, entries: [user('u1')] });
      expect(await sessionOf('a')).toEqual(snap('idle', 'kept'));
      const outcomes = await store.appendMany([
        { workstreamId: 'a', generation: 1, entries: [assistant('a1')] },
        { workstreamId: 'b', generation: 1, entries: [user('u1')], session: snap('claimed', 'b-after') },
      ]);
      expect(outcomes).toEqual([{ seqs: [2] }, { seqs: [1] }]);
      expect(await sessionOf('a')).toEqual(snap('idle', 'kept'));
      expect(await sessionOf('b')).toEqual(snap('claimed', 'b-after'));
    });

    it('P6 P2: a group commit stores each accepted batch’s snapshot; a refused batch (stale token, conflict) leaves its workstream’s as the batches before it left it', async () => {
      await store.appendMessages({ workstreamId: 'c', generation: 1, entries: [user('c-u', 'first')] });
      await store.saveSession({ workstreamId: 'b', session: snap('idle', 'b-before') });
      await store.saveSession({ workstreamId: 'c', session: snap('idle', 'c-before') });
      const stale = (await store.acquireLease('b', 'host-a:1', 1_000))!;
      clock.advance(1_000);
      const live = (await store.acquireLease('b', 'host-b:1', 60_000))!;
      const out = await store.appendMany([
        // a: accepted, then a conflict of a's own: a keeps the first batch's snapshot.
        { workstreamId: 'a', generation: 1, entries: [user('a-u')], session: snap('claimed', 'a-1') },
        // b: the paused holder's batch — refused, and so is its snapshot.
        {
          workstreamId: 'b',
          generation: 1,
          fencingToken: stale.token,
          entries: [user('b-late')],
          session: snap('tool-debt', 'b-stale'),
        },
        { workstreamId: 'a', generation: 1, entries: [user('a-u', 'changed')], session: snap('idle', 'a-2') },
        // c: a conflict — its snapshot stays the one from before the group.
        {
          workstreamId: 'c',
          generation: 1,
          entries: [user('c-u', 'other')],
          session: snap('idle', 'c-conflict'),
        },
      ]);
      expect(out.map((o) => ('seqs' in o ? o.seqs : o.error.code))).toEqual([
        [1],
        'FENCED',
        'COMMIT_CONFLICT',
        'COMMIT_CONFLICT',
      ]);
      expect(await sessionOf('a')).toEqual(snap('claimed', 'a-1'));
      expect(await sessionOf('b')).toEqual(snap('idle', 'b-before'));
      expect(await sessionOf('c')).toEqual(snap('idle', 'c-before'));
      expect(await keys('b')).toEqual([]);
      // The live holder's batch in a group with a refused one of another workstream: stored.
      const next = await store.appendMany([
        {
          workstreamId: 'c',
          generation: 1,
          fencingToken: 99,
          entries: [assistant('c-a')],
          session: snap('idle', 'c-no-lease'),
        },
        {
          workstreamId: 'b',
          generation: 1,
          fencingToken: live.token,
          entries: [user('b-u')],
          session: snap('claimed', 'b-live'),
        },
      ]);
      expect(next.map((o) => ('seqs' in o ? o.seqs : o.error.code))).toEqual(['FENCED', [1]]);
      expect(await sessionOf('b')).toEqual(snap('claimed', 'b-live'));
      expect(await sessionOf('c')).toEqual(snap('idle', 'c-before'));
      expect(await keys('c')).toEqual(['c-u']);
    });

    it('P6 P2: in a group commit, a workstream’s last accepted batch decides its snapshot, a later refused one does not', async () => {
      const old = (await store.acquireLease('a', 'h', 60_000))!;
      await store.releaseLease('a', 'h', old.token);
      const lease = (await store.acquireLease('a', 'h', 60_000))!;
      const out = await store.appendMany([
        {
          workstreamId: 'a',
          generation: 1,
          fencingToken: lease.token,
          entries: [user('u')],
          session: snap('claimed', '1'),
        },
        {
          workstreamId: 'a',
          generation: 1,
          fencingToken: lease.token,
          entries: [assistant('x')],
          session: snap('streaming', '2'),
        },
        // A stale token for the same workstream, later in the group.
        {
          workstreamId: 'a',
          generation: 1,
          fencingToken: old.token,
          entries: [user('late')],
          session: snap('idle', 'stale'),
        },
      ]);
      expect(out.map((o) => ('seqs' in o ? o.seqs : o.error.code))).toEqual([[1], [2], 'FENCED']);
      expect(await sessionOf('a')).toEqual(snap('streaming', '2'));
      expect(await keys('a')).toEqual(['u', 'x']);
    });
  });
});
