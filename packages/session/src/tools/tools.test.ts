import { ErrorCode, isTurnwardenError } from '@turnwarden/protocol';
import { describe, expect, it, vi } from 'vitest';
import { demoTools } from './demo.js';
import { echoTool } from './echo.js';
import { failTool } from './fail.js';
import { heartbeatTool } from './heartbeat.js';
import { sleepTool } from './sleep.js';
import { abortAt, testSignals, useFakeTimers } from './test-support/signals.js';

const toolError = (message: string) => expect.objectContaining({ code: ErrorCode.TOOL_ERROR, message });

describe('demoTools', () => {
  it('lists the five demo tools with descriptions', () => {
    const tools = demoTools();
    expect(tools.map((t) => t.name)).toEqual(['sleep', 'heartbeat', 'wedge', 'echo', 'fail', 'transfer']);
    expect(tools.filter((t) => t.needsApproval === true).map((t) => t.name)).toEqual(['transfer']);
    for (const tool of tools) expect(tool.description.length).toBeGreaterThan(10);
    expect(demoTools()).not.toBe(tools);
  });
});

describe('echo', () => {
  it('returns the text', async () => {
    expect(await echoTool.run({ text: 'hi there' }, testSignals())).toBe('hi there');
  });

  it('refuses a missing or non-string text', async () => {
    await expect(echoTool.run({}, testSignals())).rejects.toEqual(
      toolError('echo: args.text must be a string'),
    );
    await expect(echoTool.run({ text: 3 }, testSignals())).rejects.toEqual(
      toolError('echo: args.text must be a string'),
    );
  });

  it('refuses unknown arguments', async () => {
    await expect(echoTool.run({ text: 'a', loud: true }, testSignals())).rejects.toEqual(
      toolError('echo: unknown argument(s) "loud" (expected: text)'),
    );
  });
});

describe('fail', () => {
  it('throws TOOL_ERROR with the message', async () => {
    const error = await failTool.run({ message: 'disk full' }, testSignals()).catch((e: unknown) => e);
    expect(isTurnwardenError(error, ErrorCode.TOOL_ERROR)).toBe(true);
    expect((error as Error).message).toBe('disk full');
  });

  it('refuses a missing message', async () => {
    await expect(failTool.run({}, testSignals())).rejects.toEqual(
      toolError('fail: args.message must be a string'),
    );
  });
});

describe('sleep', () => {
  useFakeTimers();

  it('waits and reports it, without heartbeats', async () => {
    const ctx = testSignals();
    let result: string | undefined;
    void sleepTool.run({ ms: 30 }, ctx).then((r) => {
      result = r;
    });
    await vi.advanceTimersByTimeAsync(29);
    expect(result).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(result).toBe('slept 30 ms');
    expect(ctx.beats()).toBe(0);
  });

  it('rejects with TURN_ABORTED at the abort', async () => {
    const ctx = testSignals();
    const { error, prompt } = await abortAt(sleepTool.run({ ms: 60_000 }, ctx), ctx.controller, 20);
    expect(prompt).toBe(true);
    expect(isTurnwardenError(error, ErrorCode.TURN_ABORTED)).toBe(true);
  });

  it('with ignoreAbort, runs to its end despite the abort', async () => {
    const ctx = testSignals();
    let result: string | undefined;
    void sleepTool.run({ ms: 80, ignoreAbort: true }, ctx).then((r) => {
      result = r;
    });
    await vi.advanceTimersByTimeAsync(10);
    ctx.controller.abort();
    await vi.advanceTimersByTimeAsync(69);
    expect(result).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(result).toBe('slept 80 ms');
  });

  it('validates its arguments', async () => {
    const ctx = testSignals();
    await expect(sleepTool.run({}, ctx)).rejects.toEqual(
      toolError('sleep: args.ms must be a non-negative integer'),
    );
    await expect(sleepTool.run({ ms: -1 }, ctx)).rejects.toEqual(
      toolError('sleep: args.ms must be a non-negative integer'),
    );
    await expect(sleepTool.run({ ms: 1.5 }, ctx)).rejects.toEqual(
      toolError('sleep: args.ms must be a non-negative integer'),
    );
    await expect(sleepTool.run({ ms: 3_600_001 }, ctx)).rejects.toEqual(
      toolError('sleep: args.ms must be at most 3600000 (1 hour)'),
    );
    await expect(sleepTool.run({ ms: 1, ignoreAbort: 'yes' }, ctx)).rejects.toEqual(
      toolError('sleep: args.ignoreAbort must be a boolean'),
    );
  });
});

describe('heartbeat', () => {
  useFakeTimers();

  it('heartbeats while it runs', async () => {
    const ctx = testSignals();
    const run = heartbeatTool.run({ ms: 60, everyMs: 15 }, ctx);
    await vi.advanceTimersByTimeAsync(45);
    expect(ctx.beats()).toBe(4);
    await vi.advanceTimersByTimeAsync(15);
    expect(await run).toBe('ran 60 ms with 5 heartbeats');
    expect(ctx.beats()).toBe(5);
  });

  it('beats every 20 ms by default', async () => {
    const ctx = testSignals();
    const run = heartbeatTool.run({ ms: 40 }, ctx);
    await vi.advanceTimersByTimeAsync(19);
    expect(ctx.beats()).toBe(1);
    await vi.advanceTimersByTimeAsync(21);
    await run;
    expect(ctx.beats()).toBe(3);
  });

  it('rejects with TURN_ABORTED at the abort', async () => {
    const ctx = testSignals();
    const { error, prompt } = await abortAt(heartbeatTool.run({ ms: 60_000 }, ctx), ctx.controller, 50);
    expect(prompt).toBe(true);
    expect(isTurnwardenError(error, ErrorCode.TURN_ABORTED)).toBe(true);
    expect(ctx.beats()).toBe(3); // at 0, 20 and 40 ms
  });

  it('validates its arguments', async () => {
    const ctx = testSignals();
    await expect(heartbeatTool.run({ ms: 10, everyMs: 0 }, ctx)).rejects.toEqual(
      toolError('heartbeat: args.everyMs must be a positive integer'),
    );
    await expect(heartbeatTool.run({ ms: 'long' }, ctx)).rejects.toEqual(
      toolError('heartbeat: args.ms must be a non-negative integer'),
    );
  });
});
