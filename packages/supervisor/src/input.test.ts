/** The request checks of the embedded API (T5): what is refused, with which field and words. */
import { ErrorCode, isTurnwardenError } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import {
  checkCloseInput,
  checkCompactInput,
  checkDeleteInput,
  checkFields,
  checkHistoryInput,
  checkId,
  checkListInput,
  checkRef,
  checkRewindInput,
  checkSendInput,
  invalid,
} from './input.js';

const limits = { maxModelSteps: 4, maxToolArgBytes: 64, maxMessageBytes: 12 };
const ok = { tenantId: 't', principal: 'user', workstreamId: 'w', content: 'hello' };

function refusal(fn: () => unknown) {
  try {
    fn();
  } catch (e) {
    if (isTurnwardenError(e)) return { code: e.code, message: e.message, details: e.details };
    throw e;
  }
  throw new Error('expected a refusal');
}

describe('input checks', () => {
  it('T5: invalid() is INVALID_INPUT naming the field', () => {
    const e = invalid('bad thing', 'x');
    expect([e.code, e.message, e.details]).toEqual([ErrorCode.INVALID_INPUT, 'bad thing', { field: 'x' }]);
  });

  it('T5: ids are 1–128 characters of A–Z a–z 0–9 . _ : -', () => {
    for (const good of ['a', 'A.b_c:d-9', 'x'.repeat(128)]) expect(() => checkId(good, 'id')).not.toThrow();
    for (const bad of ['', 'x'.repeat(129), '../etc', 'a b', 42, undefined, null]) {
      expect(refusal(() => checkId(bad, 'tenantId'))).toEqual({
        code: ErrorCode.INVALID_INPUT,
        message: 'tenantId must be 1–128 characters of A–Z a–z 0–9 . _ : -',
        details: { field: 'tenantId' },
      });
    }
  });

  it('T5: a send must be an object with known fields only', () => {
    for (const bad of [null, undefined, 'text', 7, [ok]]) {
      expect(refusal(() => checkSendInput(bad as never, limits))).toMatchObject({
        message: 'send takes one object argument',
        details: { field: 'input' },
      });
    }
    expect(refusal(() => checkSendInput({ ...ok, admin: true } as never, limits))).toMatchObject({
      message: 'send: unknown field admin',
      details: { field: 'admin' },
    });
    // A signal must be a real AbortSignal; one is accepted.
    expect(refusal(() => checkSendInput({ ...ok, signal: {} as never }, limits))).toMatchObject({
      details: { field: 'signal' },
    });
    expect(() => checkSendInput({ ...ok, signal: new AbortController().signal }, limits)).not.toThrow();
  });

  it('T5: every id of a send is checked, the principal included', () => {
    expect(refusal(() => checkSendInput({ ...ok, tenantId: '../t' }, limits)).details).toEqual({
      field: 'tenantId',
    });
    expect(refusal(() => checkSendInput({ ...ok, workstreamId: '' }, limits)).details).toEqual({
      field: 'workstreamId',
    });
    expect(refusal(() => checkSendInput({ ...ok, principal: 'a b' }, limits)).details).toEqual({
      field: 'principal',
    });
    const { principal: _, ...anonymous } = ok;
    expect(refusal(() => checkSendInput(anonymous as never, limits)).details).toEqual({
      field: 'principal',
    });
    expect(() => checkSendInput({ ...ok, principal: 'alice' }, limits)).not.toThrow();
  });

  it('T5: content is a string with non-whitespace text, of at most maxMessageBytes UTF-8 bytes', () => {
    for (const content of ['', '   ', '\n\t ', 3, undefined]) {
      expect(refusal(() => checkSendInput({ ...ok, content } as never, limits))).toMatchObject({
        message: 'content must be a string with some non-whitespace text',
        details: { field: 'content' },
      });
    }
    expect(() => checkSendInput({ ...ok, content: 'x'.repeat(12) }, limits)).not.toThrow();
    expect(() => checkSendInput({ ...ok, content: '€€€€' }, limits)).not.toThrow(); // 12 bytes
    expect(refusal(() => checkSendInput({ ...ok, content: 'x'.repeat(13) }, limits))).toEqual({
      code: ErrorCode.INVALID_INPUT,
      message: 'content exceeds 12 bytes',
      details: { field: 'content' },
    });
    expect(refusal(() => checkSendInput({ ...ok, content: '€€€€x' }, limits)).message).toBe(
      'content exceeds 12 bytes',
    );
  });
});

