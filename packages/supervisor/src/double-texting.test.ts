/**
 * Double texting (issue 26, M1–M4): what a send does when its workstream is busy. A turn is kept
 * running by the `gated` tool (its gate opened by the test, never by time), so the test, not a
 * sleep, decides what overlaps: `reject` is refused with nothing written, `enqueue` waits behind
 * the turn, `interrupt` ends the turn (history repaired, earlier sends revoked) and runs next —
 * before the sends made while it did so —, `rollback` also removes the ended turn's rows. Each
 * holds with a call waiting for approval, and T3 holds for all of them.
 */
import {
  ErrorCode,
  isTurnwardenError,
  openToolCalls,
  SeamName,
  type ToolResultMessage,
} from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { DoubleTexting, SendInput, TurnHandle } from './index.js';
import { refusal, within } from './test-support/bounded.js';
import { type Gate, gate } from './test-support/gate.js';
import { script, startRuntime } from './test-support/runtime.js';
import { seamHold as holdSeams, type SeamHold } from './test-support/seam-hold.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
const running: Rt[] = [];
const gates: Gate[] = [];
const holds: { releaseAll(): void }[] = [];
afterEach(async () => {
  for (const h of holds.splice(0)) h.releaseAll();
  for (const g of gates.splice(0)) {
    g.open();
    g.close();
  }
  for (const rt of running.splice(0)) await rt.tw.shutdown();
});

/** Seams held by the test (test-support/seam-hold.ts), released after it. */
function seamHold(...names: SeamName[]): SeamHold {
  const h = holdSeams(...names);
  holds.push(h);
  return h;
}

const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };
const toolThen = (tool: object) => script({ tools: [tool] }, { text: 'after the tool' });

async function start(options: Parameters<typeof startRuntime>[0] = {}) {
  const rt = await startRuntime(options);
  running.push(rt);
  return rt;
}

/** A turn running its `gated` tool until the test opens the gate. */
async function gatedTurn(rt: Rt): Promise<{ turn: TurnHandle; g: Gate }> {
  const g = gate();
  gates.push(g);
  const turn = await rt.send(toolThen({ name: 'gated', args: g.args }));
  await within(g.waiting, 10_000, 'the tool runs');
  return { turn, g };
}

const send = (rt: Rt, content: string, doubleTexting?: DoubleTexting, extra: Partial<SendInput> = {}) =>
  rt.tw.send({ ...ref, content, ...(doubleTexting === undefined ? {} : { doubleTexting }), ...extra });

const users = async (rt: Rt) =>
  (await rt.history()).filter((r) => r.message.role === 'user').map((r) => r.message.content);
const roles = async (rt: Rt) => (await rt.history()).map((r) => r.message.role);

/**
 * A send that must be refused at once: its refusal as [code, details], or `queued` / `started`
 * when it was not (a broken check shows as a failed assertion, not a hang).
 */
async function refusedAtOnce(rt: Rt, p: Promise<TurnHandle>): Promise<unknown> {
  const queuedLog = rt.waitForLog('send queued behind the running turn').then(() => 'queued');
  p.catch(() => undefined);
  const e = await within(
    Promise.race([
      p.then(
        () => 'started',
        (err: unknown) => err,
      ),
      queuedLog,
    ]),
    10_000,
    'the send is answered or queued',
  );
  return isTurnwardenError(e) ? [e.code, e.details] : e;
}

/** The history is structurally valid: no call without its result. */
async function valid(rt: Rt) {
  expect(openToolCalls(await rt.history())).toEqual([]);
}

