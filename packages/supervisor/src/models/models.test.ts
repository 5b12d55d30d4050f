/**
 * Model calls on the shared model threads (`models.placement: 'shared'`, the default): what the
 * session worker no longer loads, where the context is read, the order listeners hear a step
 * in, and what a stalled call, a wedged thread and a thread that exits leave behind — the
 * watchdog, the generation-bound abort and the repair hold as they do with the model in the
 * session worker.
 */
import { readFileSync, rmSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openToolCalls } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { afterEach, describe, expect, it } from 'vitest';
import type { Turnwarden } from '../index.js';
import { LogMessage } from '../liveness/reporting.js';
import { within } from '../test-support/bounded.js';
import { FAST_WATCHDOG, POSTGRES, script, startRuntime } from '../test-support/runtime.js';
import { RealTimeScheduler } from '../test-support/scheduler.js';

const MODELS_ONLY = new URL('../test-support/models-only-plugin.mjs', import.meta.url).href;
const _caller = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: 'ws-1' };

let running: Turnwarden | undefined;
afterEach(async () => {
  await running?.shutdown();
  running = undefined;
});

/** Counts `readHistory` calls made on this thread (the model threads read through their own view). */
function counting(inner: Store): { store: Store; reads: () => number } {
  let reads = 0;
  const store = new Proxy(inner, {
    get(target, key) {
      const value = Reflect.get(target, key, target) as unknown;
      if (typeof value !== 'function') return value;
      if (key === 'readHistory') {
        return (...args: unknown[]) => {
          reads++;
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      }
      return (value as (...a: unknown[]) => unknown).bind(target);
    },
  });
  return { store, reads: () => reads };
}

describe('shared model threads', () => {
  it('a session worker loads no provider: only the model threads import a plugin module that exports models alone', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tw-models-'));
    const log = join(dir, 'imports');
    process.env.TW_TEST_IMPORTS = log;
    try {
      const imports = async (placement: 'shared' | 'session') => {
        rmSync(log, { force: true });
        const rt = await startRuntime({
          models: { placement, threads: 1 },
          pool: { maxWorkers: 3, warmWorkers: 3 },
          pluginModules: [MODELS_ONLY],
        });
        running = rt.tw;
        const done = await (await rt.send('hi')).done;
        expect(done.status).toBe('completed');
        await rt.tw.shutdown();
        running = undefined;
        return readFileSync(log, 'utf8').trim().split('\n');
      };
      // Shared: one import, by the model thread; the three session workers never load it.
      expect(await imports('shared')).toHaveLength(1);
      // Session placement: every session worker loads it.
      expect((await imports('session')).length).toBeGreaterThanOrEqual(3);
    } finally {
      delete process.env.TW_TEST_IMPORTS;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.skipIf(POSTGRES)(
    'the model threads read the context through the store’s own view: no whole-history read on the supervisor’s thread, by the claim or the calls',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'tw-models-'));
      try {
        const file = counting(openSqliteStore({ path: join(dir, 'tw.db') }));
        const rt = await startRuntime({ store: file.store });
        running = rt.tw;
        const steps = script({ tools: [{ name: 'echo', args: { text: 'x' } }] }, { text: 'ok' });
        expect((await (await rt.send(steps)).done).status).toBe('completed');
        // Two model calls, each with the user message, the call and its result in its context.
        const rows = await rt.history();
        expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
        expect(file.reads()).toBe(1); // rt.history() above, the host's own read
        await rt.tw.shutdown();
        running = undefined;

        // An in-memory store has no view another thread can open: each call carries the context.
        const memory = counting(openSqliteStore({ path: ':memory:' }));
        const rt2 = await startRuntime({ store: memory.store });
        running = rt2.tw;
        expect((await (await rt2.send(steps)).done).status).toBe('completed');
        expect(memory.reads()).toBe(2); // one per model call
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it('listeners hear the streaming step, then its tokens, then the assistant message', async () => {
    const rt = await startRuntime();
    running = rt.tw;
    const done = await (await rt.send(script({ text: 'one two three', chunks: 3, delayMs: 2 }))).done;
    expect(done).toMatchObject({ status: 'completed', finalText: 'one two three' });
    const order = rt.events
      .filter((e) => e.type === 'token' || e.type === 'message' || e.type === 'state')
      .map((e) =>
        e.type === 'token'
          ? 'token'
          : e.type === 'message'
            ? `message:${(e.data as { message: { role: string } }).message.role}`
            : `state:${(e.data as { state: string }).state}`,
      );
    const streaming = order.indexOf('state:streaming');
    const tokens = order.flatMap((o, i) => (o === 'token' ? [i] : []));
    const answer = order.indexOf('message:assistant');
    expect(tokens).toHaveLength(3);
    expect(streaming).toBeGreaterThanOrEqual(0);
    expect(tokens[0]).toBeGreaterThan(streaming);
    expect(answer).toBeGreaterThan(tokens[2]!);
    const text = rt.events
      .filter((e) => e.type === 'token')
      .map((e) => (e.data as { text: string }).text)
      .join('');
    expect(text).toBe('one two three');
  });

  it('L1 L3: a stalled call is aborted by the watchdog through its slot, its request aborted on the thread, the worker kept; the thread serves the next turn', async () => {
    const rt = await startRuntime({ watchdog: FAST_WATCHDOG, models: { threads: 1 } });
    running = rt.tw;
    const stalled = await (await rt.send(script({ text: 'a' }, { stall: true }))).done;
    expect(stalled).toMatchObject({
      status: 'interrupted',
      abortReason: 'watchdog',
      workerTerminated: false,
    });
    // The worker was only waiting on the call: it holds no leaked work and went back to the pool.
    expect(rt.tw.stats().pool.retired).toBe(0);
    const next = await (await rt.send('again')).done;
    expect(next).toMatchObject({ status: 'completed', finalText: 'echo: again' });
    // The stalled call's request was aborted on its thread (the scripted stall ignores its
    // signal: the call still ended, by the race) before the thread ran the next call (one port,
    // in order), and the thread was never replaced.
    expect(rt.tw.stats().models).toMatchObject({ threads: 1, running: 0, failed: 1, wedged: 0, crashed: 0 });
  });

  it('a wedged model thread stops stamping: its turn is aborted and repaired, the thread is terminated and replaced, the next turn runs', async () => {
    const rt = await startRuntime({ watchdog: FAST_WATCHDOG, models: { threads: 1 } });
    running = rt.tw;
    const wedged = rt.waitForLog('model thread wedged; terminating it and failing its calls');
    const first = await (
      await rt.send(script({ tools: [{ name: 'echo', args: { text: 'x' } }] }, { wedge: true }))
    ).done;
    // Two detectors see the same silence at timeoutMs: the turn's watchdog (its slot) aborts it,
    // or the thread's liveness (the thread's own slot) fails its call first — either way the turn
    // is repaired.
    if (first.status === 'interrupted') expect(first.abortReason).toBe('watchdog');
    else expect(first).toMatchObject({ status: 'failed', error: { code: 'MODEL_ERROR', retryable: true } });
    expect(openToolCalls(await rt.history())).toEqual([]);
    // At once, the thread maybe not yet replaced: the next turn's check and call wait for a
    // serving thread — never one that stopped stamping — and the turn completes.
    const next = await (await rt.send('after the wedge')).done;
    expect(next).toMatchObject({ status: 'completed', finalText: 'echo: after the wedge' });
    await wedged;
    expect(rt.tw.stats().models).toMatchObject({ threads: 1, wedged: 1 });
  });

  it('a model thread that exits mid-call fails its call (the turn repaired, MODEL_ERROR) and is replaced', async () => {
    const rt = await startRuntime({ model: 'exits', pluginModules: [MODELS_ONLY], models: { threads: 1 } });
    running = rt.tw;
    const first = await (await rt.send('hi')).done;
    expect(first.status).toBe('failed');
    expect(first.error).toMatchObject({ code: 'MODEL_ERROR', retryable: true });
    expect(openToolCalls(await rt.history())).toEqual([]);
    expect(rt.tw.stats().models).toMatchObject({ crashed: 1 });
  });

  it.runIf(process.platform === 'linux')(
    'L1 L3: a model thread silent because the host starves it is not replaced; once it runs without stamping it is (wedged); a turn’s verdict asks about its call’s thread too',
    async () => {
      const scheduler = new RealTimeScheduler(); // every thread: waiting for a CPU most of the time
      const rt = await startRuntime({
        watchdog: { timeoutMs: 600, pollMs: 30, graceMs: 250 },
        scheduler: { stats: scheduler },
        models: { threads: 1 },
      });
      running = rt.tw;
      // The thread's first judgement, whichever it is: kept (starved) or replaced (wedged).
      const threadJudged = Promise.race([
        rt.waitForLog('model thread starved of CPU; not replaced, still watching'),
        rt.waitForLog('model thread wedged; terminating it and failing its calls'),
      ]);
      const turnStarved = rt.waitForLog(LogMessage.starved);
      const turn = await rt.send(script({ text: 'a' }, { wedge: true }));
      const deferral = await within(turnStarved, 10_000, 'the turn’s abort deferred: starved');
      // Its threads: the session worker's and the model thread's running its call.
      expect(deferral.threads).toHaveLength(2);
      expect(await within(threadJudged, 10_000, 'the thread judged')).toMatchObject({
        msg: 'model thread starved of CPU; not replaced, still watching',
        verdict: 'starved',
      });
      expect(rt.tw.stats().models).toMatchObject({ wedged: 0 });
      scheduler.shares = { run: 0.9, wait: 0.05 }; // it runs and still does not stamp: a wedge
      const wedged = await within(
        rt.waitForLog('model thread wedged; terminating it and failing its calls'),
        10_000,
        'the thread replaced: wedged',
      );
      expect(wedged).toMatchObject({ verdict: 'wedged' });
      expect((await within(turn.done, 10_000, 'the turn ends')).status).not.toBe('completed');
      expect(openToolCalls(await rt.history())).toEqual([]);
      const next = await (await rt.send('after')).done;
      expect(next).toMatchObject({ status: 'completed', finalText: 'echo: after' });
    },
  );
});
