/** One tool call occurrence (T6, S2): what each kind of model output and tool outcome becomes. */
import type { ToolCall } from '@turnwarden/protocol';
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import type { Tool, ToolContext } from './contracts.js';
import { declaredEffect, runToolCall, type ToolCallEnv, toolError } from './tool-call.js';

function env(tools: Tool[], overrides: Partial<ToolCallEnv> = {}) {
  const started: number[] = [];
  const controller = new AbortController();
  const e: ToolCallEnv = {
    tools: new Map(tools.map((t) => [t.name, t])),
    maxToolArgBytes: 32,
    workstreamId: 'ws-7',
    tenantId: 'tenant-7',
    signal: controller.signal,
    heartbeat: () => {},
    onStart: () => started.push(1),
    ...overrides,
  };
  return { env: e, started, controller };
}

const call = (name: string, args: string, id = 'c1'): ToolCall => ({ id, name, arguments: args });
const seen: { args: Record<string, unknown>; ctx: ToolContext }[] = [];
const probe: Tool = {
  name: 'probe',
  description: 'records its arguments',
  async run(args, ctx) {
    seen.push({ args, ctx });
    return 'probed';
  },
};

describe('runToolCall', () => {
  it('T6: refuses an unknown tool with effect none, naming it, without starting anything', async () => {
    const { env: e, started } = env([probe]);
    expect(await runToolCall(call('nope', '{}'), 2, e)).toEqual({
      role: 'tool',
      toolCallId: 'c1',
      callIndex: 2,
      name: 'nope',
      content: 'unknown tool: nope',
      isError: true,
      effect: 'none',
    });
    expect(started).toEqual([]);
  });

  it('T6: arguments exactly at the byte limit run; one byte over is refused', async () => {
    const { env: e } = env([probe]);
    const at = JSON.stringify({ k: 'x'.repeat(24) }); // 32 bytes
    expect((await runToolCall(call('probe', at), 0, e)).effect).toBe('applied');
    const over = JSON.stringify({ k: 'x'.repeat(25) });
    expect(await runToolCall(call('probe', over), 0, e)).toMatchObject({
      effect: 'none',
      isError: true,
      content: 'tool arguments exceed 32 bytes',
    });
  });

  it('T6: malformed JSON and JSON that is not an object are refused with effect none', async () => {
    const { env: e, started } = env([probe]);
    const malformed = await runToolCall(call('probe', '{"a": '), 0, e);
    expect(malformed).toMatchObject({ effect: 'none', isError: true });
    expect(malformed.content).toMatch(/^malformed tool arguments: .+/);
    // The parser's own reason reaches the model, not the generic shape complaint.
    expect(malformed.content).not.toContain('expected a JSON object');
    for (const text of ['[1,2]', 'null', '7', '"str"', 'true']) {
      expect((await runToolCall(call('probe', text), 0, e)).content).toBe(
        'malformed tool arguments: expected a JSON object',
      );
    }
    expect(started).toEqual([]);
  });

  it('T6: empty or blank arguments are an empty object', async () => {
    const { env: e } = env([probe]);
    seen.length = 0;
    for (const text of ['', '   '])
      expect((await runToolCall(call('probe', text), 0, e)).effect).toBe('applied');
    expect(seen.map((s) => s.args)).toEqual([{}, {}]);
  });

  it('runs the tool with its context: the signal, heartbeat, call id and workstream', async () => {
    const heartbeat = () => {};
    const { env: e, started, controller } = env([probe], { heartbeat });
    seen.length = 0;
    const result = await runToolCall(call('probe', '{"n":1}', 'call-9'), 3, e);
    expect(result).toEqual({
      role: 'tool',
      toolCallId: 'call-9',
      callIndex: 3,
      name: 'probe',
      content: 'probed',
      isError: false,
      effect: 'applied',
    });
    expect(started).toEqual([1]);
    expect(seen[0]!.args).toEqual({ n: 1 });
    expect(seen[0]!.ctx).toEqual({
      signal: controller.signal,
      heartbeat,
      callId: 'call-9',
      workstreamId: 'ws-7',
      tenantId: 'tenant-7',
    });
  });

  it('S2: a tool that fails after it started is an error of unknown effect, whatever it threw', async () => {
    const throwing = (value: unknown): Tool => ({
      name: 'bad',
      description: 'throws',
      async run() {
        throw value;
      },
    });
    const cases: [unknown, string][] = [
      [new Error('disk full'), 'tool error: disk full'],
      [new TurnwardenError(ErrorCode.TOOL_ERROR, 'quota'), 'tool error: quota'],
      ['a plain string', 'tool error: a plain string'],
      [42, 'tool error: 42'],
    ];
    for (const [value, content] of cases) {
      const { env: e } = env([throwing(value)]);
      expect(await runToolCall(call('bad', '{}'), 0, e)).toMatchObject({
        isError: true,
        effect: 'unknown',
        content,
      });
    }
  });

  it('S2: a tool may declare its error’s effect: none (it never reached its work) or applied (its answer is an error)', async () => {
    const declaring = (effect: 'none' | 'applied'): Tool => ({
      name: 'declares',
      description: 'throws a declared error',
      async run() {
        throw toolError(`declared ${effect}`, effect);
      },
    });
    for (const effect of ['none', 'applied'] as const) {
      const { env: e } = env([declaring(effect)]);
      expect(await runToolCall(call('declares', '{}'), 0, e)).toMatchObject({
        isError: true,
        effect,
        content: `tool error: declared ${effect}`,
      });
    }
    // Read by shape: a plugin's own copy of the helper (or a plain object) declares the same.
    const plain: Tool = {
      name: 'plain',
      description: 'throws a shaped object',
      async run() {
        throw Object.assign(new Error('server down'), { toolEffect: 'none' });
      },
    };
    expect(await runToolCall(call('plain', '{}'), 0, env([plain]).env)).toMatchObject({ effect: 'none' });
    const bogus: Tool = {
      ...plain,
      name: 'bogus',
      async run() {
        throw Object.assign(new Error('x'), { toolEffect: 'maybe' });
      },
    };
    expect(await runToolCall(call('bogus', '{}'), 0, env([bogus]).env)).toMatchObject({ effect: 'unknown' });
  });

  it('an abort during the tool rejects (the turn unwinds) instead of becoming a result', async () => {
    const hang: Tool = { name: 'hang', description: 'never returns', run: () => new Promise(() => {}) };
    const { env: e, controller } = env([hang]);
    const running = runToolCall(call('hang', '{}'), 0, e);
    controller.abort(new TurnwardenError(ErrorCode.TURN_ABORTED, 'cancelled'));
    await expect(running).rejects.toMatchObject({ code: ErrorCode.TURN_ABORTED });
  });

  it('a tool that throws because it was aborted rejects too', async () => {
    const controller = new AbortController();
    const aborting: Tool = {
      name: 'a',
      description: 'aborts its own turn, then throws',
      async run() {
        controller.abort();
        throw new Error('stopped');
      },
    };
    const { env: e } = env([aborting], { signal: controller.signal });
    await expect(runToolCall(call('a', '{}'), 0, e)).rejects.toBeDefined();
  });
});

