/**
 * The rules of a history rewrite on their own (rewrite-rules.ts), as both stores apply them:
 * when a compaction or a rewind is written, when it was applied already, and each refusal with
 * its code, message and details (L8, C6, S1, P1).
 */
import type { HistoryRow } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { compactionToWrite, rewindToWrite } from './rewrite-rules.js';
import { assistant, toolResult, user } from './test-support/fixtures.js';

const rows =
  (...entries: Pick<HistoryRow, 'commitKey' | 'message'>[]) =>
  () =>
    entries;
const summary = { commitKey: 'sum', message: { role: 'system' as const, content: 'summary' } };
const history = rows(user('u1'), assistant('a1', ['c1']), toolResult('t1', 'c1', 0), user('u2'));

describe('compactionToWrite (L8)', () => {
  it('writes a cut that keeps every call with its result; a cut through the whole history too', () => {
    expect(compactionToWrite('w', summary, 1, undefined, history)).toBe(true);
    expect(compactionToWrite('w', summary, 3, undefined, history)).toBe(true);
    expect(compactionToWrite('w', summary, 4, undefined, history)).toBe(true);
  });

  it('P1: a summary already stored under its key is applied already; another row under the key is a conflict', () => {
    let read = false;
    const rowsRead = () => {
      read = true;
      return history();
    };
    expect(compactionToWrite('w', summary, 99, JSON.stringify(summary.message), rowsRead)).toBe(false);
    expect(read).toBe(false);
    expect(() =>
      compactionToWrite('w', summary, 1, JSON.stringify({ role: 'system', content: 'other' }), rowsRead),
    ).toThrow(
      expect.objectContaining({
        code: 'COMMIT_CONFLICT',
        message: 'commit key sum of workstream w already holds a different row',
        details: { workstreamId: 'w', commitKey: 'sum' },
      }),
    );
  });

  it('refuses a cut outside the history, naming throughSeq', () => {
    for (const throughSeq of [0, 5]) {
      expect(() => compactionToWrite('w', summary, throughSeq, undefined, history)).toThrow(
        expect.objectContaining({
          code: 'INVALID_INPUT',
          message: `throughSeq ${throughSeq} is outside 1..4`,
          details: { field: 'throughSeq' },
        }),
      );
    }
  });

  it('S1: refuses a cut that leaves a call open in the prefix, or a result first among the kept rows', () => {
    for (const throughSeq of [2]) {
      expect(() => compactionToWrite('w', summary, throughSeq, undefined, history)).toThrow(
        expect.objectContaining({
          code: 'STRUCTURE_VIOLATION',
          message: `workstream w: compacting through seq ${throughSeq} would separate tool calls from their results`,
          details: { workstreamId: 'w', throughSeq },
        }),
      );
    }
    // Two results: a cut between them leaves the call closed by neither side alone.
    const twoCalls = rows(
      user('u1'),
      assistant('a1', ['c1', 'c2']),
      toolResult('t1', 'c1', 0),
      toolResult('t2', 'c2', 1),
    );
    expect(() => compactionToWrite('w', summary, 3, undefined, twoCalls)).toThrow(
      expect.objectContaining({ code: 'STRUCTURE_VIOLATION' }),
    );
  });
});

describe('rewindToWrite (C6)', () => {
  it('writes a rewind to a row that holds its key, keeping no open call', () => {
    expect(rewindToWrite('w', 4, 'u2', 4, 4, () => history().slice(0, 3))).toBe(true);
    expect(rewindToWrite('w', 2, 'a1', 4, 2, () => history().slice(0, 1))).toBe(true);
  });

  it('a history that already ends before the cut, without the key, is applied already', () => {
    let read = false;
    expect(
      rewindToWrite('w', 4, 'u2', 3, undefined, () => {
        read = true;
        return [];
      }),
    ).toBe(false);
    expect(read).toBe(false);
  });

  it('a row that does not hold the key, or a key at another seq, is a conflict naming the history’s end', () => {
    for (const [lastSeq, keySeq] of [
      [4, undefined],
      [4, 3],
      [2, undefined],
    ] as const) {
      expect(() => rewindToWrite('w', 4, 'u2', lastSeq, keySeq, history)).toThrow(
        expect.objectContaining({
          code: 'COMMIT_CONFLICT',
          message: 'workstream w: the history changed since the rewind was planned (row 4 does not hold u2)',
          details: { workstreamId: 'w', fromSeq: 4, fromKey: 'u2', lastSeq },
        }),
      );
    }
  });

  it('S1: refuses a rewind whose kept rows end with a call without its result', () => {
    expect(() => rewindToWrite('w', 3, 't1', 4, 3, () => history().slice(0, 2))).toThrow(
      expect.objectContaining({
        code: 'STRUCTURE_VIOLATION',
        message: 'workstream w: rewinding to seq 3 would leave a tool call without its result',
        details: { workstreamId: 'w', fromSeq: 3 },
      }),
    );
  });
});
