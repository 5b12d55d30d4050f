/**
 * Bounds of waiting. T4: every refusal that says "retry later" — a full admission queue (host
 * or tenant), a wait run out, a workstream's full send queue — carries a `retryAfterMs` that is
 * whole, positive and bounded (50 ms to a minute), and follows the documented estimate: the
 * smoothed time a turn holds its worker times the sends ahead per worker. T5: every input that
 * becomes a timer is bounded below Node's limit (a timer over 2³¹ − 1 ms fires at once, with a
 * TimeoutOverflowWarning): one just above its maximum is refused naming the field, nothing
 * written, and one at its maximum waits — it never ends at once.
 */
import { ErrorCode, isTurnwardenError, type TurnwardenError } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG, resolveConfig } from '../config.js';
import type { Timers } from '../liveness/timers.js';
import { refusal, within } from '../test-support/bounded.js';
import { script, startRuntime } from '../test-support/runtime.js';
import { Admission, type AdmissionLimits, type Permit } from './admission.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
const warnings: string[] = [];
const onWarning = (w: Error) => warnings.push(w.name);
process.on('warning', onWarning);
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const DAY = 24 * 60 * 60 * 1000;
/** Node's largest timer delay: one more fires after 1 ms. */
const NODE_TIMER_MAX = 2 ** 31 - 1;

/** A sane retry hint: whole milliseconds from 50 to 60,000 (never NaN, 0 or negative). */
function expectSaneHint(e: TurnwardenError, what: string): number {
  const hint = e.details?.retryAfterMs;
  expect(
    [what, typeof hint, Number.isSafeInteger(hint), (hint as number) >= 50 && (hint as number) <= 60_000],
    `${what}: retryAfterMs ${String(hint)}`,
  ).toEqual([what, 'number', true, true]);
  return hint as number;
}

/** Admission with injected time and timers that fire only when told. */
function admissionAt(limits: AdmissionLimits) {
  let t = 0;
  const pending: { fn: () => void }[] = [];
  const timers: Timers = {
    every: () => () => {},
    after(_ms, fn) {
      const timer = { fn };
      pending.push(timer);
      return () => {
        const at = pending.indexOf(timer);
        if (at >= 0) pending.splice(at, 1);
      };
    },
  };
  const admission = new Admission(limits, timers, () => t);
  return {
    admission,
    at(ms: number) {
      t = ms;
    },
    /** Fires the waits' deadlines, oldest first. */
    expireAll() {
      for (const timer of pending.splice(0)) timer.fn();
    },
  };
}

/** The typed error `p` has rejected with by the next loop turn; fails the test otherwise. */
async function rejected(p: Promise<unknown>): Promise<TurnwardenError> {
  const waiting = Symbol('waiting');
  const e = await Promise.race([
    p.then(
      () => undefined,
      (err: unknown) => err,
    ),
    new Promise((resolve) => setImmediate(() => resolve(waiting))),
  ]);
  if (e === waiting) expect.fail('expected a refusal, and the send still waits');
  if (!isTurnwardenError(e)) expect.fail(`expected a TurnwardenError, got ${String(e)}`);
  return e;
}

