/**
 * The send queue and claim revalidation (C7): sends during a turn wait in a bounded FIFO queue;
 * a claim captured before a cancel, a close or a poisoned turn end can neither enqueue nor start
 * a turn after it; one captured after may. Turns are held at their dispatch seam (the turn is
 * claimed and running, its worker not yet told) so the test, not timing, decides what overlaps.
 */
import {
  ErrorCode,
  isTurnwardenError,
  openToolCalls,
  SeamName,
  type TurnwardenError,
} from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { within } from './test-support/bounded.js';
import { faultyStore } from './test-support/faulty-store.js';
import { script, startRuntime } from './test-support/runtime.js';
import { seamHold as holdSeams, type SeamHold } from './test-support/seam-hold.js';
import type { SendInput, TurnHandle } from './types.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
/** Seams the test holds: released after it, so a failed test's runtime still shuts down. */
const holds = new Set<ReturnType<typeof seamHold>>();
afterEach(async () => {
  for (const h of holds) h.releaseAll();
  holds.clear();
  await rt?.tw.shutdown();
  rt = undefined;
});

async function refusal(p: Promise<unknown>): Promise<TurnwardenError> {
  const e = await within(
    p.then(
      () => undefined,
      (err: unknown) => err,
    ),
    10_000,
    'the send is answered',
  );
  if (!isTurnwardenError(e)) throw new Error(`expected a TurnwardenError, got ${String(e)}`);
  return e;
}

/** A send that must be refused at once: its error, or `queued`/`started` when it was not. */
async function refusedOrQueued(r: Rt, input: SendInput): Promise<unknown> {
  const queuedLog = r.waitForLog('send queued behind the running turn').then(() => 'queued');
  const sent = r.tw.send(input);
  sent.catch(() => undefined);
  return within(
    Promise.race([
      sent.then(
        () => 'started',
        (err: unknown) => err,
      ),
      queuedLog,
    ]),
    10_000,
    'the send is answered or queued',
  );
}

/**
 * How a send ended — started (its handle) or refused (its error) — once everything it could
 * wait on has been released: a send that wrongly starts shows as started, not as a hang.
 */
async function outcome(p: Promise<TurnHandle>): Promise<{ started?: TurnHandle; error?: TurnwardenError }> {
  const settled = await within<{ started?: TurnHandle; error?: unknown }>(
    p.then(
      (started) => ({ started }),
      (error: unknown) => ({ error }),
    ),
    10_000,
    'the send is answered',
  );
  if (settled.error !== undefined && !isTurnwardenError(settled.error)) throw settled.error;
  return settled as { started?: TurnHandle; error?: TurnwardenError };
}

/** The refusal of a send that must be revoked, as [code, details] (a started send fails it). */
async function revokedAs(p: Promise<TurnHandle>): Promise<unknown[]> {
  const o = await outcome(p);
  if (o.started) await within(o.started.done, 10_000, 'the wrongly started turn ends');
  return o.started ? ['started', o.started.generation] : [o.error?.code, o.error?.details];
}

/** Seams held by the test (test-support/seam-hold.ts), released after it. */
function seamHold(...names: SeamName[]): SeamHold {
  const h = holdSeams(...names);
  holds.add(h);
  return h;
}

const ref = (r: Rt) => ({ tenantId: 'tenant-a', principal: 'user-a', workstreamId: r.workstreamId });
const userRows = async (r: Rt) =>
  (await r.history()).filter((row) => row.message.role === 'user').map((row) => row.message.content);

/**
 * Sends `content`; resolves, once the supervisor has put it in the queue, with the send's
 * pending answer (wrapped: an async function would otherwise wait for the answer itself).
 */
async function queued(r: Rt, content: string, extra: { signal?: AbortSignal } = {}) {
  const logged = r.waitForLog('send queued behind the running turn');
  const sent = r.tw.send({ ...ref(r), content, ...extra });
  sent.catch(() => undefined);
  await within(logged, 10_000, `"${content}" is queued`);
  return { sent };
}

