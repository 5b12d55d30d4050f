import { copyFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { assistant, FakeClock, Sandbox, toolResult, user } from './test-support/fixtures.js';
import { forEachStore } from './test-support/stores.js';

const sandbox = new Sandbox();
afterEach(() => sandbox.dispose());

describe('crash recovery (SQLite: a killed process leaves the database and its WAL)', () => {
  it('S7: a reopened file lists dangling tool calls and stale leases, and the repair is fenced', async () => {
    const dir = sandbox.dir();
    const clock = new FakeClock(1_000_000);
    const live = sandbox.open(join(dir, 'live.sqlite'), clock);
    for (const id of ['debt', 'clean', 'idle']) await live.createWorkstream({ id, tenantId: 't' });

    const generation = await live.nextGeneration('debt');
    const lease = (await live.acquireLease('debt', 'host-dead', 30_000))!;
    await live.appendMessages({
      workstreamId: 'debt',
      generation,
      fencingToken: lease.token,
      entries: [user('u1'), assistant('a1', ['dup', 'dup', 'c3']), toolResult('r1', 'dup', 0)],
    });
    await live.appendMessages({
      workstreamId: 'clean',
      generation: 0,
      entries: [user('u1'), assistant('a1', ['c1']), toolResult('r1', 'c1', 0), assistant('a2')],
    });

    // What a killed process leaves behind: the database and its WAL, never checkpointed.
    const crashed = join(dir, 'crashed.sqlite');
    copyFileSync(join(dir, 'live.sqlite'), crashed);
    expect(existsSync(join(dir, 'live.sqlite-wal'))).toBe(true);
    copyFileSync(join(dir, 'live.sqlite-wal'), `${crashed}-wal`);

    clock.advance(30_000);
    const store = sandbox.open(crashed, clock);
    const debts = await store.listWorkstreamsWithOpenToolCalls();
    expect(debts.map((d) => d.workstream.id)).toEqual(['debt']);
    expect(debts[0]?.openCalls.map((c) => [c.assistantKey, c.call.id, c.callIndex])).toEqual([
      ['a1', 'dup', 1],
      ['a1', 'c3', 2],
    ]);
    expect((await store.expiredLeases()).map((l) => [l.workstreamId, l.holder, l.token])).toEqual([
      ['debt', 'host-dead', lease.token],
    ]);
    // No new turn while the debt stands.
    await expect(store.closeWorkstream('debt')).rejects.toMatchObject({ code: 'TOOL_CLEANUP_PENDING' });

    const recovery = (await store.acquireLease('debt', 'host-new', 30_000))!;
    expect(recovery.token).toBe(lease.token + 1);
    const synthesized = debts[0]!.openCalls.map((c, i) =>
      toolResult(`recovered-${i}`, c.call.id, c.callIndex, { effect: 'unknown', synthesized: true }),
    );
    // The dead holder's token cannot write the repair (or anything else) any more.
    await expect(
      store.appendMessages({
        workstreamId: 'debt',
        generation,
        fencingToken: lease.token,
        entries: synthesized,
      }),
    ).rejects.toMatchObject({ code: 'FENCED' });
    expect(
      await store.appendMessages({
        workstreamId: 'debt',
        generation,
        fencingToken: recovery.token,
        entries: synthesized,
      }),
    ).toEqual([4, 5]);
    expect(await store.listWorkstreamsWithOpenToolCalls()).toEqual([]);
    expect(await store.expiredLeases()).toEqual([]);
    expect(await store.releaseLease('debt', 'host-new', recovery.token)).toBe(true);
  });
});

forEachStore((backend) => {
  describe('crash recovery scans', () => {
    it('S7: only open workstreams are reported, and a history ending in answered calls is clean', async () => {
      const store = await backend.open(new FakeClock());
      await store.createWorkstream({ id: 'a', tenantId: 't' });
      await store.createWorkstream({ id: 'b', tenantId: 't' });
      await store.appendMessages({
        workstreamId: 'a',
        generation: 0,
        entries: [user('u'), assistant('x', ['c'])],
      });
      await store.appendMessages({
        workstreamId: 'b',
        generation: 0,
        entries: [user('u'), assistant('x', ['c']), toolResult('r', 'c', 0)],
      });
      expect((await store.listWorkstreamsWithOpenToolCalls()).map((d) => d.workstream.id)).toEqual(['a']);
      await store.closeWorkstream('b');
      expect((await store.listWorkstreamsWithOpenToolCalls()).map((d) => d.workstream.id)).toEqual(['a']);
    });
  });
});
