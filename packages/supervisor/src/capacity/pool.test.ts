/**
 * The worker pool's own bound (T4): the admission queue hands out at most `pool.maxWorkers`
 * permits, but a worker retired after an aborted turn holds its clock slot until its thread has
 * exited. A claim that meets one waits at most `pool.acquireTimeoutMs` for it, then is refused.
 */
import { ActivityClock } from '@turnwarden/clock';
import { ErrorCode } from '@turnwarden/protocol';
import { sessionWorkerUrl } from '@turnwarden/session';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { refusal, within } from '../test-support/bounded.js';
import { SCRIPTED } from '../test-support/runtime.js';
import { refusingHost } from '../testing.js';
import { WorkerPool } from './pool.js';

const host = refusingHost('this test');

function pool(
  acquireTimeoutMs: number,
  size: { maxWorkers?: number; warmWorkers?: number; idleTimeoutMs?: number } = {},
) {
  const maxWorkers = size.maxWorkers ?? 1;
  return new WorkerPool({
    clock: ActivityClock.create(maxWorkers).buffer,
    maxWorkers,
    warmWorkers: size.warmWorkers ?? 1,
    startTimeoutMs: 30_000,
    acquireTimeoutMs,
    idleTimeoutMs: size.idleTimeoutMs ?? 0,
    maxConcurrentSpawns: 1,
    workerUrl: sessionWorkerUrl,
    pluginModules: [import.meta.resolve(SCRIPTED)],
    host,
    logger: pino({ level: 'silent' }),
  });
}

let open: WorkerPool | undefined;
afterEach(async () => {
  await open?.close();
  open = undefined;
});

describe('the worker pool', () => {
  it('T4: a claim meeting only a busy worker is refused at once; one meeting an exiting worker waits at most acquireTimeoutMs', async () => {
    open = pool(0);
    await open.start();
    const busy = await open.acquire();
    const e1 = await refusal(open.acquire());
    expect(e1.code).toBe(ErrorCode.CAPACITY_EXHAUSTED);
    expect(e1.message).toMatch(/all 1 session workers are busy/);
    // Like every CAPACITY_EXHAUSTED, a hint: acquireTimeoutMs (0 here), at least 50 ms.
    expect(e1.details).toEqual({ reason: 'workers_busy', retryAfterMs: 50 });
    open.retire(busy); // exiting: its slot is not free until the thread is gone
    const e2 = await refusal(open.acquire());
    expect(e2.code).toBe(ErrorCode.CAPACITY_EXHAUSTED);
    expect(e2.retryable).toBe(true);
    expect(e2.message).toMatch(/no session worker became free within 0 ms/);
    expect(e2.details).toEqual({ reason: 'worker_exiting', retryAfterMs: 50 });
  });

  it('T4: given time, a claim meeting an exiting worker gets its replacement', async () => {
    open = pool(30_000);
    await open.start();
    const busy = await open.acquire();
    // A refusal's hint is acquireTimeoutMs, at most a minute.
    expect((await refusal(open.acquire())).details).toEqual({ reason: 'workers_busy', retryAfterMs: 30_000 });
    open.release(busy);
    open.retire(await open.acquire());
    const next = await within(open.acquire(), 20_000, 'the replacement worker is handed out');
    expect(next.state).toBe('busy');
    expect(open.stats()).toMatchObject({ retired: 1, busy: 1 });
  });

  it('T4: a cold pool’s ramp: claims beyond the warm workers wait and are served in arrival order as spawns complete, none refused', async () => {
    open = pool(30_000, { maxWorkers: 4, warmWorkers: 1 });
    await open.start();
    const order: number[] = [];
    const claims = [0, 1, 2, 3].map((i) =>
      open!.acquire().then((h) => {
        order.push(i);
        return h;
      }),
    );
    const workers = await within(Promise.all(claims), 60_000, 'every claim is served');
    expect(order).toEqual([0, 1, 2, 3]);
    expect(new Set(workers.map((w) => w.slot)).size).toBe(4);
    expect(open.stats()).toMatchObject({ busy: 4, waiting: 0 });
  });

  it('after a peak the pool shrinks back to warmWorkers: warm workers idle past idleTimeoutMs are stopped, the longest idle first', async () => {
    open = pool(30_000, { maxWorkers: 3, warmWorkers: 1, idleTimeoutMs: 60_000 });
    await open.start();
    const held = await within(
      Promise.all([open.acquire(), open.acquire(), open.acquire()]),
      60_000,
      'three workers',
    );
    for (const h of held) open.release(h);
    expect(open.stats().warm).toBe(3);
    // Not idle long enough yet: nothing stops.
    expect(open.shrink(performance.now())).toBe(0);
    expect(open.shrink(performance.now() + 60_000)).toBe(2);
    expect(open.stats()).toMatchObject({ warm: 1, shrunk: 2 });
    // The one kept is the most recently idle (the last released).
    expect((await open.acquire()).id).toBe(held[2]!.id);
  });
});
