/**
 * Approvals through the runtime (issue 26): a turn whose call needs approval (`approvals.tools`)
 * ends `awaiting_approval`, holding no worker, its wait durable; `approve` and `deny` resume it
 * on any worker; stale, repeated and cross-tenant decisions are typed refusals that change
 * nothing; a cancel or the wait's timeout answers the call as denied (effect none); a runtime
 * started again on the store finds the wait still pending and a decision resumes it.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ErrorCode, type ToolResultMessage } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { TurnResult } from './index.js';
import { refusal, within } from './test-support/bounded.js';
import { killAwaitingApproval } from './test-support/crash.js';
import { script, startRuntime } from './test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
const running: Rt[] = [];
afterEach(async () => {
  for (const rt of running.splice(0)) await rt.tw.shutdown();
});

const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };
const ECHO = script({ tools: [{ name: 'echo', args: { text: 'from the model' } }] }, { text: 'all done' });

async function start(options: Parameters<typeof startRuntime>[0] = {}, existing = false) {
  const rt = await startRuntime({ approvals: { tools: ['echo'] }, ...options }, { existing });
  running.push(rt);
  return rt;
}

/** A turn that waits: its result, with the approval it waits for. */
async function waiting(
  rt: Rt,
  content = ECHO,
): Promise<TurnResult & { approval: NonNullable<TurnResult['approval']> }> {
  const result = await within((await rt.send(content)).done, 10_000, 'the turn ends waiting');
  expect(result.status).toBe('awaiting_approval');
  return result as TurnResult & { approval: NonNullable<TurnResult['approval']> };
}

const results = (rows: readonly { message: { role: string } }[]) =>
  rows.flatMap((r) => (r.message.role === 'tool' ? [r.message as ToolResultMessage] : []));