describe('T4: the retry hint', () => {
  it('T4: each refusal of the admission queue hints the smoothed hold time times the sends ahead per worker, rounded', async () => {
    // Three permits on the host, two per tenant; four may wait on the host, two per tenant.
    const { admission, expireAll } = admissionAt({
      maxActive: 3,
      maxActivePerTenant: 2,
      maxWaiting: 4,
      maxWaitingPerTenant: 2,
    });
    admission.tryAcquire('a');
    admission.tryAcquire('a');
    admission.tryAcquire('b');
    const waits = [
      admission.acquire('a', { maxWaitMs: 1_000 }),
      admission.acquire('a', { maxWaitMs: 1_000 }),
    ];
    // The tenant's share is full. Hold time 1,000 ms (no turn ended yet); ahead per worker:
    // host (2 + 1) / 3, tenant (2 + 1) / 2 → 1,500.
    const tenantFull = await rejected(admission.acquire('a', { maxWaitMs: 1_000 }));
    expect(tenantFull.details).toMatchObject({ reason: 'tenant_queue_full', retryAfterMs: 1_500 });
    waits.push(admission.acquire('b', { maxWaitMs: 1_000 }), admission.acquire('b', { maxWaitMs: 1_000 }));
    // The host's queue is full: host (4 + 1) / 3, tenant c (0 + 1) / 2 → 1,666.7, rounded.
    const hostFull = await rejected(admission.acquire('c', { maxWaitMs: 1_000 }));
    expect(hostFull.details).toMatchObject({ reason: 'queue_full', retryAfterMs: 1_667 });
    // The waits run out in order; each counts the sends waiting besides it, and itself:
    // a1: host (3 + 1) / 3, tenant (1 + 1) / 2; a2: 3 / 3, 1 / 2; b1: 2 / 3, 2 / 2; b2: 1 / 3, 1 / 2.
    expireAll();
    const hints = [];
    for (const w of waits) {
      const e = await rejected(w);
      expect(e.details?.reason).toBe('wait_timeout');
      hints.push(e.details?.retryAfterMs);
    }
    expect(hints).toEqual([1_333, 1_000, 1_000, 500]);
  });

  it('T4: the hold time is smoothed from the turns that ended; however long or short they held, the hint stays within 50 ms to a minute', async () => {
    // Tenant h holds one of the two permits throughout: its next send is refused at once
    // (nothing may wait), the hint then being the hold time itself (ahead per worker: 1 / 1).
    const { admission, at } = admissionAt({
      maxActive: 2,
      maxActivePerTenant: 1,
      maxWaiting: 0,
      maxWaitingPerTenant: 0,
    });
    admission.tryAcquire('h');
    const refusedNow = async () => {
      const e = await rejected(admission.acquire('h', { maxWaitMs: 1_000 }));
      expect(e.details?.reason).toBe('tenant_queue_full');
      // QUEUE_FULL's hint (one turn's end frees a place) is the same hold time.
      expect(admission.oneTurnRetryAfterMs()).toBe(e.details?.retryAfterMs);
      return expectSaneHint(e, 'tenant_queue_full');
    };
    let clock = 0;
    const holdFor = (ms: number) => {
      const permit: Permit = admission.tryAcquire('a')!;
      clock += ms;
      at(clock);
      permit.release();
    };
    admission.tryAcquire('a')!.release(); // held 0 ms at t = 0: 1,000 + 0.2 × (0 − 1,000) = 800
    expect(await refusedNow()).toBe(800);
    holdFor(2_000); // 800 + 0.2 × (2,000 − 800) = 1,040
    expect(await refusedNow()).toBe(1_040);
    // A turn that held its worker for a day: capped at a minute.
    holdFor(DAY);
    expect(await refusedNow()).toBe(60_000);
    // A hundred turns of no time at all: floored at 50 ms.
    for (let i = 0; i < 100; i++) holdFor(0);
    expect(await refusedNow()).toBe(50);
  });

  it('T4: stats report how long admitted sends waited (p50, p99, max in ms) and how waits ended', async () => {
    const { admission, at, expireAll } = admissionAt({
      maxActive: 1,
      maxActivePerTenant: 1,
      maxWaiting: 100,
      maxWaitingPerTenant: 100,
    });
    let held: Permit = admission.tryAcquire('h')!;
    const granted: Promise<Permit>[] = [];
    for (let i = 0; i < 10; i++) granted.push(admission.acquire('a', { maxWaitMs: 60_000 }));
    // Each waiter is admitted 100 ms after the one before it: they waited 100, 200, … 1,000 ms.
    for (let i = 0; i < 10; i++) {
      at((i + 1) * 100);
      held.release();
      held = await granted[i]!;
    }
    const late = admission.acquire('a', { maxWaitMs: 1 });
    expireAll();
    expect((await rejected(late)).details?.reason).toBe('wait_timeout');
    expect(admission.stats()).toEqual({
      active: 1,
      waiting: 0,
      waitingTenants: 0,
      admittedAfterWait: 10,
      refusedFull: 0,
      expired: 1,
      waitMs: { p50: 500, p99: 1_000, max: 1_000 },
    });
  });

  it('T4: through the runtime every "retry later" refusal carries a sane hint: QUEUE_FULL, tenant and host queue full, a wait run out; nothing is written', async () => {
    rt = await startRuntime({
      watchdog: { timeoutMs: 10_000, pollMs: 100, graceMs: 250 },
      pool: { maxWorkers: 1, warmWorkers: 1 },
      admission: { maxWaiting: 1, maxWaitingPerTenant: 1 },
      limits: { maxQueuedSends: 1 },
    });
    const { tw } = rt;
    const a = { tenantId: 'tenant-a', principal: 'user-a' };
    const b = { tenantId: 'tenant-b', principal: 'user-b' };
    for (const [who, id] of [
      [a, 'a-2'],
      [a, 'a-3'],
      [b, 'b-1'],
      [b, 'b-2'],
    ] as const)
      await tw.createWorkstream({ ...who, workstreamId: id });
    const hold = await rt.send(script({ heartbeat: 600_000, everyMs: 50 }, { text: 'done' }));
    const stop = new AbortController();
    const pendingSends: Promise<unknown>[] = [];
    const keep = (p: Promise<unknown>) => {
      p.catch(() => undefined);
      pendingSends.push(p);
    };

    // A wait that runs out at once (maxWaitMs 0: never wait).
    const expired = await refusal(
      tw.send({ ...b, workstreamId: 'b-1', content: 'now or never', maxWaitMs: 0 }),
    );
    expect(expired.details?.reason).toBe('wait_timeout');
    expectSaneHint(expired, 'wait_timeout');
    // One send of tenant a waits for the worker; the next of a is over the tenant's share, then
    // b's is over the host's queue.
    keep(tw.send({ ...a, workstreamId: 'a-2', content: 'waits', signal: stop.signal }));
    await within(
      (async () => {
        while (tw.stats().admission.waiting < 1) await new Promise((r) => setImmediate(r));
      })(),
      10_000,
      'a send waits for the worker',
    );
    const tenantFull = await refusal(tw.send({ ...a, workstreamId: 'a-3', content: 'over the share' }));
    expect(tenantFull.details?.reason).toBe('tenant_queue_full');
    expectSaneHint(tenantFull, 'tenant_queue_full');
    const hostFull = await refusal(tw.send({ ...b, workstreamId: 'b-2', content: 'over the host' }));
    expect(hostFull.details?.reason).toBe('queue_full');
    expectSaneHint(hostFull, 'queue_full');
    // The running turn's own queue: one send may wait behind it; the next is QUEUE_FULL.
    const queued = rt.waitForLog('send queued behind the running turn');
    keep(tw.send({ ...a, workstreamId: 'ws-1', content: 'behind the turn', signal: stop.signal }));
    await within(queued, 10_000, 'a send queues behind the turn');
    const queueFull = await refusal(rt.send('one too many'));
    expect([queueFull.code, queueFull.retryable, queueFull.details?.limit]).toEqual([
      ErrorCode.QUEUE_FULL,
      true,
      1,
    ]);
    expectSaneHint(queueFull, 'QUEUE_FULL');

    // Nothing of the refused sends was written.
    for (const [who, id] of [
      [b, 'b-1'],
      [a, 'a-3'],
      [b, 'b-2'],
    ] as const)
      expect((await tw.history({ ...who, workstreamId: id })).rows).toEqual([]);
    expect((await rt.history()).map((r) => r.message.content)).toEqual([
      script({ heartbeat: 600_000, everyMs: 50 }, { text: 'done' }),
    ]);
    stop.abort();
    for (const p of pendingSends) expect((await refusal(p)).code).toBe(ErrorCode.TURN_ABORTED);
    await hold.cancel();
  });
});

