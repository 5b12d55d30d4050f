/**
 * Two soft closes at once (C1, C2): both resolve the same way, the workstream is closed once
 * (one CLOSE, one `ws_closed`, one lifecycle event), and the latch holds while either still
 * waits — one timing out does not lift it under the other — and is gone once both have ended.
 *
 * A repeated fence (C7): a cancel twice, a fence then a send then a fence — every claim captured
 * before a fence is revoked by it (SEND_REVOKED), waiting, parked for a worker or not yet
 * queued; every claim captured after it is left alone; a fence arriving late never lowers the
 * one already up.
 */
import { ErrorCode, isTurnwardenError, openToolCalls, type TurnwardenError } from '@turnwarden/protocol';
import { openSqliteStore } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import { SendQueue } from './commands/send-queue.js';
import type { WorkstreamLifecycleEvent } from './streams/lifecycle-feed.js';
import { refusal, within } from './test-support/bounded.js';
import { interceptStore } from './test-support/intercept.js';
import { nextEvent, script, startRuntime } from './test-support/runtime.js';
import type { TurnHandle } from './types.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const owner = { tenantId: 'tenant-a', principal: 'user-a' };
const ref = { ...owner, workstreamId: 'ws-1' };
/** A turn that runs a tool until it is cancelled (it ignores its abort: only a cancel repairs it). */
const LONG_TOOL = script(
  { tools: [{ name: 'sleep', args: { ms: 600_000, ignoreAbort: true } }] },
  { text: 'x' },
);
/** A turn that heartbeats until it is cancelled. */
const HOLD = script({ heartbeat: 600_000, everyMs: 50 }, { text: 'done' });

/** A runtime whose store counts its closes; its tenant's lifecycle feed collected. */
async function closeCounting() {
  let closes = 0;
  const store = interceptStore(openSqliteStore({ path: ':memory:' }), {
    closeWorkstream: (original, ...args) => {
      closes++;
      return original(...args);
    },
  });
  rt = await startRuntime({ store, watchdog: { timeoutMs: 10_000, pollMs: 100, graceMs: 250 } });
  const feed: WorkstreamLifecycleEvent[] = [];
  rt.tw.subscribeWorkstreams({ ...owner, listener: (e) => feed.push(e) });
  return { rt, feed, closes: () => closes };
}

/** How a call ended, once it has: 'closed' (resolved) or its error code. */
const outcome = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: unknown) => (isTurnwardenError(e) ? e.code : String(e)),
  );

/** A send during the latch must be refused at once as closing — not queued, not started. */
async function refusedAsClosing(r: Rt, content: string): Promise<string> {
  const queued = r.waitForLog('send queued behind the running turn').then(() => 'queued');
  const sent = r.send(content);
  sent.catch(() => undefined);
  return within(
    Promise.race([
      sent.then(
        () => 'started',
        (e: unknown) => (isTurnwardenError(e) ? `${e.code}: ${e.message}` : String(e)),
      ),
      queued,
    ]),
    10_000,
    `"${content}" is answered`,
  );
}