describe('approvals', () => {
  it('A1: a call that needs approval: the turn ends awaiting_approval with the call and its token, holding no worker; the history ends with the open call; approval_requested, stream_end, no idle', async () => {
    const rt = await start();
    const result = await waiting(rt);
    expect(result.approval).toMatchObject({
      token: expect.stringMatching(/^apr\.1\.0\./),
      callIndex: 0,
      name: 'echo',
      arguments: JSON.stringify({ text: 'from the model' }),
    });
    expect(result.approval.expiresAt).toBeGreaterThan(Date.now() + 3_000_000);
    const rows = await rt.history();
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant']);
    const stats = rt.tw.stats();
    expect(stats).toMatchObject({ activeTurns: 0, turnsAwaitingApproval: 1, turnsFailed: 0 });
    expect(stats.pool.busy).toBe(0);
    const ends = rt.events.filter((e) => ['approval_requested', 'stream_end', 'idle'].includes(e.type));
    expect(ends.map((e) => e.type)).toEqual(['approval_requested', 'stream_end']);
    expect(ends[0]?.data).toEqual(result.approval);
    expect(ends[1]?.data).toEqual({ status: 'awaiting_approval' });
    const status = await rt.tw.status(ref);
    expect(status).toMatchObject({
      state: 'tool-debt',
      cleanupPending: false,
      awaitingApproval: { token: result.approval.token, callIndex: 0, expiresAt: result.approval.expiresAt },
    });
  });

  it('A1: while it waits, a send is refused APPROVAL_PENDING and nothing is written', async () => {
    const rt = await start();
    await waiting(rt);
    const e = await refusal(rt.send(script({ text: 'again' })));
    expect(e).toMatchObject({ code: ErrorCode.APPROVAL_PENDING, details: { workstreamId: 'ws-1' } });
    expect((await rt.history()).length).toBe(2);
  });

  it('A2 A3: approve: the turn resumes, the call runs with the arguments as edited, the model goes on; the same approval again is already_decided, a denial now APPROVAL_DECIDED', async () => {
    const rt = await start();
    const { approval, generation } = await waiting(rt);
    const decided = await rt.tw.approve({ ...ref, token: approval.token, arguments: { text: 'edited' } });
    expect(decided.status).toBe('resumed');
    if (decided.status !== 'resumed') return;
    const done = await within(decided.turn.done, 10_000, 'the resumed turn ends');
    expect(done).toMatchObject({ status: 'completed', finalText: 'all done', generation });
    const rows = await rt.history();
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(results(rows)[0]).toMatchObject({ content: 'edited', isError: false, effect: 'applied' });
    expect(rows.map((r) => r.commitKey)).toEqual(['g1:u', 'g1:a1', 'g1:a1:t0', 'g1:a2']);
    expect(await rt.tw.approve({ ...ref, token: approval.token })).toEqual({ status: 'already_decided' });
    const other = await refusal(rt.tw.deny({ ...ref, token: approval.token }));
    expect(other).toMatchObject({ code: ErrorCode.APPROVAL_DECIDED, details: { approved: true } });
    expect((await rt.history()).length).toBe(4);
    expect(rt.tw.stats()).toMatchObject({ approvalsApproved: 1, approvalsDenied: 0, turnsCompleted: 1 });
  });

  it('A3: deny: the tool never runs; its result says so with the reason, effect none; the model goes on', async () => {
    const rt = await start();
    const { approval } = await waiting(rt);
    const decided = await rt.tw.deny({ ...ref, token: approval.token, reason: 'not today' });
    if (decided.status !== 'resumed') throw new Error('not resumed');
    expect((await within(decided.turn.done, 10_000, 'the resumed turn ends')).status).toBe('completed');
    const tool = results(await rt.history());
    expect(tool).toEqual([
      expect.objectContaining({ content: 'denied: not today', isError: true, effect: 'none', name: 'echo' }),
    ]);
    expect(await rt.tw.deny({ ...ref, token: approval.token })).toEqual({ status: 'already_decided' });
  });

  it('A2: refusals change nothing: a token that is not one, another turn’s, another tenant’s workstream, arguments that are not an object', async () => {
    const rt = await start();
    const { approval } = await waiting(rt);
    const malformed = await refusal(rt.tw.approve({ ...ref, token: 'nope' }));
    expect(malformed).toMatchObject({ code: ErrorCode.APPROVAL_STALE, details: { reason: 'malformed' } });
    const other = approval.token.replace(/^apr\.1\./, 'apr.7.');
    const stale = await refusal(rt.tw.approve({ ...ref, token: other }));
    expect(stale).toMatchObject({ code: ErrorCode.APPROVAL_STALE, details: { reason: 'generation' } });
    const guessed = approval.token.replace(/[0-9a-f]{4}$/, '0000');
    const notWaiting = await refusal(rt.tw.approve({ ...ref, token: guessed }));
    expect(notWaiting).toMatchObject({ code: ErrorCode.APPROVAL_STALE, details: { reason: 'not_waiting' } });
    const tenant = await refusal(
      rt.tw.approve({ ...ref, tenantId: 'tenant-b', principal: 'user-b', token: approval.token }),
    );
    expect(tenant).toMatchObject({ code: ErrorCode.WORKSTREAM_NOT_FOUND });
    const args = await refusal(
      rt.tw.approve({ ...ref, token: approval.token, arguments: [1] as unknown as Record<string, unknown> }),
    );
    expect(args).toMatchObject({ code: ErrorCode.INVALID_INPUT, details: { field: 'arguments' } });
    // Still waiting, still decidable.
    expect((await rt.history()).length).toBe(2);
    expect((await rt.tw.status(ref)).state).toBe('tool-debt');
    const decided = await rt.tw.approve({ ...ref, token: approval.token });
    expect(decided.status).toBe('resumed');
  });

  it('A4 S1 S2: a cancel while it waits answers the call as denied (effect none, synthesized); the token is stale after; the next send runs', async () => {
    const rt = await start();
    const { approval } = await waiting(rt);
    expect(await rt.tw.cancel(ref)).toBe(true);
    const tool = results(await rt.history());
    expect(tool).toEqual([expect.objectContaining({ effect: 'none', synthesized: true, isError: true })]);
    expect(tool[0]!.content).toContain('cancelled while it waited for approval');
    const after = await refusal(rt.tw.approve({ ...ref, token: approval.token }));
    expect(after).toMatchObject({ code: ErrorCode.APPROVAL_STALE, details: { reason: 'not_waiting' } });
    const next = await within((await rt.send(script({ text: 'next' }))).done, 10_000, 'the next turn');
    expect(next.status).toBe('completed');
  });

  it('A4: a wait unanswered by approvals.timeoutMs: the call is denied (effect none) and the workstream takes the next send', async () => {
    const rt = await start({ approvals: { tools: ['echo'], timeoutMs: 1_000 } });
    const timedOut = rt.waitForLog('approval timed out; the call is denied');
    await waiting(rt);
    await within(timedOut, 10_000, 'the wait times out');
    const tool = results(await rt.history());
    expect(tool).toEqual([expect.objectContaining({ effect: 'none', synthesized: true })]);
    expect(tool[0]!.content).toContain('not approved in time');
    expect(rt.tw.stats().approvalsTimedOut).toBe(1);
    const next = await within((await rt.send(script({ text: 'next' }))).done, 10_000, 'the next turn');
    expect(next.status).toBe('completed');
  });

  it('A1 S7: a runtime started again on the store finds the wait pending — its send refused APPROVAL_PENDING — and the decision resumes the turn there', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'tw-approval-')), 'store.db');
    const first = await start({ store: { path } });
    const { approval } = await waiting(first);
    await first.tw.shutdown();
    running.splice(running.indexOf(first), 1);
    const second = await start({ store: { path } }, true);
    expect((await second.tw.status(ref)).state).toBe('tool-debt');
    expect(second.logged('session waiting for an approval; still waiting, its timeout kept')).toEqual([
      expect.objectContaining({ workstreamId: 'tenant-a/ws-1', expiresAt: approval.expiresAt }),
    ]);
    const e = await refusal(second.send(script({ text: 'again' })));
    expect(e).toMatchObject({ code: ErrorCode.APPROVAL_PENDING });
    const decided = await second.tw.approve({ ...ref, token: approval.token });
    if (decided.status !== 'resumed') throw new Error('not resumed');
    expect((await within(decided.turn.done, 10_000, 'the resumed turn')).status).toBe('completed');
    expect((await second.history()).map((r) => r.message.role)).toEqual([
      'user',
      'assistant',
      'tool',
      'assistant',
    ]);
  });

  it('A1 S7: SIGKILLed while a call waits for approval, then started again: still pending (a send is APPROVAL_PENDING), the decision resumes the turn, the history is valid', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'tw-approval-kill-')), 'store.db');
    const token = await killAwaitingApproval(path);
    expect(token).toMatch(/^apr\.1\.0\./);
    const rt = await start({ store: { path } }, true);
    expect((await rt.tw.status(ref)).awaitingApproval?.token).toBe(token);
    expect(await refusal(rt.send(script({ text: 'again' })))).toMatchObject({
      code: ErrorCode.APPROVAL_PENDING,
    });
    const decided = await rt.tw.approve({ ...ref, token });
    if (decided.status !== 'resumed') throw new Error('not resumed');
    expect(await within(decided.turn.done, 10_000, 'the resumed turn')).toMatchObject({
      status: 'completed',
      finalText: 'resumed',
    });
    const rows = await rt.history();
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(results(rows)[0]).toMatchObject({ content: 'approved after a kill', effect: 'applied' });
  });

  it('A1: on one worker, twenty sessions wait for approval at once: each turn ends waiting and frees it — no active turn, no busy worker', async () => {
    const rt = await start({ pool: { maxWorkers: 1, warmWorkers: 1 } });
    const ids = Array.from({ length: 20 }, (_, i) => `wait-${i}`);
    for (const workstreamId of ids) await rt.tw.createWorkstream({ ...ref, workstreamId });
    for (const workstreamId of ids) {
      const turn = await rt.tw.send({ ...ref, workstreamId, content: ECHO });
      expect((await within(turn.done, 10_000, 'the turn ends waiting')).status).toBe('awaiting_approval');
    }
    const stats = rt.tw.stats();
    expect(stats).toMatchObject({ activeTurns: 0, turnsAwaitingApproval: 20 });
    expect(stats.pool).toMatchObject({ busy: 0, spawned: 1 });
    for (const workstreamId of ids)
      expect((await rt.tw.status({ ...ref, workstreamId })).awaitingApproval).toBeDefined();
  });

  /** `after` held by the test (its callbacks kept even once cancelled, to fire late); `every` real. */
  function heldTimers() {
    const held: { fn: () => void; cancelled: boolean }[] = [];
    return {
      held,
      timers: {
        every: (ms: number, fn: () => void) => {
          const t = setInterval(fn, ms);
          t.unref();
          return () => clearInterval(t);
        },
        after: (_ms: number, fn: () => void) => {
          const entry = { fn, cancelled: false };
          held.push(entry);
          return () => {
            entry.cancelled = true;
          };
        },
      },
    };
  }

  it('A2 A4: a timeout racing a decision — the timeout first (before the host decides): the call is denied and the decision is stale, nothing else changes', async () => {
    const { held, timers } = heldTimers();
    const rt = await start({ timers });
    const { approval } = await waiting(rt);
    const timeout = held.at(-1)!;
    expect(timeout.cancelled).toBe(false);
    const denied = rt.waitForLog('approval timed out; the call is denied');
    timeout.fn();
    // The host decides once the time ran out, while the timeout's denial is on its way or done.
    const late = await refusal(rt.tw.approve({ ...ref, token: approval.token }));
    expect(late).toMatchObject({ code: ErrorCode.APPROVAL_STALE, details: { reason: 'not_waiting' } });
    await within(denied, 10_000, 'the timeout denies the call');
    const tool = results(await rt.history());
    expect(tool).toEqual([expect.objectContaining({ effect: 'none', synthesized: true })]);
    expect(rt.tw.stats()).toMatchObject({ approvalsTimedOut: 1, approvalsApproved: 0, turnsStarted: 1 });
  });

  it('A2 A4: a timeout racing a decision — the decision first: its timer is cancelled, and one that fires all the same finds nothing waiting: the call runs once, approved', async () => {
    const { held, timers } = heldTimers();
    const rt = await start({ timers });
    const { approval } = await waiting(rt);
    const timeout = held.at(-1)!;
    const decided = await rt.tw.approve({ ...ref, token: approval.token });
    expect(timeout.cancelled).toBe(true);
    // A timer whose cancel came too late fires anyway, while the resumed turn runs.
    timeout.fn();
    if (decided.status !== 'resumed') throw new Error('not resumed');
    expect((await within(decided.turn.done, 10_000, 'the resumed turn')).status).toBe('completed');
    const tool = results(await rt.history());
    expect(tool).toEqual([expect.objectContaining({ effect: 'applied', isError: false })]);
    expect(tool[0]!.synthesized).toBeUndefined();
    expect(rt.tw.stats()).toMatchObject({ approvalsTimedOut: 0, approvalsApproved: 1 });
  });

  it('A2 A4: a timeout while a decision in time waits for a worker: the decision goes first — the call runs, approved', async () => {
    const { held, timers } = heldTimers();
    const rt = await start({ timers, pool: { maxWorkers: 1, warmWorkers: 1 } });
    const { approval } = await waiting(rt);
    const timeout = held.at(-1)!;
    // Another workstream's turn holds the only worker.
    const other = { ...ref, workstreamId: 'busy' };
    await rt.tw.createWorkstream(other);
    const busy = await rt.tw.send({
      ...other,
      content: script({ tools: [{ name: 'sleep', args: { ms: 600_000 } }] }),
    });
    const deciding = rt.tw.approve({ ...ref, token: approval.token });
    // The decision waits for a worker when the wait's time runs out.
    timeout.fn();
    await rt.tw.cancel(other);
    await busy.done;
    const decided = await within(deciding, 10_000, 'the decision');
    if (decided.status !== 'resumed') throw new Error('not resumed');
    expect((await within(decided.turn.done, 10_000, 'the resumed turn')).status).toBe('completed');
    expect(results(await rt.history())).toEqual([
      expect.objectContaining({ effect: 'applied', isError: false }),
    ]);
    expect(rt.tw.stats()).toMatchObject({ approvalsTimedOut: 0, approvalsApproved: 1 });
  });

  it('A4: a close while a call waits denies it (effect none) and closes; a delete removes the workstream — either way the token is refused after', async () => {
    const rt = await start();
    const { approval } = await waiting(rt);
    await rt.tw.close(ref);
    const tool = results(await rt.history());
    expect(tool).toEqual([expect.objectContaining({ effect: 'none', synthesized: true })]);
    expect(tool[0]!.content).toContain('closed while it waited for approval');
    expect((await rt.tw.getWorkstream(ref)).status).toBe('closed');
    expect((await refusal(rt.tw.approve({ ...ref, token: approval.token }))).code).toBe(
      ErrorCode.APPROVAL_STALE,
    );

    const other = { ...ref, workstreamId: 'deleted' };
    await rt.tw.createWorkstream(other);
    const waited = await within((await rt.tw.send({ ...other, content: ECHO })).done, 10_000, 'waits');
    const { incarnation } = await rt.tw.getWorkstream(other);
    await rt.tw.deleteWorkstream({ ...other, incarnation });
    expect(await refusal(rt.tw.approve({ ...other, token: waited.approval!.token }))).toMatchObject({
      code: ErrorCode.WORKSTREAM_NOT_FOUND,
    });
  });

  it('A2: edited arguments the tool’s schema refuses (a missing required, a wrong type, an unknown key) are INVALID_INPUT naming the problem; nothing changes and the call still waits', async () => {
    const rt = await start();
    const { approval } = await waiting(rt);
    for (const [args, problem] of [
      [{}, 'arguments.text is required'],
      [{ text: 5 }, 'arguments.text must be string'],
      [{ text: 'x', extra: true }, 'arguments.extra is not an argument of the tool'],
    ] as const) {
      const e = await refusal(rt.tw.approve({ ...ref, token: approval.token, arguments: args }));
      expect(e).toMatchObject({
        code: ErrorCode.INVALID_INPUT,
        details: { field: 'arguments', reason: problem },
      });
    }
    expect((await rt.history()).length).toBe(2);
    expect((await rt.tw.status(ref)).awaitingApproval?.token).toBe(approval.token);
    expect(rt.tw.stats()).toMatchObject({ approvalsApproved: 0, activeTurns: 0 });
    expect(rt.tw.stats().pool.busy).toBe(0);
    const ok = await rt.tw.approve({ ...ref, token: approval.token, arguments: { text: 'fits' } });
    expect(ok.status).toBe('resumed');
  });

  it('A1: a send can ask for approval itself (requireApproval): its turn waits on that call, and the resumed turn still applies it; the next send without it does not wait; an unknown tool name is INVALID_INPUT', async () => {
    const rt = await start({ approvals: { tools: [] } });
    const twoEchoes = script(
      { tools: [{ name: 'echo', args: { text: 'one' } }] },
      { tools: [{ name: 'echo', args: { text: 'two' } }] },
      { text: 'done' },
    );
    const first = await within(
      (await rt.tw.send({ ...ref, content: twoEchoes, requireApproval: ['echo'] })).done,
      10_000,
      'the first wait',
    );
    expect(first.status).toBe('awaiting_approval');
    const resumed = await rt.tw.approve({ ...ref, token: first.approval!.token });
    if (resumed.status !== 'resumed') throw new Error('not resumed');
    // The turn's second echo waits too: the send's policy is the turn's.
    const second = await within(resumed.turn.done, 10_000, 'the second wait');
    expect(second.status).toBe('awaiting_approval');
    expect(second.approval).toMatchObject({ name: 'echo', arguments: JSON.stringify({ text: 'two' }) });
    const again = await rt.tw.approve({ ...ref, token: second.approval!.token });
    if (again.status !== 'resumed') throw new Error('not resumed');
    expect((await within(again.turn.done, 10_000, 'the turn')).status).toBe('completed');
    const plain = await within((await rt.tw.send({ ...ref, content: ECHO })).done, 10_000, 'a plain send');
    expect(plain.status).toBe('completed');
    expect(await refusal(rt.tw.send({ ...ref, content: ECHO, requireApproval: ['nope'] }))).toMatchObject({
      code: ErrorCode.INVALID_INPUT,
      details: { field: 'requireApproval' },
    });
  });

  it('A1: the host’s approval policy, given the call’s name and arguments, decides which calls wait; one that throws makes the call wait (fail closed)', async () => {
    const asked: { name: string; args?: unknown; workstreamId: string }[] = [];
    const rt = await start({
      approvals: { tools: [] },
      approvalPolicy: ({ name, args, workstreamId }) => {
        asked.push({ name, args, workstreamId });
        if (args?.text === 'explode') throw new Error('policy down');
        return args?.text === 'risky';
      },
    });
    const say = (text: string) => script({ tools: [{ name: 'echo', args: { text } }] }, { text: 'done' });
    const safe = await within((await rt.send(say('fine'))).done, 10_000, 'a safe call');
    expect(safe.status).toBe('completed');
    const risky = await within((await rt.send(say('risky'))).done, 10_000, 'a risky call');
    expect(risky).toMatchObject({ status: 'awaiting_approval', approval: { name: 'echo' } });
    expect(asked.at(-1)).toEqual({ name: 'echo', args: { text: 'risky' }, workstreamId: 'ws-1' });
    await rt.tw.deny({ ...ref, token: risky.approval!.token });
    await within(
      (async () => {
        while ((await rt.tw.status(ref)).state !== 'idle') await new Promise((r) => setTimeout(r, 10));
      })(),
      10_000,
      'idle again',
    );
    const failing = await within((await rt.send(say('explode'))).done, 10_000, 'a policy that throws');
    expect(failing.status).toBe('awaiting_approval');
    expect(rt.logged('approval policy threw; the call waits for approval')).toHaveLength(1);
  });
});
