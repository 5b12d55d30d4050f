/** Soft close (C1, C2): it refuses at once or waits, bounded, and never strands a tool call. */
import { ErrorCode, openToolCalls } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { refusal, within } from './test-support/bounded.js';
import { gate } from './test-support/gate.js';
import { nextEvent, script, startRuntime } from './test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const toolThen = (tool: object) => script({ tools: [tool] }, { text: 'after the tool' });

describe('soft close', () => {
  it('C1: without waitMs a close during a tool call is refused at once; the workstream stays usable and its history complete', async () => {
    rt = await startRuntime();
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    const turn = await rt.send(toolThen({ name: 'heartbeat', args: { ms: 200, everyMs: 20 } }));
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    expect((await refusal(rt.tw.close(ref))).code).toBe(ErrorCode.TURN_IN_PROGRESS);
    expect((await turn.done).status).toBe('completed');
    expect(openToolCalls(await rt.history())).toEqual([]);
    expect(rt.types()).not.toContain('ws_closed');
    expect((await (await rt.send('still open')).done).status).toBe('completed');
  });

  it('C1: with waitMs a close latches the workstream, waits for the tool to finish, and closes a complete history', async () => {
    rt = await startRuntime();
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    // The tool runs until the test opens its gate: the refused send below comes while it runs
    // however slowly the machine or the store goes, and the turn then completes on its own.
    const g = gate();
    try {
      const turn = await rt.send(toolThen({ name: 'gated', args: g.args }));
      await within(g.waiting, 10_000, 'the tool runs');
      const latched = rt.waitForLog('soft close waiting for the running turn');
      const closing = rt.tw.close({ ...ref, waitMs: 30_000 });
      await within(latched, 10_000, 'the close waits on the turn');
      // While it waits no new turn is admitted: the send is refused, not queued behind the turn.
      const refused = await within(refusal(rt.send('sneaking in')), 10_000, 'the send is refused at once');
      expect(refused.code).toBe(ErrorCode.TURN_IN_PROGRESS);
      expect(refused.message).toMatch(/is closing/);
      g.open();
      await within(closing, 10_000, 'the soft close completes once the turn ended');
      expect((await turn.done).status).toBe('completed');
    } finally {
      g.close();
    }
    const rows = await rt.history();
    expect(openToolCalls(rows)).toEqual([]);
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect((await rt.tw.status(ref)).state).toBe('closed');
    const types = rt.types();
    expect(types.indexOf('ws_closed')).toBeGreaterThan(types.lastIndexOf('idle'));
    expect((await refusal(rt.send('after the close'))).code).toBe(ErrorCode.WORKSTREAM_CLOSED);
  });

  it('C1: the latch holds in the gap after the turn ended: a send queued behind the turn’s end is refused, and the close goes through', async () => {
    // The turn's end is held at its lease release, so a send can queue behind it in the mailbox.
    const inner = openSqliteStore({ path: ':memory:' });
    let hold: { entered: () => void; gate: Promise<void> } | undefined;
    const store: Store = new Proxy(inner, {
      get(target, key, receiver) {
        const value = Reflect.get(target, key, receiver) as unknown;
        if (typeof value !== 'function') return value;
        if (key === 'releaseLease' && hold !== undefined) {
          const h = hold;
          hold = undefined;
          return async (...args: Parameters<Store['releaseLease']>) => {
            h.entered();
            await h.gate;
            return target.releaseLease(...args);
          };
        }
        return (value as (...a: unknown[]) => unknown).bind(target);
      },
    });
    rt = await startRuntime({ store });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    let open!: () => void;
    let entered!: () => void;
    const atGate = new Promise<void>((resolve) => {
      entered = resolve;
    });
    hold = { entered, gate: new Promise<void>((resolve) => (open = resolve)) };
    const turn = await rt.send(toolThen({ name: 'echo', args: { text: 'x' } }));
    const closing = rt.tw.close({ ...ref, waitMs: 30_000 });
    await within(atGate, 10_000, 'the turn ends and its settle reaches the lease release');
    // The machine is idle again; the send's admission queues behind the settle in the mailbox.
    const sneak = rt.send('sneaking in');
    open();
    const e = await refusal(sneak);
    expect(e.code).toBe(ErrorCode.TURN_IN_PROGRESS);
    expect(e.message).toMatch(/is closing/);
    await within(closing, 10_000, 'the soft close completes');
    expect((await turn.done).status).toBe('completed');
    expect((await rt.tw.status(ref)).state).toBe('closed');
    expect(openToolCalls(await rt.history())).toEqual([]);
  });

  it('C2: a soft close that times out rolls its latch back (TIMEOUT, workstream usable); a force cancel repairs the debt and the close then succeeds', async () => {
    rt = await startRuntime();
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    const turn = await rt.send(toolThen({ name: 'sleep', args: { ms: 60_000, ignoreAbort: true } }));
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    const e = await within(refusal(rt.tw.close({ ...ref, waitMs: 100 })), 10_000, 'the soft close times out');
    expect([e.code, e.details]).toEqual([ErrorCode.TIMEOUT, { waitMs: 100 }]);
    expect((await rt.tw.status(ref)).state).toBe('tool-debt');
    // Force repairs the debt: the unknown result is journaled, the turn ends.
    expect(await rt.tw.cancel(ref)).toBe(true);
    expect(await turn.done).toMatchObject({ status: 'interrupted', abortReason: 'cancel', synthesized: 1 });
    expect(openToolCalls(await rt.history())).toEqual([]);
    // The latch was rolled back: the workstream takes a new turn …
    expect((await (await rt.send('usable again')).done).status).toBe('completed');
    // … and closes.
    await rt.tw.close(ref);
    expect((await rt.tw.status(ref)).state).toBe('closed');
  });

  it('T5: waitMs must be an integer from 0 to an hour; nothing is closed', async () => {
    rt = await startRuntime();
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    for (const waitMs of [-1, 1.5, 3_600_001, '10']) {
      const e = await refusal(rt.tw.close({ ...ref, waitMs: waitMs as number }));
      expect([e.code, e.details]).toEqual([ErrorCode.INVALID_INPUT, { field: 'waitMs' }]);
    }
    expect((await rt.tw.status(ref)).state).toBe('idle');
  });
});