describe('double texting', () => {
  it('M1: reject while a turn runs is TURN_IN_PROGRESS, nothing written and nothing queued; on an idle workstream it runs', async () => {
    const rt = await start();
    const { turn, g } = await gatedTurn(rt);
    const before = await rt.history();
    expect(await refusedAtOnce(rt, send(rt, 'me too', 'reject'))).toEqual([
      ErrorCode.TURN_IN_PROGRESS,
      { workstreamId: 'ws-1', doubleTexting: 'reject' },
    ]);
    expect(await rt.history()).toEqual(before);
    expect((await rt.tw.status(ref)).queuedSends).toBe(0);
    g.open();
    expect((await within(turn.done, 10_000, 'the turn ends')).status).toBe('completed');
    const next = await send(rt, 'now', 'reject');
    expect((await within(next.done, 10_000, 'it runs')).status).toBe('completed');
    expect(await users(rt)).toEqual([expect.any(String), 'now']);
  });

  it('M1: reject behind waiting sends is refused too: they are the workstream’s work, not its own', async () => {
    const rt = await start();
    const { turn, g } = await gatedTurn(rt);
    const logged = rt.waitForLog('send queued behind the running turn');
    const second = send(rt, 'second');
    await within(logged, 10_000, 'the second send is queued');
    expect(await refusedAtOnce(rt, send(rt, 'third', 'reject'))).toEqual([
      ErrorCode.TURN_IN_PROGRESS,
      { workstreamId: 'ws-1', doubleTexting: 'reject' },
    ]);
    g.open();
    await within(turn.done, 10_000, 'the turn ends');
    await within((await second).done, 10_000, 'the queued send runs');
    expect((await users(rt)).slice(1)).toEqual(['second']);
  });

  it('M1 A1: reject while a call waits for approval is APPROVAL_PENDING, nothing written; the wait goes on', async () => {
    const rt = await start({ approvals: { tools: ['echo'] } });
    const waiting = await rt.send(
      script({ tools: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'done' }),
    );
    expect((await within(waiting.done, 10_000, 'the turn waits')).status).toBe('awaiting_approval');
    const before = await rt.history();
    expect(await refusedAtOnce(rt, send(rt, 'me too', 'reject'))).toEqual([
      ErrorCode.APPROVAL_PENDING,
      { workstreamId: 'ws-1' },
    ]);
    expect(await rt.history()).toEqual(before);
    expect((await rt.tw.status(ref)).awaitingApproval).toBeDefined();
  });

  it('M2: the workstream’s default applies to a send that names none; a send’s own policy wins over it', async () => {
    const rt = await start();
    const info = await rt.tw.createWorkstream({ ...ref, workstreamId: 'ws-r', doubleTexting: 'reject' });
    expect(info.doubleTexting).toBe('reject');
    expect(await rt.tw.getWorkstream({ ...ref, workstreamId: 'ws-r' })).toMatchObject({
      doubleTexting: 'reject',
    });
    const g = gate();
    gates.push(g);
    const wsR = { ...ref, workstreamId: 'ws-r' };
    const turn = await rt.tw.send({ ...wsR, content: toolThen({ name: 'gated', args: g.args }) });
    await within(g.waiting, 10_000, 'the tool runs');
    // The workstream's default: refused.
    expect(await refusedAtOnce(rt, rt.tw.send({ ...wsR, content: 'default' }))).toEqual([
      ErrorCode.TURN_IN_PROGRESS,
      { workstreamId: 'ws-r', doubleTexting: 'reject' },
    ]);
    // The send's own: queued behind the turn.
    const logged = rt.waitForLog('send queued behind the running turn');
    const queued = rt.tw.send({ ...wsR, content: 'queued', doubleTexting: 'enqueue' });
    await within(logged, 10_000, 'the enqueue send waits');
    g.open();
    await within(turn.done, 10_000, 'the turn ends');
    expect((await within((await queued).done, 10_000, 'it runs')).status).toBe('completed');
    const rows = (await rt.tw.history(wsR)).rows;
    expect(rows.filter((r) => r.message.role === 'user').map((r) => r.message.content)).toEqual([
      expect.any(String),
      'queued',
    ]);
    // A bad policy is INVALID_INPUT, nothing created or sent.
    await expect(
      rt.tw.createWorkstream({ ...ref, workstreamId: 'ws-x', doubleTexting: 'shout' as never }),
    ).rejects.toMatchObject({ code: ErrorCode.INVALID_INPUT, details: { field: 'doubleTexting' } });
    await expect(rt.tw.getWorkstream({ ...ref, workstreamId: 'ws-x' })).rejects.toMatchObject({
      code: ErrorCode.WORKSTREAM_NOT_FOUND,
    });
    await expect(send(rt, 'x', 'shout' as never)).rejects.toMatchObject({
      code: ErrorCode.INVALID_INPUT,
      details: { field: 'doubleTexting' },
    });
  });

  it('M3 C7: interrupt: the running turn is force-cancelled, its call answered; the sends made before it are revoked; it runs next, before the sends made while it interrupted', async () => {
    const rt = await start();
    const { turn } = await gatedTurn(rt);
    const queuedLog = rt.waitForLog('send queued behind the running turn');
    const earlier = send(rt, 'earlier');
    earlier.catch(() => undefined);
    await within(queuedLog, 10_000, 'the earlier send waits');
    const interrupting = rt.waitForLog('send interrupts the running turn');
    const interrupt = send(rt, 'interrupt', 'interrupt');
    await within(interrupting, 10_000, 'the interrupt begins');
    // Made while the interrupt is under way: it goes after the interrupting send.
    const later = send(rt, 'later');
    const ended = await within(turn.done, 10_000, 'the interrupted turn ends');
    expect(ended).toMatchObject({ status: 'interrupted', abortReason: 'cancel', synthesized: 1 });
    expect(await refusal(earlier)).toMatchObject({
      code: ErrorCode.SEND_REVOKED,
      details: { reason: 'cancel' },
    });
    const handle = await within(interrupt, 10_000, 'the interrupting send starts');
    expect(handle.generation).toBe(turn.generation + 1);
    expect((await within(handle.done, 10_000, 'its turn ends')).status).toBe('completed');
    const after = await within(later, 10_000, 'the later send starts');
    expect(after.generation).toBe(turn.generation + 2);
    await within(after.done, 10_000, 'the later turn ends');
    expect((await users(rt)).slice(1)).toEqual(['interrupt', 'later']);
    const tool = (await rt.history()).find((r) => r.message.role === 'tool')?.message as ToolResultMessage;
    expect(tool).toMatchObject({ name: 'gated', synthesized: true });
    await valid(rt);
  });

  it('M3: the interrupting send is the next turn: a send made after the interrupted turn ended, before the interrupting one claimed, waits behind it', async () => {
    const hold = seamHold(SeamName.sendCaptureToEnqueue);
    hold.disarm();
    const rt = await start({ harness: hold.harness });
    const { turn } = await gatedTurn(rt);
    // The interrupting send is held once its cancel is done: the turn has ended, nothing runs.
    hold.arm();
    const interrupt = send(rt, 'interrupt', 'interrupt');
    await within(hold.arrived(SeamName.sendCaptureToEnqueue), 10_000, 'the interrupt’s cancel is done');
    hold.disarm();
    expect(await within(turn.done, 10_000, 'the turn ended')).toMatchObject({ status: 'interrupted' });
    // A send now would find the workstream idle: it queues behind the interrupting one instead.
    const queuedLog = rt.waitForLog('send queued behind the running turn').then(() => 'queued');
    const later = send(rt, 'later');
    later.catch(() => undefined);
    expect(await within(Promise.race([later.then(() => 'started'), queuedLog]), 10_000, 'later')).toBe(
      'queued',
    );
    hold.release(SeamName.sendCaptureToEnqueue);
    const handles = [
      await within(interrupt, 10_000, 'interrupt starts'),
      await within(later, 10_000, 'later starts'),
    ];
    for (const h of handles) await within(h.done, 10_000, 'each turn ends');
    expect(handles.map((h) => h.generation)).toEqual([turn.generation + 1, turn.generation + 2]);
    expect((await users(rt)).slice(1)).toEqual(['interrupt', 'later']);
    await valid(rt);
  });

  it('M3: a send queued while the interrupted turn was ending does not take its place: the interrupting send claims first', async () => {
    const hold = seamHold(SeamName.claimCaptureToDispatch, SeamName.sendCaptureToEnqueue);
    const rt = await start({ harness: hold.harness });
    // The first turn is claimed and held before its dispatch: it ends only when the test lets it.
    const first = send(rt, 'first');
    await within(hold.arrived(SeamName.sendCaptureToEnqueue), 10_000, 'the first send is captured');
    hold.release(SeamName.sendCaptureToEnqueue);
    await within(hold.arrived(SeamName.claimCaptureToDispatch), 10_000, 'the first turn is held');
    const interrupting = rt.waitForLog('send interrupts the running turn');
    const interrupt = send(rt, 'interrupt', 'interrupt');
    await within(interrupting, 10_000, 'the interrupt begins');
    const queuedLog = rt.waitForLog('send queued behind the running turn');
    const during = send(rt, 'during');
    await within(hold.arrived(SeamName.sendCaptureToEnqueue), 10_000, 'the during send is captured');
    hold.release(SeamName.sendCaptureToEnqueue);
    await within(queuedLog, 10_000, 'the during send waits behind the turn');
    // The first turn ends; the interrupting send is held once its cancel is done.
    hold.release(SeamName.claimCaptureToDispatch);
    await within(hold.arrived(SeamName.sendCaptureToEnqueue), 10_000, 'the interrupt’s cancel is done');
    expect(await within((await first).done, 10_000, 'the first turn ended')).toMatchObject({
      status: 'interrupted',
    });
    // Whatever claims now is held at its dispatch: it must be the interrupting send's turn.
    hold.release(SeamName.sendCaptureToEnqueue);
    await within(hold.arrived(SeamName.claimCaptureToDispatch), 10_000, 'a turn is claimed');
    expect((await rt.tw.status(ref)).activeTurn?.generation).toBe((await first).generation + 1);
    hold.releaseAll();
    const handles = [
      await within(interrupt, 10_000, 'interrupt starts'),
      await within(during, 10_000, 'during starts'),
    ];
    for (const h of handles) await within(h.done, 10_000, 'each turn ends');
    expect((await users(rt)).slice(1)).toEqual(['interrupt', 'during']);
    await valid(rt);
  });

  it('M3 T3: another principal’s interrupt is TURN_IN_PROGRESS and the running turn goes on untouched', async () => {
    const rt = await start();
    const { turn, g } = await gatedTurn(rt);
    const before = await rt.history();
    const e = await refusedAtOnce(
      rt,
      rt.tw.send({ ...ref, principal: 'user-b', content: 'stop that', doubleTexting: 'interrupt' }),
    );
    expect(e).toEqual([ErrorCode.TURN_IN_PROGRESS, { workstreamId: 'ws-1' }]);
    expect(await rt.history()).toEqual(before);
    expect((await rt.tw.status(ref)).activeTurn).toBeDefined();
    g.open();
    expect((await within(turn.done, 10_000, 'the turn ends')).status).toBe('completed');
    // Idle now: another principal's send runs (T3 is about a turn in flight), and removes nothing.
    const other = await rt.tw.send({ ...ref, principal: 'user-b', content: 'x', doubleTexting: 'rollback' });
    expect((await within(other.done, 10_000, 'it runs')).status).toBe('completed');
    expect((await rt.history()).slice(0, before.length + 2)).toEqual(
      expect.arrayContaining(
        before.map((r) => expect.objectContaining({ seq: r.seq, commitKey: r.commitKey })),
      ),
    );
  });

  it('M3 A4: interrupt while a call waits for approval: the call is denied (effect none), the new message runs', async () => {
    const rt = await start({ approvals: { tools: ['echo'] } });
    const waiting = await rt.send(
      script({ tools: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'done' }),
    );
    expect((await within(waiting.done, 10_000, 'the turn waits')).status).toBe('awaiting_approval');
    const handle = await send(rt, 'never mind', 'interrupt');
    expect((await within(handle.done, 10_000, 'its turn ends')).status).toBe('completed');
    const tool = (await rt.history()).find((r) => r.message.role === 'tool')?.message as ToolResultMessage;
    expect(tool).toMatchObject({ name: 'echo', effect: 'none', synthesized: true, isError: true });
    expect((await users(rt)).slice(1)).toEqual(['never mind']);
    expect((await rt.tw.status(ref)).awaitingApproval).toBeUndefined();
    await valid(rt);
  });

  it('M4 E2: rollback: the running turn is cancelled and its rows removed before the new message runs; listeners are told history_resync', async () => {
    const rt = await start();
    const first = await send(rt, 'kept');
    await within(first.done, 10_000, 'the first turn ends');
    const kept = await rt.history();
    const { turn } = await gatedTurn(rt);
    const handle = await send(rt, 'instead', 'rollback');
    expect(await within(turn.done, 10_000, 'the cancelled turn ended')).toMatchObject({
      status: 'interrupted',
      abortReason: 'cancel',
    });
    expect((await within(handle.done, 10_000, 'its turn ends')).status).toBe('completed');
    const rows = await rt.history();
    // The first turn's rows as they were, then the new turn's: nothing of the cancelled one.
    expect(rows.slice(0, kept.length)).toEqual(kept);
    expect(rows.slice(kept.length).map((r) => [r.message.role, r.generation])).toEqual([
      ['user', handle.generation],
      ['assistant', handle.generation],
    ]);
    expect(rows.some((r) => r.generation === turn.generation)).toBe(false);
    expect(rt.events).toContainEqual(
      expect.objectContaining({ type: 'history_resync', data: { reason: 'rewritten' } }),
    );
    await valid(rt);
  });

  it('M4: rollback while a call waits for approval removes the waiting turn; on an idle workstream it removes nothing', async () => {
    const rt = await start({ approvals: { tools: ['echo'] } });
    const done = await send(rt, 'kept');
    await within(done.done, 10_000, 'the first turn ends');
    const kept = await rt.history();
    // Idle: nothing to roll back, the send just runs.
    const plain = await send(rt, 'plain', 'rollback');
    await within(plain.done, 10_000, 'it runs');
    const both = await rt.history();
    expect(both.slice(0, kept.length)).toEqual(kept);
    const waiting = await rt.send(
      script({ tools: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'done' }),
    );
    expect((await within(waiting.done, 10_000, 'the turn waits')).status).toBe('awaiting_approval');
    const handle = await send(rt, 'instead', 'rollback');
    expect((await within(handle.done, 10_000, 'its turn ends')).status).toBe('completed');
    const rows = await rt.history();
    expect(rows.slice(0, both.length)).toEqual(both);
    expect(rows.slice(both.length).map((r) => r.message.role)).toEqual(['user', 'assistant']);
    expect(rows.some((r) => r.generation === waiting.generation)).toBe(false);
    expect(await roles(rt)).not.toContain('tool');
    await valid(rt);
  });
});