describe('the send queue (C7)', () => {
  it('C7: sends made while a turn runs wait and start in order once the turns before them have ended', async () => {
    const hold = seamHold(SeamName.claimCaptureToDispatch);
    rt = await startRuntime({ harness: hold.harness });
    const first = await rt.send('first');
    // Captured before the second turn's generation exists: starting turns does not fence.
    const second = (await queued(rt, 'second')).sent;
    const third = (await queued(rt, 'third')).sent;
    expect((await rt.tw.status(ref(rt))).queuedSends).toBe(2);
    hold.disarm();
    hold.release(SeamName.claimCaptureToDispatch);
    const handles: TurnHandle[] = [first, await within(second, 10_000, 'second starts'), await third];
    const results = await Promise.all(handles.map((h) => within(h.done, 10_000, 'each turn ends')));
    expect(results.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
    expect(handles.map((h) => h.generation)).toEqual([
      first.generation,
      first.generation + 1,
      first.generation + 2,
    ]);
    expect(await userRows(rt)).toEqual(['first', 'second', 'third']);
    expect((await rt.history()).map((r) => r.message.role)).toEqual([
      'user',
      'assistant',
      'user',
      'assistant',
      'user',
      'assistant',
    ]);
    expect((await rt.tw.status(ref(rt))).queuedSends).toBe(0);
  });

  it('C7: a full queue refuses with a retryable QUEUE_FULL and writes nothing; with no queue a send is TURN_IN_PROGRESS', async () => {
    const hold = seamHold(SeamName.claimCaptureToDispatch);
    rt = await startRuntime({ harness: hold.harness, limits: { maxQueuedSends: 1 } });
    const first = await rt.send('first');
    const second = (await queued(rt, 'second')).sent;
    const e = await refusedOrQueued(rt, { ...ref(rt), content: 'third' });
    expect(isTurnwardenError(e) ? [e.code, e.retryable, e.details] : e).toEqual([
      ErrorCode.QUEUE_FULL,
      true,
      { limit: 1, retryAfterMs: expect.any(Number) },
    ]);
    hold.disarm();
    hold.release(SeamName.claimCaptureToDispatch);
    await within(first.done, 10_000, 'first ends');
    await within((await second).done, 10_000, 'second ends');
    expect(await userRows(rt)).toEqual(['first', 'second']);
    await rt.tw.shutdown();

    const off = seamHold(SeamName.claimCaptureToDispatch);
    rt = await startRuntime({ harness: off.harness, limits: { maxQueuedSends: 0 } });
    const only = await rt.send('only');
    expect((await refusal(rt.send('during'))).code).toBe(ErrorCode.TURN_IN_PROGRESS);
    off.disarm();
    off.release(SeamName.claimCaptureToDispatch);
    await within(only.done, 10_000, 'the turn ends');
    expect(await userRows(rt)).toEqual(['only']);
  });

  it('C7: a queued send captured before a force cancel is revoked; one made after the cancel runs', async () => {
    const hold = seamHold(SeamName.claimCaptureToDispatch);
    rt = await startRuntime({ harness: hold.harness });
    const first = await rt.send('first');
    const before = (await queued(rt, 'before the cancel')).sent;
    const committed = rt.waitForLog('turn aborted; lease renewal stopped');
    const cancelled = rt.tw.cancel(ref(rt));
    await within(committed, 10_000, 'the cancel commits its abort');
    // Revoked at once, while the cancelled turn is still there: the queue is empty.
    expect((await rt.tw.status(ref(rt))).queuedSends).toBe(0);
    const after = rt.send('after the cancel');
    hold.disarm();
    hold.release(SeamName.claimCaptureToDispatch);
    expect(await revokedAs(before)).toEqual([ErrorCode.SEND_REVOKED, { reason: 'cancel' }]);
    expect(await within(cancelled, 10_000, 'the cancel returns')).toBe(true);
    expect((await first.done).abortReason).toBe('cancel');
    expect((await within((await after).done, 10_000, 'the later send ends')).status).toBe('completed');
    expect(await userRows(rt)).toEqual(['first', 'after the cancel']);
  });

  for (const arm of ['enqueue', 'start'] as const) {
    it(`C7: a claim captured before a cancel and held before its ${arm} cannot ${arm} after it`, async () => {
      const hold = seamHold(SeamName.claimCaptureToDispatch, SeamName.sendCaptureToEnqueue);
      rt = await startRuntime({ harness: hold.harness });
      const firstSent = rt.send('first');
      await hold.arrived(SeamName.sendCaptureToEnqueue);
      hold.release(SeamName.sendCaptureToEnqueue);
      const first = await firstSent;
      // The second send has captured its claim; it is held before the session's mailbox.
      const stale = rt.tw.send({ ...ref(rt), content: 'stale' });
      stale.catch(() => undefined);
      await hold.arrived(SeamName.sendCaptureToEnqueue);
      const committed = rt.waitForLog('turn aborted; lease renewal stopped');
      const cancelled = rt.tw.cancel(ref(rt));
      await within(committed, 10_000, 'the cancel commits its abort');
      hold.disarm();
      if (arm === 'enqueue') {
        // The cancelled turn still runs (its dispatch is held): the stale claim would queue.
        expect((await rt.tw.status(ref(rt))).activeTurn).toBeDefined();
        hold.release(SeamName.sendCaptureToEnqueue);
        await new Promise<void>((resolve) => setImmediate(resolve));
        hold.release(SeamName.claimCaptureToDispatch);
        expect(await revokedAs(stale)).toEqual([ErrorCode.SEND_REVOKED, { reason: 'cancel' }]);
        // Refused where it would enqueue: it never entered the queue.
        expect(rt.logged('send queued behind the running turn')).toEqual([]);
      } else {
        // The turn it would have queued behind has ended: the stale claim would start one.
        hold.release(SeamName.claimCaptureToDispatch);
        await within(first.done, 10_000, 'the cancelled turn ends');
        expect((await rt.tw.status(ref(rt))).activeTurn).toBeUndefined();
        hold.release(SeamName.sendCaptureToEnqueue);
        expect(await revokedAs(stale)).toEqual([ErrorCode.SEND_REVOKED, { reason: 'cancel' }]);
      }
      expect(await within(cancelled, 10_000, 'the cancel returns')).toBe(true);
      expect(await userRows(rt)).toEqual(['first']);
      expect((await within((await rt.send('fresh')).done, 10_000, 'a fresh send ends')).status).toBe(
        'completed',
      );
    });
  }

  it('C7: a queued send captured before a poisoned turn end is revoked, and stays revoked after the repair', async () => {
    const faulty = faultyStore();
    const hold = seamHold(SeamName.claimCaptureToDispatch);
    rt = await startRuntime({ harness: hold.harness, store: faulty.store });
    // The tool's result is rejected and so is the repair after it: the turn ends poisoned (S5).
    faulty.reject(2, (e) => e.message.role === 'tool');
    const first = await rt.send(script({ tools: [{ name: 'echo', args: { text: 'ran' } }] }, { text: 'no' }));
    const next = (await queued(rt, 'queued behind the poison')).sent;
    hold.disarm();
    hold.release(SeamName.claimCaptureToDispatch);
    expect(await revokedAs(next)).toEqual([ErrorCode.SEND_REVOKED, { reason: 'poison' }]);
    expect((await first.done).status).toBe('failed');
    expect(openToolCalls(await rt.history())).toHaveLength(1);
    // The repair (C5) unpoisons: a send made now runs; the revoked one never does.
    expect(await rt.tw.cancel(ref(rt))).toBe(true);
    expect((await within((await rt.send('after the repair')).done, 10_000, 'it ends')).status).toBe(
      'completed',
    );
    expect((await userRows(rt)).slice(1)).toEqual(['after the repair']);
  });

  it('C7: a soft close revokes the sends queued before it; the close completes over a complete history', async () => {
    const hold = seamHold(SeamName.claimCaptureToDispatch);
    rt = await startRuntime({ harness: hold.harness });
    const first = await rt.send('first');
    const next = (await queued(rt, 'queued before the close')).sent;
    const latched = rt.waitForLog('soft close waiting for the running turn');
    const closing = rt.tw.close({ ...ref(rt), waitMs: 30_000 });
    await within(latched, 10_000, 'the close latches');
    // While the close waits, a new send is refused: the workstream is closing.
    expect((await refusal(rt.send('during the close'))).message).toMatch(/is closing/);
    // The latch revoked the queued send at once.
    expect((await rt.tw.status(ref(rt))).queuedSends).toBe(0);
    hold.disarm();
    hold.release(SeamName.claimCaptureToDispatch);
    expect(await revokedAs(next)).toEqual([ErrorCode.SEND_REVOKED, { reason: 'close' }]);
    await within(closing, 10_000, 'the soft close completes');
    expect((await first.done).status).toBe('completed');
    expect(await userRows(rt)).toEqual(['first']);
    expect((await rt.tw.status(ref(rt))).state).toBe('closed');
  });

  it('a queued send withdrawn by its signal never starts; the sends behind it still do', async () => {
    const hold = seamHold(SeamName.claimCaptureToDispatch);
    rt = await startRuntime({ harness: hold.harness });
    const first = await rt.send('first');
    const controller = new AbortController();
    const withdrawn = (await queued(rt, 'withdrawn', { signal: controller.signal })).sent;
    const kept = (await queued(rt, 'kept')).sent;
    controller.abort();
    expect((await refusal(withdrawn)).code).toBe(ErrorCode.TURN_ABORTED);
    expect((await rt.tw.status(ref(rt))).queuedSends).toBe(1);
    hold.disarm();
    hold.release(SeamName.claimCaptureToDispatch);
    await within(first.done, 10_000, 'first ends');
    expect((await within((await kept).done, 10_000, 'kept ends')).status).toBe('completed');
    expect(await userRows(rt)).toEqual(['first', 'kept']);
  });

  it('shutdown refuses the queued sends with SHUTTING_DOWN and still ends the running turn', async () => {
    const hold = seamHold(SeamName.claimCaptureToDispatch);
    rt = await startRuntime({ harness: hold.harness });
    const first = await rt.send('first');
    const next = (await queued(rt, 'never')).sent;
    const stopped = rt.tw.shutdown();
    expect((await refusal(next)).code).toBe(ErrorCode.SHUTTING_DOWN);
    hold.disarm();
    hold.release(SeamName.claimCaptureToDispatch);
    await within(stopped, 10_000, 'shutdown completes');
    expect((await first.done).abortReason).toBe('shutdown');
    rt = undefined;
  });

  it('T3: another principal cannot queue behind a running turn (an interjection is refused); the same principal can', async () => {
    const hold = seamHold(SeamName.claimCaptureToDispatch);
    rt = await startRuntime({ harness: hold.harness });
    const as = (principal: string, content: string) => ({ ...ref(rt!), content, principal });
    const first = await rt.tw.send(as('alice', 'first'));
    const interjection = await refusedOrQueued(rt, as('mallory', 'interjection'));
    expect(isTurnwardenError(interjection) ? interjection.code : interjection).toBe(
      ErrorCode.TURN_IN_PROGRESS,
    );
    const logged = rt.waitForLog('send queued behind the running turn');
    const own = rt.tw.send(as('alice', 'mine'));
    await within(logged, 10_000, 'alice queues');
    hold.disarm();
    hold.release(SeamName.claimCaptureToDispatch);
    await within(first.done, 10_000, 'first ends');
    await within((await own).done, 10_000, 'alice’s next ends');
    expect(await userRows(rt)).toEqual(['first', 'mine']);
  });
});
