/**
 * Approvals across hosts (issue 26): a wait is durable in the shared store and holds no lease, so
 * any host decides it — the turn resumes on the deciding host — and any host refuses a send
 * while it waits, or cancels it (the call denied, effect none). Listeners on every host hear
 * `approval_requested` (relayed).
 */
import { ErrorCode, type ToolResultMessage } from '@turnwarden/protocol';
import type { Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import type { TurnwardenEvent } from '../streams/events.js';
import { refusal, within } from '../test-support/bounded.js';
import { gatedStore } from '../test-support/gated-store.js';
import { script } from '../test-support/runtime.js';
import { type Host, threeHostCluster } from '../test-support/three-hosts.js';
import { testControls } from '../testing.js';

const cluster = threeHostCluster();
afterEach(() => cluster.stop());

const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'waits' };
const ECHO = script({ tools: [{ name: 'echo', args: { text: 'approved elsewhere' } }] }, { text: 'done' });
const start = () => cluster.start({ approvals: { tools: ['echo'] } });

async function waitingOn(host: Host) {
  const result = await within((await host.tw.send({ ...ref, content: ECHO })).done, 10_000, 'the turn waits');
  expect(result.status).toBe('awaiting_approval');
  return result.approval!;
}

const toolRows = async (host: Host) =>
  (await host.tw.history(ref)).rows.flatMap((r) =>
    r.message.role === 'tool' ? [r.message as ToolResultMessage] : [],
  );

