import { ErrorCode, isTurnwardenError } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { parseScript } from './parse.js';

const script = (steps: unknown, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ script: steps, ...extra });

function parseError(content: string): { code: string; message: string; path: unknown } {
  try {
    parseScript(content);
  } catch (error) {
    if (!isTurnwardenError(error)) throw error;
    return { code: error.code, message: error.message, path: error.details?.path };
  }
  throw new Error('expected parseScript to throw');
}

describe('parseScript: not a script', () => {
  it.each([
    ['plain text', 'hello there'],
    ['empty text', ''],
    ['malformed JSON', '{"script": ['],
    ['a JSON array', '[{"script": []}]'],
    ['a JSON string', '"{\\"script\\": []}"'],
    ['a JSON object without script', '{"text": "hi"}'],
    ['text that merely mentions script', 'please run {"script": []} for me'],
  ])('%s → undefined', (_label, content) => {
    expect(parseScript(content)).toBeUndefined();
  });
});

describe('parseScript: valid scripts', () => {
  it('fills in defaults and splits segments after every tools step', () => {
    const parsed = parseScript(
      script([
        { text: 'Let me check.' },
        {
          tools: [
            { name: 'echo', args: { text: 'a' } },
            { name: 'sleep', args: '{"ms": 5}', id: 'x' },
          ],
        },
        { sleep: 10 },
        { heartbeat: 50 },
        { text: 'All done', chunks: 2, delayMs: 5 },
        {
          tools: [
            { name: 'echo', args: {}, id: 'dup' },
            { name: 'echo', args: {}, id: 'dup' },
          ],
        },
        { fail: 'boom' },
      ]),
    );
    expect(parsed?.steps).toEqual([
      { kind: 'text', text: 'Let me check.', chunks: 4, delayMs: 0 },
      {
        kind: 'tools',
        calls: [
          { id: 'call_0_0', name: 'echo', arguments: '{"text":"a"}' },
          { id: 'x', name: 'sleep', arguments: '{"ms": 5}' },
        ],
      },
      { kind: 'sleep', ms: 10 },
      { kind: 'heartbeat', ms: 50, everyMs: 20 },
      { kind: 'text', text: 'All done', chunks: 2, delayMs: 5 },
      {
        kind: 'tools',
        calls: [
          { id: 'dup', name: 'echo', arguments: '{}' },
          { id: 'dup', name: 'echo', arguments: '{}' },
        ],
      },
      { kind: 'fail', message: 'boom' },
    ]);
    expect(parsed?.segments.map((segment) => segment.map((step) => step.kind))).toEqual([
      ['text', 'tools'],
      ['sleep', 'heartbeat', 'text', 'tools'],
      ['fail'],
    ]);
  });

  it('numbers default ids by segment and position', () => {
    const parsed = parseScript(
      script([
        { tools: [{ name: 'a', args: {} }] },
        {
          tools: [
            { name: 'b', args: {} },
            { name: 'c', args: {} },
          ],
        },
      ]),
    );
    const ids = parsed?.segments.map((segment) =>
      segment.flatMap((s) => (s.kind === 'tools' ? s.calls.map((c) => c.id) : [])),
    );
    expect(ids).toEqual([['call_0_0'], ['call_1_0', 'call_1_1']]);
  });

  it('passes string args through verbatim, even malformed JSON', () => {
    const parsed = parseScript(script([{ tools: [{ name: 'echo', args: '{"text": "unterminated' }] }]));
    const step = parsed?.steps[0];
    expect(step?.kind === 'tools' && step.calls[0]?.arguments).toBe('{"text": "unterminated');
  });

  it('accepts stall and wedge steps', () => {
    expect(parseScript(script([{ text: 'thinking' }, { stall: true }]))?.steps[1]).toEqual({ kind: 'stall' });
    expect(parseScript(script([{ wedge: true }]))?.steps[0]).toEqual({ kind: 'wedge' });
  });

  it('accepts an empty script and leaves no empty trailing segment', () => {
    expect(parseScript(script([]))).toEqual({ steps: [], segments: [] });
    expect(parseScript(script([{ tools: [{ name: 'echo', args: {} }] }]))?.segments).toHaveLength(1);
  });

  it('accepts surrounding whitespace and the limits themselves', () => {
    const steps = Array.from({ length: 1000 }, () => ({ sleep: 3_600_000 }));
    expect(parseScript(`  \n${script(steps)}\n`)?.steps).toHaveLength(1000);
    expect(parseScript(script([{ text: 'x'.repeat(64 * 1024) }]))?.steps).toHaveLength(1);
    expect(parseScript(script([{ heartbeat: 0, everyMs: 3_600_000 }]))?.steps).toHaveLength(1);
  });
});

