import type { HistoryMessage } from '@turnwarden/protocol';
import { ErrorCode, isTurnwardenError } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import type { ModelEvent } from '../contracts.js';
import { abortAt, collect, testSignals, useFakeTimers } from '../tools/test-support/signals.js';
import { createScriptedModel } from './model.js';

const model = createScriptedModel();

/** A history ending with `content` as the user message, followed by `modelCalls` answered assistant messages. */
function historyAt(content: string, modelCalls = 0): HistoryMessage[] {
  const history: HistoryMessage[] = [
    { role: 'user', content: 'an earlier turn' },
    { role: 'assistant', content: 'an earlier answer' },
    { role: 'user', content },
  ];
  for (let k = 0; k < modelCalls; k += 1) {
    const id = `c${k}`;
    history.push({ role: 'assistant', content: '', toolCalls: [{ id, name: 'echo', arguments: '{}' }] });
    history.push({
      role: 'tool',
      toolCallId: id,
      callIndex: 0,
      name: 'echo',
      content: '',
      isError: false,
      effect: 'applied',
    });
  }
  return history;
}

const script = (steps: unknown[]) => JSON.stringify({ script: steps });
const run = (content: string, modelCalls = 0, ctx = testSignals()) =>
  collect(model.stream({ history: historyAt(content, modelCalls), tools: [] }, ctx));
const texts = (events: ModelEvent[]) => events.flatMap((e) => (e.type === 'text' ? [e.text] : []));
const calls = (events: ModelEvent[]) => events.flatMap((e) => (e.type === 'tool_call' ? [e.call] : []));

describe('scripted model: echo', () => {
  it('is named scripted', () => {
    expect(model.name).toBe('scripted');
  });

  it('echoes plain text in a few chunks', async () => {
    const events = await run('hello world');
    expect(events.every((e) => e.type === 'text')).toBe(true);
    expect(events).toHaveLength(4);
    expect(texts(events).join('')).toBe('echo: hello world');
  });

  it('echoes JSON that has no script key', async () => {
    const events = await run('{"text": "hi"}');
    expect(texts(events).join('')).toBe('echo: {"text": "hi"}');
  });
});

describe('scripted model: segments', () => {
  const twoRounds = script([
    { text: 'first', chunks: 1 },
    { tools: [{ name: 'echo', args: { text: 'a' } }] },
    { text: 'second', chunks: 1 },
    { tools: [{ name: 'echo', args: { text: 'b' } }] },
    { text: 'final answer', chunks: 3 },
  ]);

  it('plays segment k on model call k, counted from the assistant messages in the history', async () => {
    const first = await run(twoRounds, 0);
    expect(first).toEqual([
      { type: 'text', text: 'first' },
      { type: 'tool_call', call: { id: 'call_0_0', name: 'echo', arguments: '{"text":"a"}' } },
    ]);
    const second = await run(twoRounds, 1);
    expect(second).toEqual([
      { type: 'text', text: 'second' },
      { type: 'tool_call', call: { id: 'call_1_0', name: 'echo', arguments: '{"text":"b"}' } },
    ]);
    const third = await run(twoRounds, 2);
    expect(calls(third)).toEqual([]);
    expect(texts(third)).toHaveLength(3);
    expect(texts(third).join('')).toBe('final answer');
  });

  it('is deterministic: the same history plays the same segment again', async () => {
    expect(await run(twoRounds, 1)).toEqual(await run(twoRounds, 1));
  });

  it('says "done" once past the end of the script', async () => {
    expect(await run(twoRounds, 3)).toEqual([{ type: 'text', text: 'done' }]);
    expect(await run(script([]), 0)).toEqual([{ type: 'text', text: 'done' }]);
  });

  it('emits several tool calls in one message, preserving duplicate ids', async () => {
    const events = await run(
      script([
        {
          tools: [
            { name: 'echo', args: { text: 'x' }, id: 'dup' },
            { name: 'echo', args: { text: 'y' }, id: 'dup' },
            { name: 'sleep', args: { ms: 1 } },
          ],
        },
        { text: 'never in this message' },
      ]),
    );
    expect(calls(events).map((c) => c.id)).toEqual(['dup', 'dup', 'call_0_2']);
    expect(texts(events)).toEqual([]);
  });

  it('passes string args through verbatim', async () => {
    const events = await run(script([{ tools: [{ name: 'echo', args: '{"text": oops' }] }]));
    expect(calls(events)[0]?.arguments).toBe('{"text": oops');
  });

  it('streams a text step in the requested number of chunks', async () => {
    const events = await run(script([{ text: 'abcdef', chunks: 3, delayMs: 5 }]));
    expect(texts(events)).toEqual(['ab', 'cd', 'ef']);
  });
});