describe('T5: every input that becomes a timer is bounded below Node’s timer limit', () => {
  /** Every duration setting: its largest accepted value, and what else it needs to be valid there. */
  const DURATIONS: readonly { field: string; max: number; with?: object }[] = [
    { field: 'watchdog.timeoutMs', max: DAY, with: { watchdog: { dispatchMs: DAY } } },
    { field: 'watchdog.pollMs', max: 60_000, with: { watchdog: { timeoutMs: 60_000 } } },
    { field: 'watchdog.graceMs', max: 10 * 60_000, with: { lease: { ttlMs: DAY } } },
    { field: 'watchdog.turnDeadlineMs', max: 7 * DAY },
    { field: 'watchdog.dispatchMs', max: DAY },
    { field: 'lease.ttlMs', max: DAY },
    // Less than the ttl, which must also exceed grace + renew.
    { field: 'lease.renewMs', max: DAY - 1, with: { lease: { ttlMs: DAY }, watchdog: { graceMs: 0 } } },
    { field: 'pool.startTimeoutMs', max: DAY },
    { field: 'pool.acquireTimeoutMs', max: DAY },
    { field: 'pool.idleTimeoutMs', max: DAY },
    { field: 'journal.retryBaseMs', max: DAY },
    { field: 'journal.retryMaxMs', max: DAY },
    { field: 'journal.sweepMs', max: DAY },
    { field: 'admission.maxWaitMs', max: DAY },
    { field: 'isolation.idleTimeoutMs', max: DAY },
    { field: 'models.flushMs', max: 1_000 },
    { field: 'approvals.timeoutMs', max: 7 * DAY },
  ];

  /** `{ a: { b: v } }` for `a.b`, merged over `base`. */
  function setting(field: string, value: unknown, base: object = {}): Record<string, unknown> {
    const [section, key] = field.split('.') as [string, string];
    const b = base as Record<string, Record<string, unknown>>;
    return { ...b, [section]: { ...b[section], [key]: value } };
  }

  it('T5: each duration setting is accepted at its maximum, below 2³¹ ms, and refused above it naming the field', () => {
    for (const { field, max, with: base } of DURATIONS) {
      expect([field, max <= NODE_TIMER_MAX]).toEqual([field, true]);
      const config = resolveConfig({ model: 'scripted', ...setting(field, max, base) });
      const [section, key] = field.split('.') as [string, string];
      expect([field, (config as never)[section][key]]).toEqual([field, max]);
      for (const over of [max + 1, NODE_TIMER_MAX + 1, 1e20, Number.POSITIVE_INFINITY]) {
        let caught: unknown;
        try {
          resolveConfig({ model: 'scripted', ...setting(field, over, base) });
        } catch (e) {
          caught = e;
        }
        expect([field, over, isTurnwardenError(caught, ErrorCode.INVALID_CONFIG)]).toEqual([
          field,
          over,
          true,
        ]);
        expect([field, over, (caught as TurnwardenError).details]).toEqual([field, over, { field }]);
      }
    }
    // Every duration setting is in the table: a new one must state its bound here.
    const durations = Object.entries(DEFAULT_CONFIG).flatMap(([section, values]) =>
      typeof values === 'object' && !Array.isArray(values)
        ? Object.keys(values as object)
            .filter((k) => k.endsWith('Ms'))
            .map((k) => `${section}.${k}`)
        : [],
    );
    expect([...durations, 'watchdog.turnDeadlineMs'].sort()).toEqual(DURATIONS.map((d) => d.field).sort());
  });

  it('T5: a send’s maxWaitMs and a close’s waitMs above an hour are refused naming the field; at an hour, and at a day of admission.maxWaitMs, they wait', async () => {
    warnings.length = 0;
    rt = await startRuntime({
      watchdog: { timeoutMs: 10_000, pollMs: 100, graceMs: 250 },
      pool: { maxWorkers: 1, warmWorkers: 1 },
      admission: { maxWaitMs: DAY },
    });
    const { tw } = rt;
    const a = { tenantId: 'tenant-a', principal: 'user-a' };
    for (const id of ['ws-2', 'ws-3']) await tw.createWorkstream({ ...a, workstreamId: id });
    const hold = await rt.send(script({ heartbeat: 600_000, everyMs: 50 }, { text: 'done' }));

    for (const maxWaitMs of [3_600_001, NODE_TIMER_MAX + 1, 1e20, 3_600_000.5]) {
      // Bounded: a value let through would wait (or, past Node's limit, end at once).
      const e = await within(
        refusal(tw.send({ ...a, workstreamId: 'ws-2', content: 'too long', maxWaitMs })),
        5_000,
        `maxWaitMs ${maxWaitMs} is refused at once`,
      );
      expect([maxWaitMs, e.code, e.details]).toEqual([
        maxWaitMs,
        ErrorCode.INVALID_INPUT,
        { field: 'maxWaitMs' },
      ]);
    }
    expect(tw.stats().admission.waiting).toBe(0);
    expect((await tw.history({ ...a, workstreamId: 'ws-2' })).rows).toEqual([]);

    // At the bound, and by the configured default of a day: both wait for the worker.
    const stop = new AbortController();
    const settled: string[] = [];
    const track = (name: string, p: Promise<unknown>) => {
      const tracked = p.then(
        () => settled.push(`${name} resolved`),
        () => settled.push(`${name} rejected`),
      );
      return { p, tracked };
    };
    const atBound = track(
      'maxWaitMs 3600000',
      tw.send({
        ...a,
        workstreamId: 'ws-2',
        content: 'waits an hour',
        maxWaitMs: 3_600_000,
        signal: stop.signal,
      }),
    );
    const byDefault = track(
      'admission.maxWaitMs',
      tw.send({ ...a, workstreamId: 'ws-3', content: 'waits a day', signal: stop.signal }),
    );
    await within(
      (async () => {
        while (tw.stats().admission.waiting < 2) await new Promise((r) => setImmediate(r));
      })(),
      10_000,
      'both sends wait for the worker',
    );
    // A close at its bound waits for the running turn; above it, refused before anything.
    for (const waitMs of [3_600_001, NODE_TIMER_MAX + 1]) {
      const e = await within(
        refusal(tw.close({ ...a, workstreamId: 'ws-1', waitMs })),
        5_000,
        `waitMs ${waitMs} is refused at once`,
      );
      expect([waitMs, e.code, e.details]).toEqual([waitMs, ErrorCode.INVALID_INPUT, { field: 'waitMs' }]);
    }
    const latched = rt.waitForLog('soft close waiting for the running turn');
    const closing = track(
      'close waitMs 3600000',
      tw.close({ ...a, workstreamId: 'ws-1', waitMs: 3_600_000 }),
    );
    await within(latched, 10_000, 'the close waits for the turn');
    // Every wait's timer is set. A timer over Node's limit would run after 1 ms — before this one.
    await new Promise((resolve) => setTimeout(resolve, 20));
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toEqual([]);
    expect(tw.stats().admission.waiting).toBe(2);
    expect(warnings.filter((w) => w === 'TimeoutOverflowWarning')).toEqual([]);

    stop.abort();
    expect((await refusal(atBound.p)).code).toBe(ErrorCode.TURN_ABORTED);
    expect((await refusal(byDefault.p)).code).toBe(ErrorCode.TURN_ABORTED);
    // The turn ends (cancelled): the close it waited for goes through.
    await hold.cancel();
    await within(closing.p, 10_000, 'the close completes once the turn ended');
    expect((await tw.status({ ...a, workstreamId: 'ws-1' })).state).toBe('closed');
    expect(warnings.filter((w) => w === 'TimeoutOverflowWarning')).toEqual([]);
  });
});
