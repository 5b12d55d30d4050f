import type { HistoryMessage } from '@turnwarden/protocol';
import { ErrorCode } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { turnPosition } from './position.js';

const call = { id: 'c1', name: 'echo', arguments: '{}' };
const result: HistoryMessage = {
  role: 'tool',
  toolCallId: 'c1',
  callIndex: 0,
  name: 'echo',
  content: 'ok',
  isError: false,
  effect: 'applied',
};

describe('turnPosition', () => {
  it('counts the assistant messages after the last user message', () => {
    const history: HistoryMessage[] = [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: 'old' },
      { role: 'assistant', content: 'old answer' },
      { role: 'user', content: 'new' },
      { role: 'assistant', content: '', toolCalls: [call] },
      result,
      { role: 'assistant', content: '', toolCalls: [call] },
      result,
    ];
    expect(turnPosition(history)).toEqual({ content: 'new', modelCall: 2 });
  });

  it('is at model call 0 right after the user message', () => {
    expect(turnPosition([{ role: 'user', content: 'hi' }])).toEqual({ content: 'hi', modelCall: 0 });
  });

  it('fails with MODEL_ERROR without a user message', () => {
    expect(() => turnPosition([{ role: 'system', content: 's' }])).toThrow(
      expect.objectContaining({ code: ErrorCode.MODEL_ERROR }),
    );
  });
});
