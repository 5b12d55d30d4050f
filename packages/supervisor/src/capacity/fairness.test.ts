/**
 * T4 through the runtime: over capacity a send waits for a worker instead of being refused; two
 * tenants, one flooding, and the other's turn is admitted within the bound the admission queue
 * states; a tenant's own limit leaves room for the others; the queue's bound refuses with a
 * retry hint and writes nothing; a wait ends by the send's signal, its deadline or a fence.
 *
 * Turns are held open with a heartbeat step (no stall: the watchdog leaves them alone) and
 * ended by cancelling them one at a time: admission order is asserted, not timing.
 */
import { ErrorCode } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { TurnHandle, Turnwarden } from '../index.js';
import { refusal, within } from '../test-support/bounded.js';
import { script, startRuntime } from '../test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

/** Turns here are held open on purpose; a loaded machine must not make the watchdog end them. */
const RELAXED = { timeoutMs: 10_000, pollMs: 100, graceMs: 250 };

/** A turn that runs until it is cancelled. */
const HOLD = script({ heartbeat: 600_000, everyMs: 50 }, { text: 'done' });

/** Resolves once `test` holds, checking after every turn of the event loop; fails the test after `ms`. */
async function until(test: () => boolean, ms: number, what: string): Promise<void> {
  await within(
    (async () => {
      while (!test()) await new Promise((resolve) => setImmediate(resolve));
    })(),
    ms,
    what,
  );
}

interface Sent {
  readonly tenant: string;
  readonly workstreamId: string;
  handle?: TurnHandle;
  error?: unknown;
}

function sender(tw: Turnwarden, started: Sent[]) {
  return async (
    tenant: string,
    workstreamId: string,
    extra: { maxWaitMs?: number; signal?: AbortSignal } = {},
  ) => {
    const caller = { tenantId: tenant, principal: `${tenant}-user` };
    await tw.createWorkstream({ ...caller, workstreamId });
    const sent: Sent = { tenant, workstreamId };
    const done = tw.send({ ...caller, workstreamId, content: HOLD, ...extra }).then(
      (handle) => {
        sent.handle = handle;
        started.push(sent);
      },
      (error: unknown) => {
        sent.error = error;
      },
    );
    return { sent, done };
  };
}