describe('one object argument per call', () => {
  const limits = { maxModelSteps: 4, maxToolArgBytes: 64, maxMessageBytes: 12 };
  const ref = { tenantId: 't', principal: 'user', workstreamId: 'ws' };

  it('T5: a workstream reference is exactly { tenantId, principal, workstreamId }, each a valid id', () => {
    expect(() => checkRef(ref, 'status')).not.toThrow();
    expect(refusal(() => checkRef({ ...ref, extra: 1 }, 'status'))).toMatchObject({
      message: 'status: unknown field extra',
      details: { field: 'extra' },
    });
    expect(refusal(() => checkRef(['t', 'ws'], 'history')).details).toEqual({ field: 'input' });
    expect(refusal(() => checkRef({ tenantId: 't', principal: 'user' }, 'close')).details).toEqual({
      field: 'workstreamId',
    });
    expect(refusal(() => checkRef({ ...ref, tenantId: 't t' }, 'cancel')).details).toEqual({
      field: 'tenantId',
    });
    expect(() => checkRef({ ...ref, listener: () => {} }, 'subscribe', ['listener'])).not.toThrow();
    expect(() => checkFields({}, [], 'x')).not.toThrow();
  });

  it('T5: compact needs a positive integer throughSeq, a summary with text within the size limit, an optional key', () => {
    const good = { ...ref, throughSeq: 2, summary: 'sum' };
    expect(() => checkCompactInput(good, limits)).not.toThrow();
    expect(() => checkCompactInput({ ...good, commitKey: 'k' }, limits)).not.toThrow();
    for (const throughSeq of [0, -1, 1.5, Number.NaN, '2', 2 ** 53]) {
      expect(refusal(() => checkCompactInput({ ...good, throughSeq } as never, limits)).details).toEqual({
        field: 'throughSeq',
      });
    }
    for (const summary of ['', '  ', 5, 'x'.repeat(13)]) {
      expect(refusal(() => checkCompactInput({ ...good, summary } as never, limits)).details).toEqual({
        field: 'summary',
      });
    }
    expect(refusal(() => checkCompactInput({ ...good, commitKey: '' }, limits)).details).toEqual({
      field: 'commitKey',
    });
    expect(refusal(() => checkCompactInput({ ...good, note: 'x' } as never, limits)).message).toBe(
      'compact: unknown field note',
    );
  });
});

describe('a send’s tool allow-list', () => {
  const limits = { maxModelSteps: 4, maxToolArgBytes: 64, maxMessageBytes: 64 };
  const ok = { tenantId: 't', principal: 'user', workstreamId: 'ws', content: 'hi' };
  const known = ['echo', 'sleep'];

  it('T5: an array of distinct registered names; each refusal names the field and says why', () => {
    expect(() => checkSendInput({ ...ok, tools: ['echo'] }, limits, known)).not.toThrow();
    expect(() => checkSendInput({ ...ok, tools: [] }, limits, known)).not.toThrow();
    // Before the workers reported their catalogue, only the shape is checked.
    expect(() => checkSendInput({ ...ok, tools: ['anything'] }, limits)).not.toThrow();
    const cases: [unknown, string][] = [
      ['echo', 'tools must be an array of tool names'],
      [[3], 'tools must be an array of tool names'],
      [[''], 'tools must be an array of tool names'],
      [['echo', 'echo'], 'tools names echo twice'],
      [['nope'], 'tools names nope, which is not registered'],
    ];
    for (const [tools, message] of cases) {
      expect(refusal(() => checkSendInput({ ...ok, tools: tools as never }, limits, known))).toEqual({
        code: ErrorCode.INVALID_INPUT,
        message,
        details: { field: 'tools' },
      });
    }
  });

  it('T5: each refusal of a send’s signal or a compact’s reference and range says what and which field', () => {
    expect(refusal(() => checkSendInput({ ...ok, signal: 'abort' as never }, limits))).toEqual({
      code: ErrorCode.INVALID_INPUT,
      message: 'signal must be an AbortSignal',
      details: { field: 'signal' },
    });
    const good = { tenantId: 't', principal: 'user', workstreamId: 'ws', throughSeq: 1, summary: 's' };
    expect(refusal(() => checkCompactInput({ ...good, tenantId: '' }, limits)).details).toEqual({
      field: 'tenantId',
    });
    expect(refusal(() => checkCompactInput({ ...good, workstreamId: '/' }, limits)).details).toEqual({
      field: 'workstreamId',
    });
    expect(refusal(() => checkCompactInput({ ...good, throughSeq: 0 }, limits))).toEqual({
      code: ErrorCode.INVALID_INPUT,
      message: 'throughSeq must be a positive integer',
      details: { field: 'throughSeq' },
    });
  });

  it('T5: compact’s commitKey must be a non-empty string when given', () => {
    const good = { tenantId: 't', principal: 'user', workstreamId: 'ws', throughSeq: 1, summary: 's' };
    for (const commitKey of ['', 7, null]) {
      expect(refusal(() => checkCompactInput({ ...good, commitKey } as never, limits))).toEqual({
        code: ErrorCode.INVALID_INPUT,
        message: 'commitKey must be a non-empty string',
        details: { field: 'commitKey' },
      });
    }
  });
});

