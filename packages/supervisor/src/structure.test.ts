/** Structural debt after failures (S3, S4, C5): repair, poison, rollback. */
import { ErrorCode, type HarnessLink, openToolCalls, SeamName, TurnwardenError } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { refusal, within } from './test-support/bounded.js';
import { assistantRow, faultyStore, synthesized } from './test-support/faulty-store.js';
import { gatedStore } from './test-support/gated-store.js';
import { interceptStore } from './test-support/intercept.js';
import { leaseStore } from './test-support/lease-store.js';
import { nextEvent, script, startRuntime } from './test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

/** Resolves when the call occurrence `callIndex` has started. */
function nextToolStart(r: Rt, callIndex: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const subscribed = r.tw.subscribe({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: r.workstreamId,
      listener: (e) => {
        if (e.type !== 'tool_started' || e.data.callIndex !== callIndex) return;
        void subscribed.then((off) => off());
        resolve();
      },
    });
    subscribed.catch(reject);
  });
}

const hangingTool = script({ tools: [{ name: 'sleep', args: { ms: 60_000, ignoreAbort: true } }] });

describe('structural debt', () => {
  it('S3 C5: a failed repair refuses claims with TOOL_CLEANUP_PENDING; a failed cancel stays poisoned, a retry repairs', async () => {
    const faulty = faultyStore();
    rt = await startRuntime({ store: faulty.store });
    const turn = await rt.send(hangingTool);
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    faulty.reject(1, synthesized); // the cancel's repair fails once
    expect(
      await rt.tw.cancel({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId }),
    ).toBe(true);
    expect((await turn.done).synthesized).toBe(0);
    expect(openToolCalls(await rt.history())).toHaveLength(1);
    expect(
      (await rt.tw.status({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId }))
        .cleanupPending,
    ).toBe(true);

    // S3: no claim while the debt is unresolved, with a typed error; nothing is written.
    const rowsBefore = (await rt.history()).length;
    expect((await refusal(rt.send('next'))).code).toBe(ErrorCode.TOOL_CLEANUP_PENDING);
    expect(await rt.history()).toHaveLength(rowsBefore);

    // C5: a repair that fails again leaves it poisoned …
    faulty.reject(1, synthesized);
    expect(
      (
        await refusal(
          rt.tw.cancel({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId }),
        )
      ).code,
    ).toBe(ErrorCode.STORE_ERROR);
    expect((await refusal(rt.send('next'))).code).toBe(ErrorCode.TOOL_CLEANUP_PENDING);
    // … and a retry repairs and unpoisons.
    expect(
      await rt.tw.cancel({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId }),
    ).toBe(true);
    const rows = await rt.history();
    expect(openToolCalls(rows)).toEqual([]);
    expect(rows.filter((r) => r.message.role === 'tool').map((r) => r.message)).toEqual([
      expect.objectContaining({ synthesized: true, effect: 'unknown' }),
    ]);
    expect((await (await rt.send('next')).done).status).toBe('completed');
  });

  it('S1 S2: a cancelled turn whose calls share one provider id gets exactly one result per occurrence', async () => {
    rt = await startRuntime();
    const turn = await rt.send(
      script({
        tools: [
          { name: 'echo', args: { text: 'first' }, id: 'dup' },
          { name: 'sleep', args: { ms: 60_000, ignoreAbort: true }, id: 'dup' },
          { name: 'echo', args: { text: 'third' }, id: 'dup' },
        ],
      }),
    );
    // The second occurrence is running: its id is already answered once (by the first).
    await nextToolStart(rt, 1);
    expect(
      await rt.tw.cancel({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId }),
    ).toBe(true);
    expect(await turn.done).toMatchObject({ status: 'interrupted', abortReason: 'cancel', synthesized: 2 });
    const rows = await rt.history();
    expect(openToolCalls(rows)).toEqual([]);
    const tools = rows.flatMap((r) => (r.message.role === 'tool' ? [r.message] : []));
    expect(tools.map((m) => [m.toolCallId, m.callIndex, m.effect, m.synthesized === true])).toEqual([
      ['dup', 0, 'applied', false],
      ['dup', 1, 'unknown', true], // started, interrupted: its effect is not known
      ['dup', 2, 'none', true], // provably never started
    ]);
    expect((await (await rt.send('next')).done).status).toBe('completed');
  });

  it('P2 L3: a row admitted before the abort committed is durable before repair reads history, however late the store completes it', async () => {
    const leases = leaseStore();
    rt = await startRuntime({ store: leases.store });
    const r = rt;
    let readWhileHeld = false;
    // The tool's result is admitted (the turn is live) but the store holds its write; meanwhile
    // the turn is cancelled. Repair must not read history until that write has landed.
    leases.beforeAppend(
      (e) => e.message.role === 'tool' && e.message.synthesized !== true,
      async () => {
        const aborted = nextEvent(r.tw, r.workstreamId, 'turn_aborted');
        void r.tw.cancel({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: r.workstreamId });
        await aborted;
        readWhileHeld = await leases.nextRead(300);
      },
    );
    const turn = await r.send(
      script({ tools: [{ name: 'echo', args: { text: 'landed' } }] }, { text: 'after' }),
    );
    const result = await within(turn.done, 10_000, 'the cancelled turn settles');
    expect(readWhileHeld).toBe(false);
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'cancel', synthesized: 0 });
    const tools = (await r.history()).flatMap((row) => (row.message.role === 'tool' ? [row.message] : []));
    expect(tools).toEqual([expect.objectContaining({ content: 'landed', effect: 'applied' })]);
    expect(
      (await r.tw.status({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: r.workstreamId }))
        .cleanupPending,
    ).toBe(false);
  });

  it('C5: force cancel on an idle, clean workstream is a silent no-op', async () => {
    rt = await startRuntime();
    await (await rt.send('hello')).done;
    const before = rt.events.length;
    expect(
      await rt.tw.cancel({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId }),
    ).toBe(false);
    expect(rt.events.length).toBe(before);
  });

  it('S4: a rejected assistant row leaves nothing behind: no row, no debt, and the next turn runs', async () => {
    const faulty = faultyStore();
    rt = await startRuntime({ store: faulty.store });
    faulty.reject(1, assistantRow);
    const result = await (
      await rt.send(
        script({ tools: [{ name: 'echo', args: { text: 'never run' } }] }, { text: 'never said' }),
      )
    ).done;
    expect(result.status).toBe('failed');
    expect(result.error?.code).toBe(ErrorCode.STORE_ERROR);
    expect(result.synthesized).toBe(0);
    const rows = await rt.history();
    expect(rows.map((r) => r.message.role)).toEqual(['user']);
    expect(rt.types()).not.toContain('tool_started');
    expect(
      (await rt.tw.status({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId }))
        .cleanupPending,
    ).toBe(false);
    expect((await (await rt.send('again')).done).status).toBe('completed');
  });

  it('S4: a rejected user row leaves nothing behind: the send fails, no turn starts, the session stays idle', async () => {
    const faulty = faultyStore();
    rt = await startRuntime({ store: faulty.store });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    faulty.reject(1, (e) => e.message.role === 'user');
    const e = await refusal(rt.send('hello'));
    expect(e.code).toBe(ErrorCode.STORE_ERROR);
    expect(await rt.history()).toEqual([]);
    expect(rt.types()).not.toContain('turn_started');
    expect(await rt.tw.status(ref)).toMatchObject({ state: 'idle', cleanupPending: false });
    expect(rt.tw.stats()).toMatchObject({ activeTurns: 0, pool: { busy: 0 } });
    expect((await (await rt.send('again')).done).status).toBe('completed');
    expect((await rt.history()).map((r) => r.message.content)).toEqual(['again', 'echo: again']);
  });

  it('S4: a rejected system row (a compaction summary) leaves the history as it was', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    let rejectNext = true;
    const store = interceptStore(inner, {
      compactHistory: (original, ...args) => {
        if (!rejectNext) return original(...args);
        rejectNext = false;
        return Promise.reject(new TurnwardenError(ErrorCode.STORE_ERROR, 'injected: compaction rejected'));
      },
    });
    rt = await startRuntime({ store });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    await (await rt.send('hello')).done;
    const before = await rt.history();
    const e = await refusal(rt.tw.compact({ ...ref, throughSeq: 2, summary: 'The user said hello.' }));
    expect(e.code).toBe(ErrorCode.STORE_ERROR);
    expect(await rt.history()).toEqual(before);
    expect((await (await rt.send('next')).done).status).toBe('completed');
    expect(await rt.tw.compact({ ...ref, throughSeq: 2, summary: 'The user said hello.' })).toEqual({
      removed: 2,
    });
  });

  it('C7 S1: a successor sent while a force cancel is repairing the turn starts only on a complete history', async () => {
    rt = await startRuntime();
    const turn = await rt.send(hangingTool);
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const cancelled = rt.tw.cancel({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
    });
    // Sent at once, while the wedged tool is being abandoned: it may wait, it may not cross.
    const successor = await rt.send('successor');
    expect(await cancelled).toBe(true);
    expect(await turn.done).toMatchObject({ status: 'interrupted', synthesized: 1 });
    expect((await successor.done).status).toBe('completed');
    const rows = await rt.history();
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool', 'user', 'assistant']);
    expect(rows[2]!.message).toMatchObject({ synthesized: true, effect: 'unknown' });
    expect(openToolCalls(rows)).toEqual([]);
  });

  it('S5: a rejected tool row keeps the assistant debt, ends the turn, and poisons claims until a repair succeeds', async () => {
    const faulty = faultyStore();
    rt = await startRuntime({ store: faulty.store });
    // The tool's own result is rejected, and so is the automatic repair after it.
    faulty.reject(2, (e) => e.message.role === 'tool');
    const result = await (
      await rt.send(script({ tools: [{ name: 'echo', args: { text: 'ran' } }] }, { text: 'never said' }))
    ).done;
    // The turn ends on the rejection itself: the model is not asked again.
    expect(result).toMatchObject({ status: 'failed', synthesized: 0 });
    expect(result.error?.code).toBe(ErrorCode.STORE_ERROR);
    expect(rt.types()).not.toContain('token');
    const rows = await rt.history();
    // The debt stays: the assistant's call is durable, no result row — neither the real one nor a
    // synthesized one — and the turn's final text was never produced.
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant']);
    expect(openToolCalls(rows)).toHaveLength(1);
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    expect(await rt.tw.status(ref)).toMatchObject({ cleanupPending: true });
    // Poisoned: no claim, a typed error, nothing written.
    expect((await refusal(rt.send('next'))).code).toBe(ErrorCode.TOOL_CLEANUP_PENDING);
    expect(await rt.history()).toHaveLength(2);
    // A repair (force cancel of the idle workstream, C5) resolves the debt and unpoisons.
    expect(await rt.tw.cancel(ref)).toBe(true);
    const repaired = await rt.history();
    expect(openToolCalls(repaired)).toEqual([]);
    expect(repaired.at(-1)?.message).toMatchObject({ role: 'tool', synthesized: true, effect: 'unknown' });
    expect((await (await rt.send('next')).done).status).toBe('completed');
  });

  it('C4: a force cancel aimed at a turn that already ended leaves its successor untouched (handle and signal)', async () => {
    rt = await startRuntime();
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    const controller = new AbortController();
    const first = await rt.tw.send({ ...ref, content: 'first', signal: controller.signal });
    expect((await first.done).status).toBe('completed');
    // The successor runs a tool; both cancels were meant for the first turn.
    const successor = await rt.send(
      script({ tools: [{ name: 'heartbeat', args: { ms: 300, everyMs: 20 } }] }, { text: 'ok' }),
    );
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    first.cancel();
    controller.abort();
    const result = await successor.done;
    expect(result).toMatchObject({ status: 'completed', synthesized: 0 });
    expect(result.abortReason).toBeUndefined();
    expect(rt.types()).not.toContain('turn_aborted');
    const tools = (await rt.history()).filter((r) => r.message.role === 'tool').map((r) => r.message);
    expect(tools).toEqual([expect.objectContaining({ effect: 'applied' })]);
  });

  it('C7: a claim captured before a force cancel cannot start its turn after it; a claim taken after the cancel runs', async () => {
    let release: (() => void) | undefined;
    let held = false;
    const harness: HarnessLink = {
      controller: {
        mutations: new Set(),
        reach: (name) => {
          if (name !== SeamName.claimCaptureToDispatch || held) return undefined;
          held = true;
          return new Promise((resolve) => {
            release = () => resolve(undefined);
          });
        },
      },
      workerArrived: (_id, _arrival, go) => go(),
    };
    rt = await startRuntime({ harness });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    // The claim is captured (user row durable, turn armed); its dispatch is held at the seam.
    const turn = await rt.send(
      script({ text: 'never streamed' }, { tools: [{ name: 'echo', args: { text: 'x' } }] }),
    );
    expect(release).toBeDefined();
    const aborted = nextEvent(rt.tw, rt.workstreamId, 'turn_aborted');
    const cancelled = rt.tw.cancel(ref);
    await within(aborted, 10_000, 'the cancel commits');
    release!();
    expect(await cancelled).toBe(true);
    const result = await within(turn.done, 10_000, 'the cancelled turn settles');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'cancel' });
    // The dispatch reached the worker only after the cancel: the turn never streamed or ran a tool.
    const types = rt.types();
    expect(types).not.toContain('token');
    expect(types).not.toContain('tool_started');
    expect((await rt.history()).map((r) => r.message.role)).toEqual(['user']);
    // A claim taken after the cancel may start.
    expect((await (await rt.send('after the cancel')).done).status).toBe('completed');
  });

  it('C7: a cancel whose ownership check is still reading the store when the dispatch goes takes effect as of its call: the turn never reaches its worker', async () => {
    // Found by the harness on PostgreSQL: the cancel was called while the dispatch was held, but
    // its tenancy check (a store read) came back only after the dispatch had gone on.
    let release: (() => void) | undefined;
    const harness: HarnessLink = {
      controller: {
        mutations: new Set(),
        reach: (name) =>
          name !== SeamName.claimCaptureToDispatch || release !== undefined
            ? undefined
            : new Promise((resolve) => {
                release = () => resolve(undefined);
              }),
      },
      workerArrived: (_id, _arrival, go) => go(),
    };
    const gated = gatedStore(openSqliteStore({ path: ':memory:' }), 'getWorkstream', { armed: false });
    rt = await startRuntime({ harness, store: gated.store });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    const turn = await rt.send(script({ text: 'never streamed', chunks: 3 }));
    expect(release).toBeDefined();
    // (Subscribed before the gate: a subscription's own ownership read would wait there too.)
    const streamed = nextEvent(rt.tw, rt.workstreamId, 'token');
    await within(rt.tw.status(ref), 10_000, 'the subscription is verified');
    // The cancel's ownership read waits at the gate; the dispatch is let go meanwhile.
    gated.arm();
    const cancelled = rt.tw.cancel(ref);
    await gated.atGate;
    const waited = rt.waitForLog('turn dispatch waits for a cancel, close or delete called after its send');
    release!();
    // Either the dispatch waits for the cancel, or (the bug) the turn streams before it lands.
    await within(Promise.race([waited, streamed]), 10_000, 'the dispatch waits or the turn streams');
    gated.open();
    expect(await within(cancelled, 10_000, 'the cancel returns')).toBe(true);
    const result = await within(turn.done, 10_000, 'the cancelled turn settles');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'cancel', workerTerminated: false });
    expect(rt.types()).not.toContain('token');
    expect((await rt.history()).map((r) => r.message.role)).toEqual(['user']);
    expect(rt.logged('turn aborted before its dispatch: not sent to its worker')).toHaveLength(1);
    // Its worker ran nothing: kept, not retired.
    expect(rt.tw.stats().pool.retired).toBe(0);
    expect((await (await rt.send('after the cancel')).done).status).toBe('completed');
  });

  it('C3: force cancel journals unknown results before it releases the turn, and stream_end then idle precede the successor', async () => {
    rt = await startRuntime();
    const turn = await rt.send(hangingTool);
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const cancelled = rt.tw.cancel({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
    });
    // A successor sent the moment the cancel resolves.
    const successor = cancelled.then(() => rt!.send('after the cancel'));
    expect(await cancelled).toBe(true);
    expect(await turn.done).toMatchObject({ status: 'interrupted', abortReason: 'cancel', synthesized: 1 });
    await (await successor).done;
    const types = rt.types();
    const at = (type: string, from = 0) => types.indexOf(type as never, from);
    const aborted = at('turn_aborted');
    expect(at('tool_results_synthesized', aborted)).toBeGreaterThan(aborted);
    expect(at('stream_end', aborted)).toBeGreaterThan(at('tool_results_synthesized', aborted));
    expect(at('idle', aborted)).toBe(at('stream_end', aborted) + 1);
    expect(at('turn_started', aborted)).toBeGreaterThan(at('idle', aborted));
    const tools = (await rt.history()).filter((r) => r.message.role === 'tool').map((r) => r.message);
    expect(tools).toEqual([expect.objectContaining({ effect: 'unknown', synthesized: true })]);
  });
});
