/**
 * Any host accepts any send (issue 25, item 2): three runtimes with host ids share a store and a
 * notification channel (test-support/memory-channel.ts). A send that meets a turn running on
 * another host is queued durably in the store (commands/durable-sends.ts) and started, in the
 * order the sends were queued, by whichever host holds the workstream when the turn before it
 * ends; its handle resolves on the host that was called.
 */
import { ErrorCode } from '@turnwarden/protocol';
import type { Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { refusal, within } from '../test-support/bounded.js';
import { gatedStore } from '../test-support/gated-store.js';
import { script } from '../test-support/runtime.js';
import { type Host, threeHostCluster } from '../test-support/three-hosts.js';

type Rt = Host;
const cluster = threeHostCluster();
afterEach(() => cluster.stop());

const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };
const QUEUED = 'send queued durably behind a turn on another host';

const threeHosts = (options: Parameters<typeof cluster.start>[0] = {}, wrapB?: (view: Store) => Store) =>
  cluster.start(options, wrapB);

/** A turn on `rt` that runs until the test opens its gate. */
async function gatedTurn(rt: Rt) {
  const g = cluster.gate();
  const turn = await rt.send(script({ tools: [{ name: 'gated', args: g.args }] }, { text: 'first done' }));
  await within(g.waiting, 10_000, 'the gated tool runs');
  return { turn, g };
}

/** Sends on `rt`; resolves once the send is queued in the store, with the send (which resolves later). */
async function queueOn(rt: Rt, text: string, extra: { principal?: string; signal?: AbortSignal } = {}) {
  const logged = rt.waitForLog(QUEUED);
  const sent = rt.tw.send({ ...ref, ...extra, content: script({ text }) });
  sent.catch(() => undefined);
  await within(Promise.race([logged, sent]), 10_000, `the send "${text}" is queued`);
  // Wrapped: an async function returning the promise itself would wait for it.
  return { sent };
}

/**
 * What a send that must be refused is answered with — or `queued`/`started` should it be queued
 * instead (the test's assertion then fails: no wait on a send that would never be answered).
 */
async function answerOf(rt: Rt, send: () => Promise<unknown>): Promise<unknown> {
  const queued = rt.waitForLog(QUEUED).then(() => 'queued');
  const sent = send().then(
    () => 'started',
    (e: unknown) => e,
  );
  return within(Promise.race([sent, queued]), 10_000, 'the send is answered');
}

const userTexts = async (rt: Rt) =>
  (await rt.history()).flatMap((r) =>
    r.message.role === 'user'
      ? [
          {
            key: r.commitKey,
            text: (JSON.parse(r.message.content) as { script: { text?: string }[] }).script[0]?.text,
          },
        ]
      : [],
  );