describe('T4: fair admission through the runtime', () => {
  it('T4: over capacity a send waits for a worker and starts when one frees up, not refused', async () => {
    rt = await startRuntime({ watchdog: RELAXED, pool: { maxWorkers: 1, warmWorkers: 1 } });
    const started: Sent[] = [];
    const send = sender(rt.tw, started);
    await send('tenant-a', 'first');
    await until(() => started.length === 1, 10_000, 'the first turn starts');
    const second = await send('tenant-a', 'second');
    await until(() => rt!.tw.stats().admission.waiting === 1, 10_000, 'the second send waits');
    expect(started).toHaveLength(1);
    expect(rt.tw.stats().admission.active).toBe(1);
    await started[0]!.handle!.cancel();
    await within(second.done, 10_000, 'the waiting send starts');
    expect(second.sent.error).toBeUndefined();
    expect(started.map((s) => s.workstreamId)).toEqual(['first', 'second']);
    expect(rt.tw.stats().admission).toMatchObject({ active: 1, waiting: 0, admittedAfterWait: 1 });
    expect(rt.tw.stats().admission.waitMs.max).toBeGreaterThan(0);
    await started[1]!.handle!.cancel();
  });

  it('T4: fairness: two tenants, one flooding: the other’s turn is admitted within one of the flooder’s turns', async () => {
    // The bound: with k tenants waiting, a tenant's head send is admitted within k permits
    // freed for them (round-robin). Here k = 1: at most one more flood turn starts first.
    rt = await startRuntime({ watchdog: RELAXED, pool: { maxWorkers: 2, warmWorkers: 2 } });
    const started: Sent[] = [];
    const send = sender(rt.tw, started);
    for (let i = 0; i < 12; i++) await send('flood', `flood-${i}`);
    await until(
      () => started.length === 2 && rt!.tw.stats().admission.waiting === 10,
      10_000,
      'two flood turns run and ten flood sends wait',
    );
    const quiet = await send('quiet', 'quiet-1');
    await until(() => rt!.tw.stats().admission.waiting === 11, 10_000, 'the quiet send waits');
    const before = started.length;
    // Turns end one at a time (cancelled), as they would on their own; each frees one worker.
    const ended = new Set<Sent>();
    for (let round = 0; round < 4 && quiet.sent.handle === undefined; round++) {
      const running = started.find((s) => !ended.has(s));
      if (running === undefined) expect.fail('no turn runs and the quiet send is not admitted');
      ended.add(running);
      const admitted = started.length;
      await running.handle!.cancel();
      await until(() => started.length > admitted, 10_000, 'the freed worker admits a waiting send');
    }
    const floodFirst = started.slice(before).findIndex((s) => s.tenant === 'quiet');
    expect(
      floodFirst,
      'flood turns admitted after the quiet send began to wait, before it',
    ).toBeLessThanOrEqual(1);
    expect(floodFirst).toBeGreaterThanOrEqual(0);
    expect(quiet.sent.error).toBeUndefined();
  });

  it('T4: a tenant at its own limit leaves the host’s other workers to the others: admitted at once', async () => {
    rt = await startRuntime({
      pool: { maxWorkers: 2, warmWorkers: 2 },
      admission: { maxActivePerTenant: 1 },
    });
    const started: Sent[] = [];
    const send = sender(rt.tw, started);
    for (let i = 0; i < 4; i++) await send('flood', `flood-${i}`);
    await until(
      () => started.length === 1 && rt!.tw.stats().admission.waiting === 3,
      10_000,
      'one flood turn runs and three flood sends wait',
    );
    const quiet = await send('quiet', 'quiet-1');
    // No flood turn has ended: the quiet tenant's turn starts on the host's second worker.
    await within(quiet.done, 10_000, 'the quiet send is admitted while the flood waits');
    expect(quiet.sent.error).toBeUndefined();
    expect(started.map((s) => s.tenant)).toEqual(['flood', 'quiet']);
    expect(rt.tw.stats().admission).toMatchObject({ active: 2, waiting: 3 });
  });

  it('T4: a full queue refuses with CAPACITY_EXHAUSTED, retryable, with a retry hint; nothing is written', async () => {
    rt = await startRuntime({
      watchdog: RELAXED,
      pool: { maxWorkers: 1, warmWorkers: 1 },
      admission: { maxWaiting: 2, maxWaitingPerTenant: 1 },
    });
    const started: Sent[] = [];
    const send = sender(rt.tw, started);
    await send('flood', 'flood-0');
    await until(() => started.length === 1, 10_000, 'the first turn starts');
    await send('flood', 'flood-1');
    await until(() => rt!.tw.stats().admission.waiting === 1, 10_000, 'one flood send waits');
    const refused = await send('flood', 'flood-2');
    await within(refused.done, 10_000, 'the flood send over its share is refused at once');
    const e = refused.sent.error as { code: string; retryable: boolean; details: Record<string, unknown> };
    expect(e.code).toBe(ErrorCode.CAPACITY_EXHAUSTED);
    expect(e.retryable).toBe(true);
    expect(e.details).toMatchObject({ reason: 'tenant_queue_full', tenantId: 'flood' });
    expect(e.details.retryAfterMs).toEqual(expect.any(Number));
    // Its history has nothing: no user row, no claim.
    const caller = { tenantId: 'flood', principal: 'flood-user' };
    expect((await rt.tw.history({ ...caller, workstreamId: 'flood-2' })).rows).toEqual([]);
    expect((await rt.tw.status({ ...caller, workstreamId: 'flood-2' })).generation).toBe(0);
    // The other tenant still has room in the host's queue.
    const quiet = await send('quiet', 'quiet-1');
    await until(() => rt!.tw.stats().admission.waiting === 2, 10_000, 'the quiet send waits');
    await started[0]!.handle!.cancel();
    await until(() => started.length === 2, 10_000, 'the next send starts');
    expect(quiet.sent.error).toBeUndefined();
  });

  it('T4: a wait ends by the send’s deadline (maxWaitMs), its signal, or a fence (a cancel or a close of its workstream); nothing is written', async () => {
    rt = await startRuntime({ watchdog: RELAXED, pool: { maxWorkers: 1, warmWorkers: 1 } });
    const started: Sent[] = [];
    const send = sender(rt.tw, started);
    await send('tenant-a', 'busy');
    await until(() => started.length === 1, 10_000, 'the first turn starts');
    // Deadline.
    const late = await send('tenant-a', 'late', { maxWaitMs: 20 });
    await within(late.done, 10_000, 'the deadline ends the wait');
    expect(late.sent.error).toMatchObject({
      code: ErrorCode.CAPACITY_EXHAUSTED,
      details: { reason: 'wait_timeout' },
    });
    // Signal.
    const stop = new AbortController();
    const withdrawn = await send('tenant-a', 'withdrawn', { signal: stop.signal });
    await until(() => rt!.tw.stats().admission.waiting === 1, 10_000, 'the send waits');
    stop.abort();
    await within(withdrawn.done, 10_000, 'the signal ends the wait');
    expect(withdrawn.sent.error).toMatchObject({ code: ErrorCode.TURN_ABORTED });
    // A fence — a cancel or a close (C7) — revokes a send waiting for a worker as it does a
    // queued one. A cancel of the idle, clean workstream still answers false and says nothing (C5).
    const caller = { tenantId: 'tenant-a', principal: 'tenant-a-user' };
    const cancelled = await send('tenant-a', 'cancelled');
    await until(() => rt!.tw.stats().admission.waiting === 1, 10_000, 'the send waits');
    expect(await rt.tw.cancel({ ...caller, workstreamId: 'cancelled' })).toBe(false);
    await within(cancelled.done, 10_000, 'the cancel ends the wait');
    expect(cancelled.sent.error).toMatchObject({
      code: ErrorCode.SEND_REVOKED,
      details: { reason: 'cancel' },
    });
    const fenced = await send('tenant-a', 'fenced');
    await until(() => rt!.tw.stats().admission.waiting === 1, 10_000, 'the send waits');
    await rt.tw.close({ ...caller, workstreamId: 'fenced' });
    await within(fenced.done, 10_000, 'the close ends the wait');
    expect(fenced.sent.error).toMatchObject({ code: ErrorCode.SEND_REVOKED, details: { reason: 'close' } });
    for (const workstreamId of ['late', 'withdrawn', 'cancelled', 'fenced']) {
      expect((await rt.tw.history({ ...caller, workstreamId })).rows, workstreamId).toEqual([]);
    }
    expect(rt.tw.stats().admission).toMatchObject({ waiting: 0, active: 1 });
    await started[0]!.handle!.cancel();
  });

  it('T4: a send that cannot claim is refused at once, without waiting for a worker', async () => {
    rt = await startRuntime({ watchdog: RELAXED, pool: { maxWorkers: 1, warmWorkers: 1 } });
    const started: Sent[] = [];
    const send = sender(rt.tw, started);
    await send('tenant-a', 'busy');
    await until(() => started.length === 1, 10_000, 'the first turn starts');
    const caller = { tenantId: 'tenant-a', principal: 'tenant-a-user' };
    await rt.tw.createWorkstream({ ...caller, workstreamId: 'closed' });
    await rt.tw.close({ ...caller, workstreamId: 'closed' });
    const e = await within(
      refusal(rt.tw.send({ ...caller, workstreamId: 'closed', content: 'hi' })),
      10_000,
      'the send to a closed workstream is answered',
    );
    expect(e.code).toBe(ErrorCode.WORKSTREAM_CLOSED);
    expect(rt.tw.stats().admission.waiting).toBe(0);
    await started[0]!.handle!.cancel();
  });
});