describe('C1 C2: two soft closes at once', () => {
  it('C1: two soft closes during a tool call both resolve once the turn ends; one CLOSE, one ws_closed, one lifecycle event; a close that will not wait is refused at once', async () => {
    const { feed, closes } = await closeCounting();
    // The tool runs until the test ends the turn: nothing here races its length.
    const turn = await rt!.send(LONG_TOOL);
    await nextEvent(rt!.tw, 'ws-1', 'tool_started');
    const first = outcome(rt!.tw.close({ ...ref, waitMs: 30_000 }));
    const second = outcome(rt!.tw.close({ ...ref, waitMs: 30_000 }));
    await within(
      (async () => {
        while (rt!.logged('soft close waiting for the running turn').length < 2)
          await new Promise((resolve) => setImmediate(resolve));
      })(),
      10_000,
      'both closes wait on the turn',
    );
    // Meanwhile: no new turn, and a close without waitMs is refused as it would be alone.
    expect(await refusedAsClosing(rt!, 'sneaking in')).toMatch(/^TURN_IN_PROGRESS: .*is closing/);
    expect((await refusal(rt!.tw.close(ref))).code).toBe(ErrorCode.TURN_IN_PROGRESS);
    // The turn ends (its unfinished call answered by the repair); both closes resolve with it.
    expect(await rt!.tw.cancel(ref)).toBe(true);
    expect(await within(Promise.all([first, second]), 10_000, 'both closes end')).toEqual([
      'resolved',
      'resolved',
    ]);
    expect(await turn.done).toMatchObject({ status: 'interrupted', synthesized: 1 });
    expect((await rt!.tw.status(ref)).state).toBe('closed');
    expect(openToolCalls(await rt!.history())).toEqual([]);
    expect(closes()).toBe(1);
    expect(rt!.events.filter((e) => e.type === 'ws_closed')).toHaveLength(1);
    expect(feed.map((e) => e.type)).toEqual(['ws_closed']);
    expect(rt!.logged('workstream closed')).toHaveLength(1);
    // Closed is final: a later close is refused as before.
    expect((await refusal(rt!.tw.close({ ...ref, waitMs: 1_000 }))).code).toBe(ErrorCode.WORKSTREAM_CLOSED);
  });

  it('C2: one soft close times out while the other still waits: the latch holds for the other, which then closes', async () => {
    const { feed, closes } = await closeCounting();
    const turn = await rt!.send(LONG_TOOL);
    await nextEvent(rt!.tw, 'ws-1', 'tool_started');
    const patient = outcome(rt!.tw.close({ ...ref, waitMs: 30_000 }));
    const hasty = await within(
      refusal(rt!.tw.close({ ...ref, waitMs: 50 })),
      10_000,
      'the short close times out',
    );
    expect([hasty.code, hasty.details]).toEqual([ErrorCode.TIMEOUT, { waitMs: 50 }]);
    // The patient close still waits: still latched.
    expect(await refusedAsClosing(rt!, 'after the timeout')).toMatch(/^TURN_IN_PROGRESS: .*is closing/);
    // The turn ends (forced: its tool ignores its abort); the patient close goes through.
    expect(await rt!.tw.cancel(ref)).toBe(true);
    expect(await turn.done).toMatchObject({ status: 'interrupted', synthesized: 1 });
    expect(await within(patient, 10_000, 'the patient close ends')).toBe('resolved');
    expect((await rt!.tw.status(ref)).state).toBe('closed');
    expect(closes()).toBe(1);
    expect(feed.map((e) => e.type)).toEqual(['ws_closed']);
  });

  it('C2: two soft closes that both time out leave no latch behind: the workstream takes turns and closes afterwards', async () => {
    const { feed, closes } = await closeCounting();
    const turn = await rt!.send(LONG_TOOL);
    await nextEvent(rt!.tw, 'ws-1', 'tool_started');
    const both = await within(
      Promise.all([
        refusal(rt!.tw.close({ ...ref, waitMs: 50 })),
        refusal(rt!.tw.close({ ...ref, waitMs: 80 })),
      ]),
      10_000,
      'both closes time out',
    );
    expect(both.map((e: TurnwardenError) => e.code)).toEqual([ErrorCode.TIMEOUT, ErrorCode.TIMEOUT]);
    // No latch: a send of the turn's principal queues behind the turn again (and a cancel,
    // which repairs the turn, revokes it: it was made before the cancel, C7).
    const queued = rt!.waitForLog('send queued behind the running turn');
    const next = rt!.send('after both timed out');
    next.catch(() => undefined);
    await within(queued, 10_000, 'the send queues');
    expect(await rt!.tw.cancel(ref)).toBe(true);
    await turn.done;
    expect((await refusal(next)).code).toBe(ErrorCode.SEND_REVOKED);
    expect((await within((await rt!.send('usable again')).done, 10_000, 'a new turn ends')).status).toBe(
      'completed',
    );
    expect(closes()).toBe(0);
    await rt!.tw.close(ref);
    expect(closes()).toBe(1);
    expect(feed.map((e) => e.type)).toEqual(['ws_closed']);
  });
});