describe('a tool error’s declared effect (S2)', () => {
  it('S2: read by shape from an object only: none or applied, anything else undeclared', () => {
    expect(declaredEffect(toolError('down', 'none'))).toBe('none');
    expect(declaredEffect({ toolEffect: 'applied' })).toBe('applied');
    expect(declaredEffect({ toolEffect: 'maybe' })).toBeUndefined();
    expect(declaredEffect(null)).toBeUndefined();
    expect(declaredEffect(undefined)).toBeUndefined();
    expect(declaredEffect('none')).toBeUndefined();
    expect(declaredEffect(Object.assign(() => {}, { toolEffect: 'none' }))).toBeUndefined();
  });

  it('toolError keeps its cause when given, and has none when not', () => {
    const cause = new Error('socket closed');
    const withCause = toolError('down', 'none', cause);
    expect(withCause.cause).toBe(cause);
    expect(withCause.message).toBe('down');
    expect('cause' in toolError('down', 'applied')).toBe(false);
  });
});

describe('the context a tool runs with', () => {
  it('carries runIsolated only when the host gave one', async () => {
    seen.length = 0;
    await runToolCall(call('probe', '{}'), 0, env([probe]).env);
    expect('runIsolated' in seen[0]!.ctx).toBe(false);
    const runIsolated = (async () => undefined) as unknown as NonNullable<ToolCallEnv['runIsolated']>;
    await runToolCall(call('probe', '{}'), 0, env([probe], { runIsolated }).env);
    expect(seen[1]!.ctx.runIsolated).toBe(runIsolated);
    expect(seen[1]!.ctx).toMatchObject({ callId: 'c1', workstreamId: 'ws-7' });
  });
});