describe('the bounds of rewind, listWorkstreams, history, deleteWorkstream and close', () => {
  const caller = { tenantId: 't', principal: 'user' };
  const ws = { ...caller, workstreamId: 'w' };
  const field = (fn: () => unknown) => refusal(fn).details;

  it('T5: each call refuses an unknown field, naming the call', () => {
    expect(refusal(() => checkRewindInput({ ...ws, turns: 1, x: 1 } as never)).message).toBe(
      'rewind: unknown field x',
    );
    expect(refusal(() => checkListInput({ ...caller, x: 1 } as never)).message).toBe(
      'listWorkstreams: unknown field x',
    );
    expect(refusal(() => checkDeleteInput({ ...ws, incarnation: 'i', x: 1 } as never)).message).toBe(
      'deleteWorkstream: unknown field x',
    );
    expect(refusal(() => checkCloseInput({ ...ws, x: 1 } as never)).message).toBe('close: unknown field x');
    expect(refusal(() => checkHistoryInput({ ...ws, offset: 1 } as never))).toMatchObject({
      message: 'history: unknown field offset',
      details: { field: 'offset' },
    });
  });

  it('T5: rewind: turns within 1–10000, ifLastSeq a non-negative integer when given', () => {
    expect(() => checkRewindInput({ ...ws, turns: 1 })).not.toThrow();
    expect(() => checkRewindInput({ ...ws, turns: 10_000, ifLastSeq: 0 })).not.toThrow();
    expect(field(() => checkRewindInput({ ...ws, turns: 0 }))).toEqual({ field: 'turns' });
    expect(field(() => checkRewindInput({ ...ws, turns: 10_001 }))).toEqual({ field: 'turns' });
    expect(refusal(() => checkRewindInput({ ...ws, turns: 1, ifLastSeq: -1 }))).toMatchObject({
      code: ErrorCode.INVALID_INPUT,
      message: 'ifLastSeq must be a non-negative integer',
      details: { field: 'ifLastSeq' },
    });
    expect(field(() => checkRewindInput({ ...ws, turns: 1, ifLastSeq: 1.5 }))).toEqual({
      field: 'ifLastSeq',
    });
  });

  it('T5: listWorkstreams: limit within 1–1000 when given, status a known one', () => {
    expect(() => checkListInput({ ...caller })).not.toThrow();
    expect(() => checkListInput({ ...caller, limit: 1, status: 'open' })).not.toThrow();
    expect(() => checkListInput({ ...caller, limit: 1_000, status: 'closed' })).not.toThrow();
    expect(field(() => checkListInput({ ...caller, limit: 0 }))).toEqual({ field: 'limit' });
    expect(field(() => checkListInput({ ...caller, limit: 1_001 }))).toEqual({ field: 'limit' });
    expect(refusal(() => checkListInput({ ...caller, status: 'gone' } as never))).toMatchObject({
      code: ErrorCode.INVALID_INPUT,
      message: "status must be 'open' or 'closed'",
      details: { field: 'status' },
    });
  });

  it('T5: history: limit within 1–1000 when given; a cursor is a string (decoded where the read goes on)', () => {
    expect(() => checkHistoryInput({ ...ws })).not.toThrow();
    expect(() => checkHistoryInput({ ...ws, limit: 1 })).not.toThrow();
    expect(() => checkHistoryInput({ ...ws, limit: 1_000, cursor: 'c' })).not.toThrow();
    for (const limit of [0, 1_001, 1.5, -1, '10', Number.NaN]) {
      expect(refusal(() => checkHistoryInput({ ...ws, limit } as never))).toMatchObject({
        code: ErrorCode.INVALID_INPUT,
        message: 'limit must be an integer from 1 to 1000',
        details: { field: 'limit' },
      });
    }
    expect(field(() => checkHistoryInput({ ...ws, workstreamId: 'a b', limit: 1 }))).toEqual({
      field: 'workstreamId',
    });
  });

  it('T5: deleteWorkstream needs the incarnation as returned (1–256 characters)', () => {
    expect(() => checkDeleteInput({ ...ws, incarnation: 'i' })).not.toThrow();
    expect(() => checkDeleteInput({ ...ws, incarnation: 'i'.repeat(256) })).not.toThrow();
    for (const incarnation of ['', 'i'.repeat(257), 7, undefined]) {
      expect(refusal(() => checkDeleteInput({ ...ws, incarnation } as never))).toMatchObject({
        message: 'incarnation must be the one createWorkstream or getWorkstream returned',
        details: { field: 'incarnation' },
      });
    }
  });

  it('T5: close: waitMs within 0–3600000 when given', () => {
    expect(() => checkCloseInput({ ...ws })).not.toThrow();
    expect(() => checkCloseInput({ ...ws, waitMs: 0 })).not.toThrow();
    expect(() => checkCloseInput({ ...ws, waitMs: 3_600_000 })).not.toThrow();
    expect(field(() => checkCloseInput({ ...ws, waitMs: 3_600_001 }))).toEqual({ field: 'waitMs' });
    expect(field(() => checkCloseInput({ ...ws, waitMs: -1 }))).toEqual({ field: 'waitMs' });
  });
});