describe('C7: a repeated fence', () => {
  /** A queue with a parked (waiting for a worker) claim's revocation recorded. */
  function queue() {
    const q = new SendQueue(8, () => 1_000);
    const ws = 'ws';
    const revoked: string[] = [];
    /** A claim captured now, waiting in the workstream's queue; its outcome recorded under `name`. */
    const queuedClaim = (name: string) => {
      const claim = q.capture(ws);
      const p = q.enqueue(claim, { workstreamId: ws } as never, undefined);
      void p.then(
        () => revoked.push(`${name} started`),
        (e: TurnwardenError) => {
          revoked.push(`${name} ${e.code} ${String(e.details?.reason)}`);
          q.settled(claim);
        },
      );
      return claim;
    };
    /** A claim captured now, parked waiting for a worker; unparked when revoked, as admission does. */
    const parkedClaim = (name: string) => {
      const claim = q.capture(ws);
      const unpark = q.park(claim, (e) => {
        unpark();
        revoked.push(
          `${name} ${(e as TurnwardenError).code} ${String((e as TurnwardenError).details?.reason)}`,
        );
        q.settled(claim);
      });
      return claim;
    };
    /** A claim captured now, not yet queued (its ownership check on its way): what check() says. */
    const checked = (claim: ReturnType<SendQueue['capture']>) => {
      try {
        q.check(claim);
        return 'valid';
      } catch (e) {
        return `${(e as TurnwardenError).code} ${String((e as TurnwardenError).details?.reason)}`;
      }
    };
    return { q, ws, revoked, queuedClaim, parkedClaim, checked };
  }
  const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

  it('C7: fencing twice revokes, at each fence, exactly the claims captured before it — queued, parked or in flight', async () => {
    const { q, ws, revoked, queuedClaim, parkedClaim, checked } = queue();
    const a = queuedClaim('a');
    parkedClaim('p1');
    const inFlight1 = q.capture(ws);
    const cancel1 = q.ticket(); // a cancel is called
    const b = queuedClaim('b'); // a send after it, before its fence is up
    parkedClaim('p2');
    const inFlight2 = q.capture(ws);
    expect(q.fence(ws, cancel1, 'cancel')).toBe(2); // a, p1
    await tick();
    expect(revoked.sort()).toEqual(['a SEND_REVOKED cancel', 'p1 SEND_REVOKED cancel']);
    expect([checked(inFlight1), checked(inFlight2), checked(b), q.depth(ws)]).toEqual([
      'SEND_REVOKED cancel',
      'valid',
      'valid',
      1,
    ]);
    // A second fence (a close): now b, p2 and the second in-flight claim are before it.
    const c = queuedClaim('c'); // captured before the second fence too
    const close = q.ticket();
    const d = queuedClaim('d'); // after it
    parkedClaim('p3');
    expect(q.fence(ws, close, 'close')).toBe(3); // b, p2, c
    await tick();
    expect(revoked.slice(2).sort()).toEqual([
      'b SEND_REVOKED close',
      'c SEND_REVOKED close',
      'p2 SEND_REVOKED close',
    ]);
    expect([checked(inFlight1), checked(inFlight2), checked(d), q.depth(ws)]).toEqual([
      'SEND_REVOKED close',
      'SEND_REVOKED close',
      'valid',
      1,
    ]);
    expect(q.peek(ws)?.claim).toBe(d);
    void a;
    void c;
  });

  it('C7: two cancels at once — the later fence first, the earlier one late — revoke what came before each and lower nothing', async () => {
    const { q, ws, revoked, queuedClaim, checked } = queue();
    const before = q.capture(ws);
    const cancel1 = q.ticket();
    const between = q.capture(ws); // a send made between the two cancel calls
    const cancel2 = q.ticket();
    const after = q.capture(ws);
    const queuedAfter = queuedClaim('queued after both');
    // The second cancel's fence goes up first; the first one's arrives late.
    q.fence(ws, cancel2, 'cancel');
    q.fence(ws, cancel1, 'cancel');
    await tick();
    expect([checked(before), checked(between), checked(after)]).toEqual([
      'SEND_REVOKED cancel',
      'SEND_REVOKED cancel',
      'valid',
    ]);
    expect(revoked).toEqual([]);
    expect(q.peek(ws)?.claim).toBe(queuedAfter);
    // A fence then a send then a fence, and the same fence again: only what came before each.
    const fence3 = q.ticket();
    const later = q.capture(ws);
    q.fence(ws, fence3, 'cancel');
    q.fence(ws, fence3, 'cancel');
    await tick();
    expect([checked(after), checked(later)]).toEqual(['SEND_REVOKED cancel', 'valid']);
    expect(revoked).toEqual(['queued after both SEND_REVOKED cancel']);
  });

  it('C7: through the runtime: a cancel twice, then a fence, a send and a fence — each revokes exactly the sends made before it, later sends run', async () => {
    rt = await startRuntime({ watchdog: { timeoutMs: 10_000, pollMs: 100, graceMs: 250 } });
    const r = rt;
    const queued = async (content: string) => {
      const logged = r.waitForLog('send queued behind the running turn');
      const sent = r.send(content);
      sent.catch(() => undefined);
      await within(logged, 10_000, `"${content}" queues`);
      // Wrapped: an async function returning the promise would wait for the send's answer.
      return { sent };
    };
    const revokedAs = async (p: Promise<TurnHandle>) => {
      const e = await within(refusal(p), 10_000, 'the send is answered');
      return [e.code, e.details?.reason];
    };
    /** SEND_REVOKED's code and reason; or, for a send whose turn was claimed, how that turn ended. */
    const revokedOrCancelled = async (p: Promise<TurnHandle>) => {
      const outcome = await within(
        p.then(
          async (handle) => await handle.done,
          (e: unknown) => e,
        ),
        10_000,
        'the send is answered and its turn, if any, ends',
      );
      if (isTurnwardenError(outcome)) return [outcome.code, outcome.details?.reason];
      const result = outcome as Awaited<TurnHandle['done']>;
      return ['a claimed turn', result.status === 'completed' ? 'completed' : result.abortReason];
    };

    const first = await within(r.send(HOLD), 10_000, 'the first turn starts');
    const q1 = (await queued('q1')).sent;
    // Two cancels; sends made just before the first call, between the calls and right after
    // them, all in the same tick: their ownership checks, like the cancels', still on their way.
    // What counts is when the host called: the claim and the fence are taken then.
    const justBefore = r.send('just before the cancels');
    justBefore.catch(() => undefined);
    const cancel1 = r.tw.cancel(ref);
    const between = r.send('between the cancels');
    between.catch(() => undefined);
    const cancel2 = r.tw.cancel(ref);
    const justAfter = r.send('right after the cancels');
    // At least one found the turn running. (Each answers for when its ownership check completed:
    // on a slow store the second's abort can end the turn before the first's check returns, and
    // the first then finds no turn — false, as documented. Its fence was still taken at the call.)
    const answers = await within(Promise.all([cancel1, cancel2]), 10_000, 'both cancels return');
    expect(answers).toContain(true);
    expect(await revokedAs(q1)).toEqual([ErrorCode.SEND_REVOKED, 'cancel']);
    expect(await revokedAs(justBefore)).toEqual([ErrorCode.SEND_REVOKED, 'cancel']);
    // Captured after the first cancel, before the second: it never runs. Refused if it still
    // waited when the second's check came back; claimed behind the first turn's end before that,
    // its turn is aborted by the second cancel before it reaches its worker.
    expect([
      [ErrorCode.SEND_REVOKED, 'cancel'],
      ['a claimed turn', 'cancel'],
    ]).toContainEqual(await revokedOrCancelled(between));
    expect((await within(first.done, 10_000, 'the first turn ends')).abortReason).toBe('cancel');
    const after = await within(
      justAfter.then(
        (handle) => handle,
        (e: unknown) => e,
      ),
      10_000,
      'the send made after both cancels is answered',
    );
    expect(isTurnwardenError(after) ? `${after.code} ${String(after.details?.reason)}` : 'started').toBe(
      'started',
    );
    expect((await within((after as TurnHandle).done, 10_000, 'its turn ends')).status).toBe('completed');

    // A fence, a send, a fence: the send after the first runs; the one queued behind it does not.
    const second = await within(r.send(HOLD), 10_000, 'the second turn starts');
    const q2 = (await queued('q2')).sent;
    expect(await within(r.tw.cancel(ref), 10_000, 'the third cancel returns')).toBe(true);
    expect(await revokedAs(q2)).toEqual([ErrorCode.SEND_REVOKED, 'cancel']);
    expect((await within(second.done, 10_000, 'the second turn ends')).abortReason).toBe('cancel');
    const third = await within(r.send(HOLD), 10_000, 'the third turn starts'); // after that fence
    const q3 = (await queued('q3')).sent;
    expect(await within(r.tw.cancel(ref), 10_000, 'the fourth cancel returns')).toBe(true);
    expect(await revokedAs(q3)).toEqual([ErrorCode.SEND_REVOKED, 'cancel']);
    expect((await within(third.done, 10_000, 'the third turn ends')).abortReason).toBe('cancel');
    expect((await within((await r.send('last')).done, 10_000, 'the last turn ends')).status).toBe(
      'completed',
    );
    const users = (await r.history())
      .filter((row) => row.message.role === 'user')
      .map((row) => row.message.content);
    expect(users).toEqual([HOLD, 'right after the cancels', HOLD, HOLD, 'last']);
  });
});