describe('parseScript: invalid scripts name the bad field', () => {
  it.each([
    ['script not an array', '{"script": {"text": "a"}}', 'script must be an array'],
    [
      'an extra top-level key',
      script([], { model: 'x' }),
      'model is not allowed (a script message has only the key script)',
    ],
    ['a step that is not an object', script([{ text: 'a' }, 'b']), 'script[1] must be an object'],
    ['a null step', script([null]), 'script[0] must be an object'],
    [
      'a step without a kind',
      script([{ chunks: 2 }]),
      'script[0] must have exactly one of the keys text, tools, sleep, heartbeat, stall, wedge, fail',
    ],
    [
      'a step with two kinds',
      script([{ text: 'a', sleep: 5 }]),
      'script[0] must have exactly one of the keys text, tools, sleep, heartbeat, stall, wedge, fail (found text, sleep)',
    ],
    [
      'an unknown key in a text step',
      script([{ text: 'a', speed: 2 }]),
      'script[0].speed is not allowed in a text step (allowed keys: text, chunks, delayMs)',
    ],
    ['text not a string', script([{ text: 5 }]), 'script[0].text must be a string'],
    ['chunks zero', script([{ text: 'a', chunks: 0 }]), 'script[0].chunks must be a positive integer'],
    [
      'chunks fractional',
      script([{ text: 'a', chunks: 1.5 }]),
      'script[0].chunks must be a positive integer',
    ],
    [
      'delayMs negative',
      script([{ text: 'a', delayMs: -1 }]),
      'script[0].delayMs must be a non-negative integer',
    ],
    ['tools not an array', script([{ tools: 'echo' }]), 'script[0].tools must be a non-empty array'],
    ['tools empty', script([{ tools: [] }]), 'script[0].tools must be a non-empty array'],
    ['a tool call not an object', script([{ tools: [7] }]), 'script[0].tools[0] must be an object'],
    [
      'an unknown key in a tool call',
      script([{ tools: [{ name: 'echo', args: {}, arguments: {} }] }]),
      'script[0].tools[0].arguments is not allowed in a tool call (allowed keys: name, args, id)',
    ],
    [
      'a tool call without name',
      script([{ tools: [{ args: {} }] }]),
      'script[0].tools[0].name must be a non-empty string',
    ],
    [
      'an empty tool name',
      script([{ tools: [{ name: '', args: {} }] }]),
      'script[0].tools[0].name must be a non-empty string',
    ],
    [
      'a tool call without args',
      script([{ tools: [{ name: 'echo' }] }]),
      'script[0].tools[0].args must be an object or a string',
    ],
    [
      'array args',
      script([{ tools: [{ name: 'echo', args: [1] }] }]),
      'script[0].tools[0].args must be an object or a string',
    ],
    [
      'a numeric id in a later call',
      script([
        {
          tools: [
            { name: 'echo', args: {} },
            { name: 'echo', args: {}, id: 3 },
          ],
        },
      ]),
      'script[0].tools[1].id must be a non-empty string',
    ],
    ['sleep negative', script([{ sleep: -5 }]), 'script[0].sleep must be a non-negative integer'],
    ['sleep as text', script([{ sleep: '5' }]), 'script[0].sleep must be a non-negative integer'],
    [
      'heartbeat fractional',
      script([{ text: 'a' }, { sleep: 1 }, { heartbeat: 2.5 }]),
      'script[2].heartbeat must be a non-negative integer',
    ],
    ['everyMs zero', script([{ heartbeat: 10, everyMs: 0 }]), 'script[0].everyMs must be a positive integer'],
    [
      'an unknown key in a heartbeat step',
      script([{ heartbeat: 10, every: 5 }]),
      'script[0].every is not allowed in a heartbeat step (allowed keys: heartbeat, everyMs)',
    ],
    ['stall false', script([{ stall: false }]), 'script[0].stall must be true'],
    ['wedge as text', script([{ wedge: 'yes' }]), 'script[0].wedge must be true'],
    [
      'an extra key on wedge',
      script([{ wedge: true, ms: 5 }]),
      'script[0].ms is not allowed in a wedge step (allowed keys: wedge)',
    ],
    ['fail empty', script([{ fail: '' }]), 'script[0].fail must be a non-empty string'],
    ['fail not a string', script([{ fail: true }]), 'script[0].fail must be a non-empty string'],
  ])('%s', (_label, content, message) => {
    const error = parseError(content);
    expect(error.code).toBe(ErrorCode.INVALID_SCRIPT);
    expect(error.message).toBe(message);
    expect(message.startsWith(String(error.path))).toBe(true);
  });

  it('reports the first bad step', () => {
    expect(parseError(script([{ sleep: 1 }, { sleep: -1 }, { sleep: -2 }])).message).toBe(
      'script[1].sleep must be a non-negative integer',
    );
  });
});