describe('scripted model: progress and abort', () => {
  it('heartbeats without output during a heartbeat step', async () => {
    const ctx = testSignals();
    const events = await run(
      script([
        { heartbeat: 60, everyMs: 20 },
        { text: 'ok', chunks: 1 },
      ]),
      0,
      ctx,
    );
    expect(ctx.beats()).toBe(4);
    expect(events).toEqual([{ type: 'text', text: 'ok' }]);
  });

  it('a sleep step makes no heartbeat', async () => {
    const ctx = testSignals();
    await run(script([{ sleep: 20 }]), 0, ctx);
    expect(ctx.beats()).toBe(0);
  });
});

describe('scripted model: aborts', () => {
  useFakeTimers();

  it('aborting during a sleep step rejects at the abort with TURN_ABORTED', async () => {
    const ctx = testSignals();
    const { error, prompt } = await abortAt(run(script([{ sleep: 60_000 }]), 0, ctx), ctx.controller, 20);
    expect(prompt).toBe(true);
    expect(isTurnwardenError(error, ErrorCode.TURN_ABORTED)).toBe(true);
  });

  it('aborting during a heartbeat step rejects at the abort with TURN_ABORTED', async () => {
    const ctx = testSignals();
    const { error, prompt } = await abortAt(
      run(script([{ heartbeat: 60_000, everyMs: 10 }]), 0, ctx),
      ctx.controller,
      55,
    );
    expect(prompt).toBe(true);
    expect(isTurnwardenError(error, ErrorCode.TURN_ABORTED)).toBe(true);
    expect(ctx.beats()).toBe(6); // at 0, 10, … 50 ms
  });

  it('aborting during a text delay rejects at the abort with TURN_ABORTED, after the first chunk', async () => {
    const ctx = testSignals();
    const seen: ModelEvent[] = [];
    const consume = async () => {
      const stream = model.stream(
        { history: historyAt(script([{ text: 'abcd', chunks: 2, delayMs: 60_000 }])), tools: [] },
        ctx,
      );
      for await (const event of stream) seen.push(event);
    };
    const { error, prompt } = await abortAt(consume(), ctx.controller, 30);
    expect(prompt).toBe(true);
    expect(isTurnwardenError(error, ErrorCode.TURN_ABORTED)).toBe(true);
    expect(seen).toEqual([{ type: 'text', text: 'ab' }]);
  });

  it('refuses to start when the signal is already aborted', async () => {
    const ctx = testSignals();
    ctx.controller.abort('cancel');
    await expect(run(script([{ text: 'never' }]), 0, ctx)).rejects.toMatchObject({
      code: ErrorCode.TURN_ABORTED,
    });
  });
});

describe('scripted model: failures', () => {
  it('a fail step throws MODEL_ERROR with its message, after what came before it', async () => {
    const seen: ModelEvent[] = [];
    const consume = async () => {
      const stream = model.stream(
        { history: historyAt(script([{ text: 'hm', chunks: 1 }, { fail: 'rate limited' }])), tools: [] },
        testSignals(),
      );
      for await (const event of stream) seen.push(event);
    };
    const error = await consume().catch((e: unknown) => e);
    expect(isTurnwardenError(error, ErrorCode.MODEL_ERROR)).toBe(true);
    expect((error as Error).message).toBe('rate limited');
    expect(seen).toEqual([{ type: 'text', text: 'hm' }]);
  });

  it('turns an invalid script into MODEL_ERROR naming the bad field', async () => {
    await expect(run(script([{ sleep: -1 }]))).rejects.toMatchObject({
      code: ErrorCode.MODEL_ERROR,
      message: 'scripted model: invalid script: script[0].sleep must be a non-negative integer',
    });
  });

  it('fails with MODEL_ERROR when the history has no user message', async () => {
    const stream = model.stream({ history: [{ role: 'system', content: 's' }], tools: [] }, testSignals());
    await expect(collect(stream)).rejects.toMatchObject({ code: ErrorCode.MODEL_ERROR });
  });
});
