/**
 * A turn's end (turn/turn.ts), on the stub host of turn.test.ts: what each way of ending gives
 * back (the worker, the permit, the lease, the counters, the events, the result and outcome),
 * an end that fails still ending, and what the watchdog reads of a running turn's threads.
 */
import { describe, expect, it } from 'vitest';
import { turnWorld as world } from '../test-support/turn-world.js';

describe('a turn’s end', () => {
  it('completed: the worker back to the pool, counted, stream_end with its status, then the host told in order', async () => {
    const w = world();
    const result = await w.run().finish();
    expect(result).toEqual({
      workstreamId: 'ws',
      generation: 4,
      status: 'completed',
      finalText: 'ok',
      synthesized: 0,
      workerTerminated: false,
    });
    expect(w.workersReleased).toEqual([12]);
    expect(w.retired).toEqual([]);
    expect(w.counters).toMatchObject({ turnsCompleted: 1, turnsInterrupted: 0, turnsFailed: 0 });
    expect(w.events.find((e) => e.type === 'stream_end')?.data).toEqual({ status: 'completed' });
    // The mailbox is released and the next send pumped once the end's task settled.
    await new Promise((r) => setImmediate(r));
    expect(w.ended).toEqual(['turn ended', 'mailbox released', 'pump ws']);
    expect(w.released()).toBe(1);
  });

  it('interrupted by its worker (no abort committed here): its own reason and error reach the result; the worker is retired', async () => {
    const w = world();
    const error = { code: 'TOOL_ERROR', message: 'boom', retryable: false };
    const result = await w.run().finish('interrupted', { abortReason: 'deadline', error } as never);
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'deadline', error });
    expect(result).not.toHaveProperty('finalText');
    expect((await w.turn.outcome).kind).toBe('aborted');
    expect(w.retired).toEqual([12]);
    expect(w.workersReleased).toEqual([]);
    expect(w.counters).toMatchObject({ turnsCompleted: 0, turnsInterrupted: 1, turnsFailed: 0 });
  });

  it('failed by its worker: counted as failed, the worker retired', async () => {
    const w = world();
    const result = await w.run().finish('failed');
    expect(result.status).toBe('failed');
    expect(w.counters).toMatchObject({ turnsCompleted: 0, turnsInterrupted: 0, turnsFailed: 1 });
    expect(w.retired).toEqual([12]);
    expect(w.events.find((e) => e.type === 'stream_end')?.data).toEqual({ status: 'failed' });
  });

  it('T7: a worker that dies under the turn ends it failed through the one abort: crashed, terminated, neither released nor retired', async () => {
    const w = world();
    const result = await w.run().die(new Error('exited with 1'));
    expect(result).toMatchObject({ status: 'failed', abortReason: 'crash', workerTerminated: true });
    expect(result.error?.message).toContain('exited with 1');
    const outcome = await w.turn.outcome;
    expect(outcome).toMatchObject({ kind: 'failed', crashed: true });
    expect(w.terminated).toEqual([12]);
    expect(w.workersReleased).toEqual([]);
    expect(w.retired).toEqual([]);
    expect(w.counters).toMatchObject({ workersCrashed: 1, turnsFailed: 1, abortsCommitted: 0 });
    expect(w.released()).toBe(1);
    expect(w.slots.on(1)).toBeUndefined();
  });

  it('an abort then the worker’s answer: the grace timer is cancelled by the end, the worker not terminated', async () => {
    const w = world();
    const running = w.run();
    await new Promise((r) => setImmediate(r));
    w.turn.abort('cancel');
    expect(w.timers.pending).toBe(1); // grace
    const result = await running.finish('interrupted');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'cancel', workerTerminated: false });
    expect(w.timers.pending).toBe(0);
    w.timers.run(10_000);
    expect(w.terminated).toEqual([]);
  });

  it('a lease release that fails is logged and the turn ends all the same', async () => {
    const w = world({ releaseLease: () => Promise.reject(new Error('db down')) });
    const result = await w.run().finish();
    expect(result.status).toBe('completed');
    expect(w.logs).toContainEqual(
      expect.objectContaining({ level: 40, msg: 'lease release failed; it will expire' }),
    );
  });

  it('an end that throws still ends: failed with the error, detached, the permit freed once, the host told and the mailbox pumped', async () => {
    const w = world({
      sessionSet: () => {
        throw new Error('session table broken');
      },
    });
    const result = await w.run().finish();
    expect(result).toMatchObject({ status: 'failed', synthesized: 0, workerTerminated: false });
    expect(result.error?.message).toContain('session table broken');
    expect((await w.turn.outcome).kind).toBe('failed');
    expect(w.msgs()).toContain('turn finish failed');
    expect(w.turn.phase).toBe('done');
    expect(w.rec.turn).toBeUndefined();
    expect(w.slots.on(1)).toBeUndefined();
    expect(w.released()).toBe(1);
    await new Promise((r) => setImmediate(r));
    expect(w.ended).toEqual(['turn ended', 'mailbox released', 'pump ws']);
  });

  it('a model call that starts once the turn has ended is aborted as ended; no phase steps back', async () => {
    const w = world();
    await w.run().finish();
    expect(w.turn.ending).toBe(true);
    const seen: string[] = [];
    w.turn.modelCallStarted({ result: new Promise(() => {}), abort: (r) => void seen.push(r) });
    expect(seen).toEqual(['ended']);
    expect(() => w.turn.dispatched()).toThrow('turn 4 of ws: done → running is not a step');
  });

  it('L8: a rewrite held under the turn counts until it settles, and the end waits for it', async () => {
    const w = world();
    let finishRewrite!: () => void;
    const rewrite = w.turn.holdEndFor(new Promise<void>((r) => (finishRewrite = r)));
    expect(w.turn.rewritesInFlight).toBe(1);
    expect(w.turn.rewritesPending()).toHaveLength(1);
    const running = w.run();
    await running.answer();
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(w.turn.phase).toBe('settling');
    expect(w.msgs()).toContain('turn end waiting for history rewrite in flight');
    finishRewrite();
    await rewrite;
    expect(w.turn.rewritesInFlight).toBe(0);
    expect((await w.turn.done).status).toBe('completed');
  });

  it('the watchdog reads the worker’s thread, and the model thread’s while a model call runs on one', () => {
    const w = world({ tid: 501 });
    expect(w.threads()).toEqual([501]);
    const call = { tid: 777, result: new Promise<never>(() => {}), abort: () => {} };
    w.turn.modelCallStarted(call as never);
    expect(w.threads()).toEqual([501, 777]);
    w.turn.modelCallEnded(call as never);
    expect(w.threads()).toEqual([501]);
    // Without a thread id (not Linux), nothing to read.
    expect(world().threads()).toEqual([]);
  });
});