describe('parseScript: limits', () => {
  it.each([
    [
      'more than 1000 steps',
      script(Array.from({ length: 1001 }, () => ({ sleep: 0 }))),
      'script must have at most 1000 steps',
    ],
    [
      'a text over 64 KiB',
      script([{ text: 'x'.repeat(64 * 1024 + 1) }]),
      'script[0].text must be at most 65536 UTF-8 bytes',
    ],
    [
      'a text over 64 KiB in UTF-8 bytes',
      script([{ text: 'é'.repeat(32 * 1024 + 1) }]),
      'script[0].text must be at most 65536 UTF-8 bytes',
    ],
    [
      'a sleep over one hour',
      script([{ sleep: 3_600_001 }]),
      'script[0].sleep must be at most 3600000 (1 hour)',
    ],
    [
      'a delay over one hour',
      script([{ text: 'a', delayMs: 1e9 }]),
      'script[0].delayMs must be at most 3600000 (1 hour)',
    ],
    [
      'a heartbeat over one hour',
      script([{ heartbeat: 3_600_001 }]),
      'script[0].heartbeat must be at most 3600000 (1 hour)',
    ],
    [
      'an interval over one hour',
      script([{ heartbeat: 1, everyMs: 3_600_001 }]),
      'script[0].everyMs must be at most 3600000 (1 hour)',
    ],
    ['too many chunks', script([{ text: 'a', chunks: 65_537 }]), 'script[0].chunks must be at most 65536'],
    [
      'more than 100 tool calls',
      script([{ tools: Array.from({ length: 101 }, () => ({ name: 'echo', args: {} })) }]),
      'script[0].tools must have at most 100 entries',
    ],
    [
      'args over 256 KiB',
      script([{ tools: [{ name: 'echo', args: 'x'.repeat(256 * 1024 + 1) }] }]),
      'script[0].tools[0].args must be at most 262144 UTF-8 bytes as JSON text',
    ],
    [
      'a tool name over 256 characters',
      script([{ tools: [{ name: 'n'.repeat(257), args: {} }] }]),
      'script[0].tools[0].name must be at most 256 characters',
    ],
  ])('refuses %s', (_label, content, message) => {
    const error = parseError(content);
    expect(error.code).toBe(ErrorCode.INVALID_SCRIPT);
    expect(error.message).toBe(message);
  });
});
