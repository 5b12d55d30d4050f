/** The structure checks every writer relies on (S1): open call occurrences and admissibility. */
import { describe, expect, it } from 'vitest';
import {
  type AssistantMessage,
  type HistoryMessage,
  openToolCalls,
  structuralRefusal,
  type ToolResultMessage,
} from './history.js';

const user = (content = 'hi'): HistoryMessage => ({ role: 'user', content });
const assistant = (...ids: string[]): AssistantMessage =>
  ids.length === 0
    ? { role: 'assistant', content: 'answer' }
    : { role: 'assistant', content: '', toolCalls: ids.map((id) => ({ id, name: 'echo', arguments: '{}' })) };
const result = (toolCallId: string, callIndex: number): ToolResultMessage => ({
  role: 'tool',
  toolCallId,
  callIndex,
  name: 'echo',
  content: 'ok',
  isError: false,
  effect: 'applied',
});
const rows = (...messages: HistoryMessage[]) =>
  messages.map((message, i) => ({ commitKey: `k${i + 1}`, message }));

describe('openToolCalls', () => {
  it('S1: an assistant message without calls, or with every call answered, leaves nothing open', () => {
    expect(openToolCalls([])).toEqual([]);
    expect(openToolCalls(rows(user(), assistant()))).toEqual([]);
    expect(openToolCalls(rows(user(), assistant('a', 'b'), result('a', 0), result('b', 1)))).toEqual([]);
  });

  it('S1: reports each unanswered occurrence with its call index and the assistant row that made it', () => {
    const open = openToolCalls(rows(user(), assistant('a', 'b', 'c'), result('b', 1)));
    expect(open.map((o) => [o.assistantKey, o.callIndex, o.call.id])).toEqual([
      ['k2', 0, 'a'],
      ['k2', 2, 'c'],
    ]);
  });

  it('S1: duplicate provider ids are counted by occurrence, not by id', () => {
    const h = rows(user(), assistant('dup', 'dup', 'dup'), result('dup', 0));
    expect(openToolCalls(h).map((o) => o.callIndex)).toEqual([1, 2]);
    expect(
      openToolCalls([...h, ...rows(result('dup', 2))].map((r, i) => ({ ...r, commitKey: `x${i}` }))).map(
        (o) => o.callIndex,
      ),
    ).toEqual([1]);
  });

  it('S1: a result with an index outside the calls answers nothing', () => {
    expect(openToolCalls(rows(user(), assistant('a'), result('a', 1))).map((o) => o.callIndex)).toEqual([0]);
    expect(openToolCalls(rows(user(), assistant('a'), result('a', -1))).map((o) => o.callIndex)).toEqual([0]);
  });

  it('S1: an earlier assistant message with missing results is reported too (a corrupt history)', () => {
    const open = openToolCalls(rows(user(), assistant('a'), user('again'), assistant('b'), result('b', 0)));
    expect(open.map((o) => [o.assistantKey, o.call.id])).toEqual([['k2', 'a']]);
  });

  it('S1: a result that follows a non-assistant message answers nothing', () => {
    expect(openToolCalls(rows(user(), result('a', 0)))).toEqual([]);
  });
});

describe('structuralRefusal', () => {
  const debt = rows(user(), assistant('dup', 'dup'), result('dup', 0));

  it('S1: admits the result of an open occurrence', () => {
    expect(structuralRefusal(debt, result('dup', 1))).toBeUndefined();
  });

  it('S1: refuses an extra occurrence, an answered one again, and a foreign id', () => {
    expect(structuralRefusal(debt, result('dup', 2))).toBe(
      'tool result for dup#2 answers no open call occurrence',
    );
    expect(structuralRefusal(debt, result('dup', 0))).toBe(
      'tool result for dup#0 answers no open call occurrence',
    );
    expect(structuralRefusal(debt, result('other', 1))).toBe(
      'tool result for other#1 answers no open call occurrence',
    );
  });

  it('S1: refuses any other message while calls are open, and admits it once they are answered', () => {
    expect(structuralRefusal(debt, user())).toBe('1 tool call(s) still need results before a user message');
    expect(structuralRefusal(debt, assistant())).toBe(
      '1 tool call(s) still need results before a assistant message',
    );
    const paid = [...debt, { commitKey: 'k9', message: result('dup', 1) }];
    expect(structuralRefusal(paid, user())).toBeUndefined();
    expect(structuralRefusal(paid, result('dup', 1))).toBeDefined();
  });

  it('S1: refuses a tool result where no call was made', () => {
    expect(structuralRefusal(rows(user()), result('a', 0))).toBe(
      'tool result for a#0 answers no open call occurrence',
    );
  });
});