describe('sends to a workstream running on another host (issue 25)', () => {
  it('C7 T4: any host accepts them — queued durably, started in the order they were queued across hosts, each answered on its own host', async () => {
    const { a, b, c } = await threeHosts();
    const { turn, g } = await gatedTurn(a);
    // Queued in this order, on three hosts: B, then C, then A itself (the holder).
    const one = (await queueOn(b, 'one')).sent;
    const two = (await queueOn(c, 'two')).sent;
    const three = (await queueOn(a, 'three')).sent;
    // Nothing starts while the turn runs; every host's status counts the three.
    expect((await userTexts(a)).length).toBe(1);
    for (const rt of [a, b, c]) expect((await rt.tw.status(ref)).queuedSends).toBe(3);
    g.open();
    expect((await within(turn.done, 10_000, 'the first turn')).status).toBe('completed');
    const handles = await within(Promise.all([one, two, three]), 20_000, 'the queued sends start');
    const results = await within(Promise.all(handles.map((h) => h.done)), 20_000, 'their turns end');
    expect(results.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
    // Each handle names the workstream as its caller did, on the host that was called.
    expect(results.map((r) => r.workstreamId)).toEqual(['ws-1', 'ws-1', 'ws-1']);
    expect(results.map((r) => r.finalText)).toEqual(['one', 'two', 'three']);
    // Each result names the host that ran it: the holder, whichever host was called.
    expect(results.map((r) => r.host)).toEqual(['host-a', 'host-a', 'host-a']);
    const gens = handles.map((h) => h.generation);
    expect(gens).toEqual([2, 3, 4]);
    // The history holds them in the order they were queued, each user row under its queue key.
    const texts = await userTexts(b);
    expect(texts.map((t) => t.text)).toEqual([undefined, 'one', 'two', 'three']);
    expect(texts.slice(1).every((t) => /^q\d+:u$/.test(t.key))).toBe(true);
    // No host was refused, none had to find the holder.
    for (const rt of [a, b, c]) expect(rt.logs.some((l) => l.msg.includes('LEASED_ELSEWHERE'))).toBe(false);
  });

  it('C7: a cancel called on a third host revokes the sends queued on another: SEND_REVOKED where they were sent, nothing of them written', async () => {
    const { a, b, c } = await threeHosts();
    const { turn } = await gatedTurn(a);
    const one = (await queueOn(b, 'one')).sent;
    const two = (await queueOn(a, 'two')).sent;
    expect(await within(c.tw.cancel(ref), 10_000, 'the routed cancel')).toBe(true);
    const e1 = await refusal(within(one, 10_000, 'the send on B is answered'));
    expect(e1).toMatchObject({ code: ErrorCode.SEND_REVOKED, details: { reason: 'cancel' } });
    const e2 = await refusal(within(two, 10_000, 'the send on A is answered'));
    expect(e2).toMatchObject({ code: ErrorCode.SEND_REVOKED, details: { reason: 'cancel' } });
    expect((await within(turn.done, 10_000, 'the cancelled turn')).abortReason).toBe('cancel');
    expect((await userTexts(a)).map((t) => t.text)).toEqual([undefined]);
    // A send after the cancel starts, on any host.
    const after = await c.tw.send({ ...ref, content: script({ text: 'after' }) });
    expect((await within(after.done, 10_000, 'the next turn')).finalText).toBe('after');
  });

  it('C7: a send called on a host before a cancel called there cannot start after it, even while its enqueue is on its way', async () => {
    let held!: ReturnType<typeof gatedStore>;
    const { a, b } = await threeHosts({}, (view) => {
      held = gatedStore(view, 'enqueueSend');
      return held.store;
    });
    const { turn } = await gatedTurn(a);
    // Called in this order on host B: the send's enqueue is held before it writes when the
    // cancel is called.
    const sent = b.tw.send({ ...ref, content: script({ text: 'before the cancel' }) });
    sent.catch(() => undefined);
    await within(held.atGate, 10_000, 'the enqueue is on its way');
    const waits = b.waitForLog('revocation waits for sends queued before it');
    const cancelled = b.tw.cancel(ref);
    // Host B's cancel waits for the send it was called with before, then revokes and routes.
    const first = await within(
      Promise.race([waits.then(() => 'waits'), cancelled.then(() => 'returned')]),
      10_000,
      'the cancel on host B',
    );
    expect(first).toBe('waits');
    // Only now the send is queued: it must not start.
    held.open();
    expect(await within(cancelled, 10_000, 'the cancel')).toBe(true);
    expect((await within(turn.done, 10_000, 'the cancelled turn')).abortReason).toBe('cancel');
    const e = await refusal(within(sent, 10_000, 'the send is answered'));
    expect(e).toMatchObject({ code: ErrorCode.SEND_REVOKED, details: { reason: 'cancel' } });
    // A send called after the cancel returned starts.
    const after = await b.tw.send({ ...ref, content: script({ text: 'after' }) });
    expect((await within(after.done, 10_000, 'the next turn')).finalText).toBe('after');
    expect((await userTexts(a)).map((t) => t.text)).toEqual([undefined, 'after']);
  });

  it('T3: another principal’s message is refused TURN_IN_PROGRESS on any host, nothing queued', async () => {
    const { a, b } = await threeHosts();
    const { turn, g } = await gatedTurn(a);
    const e = await answerOf(b, () =>
      b.tw.send({ ...ref, principal: 'user-b', content: script({ text: 'x' }) }),
    );
    expect(e).toMatchObject({ code: ErrorCode.TURN_IN_PROGRESS });
    g.open();
    await within(turn.done, 10_000, 'the turn');
    expect((await userTexts(a)).length).toBe(1);
    expect(b.logs.some((l) => l.msg === QUEUED)).toBe(false);
  });

  it('T4: the bound (limits.maxQueuedSends) holds across hosts: QUEUE_FULL, retryable, nothing written', async () => {
    const { a, b, c } = await threeHosts({ limits: { maxQueuedSends: 1 } });
    const { turn, g } = await gatedTurn(a);
    const one = (await queueOn(b, 'one')).sent;
    const e = await answerOf(c, () => c.tw.send({ ...ref, content: script({ text: 'two' }) }));
    expect(e).toMatchObject({ code: ErrorCode.QUEUE_FULL, retryable: true, details: { limit: 1 } });
    g.open();
    await within(turn.done, 10_000, 'the turn');
    expect((await within((await one).done, 10_000, 'the queued one')).finalText).toBe('one');
    expect((await userTexts(a)).map((t) => t.text)).toEqual([undefined, 'one']);
  });

  it('a send withdrawn by its signal while it waits never starts: TURN_ABORTED on its host', async () => {
    const { a, b } = await threeHosts();
    const { turn, g } = await gatedTurn(a);
    const ac = new AbortController();
    const one = (await queueOn(b, 'one', { signal: ac.signal })).sent;
    const two = (await queueOn(b, 'two')).sent;
    ac.abort();
    // The gate opens at once: a send its signal did not withdraw would start as the turn ends.
    g.open();
    await within(turn.done, 10_000, 'the turn');
    expect((await refusal(within(one, 10_000, 'the withdrawn send'))).code).toBe(ErrorCode.TURN_ABORTED);
    expect((await within((await two).done, 10_000, 'the next one')).finalText).toBe('two');
    expect((await userTexts(a)).map((t) => t.text)).toEqual([undefined, 'two']);
  });

  it('C4: the handle of a send queued on one host cancels its turn where it runs, not a later one', async () => {
    const { a, b } = await threeHosts();
    const { turn, g } = await gatedTurn(a);
    const g2 = cluster.gate();
    const logged = b.waitForLog(QUEUED);
    const sent = b.tw.send({
      ...ref,
      content: script({ tools: [{ name: 'gated', args: g2.args }] }, { text: 'late' }),
    });
    await within(logged, 10_000, 'queued');
    g.open();
    await within(turn.done, 10_000, 'the first turn');
    const handle = await within(sent, 10_000, 'the queued send starts (on host A, the holder)');
    await within(g2.waiting, 10_000, 'its tool runs');
    const routed = a.waitForLog('routed call received');
    const result = handle.cancel();
    await within(routed, 10_000, 'the cancel reaches host A');
    // Opened only now: a turn the cancel did not abort would complete.
    g2.open();
    expect(await within(result, 10_000, 'the cancelled turn')).toMatchObject({
      workstreamId: 'ws-1',
      status: 'interrupted',
      abortReason: 'cancel',
    });
    // A later turn is not the handle's: its cancel leaves it alone — nor the sends queued behind it.
    const g3 = cluster.gate();
    const next = await a.tw.send({
      ...ref,
      content: script({ tools: [{ name: 'gated', args: g3.args }] }, { text: 'next' }),
    });
    await within(g3.waiting, 10_000, 'the next turn’s tool runs (on host A)');
    const behind = (await queueOn(b, 'behind the next')).sent;
    // The late cancel goes to host A, which finds another generation running and does nothing.
    const routedAgain = a.waitForLog('routed call received');
    void handle.cancel();
    await within(routedAgain, 10_000, 'the late cancel reaches host A');
    g3.open();
    expect((await within(next.done, 10_000, 'the next turn')).status).toBe('completed');
    expect(
      (await within((await within(behind, 10_000, 'the send behind it')).done, 10_000, 'its turn')).finalText,
    ).toBe('behind the next');
  });

  it('S7: a send queued behind a host that stops is not lost: another host starts it once the lease is free', async () => {
    const { a, b } = await threeHosts();
    await gatedTurn(a);
    const one = (await queueOn(b, 'one')).sent;
    // The holder shuts down: its turn is aborted, its lease released; it starts nothing more.
    await a.tw.shutdown();
    cluster.forget(a);
    const handle = await within(one, 20_000, 'the send starts on another host');
    expect((await within(handle.done, 10_000, 'its turn')).finalText).toBe('one');
    expect((await userTexts(b)).map((t) => t.text)).toEqual([undefined, 'one']);
  });
});
