/**
 * P5: a workstream deleted under its session. Counterparts of
 * `test_workstream_gone_discard_is_terminal_nonraising_and_bumps_revision` and
 * `test_gone_discard_is_a_terminal_latch_not_a_phantom_error`.
 */
import { ErrorCode } from '@turnwarden/protocol';
import { type AppendInput, openSqliteStore, type SqliteStore, type Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { refusal, within } from './test-support/bounded.js';
import { interceptStore } from './test-support/intercept.js';
import { nextEvent, script, startRuntime } from './test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
let store: SqliteStore | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  await store?.close();
  rt = undefined;
  store = undefined;
});

/** `inner`, which deletes the workstream just before a claim's user row is written. */
function deletingAtClaim(inner: SqliteStore): Store {
  const userRow = (inputs: readonly AppendInput[]) =>
    inputs.some((i) => i.entries.some((e) => /^g\d+:u$/.test(e.commitKey)));
  const deleteFirst = async (inputs: AppendInput[], write: () => unknown) => {
    if (userRow(inputs)) await inner.deleteWorkstream(inputs[0]!.workstreamId);
    return write();
  };
  return interceptStore(inner, {
    appendMany: (original, ...args) => deleteFirst(args[0] as AppendInput[], () => original(...args)),
    appendMessages: (original, ...args) => deleteFirst([args[0] as AppendInput], () => original(...args)),
  });
}

/** A turn whose tool runs briefly: its result row is written after the deletion. */
const briefTool = script({ tools: [{ name: 'sleep', args: { ms: 50 } }] });

describe('workstream gone (P5)', () => {
  it('P5: deleted under a running turn, the journal is discarded without an error state; one history_resync; the latch refuses what follows', async () => {
    store = openSqliteStore({ path: ':memory:' });
    rt = await startRuntime({ store });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    const turn = await rt.send(briefTool);
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    // A client that read the history and follows from its handoff token (E2).
    const read = await rt.tw.history(ref);
    const following: string[] = [];
    await rt.tw.subscribe({ ...ref, handoff: read.handoff, listener: (e) => following.push(e.type) });
    const inQueue = rt.waitForLog('send queued behind the running turn');
    const queued = refusal(rt.send('waiting behind the turn'));
    await within(inQueue, 10_000, 'the second send is queued');
    expect(await store.deleteWorkstream(rt.key)).toBe(true);

    // The tool's result meets the deletion: discarded, and the turn ends — aborted, not failed.
    const result = await within(turn.done, 10_000, 'the turn ends after the deletion');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'workstream_gone', synthesized: 0 });
    // Aborted like any cancelled turn: no store error reaches the host.
    expect(result.error?.code).toBe(ErrorCode.TURN_ABORTED);

    // Exactly one repair event names the deletion; no persistence trouble was reported.
    const resyncs = rt.events.filter((e) => e.type === 'history_resync');
    expect(resyncs.map((e) => e.data)).toEqual([{ reason: 'workstream_gone' }]);
    // The token's follower is told its history is void; a new token cannot be minted (not found).
    expect(following.filter((t) => t === 'history_resync')).toHaveLength(1);
    expect((await refusal(rt.tw.history(ref))).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    const persistence = rt.events.filter((e) => e.type === 'persistence').map((e) => e.data.state);
    expect(persistence.filter((s) => s === 'retrying' || s === 'conflict')).toEqual([]);
    expect(rt.logged('journal write failed; retrying')).toEqual([]);
    // Whichever write met the deletion first (a row, a machine snapshot), the session latched once.
    expect(
      rt.logged('workstream deleted under its session: its writes are discarded and no new turn is admitted'),
    ).toHaveLength(1);
    expect(rt.logged('turn finish failed')).toEqual([]);

    // The latch: the send waiting behind the turn never starts; nothing later is admitted.
    const revoked = await queued;
    expect(revoked.code).toBe(ErrorCode.SEND_REVOKED);
    expect(revoked.details).toMatchObject({ reason: 'gone' });
    expect((await refusal(rt.send('after'))).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect((await refusal(rt.tw.rewind({ ...ref, turns: 1 }))).code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect(rt.tw.stats().activeTurns).toBe(0);
  });

  it('P5: a soft close waiting on the turn succeeds, the finalizers having run; a workstream created again under the id is served', async () => {
    store = openSqliteStore({ path: ':memory:' });
    rt = await startRuntime({ store });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    const turn = await rt.send(briefTool);
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const closed = rt.tw.close({ ...ref, waitMs: 30_000 });
    await rt.waitForLog('soft close waiting for the running turn');
    expect(await store.deleteWorkstream(rt.key)).toBe(true);
    await within(closed, 10_000, 'the soft close completes');
    expect(await turn.done).toMatchObject({ status: 'interrupted', abortReason: 'workstream_gone' });
    expect(rt.types()).toContain('ws_closed');
    expect(rt.logged('turn finish failed')).toEqual([]);

    // The latch names the deleted session, not the id: a new workstream under it runs turns.
    await rt.tw.createWorkstream(ref);
    const next = await rt.send('hello again');
    expect(await next.done).toMatchObject({ status: 'completed' });
    expect((await rt.history()).map((r) => r.message.role)).toEqual(['user', 'assistant']);
  });

  it('P5: deleted between a claim reading the history and writing its user row: the send is refused, no turn starts', async () => {
    store = openSqliteStore({ path: ':memory:' });
    rt = await startRuntime({ store: deletingAtClaim(store) });
    const e = await refusal(rt.send('hello'));
    expect(e.code).toBe(ErrorCode.WORKSTREAM_NOT_FOUND);
    expect(e.details).toMatchObject({ reason: 'deleted' });
    expect(rt.types()).not.toContain('turn_started');
    expect(rt.events.filter((ev) => ev.type === 'history_resync').map((ev) => ev.data)).toEqual([
      { reason: 'workstream_gone' },
    ]);
    expect(rt.tw.stats()).toMatchObject({ activeTurns: 0, pool: { busy: 0 } });
  });
});
