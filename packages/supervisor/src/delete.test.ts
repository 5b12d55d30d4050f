/**
 * Deleting workstreams: conditional on the incarnation (D1), ambiguous deletes leave a hidden
 * tombstone (D2) that retires only on proof (D3), a predecessor never reaches its successor
 * (D4), listeners are closed once (D6). Counterparts of the structure suite's delete tests.
 */
import { ErrorCode, TurnwardenError, workstreamKey } from '@turnwarden/protocol';
import { openSqliteStore, type SqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import type { TurnwardenEvent } from './streams/events.js';
import { refusal, within } from './test-support/bounded.js';
import { interceptStore } from './test-support/intercept.js';
import { nextEvent, script, startRuntime } from './test-support/runtime.js';
import { testControls } from './testing.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };

/** A store whose next delete fails: before it runs, after it ran (a lost acknowledgement), and whose reads can fail. */
function flakyDeletes(inner: SqliteStore) {
  let mode: 'ok' | 'before' | 'after' = 'ok';
  let readsFail = false;
  const injected = () => {
    throw new TurnwardenError(ErrorCode.STORE_ERROR, 'injected: the delete was not acknowledged');
  };
  const store = interceptStore(inner, {
    getWorkstream: (original, ...args) =>
      readsFail ? Promise.reject(new Error('injected: the store cannot be reached')) : original(...args),
    deleteWorkstream: async (original, ...args) => {
      const m = mode;
      mode = 'ok';
      if (m === 'before') injected();
      const done = await original(...args);
      if (m === 'after') injected();
      return done;
    },
  });
  return {
    store,
    failNext(m: 'before' | 'after') {
      mode = m;
    },
    failReads(on: boolean) {
      readsFail = on;
    },
  };
}

const closes = (events: readonly TurnwardenEvent[]) => events.filter((e) => e.type === 'ws_closed');

describe('deleting workstreams', () => {
  it('D1 D6: delete is conditional on the incarnation; listeners are closed once; the id can be created again and is a new workstream', async () => {
    rt = await startRuntime();
    const first = await rt.tw.getWorkstream(ref);
    await (await rt.send('hello')).done;

    const wrong = await refusal(rt.tw.deleteWorkstream({ ...ref, incarnation: 'not-this-one' }));
    expect(wrong.code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect(await rt.history()).toHaveLength(2);

    await rt.tw.deleteWorkstream({ ...ref, incarnation: first.incarnation });
    expect(closes(rt.events)).toEqual([expect.objectContaining({ data: { reason: 'deleted' } })]);
    expect(rt.tw.stats().events.listeners).toBe(0);
    expect((await refusal(rt.tw.getWorkstream(ref))).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect((await rt.tw.listWorkstreams({ tenantId: 'tenant-a', principal: 'user-a' })).items).toEqual([]);

    // Created again: another incarnation, an empty history, a stream of its own.
    const second = await rt.tw.createWorkstream(ref);
    expect(second.incarnation).not.toBe(first.incarnation);
    const heard: TurnwardenEvent[] = [];
    await rt.tw.subscribe({ ...ref, listener: (e) => heard.push(e) });
    expect(heard).toEqual([]);
    expect((await rt.tw.history(ref)).rows).toEqual([]);
    // The first incarnation's delete does not reach the second (D1).
    expect((await refusal(rt.tw.deleteWorkstream({ ...ref, incarnation: first.incarnation }))).code).toBe(
      ErrorCode.WORKSTREAM_NOT_FOUND,
    );
    expect((await (await rt.send('again')).done).status).toBe('completed');
    expect((await rt.tw.getWorkstream(ref)).incarnation).toBe(second.incarnation);
  });

  it('D4 D6: a delete during a turn aborts and settles it first; nothing of the predecessor reaches its successor', async () => {
    rt = await startRuntime();
    const { incarnation } = await rt.tw.getWorkstream(ref);
    const turn = await rt.send(script({ tools: [{ name: 'sleep', args: { ms: 60_000 } }] }));
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    // The send is in the queue before the delete runs (on a slower store its lookup could
    // otherwise run after the delete, and be refused as not found, which is right for it).
    const inQueue = rt.waitForLog('send queued behind the running turn');
    const queued = refusal(rt.send('behind the turn'));
    await within(inQueue, 10_000, 'the second send is queued');
    await rt.tw.deleteWorkstream({ ...ref, incarnation });
    // The turn had ended — aborted, its calls repaired — before the delete resolved.
    expect(await turn.done).toMatchObject({ status: 'interrupted', abortReason: 'workstream_gone' });
    expect(await queued).toMatchObject({ code: ErrorCode.SEND_REVOKED, details: { reason: 'gone' } });
    const lastOfPredecessor = rt.events.at(-1)!;
    expect(lastOfPredecessor).toMatchObject({ type: 'ws_closed', data: { reason: 'deleted' } });

    await rt.tw.createWorkstream(ref);
    const heard: TurnwardenEvent[] = [];
    await rt.tw.subscribe({ ...ref, listener: (e) => heard.push(e) });
    await (await rt.send('fresh')).done;
    expect((await rt.tw.history(ref)).rows.map((r) => r.message.content)).toEqual(['fresh', 'echo: fresh']);
    expect(heard.every((e) => e.generation === undefined || e.generation === 1)).toBe(true);
    expect(heard.some((e) => e.type === 'ws_closed')).toBe(false);
  });

  it('D4: the turn handle of a deleted workstream cannot cancel a turn of the one created again under its id', async () => {
    rt = await startRuntime();
    const { incarnation } = await rt.tw.getWorkstream(ref);
    const old = await rt.send('first');
    await old.done;
    await rt.tw.deleteWorkstream({ ...ref, incarnation });
    await rt.tw.createWorkstream(ref);
    const successor = await rt.send(
      script({ tools: [{ name: 'sleep', args: { ms: 50 } }] }, { text: 'done' }),
    );
    // Both are generation 1 of their incarnation.
    expect(successor.generation).toBe(old.generation);
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    await old.cancel();
    expect(await successor.done).toMatchObject({ status: 'completed', finalText: 'done' });
  });

  it('D2 D3: an ambiguous delete leaves a hidden tombstone: not listed, gettable or re-creatable; the same incarnation keeps it, an explicit retry finishes and closes listeners once', async () => {
    const flaky = flakyDeletes(openSqliteStore({ path: ':memory:' }));
    rt = await startRuntime({ store: flaky.store });
    const { incarnation } = await rt.tw.getWorkstream(ref);
    await (await rt.send('hello')).done;

    flaky.failNext('before');
    expect((await refusal(rt.tw.deleteWorkstream({ ...ref, incarnation }))).code).toBe(ErrorCode.STORE_ERROR);
    // Hidden, though its row is still there.
    expect((await refusal(rt.tw.getWorkstream(ref))).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect((await rt.tw.listWorkstreams({ tenantId: 'tenant-a', principal: 'user-a' })).items).toEqual([]);
    expect((await refusal(rt.send('hello?'))).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect(await refusal(rt.tw.createWorkstream(ref))).toMatchObject({
      code: ErrorCode.WORKSTREAM_EXISTS,
      details: { reason: 'deleting' },
    });
    expect(closes(rt.events)).toEqual([]);

    // D3: the sweep finds the same incarnation — or cannot tell — and keeps the tombstone.
    await testControls(rt.tw).probeTombstones();
    flaky.failReads(true);
    await testControls(rt.tw).probeTombstones();
    flaky.failReads(false);
    expect((await refusal(rt.tw.getWorkstream(ref))).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect(closes(rt.events)).toEqual([]);

    // The explicit retry finishes the delete; listeners are closed once.
    await rt.tw.deleteWorkstream({ ...ref, incarnation });
    expect(closes(rt.events)).toHaveLength(1);
    expect((await rt.tw.createWorkstream(ref)).incarnation).not.toBe(incarnation);
  });

  it('D2 D3: a delete whose acknowledgement was lost is retired once the sweep proves the row gone; closed once', async () => {
    const flaky = flakyDeletes(openSqliteStore({ path: ':memory:' }));
    rt = await startRuntime({ store: flaky.store });
    const { incarnation } = await rt.tw.getWorkstream(ref);
    flaky.failNext('after');
    expect((await refusal(rt.tw.deleteWorkstream({ ...ref, incarnation }))).code).toBe(ErrorCode.STORE_ERROR);
    expect(closes(rt.events)).toEqual([]);
    expect(await refusal(rt.tw.createWorkstream(ref))).toMatchObject({ details: { reason: 'deleting' } });
    await testControls(rt.tw).probeTombstones();
    expect(closes(rt.events)).toHaveLength(1);
    // Retired: the id is free, and a late retry of the delete finds nothing.
    await testControls(rt.tw).probeTombstones();
    expect(closes(rt.events)).toHaveLength(1);
    expect((await refusal(rt.tw.deleteWorkstream({ ...ref, incarnation }))).code).toBe(
      ErrorCode.WORKSTREAM_NOT_FOUND,
    );
    await rt.tw.createWorkstream(ref);
  });

  it("lists a tenant's workstreams a page at a time, never another tenant's", async () => {
    rt = await startRuntime();
    for (const id of ['b', 'c', 'a'])
      await rt.tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: id });
    await rt.tw.createWorkstream({ tenantId: 'tenant-b', principal: 'user-b', workstreamId: 'z' });
    const one = await rt.tw.listWorkstreams({ tenantId: 'tenant-a', principal: 'user-a', limit: 3 });
    expect(one.items.map((w) => w.workstreamId)).toEqual(['a', 'b', 'c']);
    const two = await rt.tw.listWorkstreams({
      tenantId: 'tenant-a',
      principal: 'user-a',
      limit: 3,
      cursor: one.nextCursor!,
    });
    expect(two.items.map((w) => w.workstreamId)).toEqual(['ws-1']);
    expect(two.nextCursor).toBeUndefined();
    expect(two.items[0]).toMatchObject({ tenantId: 'tenant-a', status: 'open', generation: 0 });
    expect(
      (await refusal(rt.tw.listWorkstreams({ tenantId: 'tenant-a', principal: 'user-a', cursor: '!!' })))
        .details,
    ).toEqual({
      field: 'cursor',
    });
    expect(
      (await refusal(rt.tw.getWorkstream({ tenantId: 'tenant-b', principal: 'user-b', workstreamId: 'a' })))
        .code,
    ).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
  });
});

describe('the lifecycle feed', () => {
  it('D5: a creation is advertised only once it committed; one whose creation failed ambiguously is never advertised, nor its close; it never suppresses a successor', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    const committed = new Set<string>();
    let failAfterCommit = false;
    const store = interceptStore(inner, {
      createWorkstream: async (original, ...args) => {
        const rec = (await original(...args)) as { id: string };
        committed.add(rec.id);
        if (failAfterCommit) {
          failAfterCommit = false;
          throw new TurnwardenError(ErrorCode.STORE_ERROR, 'injected: the creation was not acknowledged');
        }
        return rec;
      },
    });
    rt = await startRuntime({ store });
    const feed: string[] = [];
    const off = rt.tw.subscribeWorkstreams({
      tenantId: 'tenant-a',
      principal: 'user-a',
      listener: (e) => {
        // Advertised only once the row is committed.
        if (e.type === 'ws_created' && !committed.has(workstreamKey('tenant-a', e.workstreamId)))
          feed.push('premature');
        feed.push(`${e.type}:${e.workstreamId}${e.reason ? `:${e.reason}` : ''}`);
      },
    });
    rt.tw.subscribeWorkstreams({
      tenantId: 'tenant-b',
      principal: 'user-b',
      listener: (e) => feed.push(`other tenant ${e.type}`),
    });

    await rt.tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'a' });
    // An ambiguous creation: the row exists, but it was never confirmed, so never advertised.
    failAfterCommit = true;
    expect(
      (
        await refusal(
          rt.tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'b' }),
        )
      ).code,
    ).toBe(ErrorCode.STORE_ERROR);
    const hidden = await rt.tw.getWorkstream({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: 'b',
    });
    await rt.tw.deleteWorkstream({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: 'b',
      incarnation: hidden.incarnation,
    });
    // Its successor is advertised, and so is its close.
    const successor = await rt.tw.createWorkstream({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: 'b',
    });
    await rt.tw.deleteWorkstream({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: 'b',
      incarnation: successor.incarnation,
    });
    // Another unadvertised one, deleted by another process sharing the store: its successor is
    // advertised, and its close is not suppressed by the predecessor it never heard of.
    failAfterCommit = true;
    await refusal(rt.tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'c' }));
    expect(await inner.deleteWorkstream(workstreamKey('tenant-a', 'c'))).toBe(true);
    await rt.tw.createWorkstream({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'c' });
    await rt.tw.close({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'c' });
    await rt.tw.close({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'a' });
    off();
    await rt.tw.close({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' });
    expect(feed).toEqual([
      'ws_created:a',
      'ws_created:b',
      'ws_closed:b:deleted',
      'ws_created:c',
      'ws_closed:c:closed',
      'ws_closed:a:closed',
    ]);
  });
});