describe('approvals across hosts', () => {
  it('A1 A3: a turn that waits on host A is approved on host B: it resumes there and completes; a listener on C hears the request', async () => {
    const { a, b, c } = await start();
    await a.tw.createWorkstream(ref);
    const heard: TurnwardenEvent[] = [];
    await c.tw.subscribe({ ...ref, listener: (e) => heard.push(e) });
    const approval = await waitingOn(a);
    // B refuses a send while it waits, as A would.
    expect(await refusal(b.tw.send({ ...ref, content: 'hi' }))).toMatchObject({
      code: ErrorCode.APPROVAL_PENDING,
    });
    const decided = await b.tw.approve({ ...ref, token: approval.token });
    if (decided.status !== 'resumed') throw new Error('not resumed');
    const done = await within(decided.turn.done, 10_000, 'the resumed turn');
    expect(done).toMatchObject({ status: 'completed', host: 'host-b', finalText: 'done' });
    expect((await toolRows(c))[0]).toMatchObject({ content: 'approved elsewhere', effect: 'applied' });
    await within(
      (async () => {
        while (!heard.some((e) => e.type === 'approval_requested'))
          await new Promise((r) => setTimeout(r, 10));
      })(),
      10_000,
      'C hears the request',
    );
    expect(heard.find((e) => e.type === 'approval_requested')?.data).toEqual(approval);
    // And the same decision on a third host is recognised.
    expect(await c.tw.approve({ ...ref, token: approval.token })).toEqual({ status: 'already_decided' });
  });

  it('A4: the timeout host A keeps fires after host B’s decision resumed the turn: it denies nothing, the call has its one result', async () => {
    const { a, b } = await start();
    await a.tw.createWorkstream(ref);
    const approval = await waitingOn(a);
    const decided = await b.tw.approve({ ...ref, token: approval.token });
    if (decided.status !== 'resumed') throw new Error('not resumed');
    expect((await within(decided.turn.done, 10_000, 'the resumed turn')).status).toBe('completed');
    // A still keeps the wait's timeout: it fires now, late.
    testControls(a.tw).expireApprovals();
    expect(await a.tw.cancel(ref).then(() => toolRows(a))).toEqual([
      expect.objectContaining({ content: 'approved elsewhere', effect: 'applied' }),
    ]);
    expect(a.tw.stats().approvalsTimedOut).toBe(0);
    expect(a.logged('approval timed out; the call is denied')).toEqual([]);
  });

  it('A4: every host keeps the wait’s timeout: host A, where the turn ended, shuts down; the timeout fires on B and denies the call (effect none)', async () => {
    const { a, b, c } = await start();
    await a.tw.createWorkstream(ref);
    await waitingOn(a);
    await a.tw.shutdown();
    cluster.forget(a);
    // B heard of the wait over the control channel (asynchronously): its timeout fires now.
    let tool: ToolResultMessage[] = [];
    for (let i = 0; i < 100 && tool.length === 0; i++) {
      testControls(b.tw).expireApprovals();
      await new Promise((r) => setTimeout(r, 20));
      tool = await toolRows(c);
    }
    expect(tool).toEqual([expect.objectContaining({ effect: 'none', synthesized: true })]);
    expect(b.tw.stats().approvalsTimedOut).toBe(1);
    expect((await c.tw.status(ref)).state).toBe('idle');
  });

  it('A4: every host keeps the timeout of a wait that began on A; a decision on B drops it on every host', async () => {
    const { a, b, c } = await start();
    await a.tw.createWorkstream(ref);
    const approval = await waitingOn(a);
    const kept = () => [a, b, c].map((h) => testControls(h.tw).approvalTimeouts());
    const until = async (want: number[]) => {
      for (let i = 0; i < 200 && JSON.stringify(kept()) !== JSON.stringify(want); i++)
        await new Promise((r) => setTimeout(r, 10));
      return kept();
    };
    expect(await until([1, 1, 1])).toEqual([1, 1, 1]);
    const decided = await b.tw.approve({ ...ref, token: approval.token });
    if (decided.status !== 'resumed') throw new Error('not resumed');
    await within(decided.turn.done, 10_000, 'the resumed turn');
    expect(await until([0, 0, 0])).toEqual([0, 0, 0]);
  });

  it('A4: a cancel on host C while a call waits on A denies it (effect none); the next send runs on any host', async () => {
    const { a, b, c } = await start();
    await a.tw.createWorkstream(ref);
    const approval = await waitingOn(a);
    expect(await c.tw.cancel(ref)).toBe(true);
    expect(await toolRows(b)).toEqual([expect.objectContaining({ effect: 'none', synthesized: true })]);
    expect(await refusal(b.tw.approve({ ...ref, token: approval.token }))).toMatchObject({
      code: ErrorCode.APPROVAL_STALE,
    });
    const next = await within(
      (await b.tw.send({ ...ref, content: script({ text: 'next' }) })).done,
      10_000,
      'next',
    );
    expect(next.status).toBe('completed');
  });

  it('A2 A4: a decision on B that loaded the wait before a cancel on C ended it is refused APPROVAL_STALE under its lease: the call keeps its one result, nothing runs', async () => {
    let held: ReturnType<typeof gatedStore> | undefined;
    const { a, b, c } = await cluster.start({ approvals: { tools: ['echo'] } }, (view: Store) => {
      held = gatedStore(view, 'acquireLease', { armed: false });
      return held.store;
    });
    await a.tw.createWorkstream(ref);
    const approval = await waitingOn(a);
    held!.arm();
    // B checked the token against the wait it loaded; its lease is held at the gate …
    const deciding = b.tw.approve({ ...ref, token: approval.token });
    await within(held!.atGate, 10_000, 'the decision reaches its lease');
    // … while C cancels: the wait is denied under C's lease.
    expect(await c.tw.cancel(ref)).toBe(true);
    held!.open();
    expect(await refusal(deciding)).toMatchObject({
      code: ErrorCode.APPROVAL_STALE,
      details: { reason: 'not_waiting' },
    });
    const tool = await toolRows(c);
    expect(tool).toEqual([expect.objectContaining({ effect: 'none', synthesized: true })]);
    expect((await c.tw.status(ref)).state).toBe('idle');
    expect(b.tw.stats().turnsStarted).toBe(0);
  });
});
