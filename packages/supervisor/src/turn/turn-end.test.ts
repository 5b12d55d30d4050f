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
    // No key stands for an absent value: a result carries exactly what happened.
    expect(Object.keys(result).sort()).toEqual(
      ['finalText', 'generation', 'status', 'synthesized', 'workerTerminated', 'workstreamId'].sort(),
    );
    // Renewal stopped with the end: no timer of the turn is left.
    expect(w.timers.pending).toBe(0);
    // Work it handed to the supervisor's side ends with it.
    expect(w.cancelled).toEqual(['isolated tasks', 'host tool calls']);
    expect(w.logs).toContainEqual(
      expect.objectContaining({
        msg: 'turn finished',
        status: 'completed',
        synthesized: 0,
        workerTerminated: false,
      }),
    );
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
    // Failed by its worker, not crashed: the worker lived.
    expect(await w.turn.outcome).toMatchObject({ kind: 'failed', crashed: false });
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
    expect(w.unwatched()).toBe(1);
    const died = w.logs.find((l) => l.msg === 'session worker died mid-turn') as {
      err?: { message: string };
    };
    expect(died?.err?.message).toBe('exited with 1');
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
    // Settling is part of the end: nothing aborts or escalates it any more.
    expect(w.turn.ending).toBe(true);
    expect(w.turn.abort('cancel')).toBe(false);
    w.turn.escalate();
    expect(w.terminated).toEqual([]);
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
    // The end of another (an earlier) call leaves the running one in place.
    w.turn.modelCallEnded({ tid: 778 } as never);
    expect(w.threads()).toEqual([501, 777]);
    w.turn.modelCallEnded(call as never);
    expect(w.threads()).toEqual([501]);
    // Without a thread id (not Linux), nothing to read.
    expect(world().threads()).toEqual([]);
  });
  it('is armed on the clock at its generation, routes its worker’s events, and sends its worker the claim', async () => {
    const w = world();
    expect(w.clock.generation(1)).toBe(4);
    w.turn.worker.onEvent?.({ t: 'token', generation: 4, text: 'hey' } as never);
    expect(w.events.filter((e) => e.type === 'token').map((e) => e.data)).toEqual([{ text: 'hey' }]);
    const handle = w.turn.run({ workstreamId: 'ws', ticket: 0 }, ['echo']);
    expect(handle).toEqual({ workstreamId: 'ws', generation: 4, done: w.turn.done });
    await new Promise((r) => setImmediate(r));
    expect(w.requests).toEqual([
      expect.objectContaining({
        workstreamId: 'ws',
        generation: 4,
        tools: ['echo'],
        history: [],
        fencingToken: 9,
        input: { role: 'user', content: 'hi', principal: 'user' },
      }),
    ]);
  });

  it('a dispatch whose delivery check fails still ends the turn, failed, and says so', async () => {
    const w = world({ caughtUp: () => Promise.reject(new Error('port closed')) });
    const result = await w.run().finish();
    expect(result).toMatchObject({
      status: 'failed',
      error: { message: expect.stringContaining('port closed') },
    });
    expect(w.msgs()).toContain('turn dispatch failed');
    expect(w.released()).toBe(1);
  });

  it('a model call still running when the worker returned is aborted as ended', async () => {
    const w = world();
    const running = w.run();
    await new Promise((r) => setImmediate(r));
    const seen: string[] = [];
    w.turn.modelCallStarted({ result: new Promise(() => {}), abort: (r) => void seen.push(r) });
    await running.finish();
    expect(seen).toEqual(['ended']);
  });

  it('once ended it aborts nothing, not even for a dead worker; an abort whose fence another set first is not this one’s', async () => {
    const w = world();
    await w.run().finish();
    expect(w.turn.abort('crash')).toBe(false);
    expect(w.counters.workersCrashed).toBe(0);

    const v = world();
    // The watchdog's CAS (or a cancel) fenced the slot first: a second reason commits nothing.
    v.clock.fence(1);
    expect(v.turn.abort('cancel')).toBe(false);
    expect(v.turn.aborted).toBeUndefined();
    expect(v.turn.phase).toBe('admitted');
  });

  it('its end leaves a successor’s turn on the session record in place', async () => {
    const w = world();
    const running = w.run();
    const successor = { successor: true };
    (w.rec as { turn?: unknown }).turn = successor;
    await running.finish();
    expect(w.rec.turn).toBe(successor);
  });

  it('a host that fails once the turn is done changes nothing of its result and logs no second end', async () => {
    let calls = 0;
    const w = world({
      turnEnded: () => {
        calls++;
        if (calls === 1) throw new Error('host bookkeeping failed');
      },
    });
    const result = await w.run().finish();
    await new Promise((r) => setImmediate(r));
    expect(result.status).toBe('completed');
    expect(w.msgs()).not.toContain('turn finish failed');
    expect(w.ended).toEqual(['turn ended', 'turn ended', 'mailbox released', 'pump ws']);
  });
});
