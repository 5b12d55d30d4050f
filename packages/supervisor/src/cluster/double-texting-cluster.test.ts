/**
 * Double texting across hosts (issue 26, M1–M4): the turn runs on host A, the second message
 * comes to another host. `reject` is refused there (nothing written, nothing queued in the
 * store); `interrupt` cancels A's turn through the cluster (its history repaired, a send queued
 * durably before it revoked) and runs; `rollback` also removes A's turn's rows, and a listener
 * on a third host is told `history_resync`; another principal's interrupt is refused (T3).
 */
import { ErrorCode, isTurnwardenError, openToolCalls } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { TurnHandle } from '../index.js';
import type { TurnwardenEvent } from '../streams/events.js';
import { within } from '../test-support/bounded.js';
import { script } from '../test-support/runtime.js';
import { type Host, threeHostCluster } from '../test-support/three-hosts.js';

const cluster = threeHostCluster();
afterEach(() => cluster.stop());

const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'busy' };

/** A turn on `host` running its gated tool until the gate opens. */
async function gatedOn(host: Host) {
  const g = cluster.gate();
  const turn = await host.tw.send({
    ...ref,
    content: script({ tools: [{ name: 'gated', args: g.args }] }, { text: 'after the tool' }),
  });
  await within(g.waiting, 10_000, 'the tool runs on A');
  return { turn, g };
}

/**
 * How a send ended: started, or its refusal as [code, details] — or `queued` once `host` sees it
 * waiting in the store (a broken refusal then fails an assertion, not a timeout).
 */
async function answered(p: Promise<TurnHandle>, host?: Host): Promise<unknown> {
  p.catch(() => undefined);
  let settled = false;
  const queued = (async () => {
    while (host !== undefined && !settled) {
      if (((await host.tw.status(ref)).queuedSends ?? 0) > 0) return 'queued';
      await new Promise((r) => setTimeout(r, 10));
    }
    return new Promise<never>(() => undefined);
  })();
  const r = await within(
    Promise.race([
      p.then(
        () => 'started',
        (e: unknown) => e,
      ),
      queued,
    ]),
    10_000,
    'the send is answered',
  ).finally(() => {
    settled = true;
  });
  return isTurnwardenError(r) ? [r.code, r.details] : r;
}

const users = async (host: Host) =>
  (await host.tw.history(ref)).rows.filter((r) => r.message.role === 'user').map((r) => r.message.content);

describe('double texting across hosts', () => {
  it('M1: a reject send on host B while A runs the turn is TURN_IN_PROGRESS; nothing is written or queued in the store', async () => {
    const { a, b } = await cluster.start();
    await a.tw.createWorkstream(ref);
    const { turn, g } = await gatedOn(a);
    const before = (await b.tw.history(ref)).rows;
    expect(await answered(b.tw.send({ ...ref, content: 'me too', doubleTexting: 'reject' }), b)).toEqual([
      ErrorCode.TURN_IN_PROGRESS,
      { workstreamId: 'busy', doubleTexting: 'reject' },
    ]);
    expect((await b.tw.history(ref)).rows).toEqual(before);
    expect((await b.tw.status(ref)).queuedSends).toBe(0);
    g.open();
    expect((await within(turn.done, 10_000, 'A’s turn')).status).toBe('completed');
  });

  it('M3 C7: an interrupt on host B cancels the turn A runs (its call answered), revokes the send C queued before it, and runs', async () => {
    const { a, b, c } = await cluster.start();
    await a.tw.createWorkstream(ref);
    const { turn } = await gatedOn(a);
    const earlier = c.tw.send({ ...ref, content: 'earlier' });
    earlier.catch(() => undefined);
    await within(
      (async () => {
        while ((await c.tw.status(ref)).queuedSends === 0) await new Promise((r) => setTimeout(r, 10));
      })(),
      10_000,
      'the earlier send is queued in the store',
    );
    const handle = await within(
      b.tw.send({ ...ref, content: 'interrupt', doubleTexting: 'interrupt' }),
      10_000,
      'the interrupting send starts',
    );
    expect(await within(turn.done, 10_000, 'A’s turn ends')).toMatchObject({
      status: 'interrupted',
      abortReason: 'cancel',
      synthesized: 1,
    });
    expect(await answered(earlier)).toEqual([
      ErrorCode.SEND_REVOKED,
      expect.objectContaining({ reason: 'cancel' }),
    ]);
    expect((await within(handle.done, 10_000, 'its turn')).status).toBe('completed');
    expect((await users(c)).slice(1)).toEqual(['interrupt']);
    expect(openToolCalls((await c.tw.history(ref)).rows)).toEqual([]);
  });

  it('M3: the interrupting send is the next turn across hosts: a send made on host C once the interrupt from B has aborted A’s turn, while that turn still ends, waits behind it', async () => {
    const { a, b, c } = await cluster.start();
    await a.tw.createWorkstream(ref);
    // A's tool ignores its abort: the turn ends only once its worker is reclaimed after the grace.
    let onStarted!: () => void;
    let onAborted!: () => void;
    const started = new Promise<void>((r) => {
      onStarted = r;
    });
    const aborted = new Promise<void>((r) => {
      onAborted = r;
    });
    await a.tw.subscribe({
      ...ref,
      listener: (e) => {
        if (e.type === 'tool_started') onStarted();
        if (e.type === 'turn_aborted') onAborted();
      },
    });
    const first = await a.tw.send({
      ...ref,
      content: script({ tools: [{ name: 'sleep', args: { ms: 60_000, ignoreAbort: true } }] }),
    });
    await within(started, 10_000, 'A’s tool runs');
    const interrupt = b.tw.send({ ...ref, content: 'interrupt', doubleTexting: 'interrupt' });
    interrupt.catch(() => undefined);
    await within(aborted, 10_000, 'the interrupt aborted A’s turn');
    // A's turn still runs (its tool ignores the abort): this send queues behind it, on any design.
    const later = c.tw.send({ ...ref, content: 'later' });
    later.catch(() => undefined);
    expect(await within(first.done, 15_000, 'A’s turn ends')).toMatchObject({ status: 'interrupted' });
    const settled = await within(Promise.allSettled([interrupt, later]), 15_000, 'both sends');
    expect(
      settled.map((r) => (r.status === 'fulfilled' ? 'started' : (r.reason as { code?: string }).code)),
    ).toEqual(['started', 'started']);
    for (const r of settled) if (r.status === 'fulfilled') await within(r.value.done, 10_000, 'each turn');
    expect((await users(c)).slice(1)).toEqual(['interrupt', 'later']);
    expect(openToolCalls((await c.tw.history(ref)).rows)).toEqual([]);
  });

  it('M4 E2: a rollback on host C removes the rows of the turn A ran; a listener on B is told history_resync', async () => {
    const { a, b, c } = await cluster.start();
    await a.tw.createWorkstream(ref);
    const kept = await within((await a.tw.send({ ...ref, content: 'kept' })).done, 10_000, 'first turn');
    expect(kept.status).toBe('completed');
    const keptRows = (await a.tw.history(ref)).rows;
    const heard: TurnwardenEvent[] = [];
    await b.tw.subscribe({ ...ref, listener: (e) => heard.push(e) });
    const { turn } = await gatedOn(a);
    const handle = await within(
      c.tw.send({ ...ref, content: 'instead', doubleTexting: 'rollback' }),
      10_000,
      'the rollback send starts',
    );
    expect((await within(turn.done, 10_000, 'A’s turn ends')).status).toBe('interrupted');
    expect((await within(handle.done, 10_000, 'its turn')).status).toBe('completed');
    const rows = (await b.tw.history(ref)).rows;
    expect(rows.slice(0, keptRows.length)).toEqual(keptRows);
    expect(rows.some((r) => r.generation === turn.generation)).toBe(false);
    expect(rows.slice(keptRows.length).map((r) => r.message.role)).toEqual(['user', 'assistant']);
    await within(
      (async () => {
        while (!heard.some((e) => e.type === 'history_resync')) await new Promise((r) => setTimeout(r, 10));
      })(),
      10_000,
      'B hears history_resync',
    );
  });

  it('M3 A4: an interrupt on host B while a call waits for approval on A: the call is denied (effect none) and the new message runs', async () => {
    const { a, b, c } = await cluster.start({ approvals: { tools: ['echo'] } });
    await a.tw.createWorkstream(ref);
    const waits = script({ tools: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'done' });
    const waiting = await within((await a.tw.send({ ...ref, content: waits })).done, 10_000, 'A waits');
    expect(waiting.status).toBe('awaiting_approval');
    const handle = await b.tw.send({ ...ref, content: 'never mind', doubleTexting: 'interrupt' });
    expect((await within(handle.done, 10_000, 'its turn')).status).toBe('completed');
    const rows = (await c.tw.history(ref)).rows;
    expect(rows.find((r) => r.message.role === 'tool')?.message).toMatchObject({
      effect: 'none',
      synthesized: true,
    });
    expect(openToolCalls(rows)).toEqual([]);
    expect((await c.tw.status(ref)).awaitingApproval).toBeUndefined();
  });

  it('M3 T3: another principal’s interrupt on host B is TURN_IN_PROGRESS; A’s turn goes on', async () => {
    const { a, b } = await cluster.start();
    await a.tw.createWorkstream(ref);
    const { turn, g } = await gatedOn(a);
    expect(
      await answered(
        b.tw.send({ ...ref, principal: 'user-b', content: 'stop', doubleTexting: 'interrupt' }),
        b,
      ),
    ).toEqual([ErrorCode.TURN_IN_PROGRESS, { workstreamId: 'busy' }]);
    g.open();
    expect((await within(turn.done, 10_000, 'A’s turn')).status).toBe('completed');
  });
});
