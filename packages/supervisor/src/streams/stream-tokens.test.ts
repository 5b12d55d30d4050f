/**
 * The opaque tokens of the public API (streams.ts) on their own: a history read's handoff (E2),
 * a page's `nextCursor`, and where a subscription starts. Each refusal is INVALID_INPUT naming
 * its field, with the message a host reads; a token of another workstream is refused as such.
 */
import { describe, expect, it } from 'vitest';
import { cursorToken, fromCursor, handoffToken, incarnationDigest, startAt } from './streams.js';

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
const refusal = (field: string, message: string) =>
  expect.objectContaining({ code: 'INVALID_INPUT', details: { field }, message });
const NOT_OURS_HANDOFF = refusal('handoff', 'handoff must be a token returned by history()');
const NOT_OURS_CURSOR = refusal('cursor', 'cursor must be a nextCursor returned by history()');

describe('handoff tokens (E2)', () => {
  it('a token of this workstream starts after its position, without the rows read', () => {
    expect(startAt({ workstreamId: 'w', handoff: handoffToken('w', 7, 3) })).toEqual({
      kind: 'handoff',
      position: 7,
      lastSeq: 3,
    });
    expect(startAt({ workstreamId: 'w', handoff: handoffToken('w', 0, 0) })).toMatchObject({
      position: 0,
      lastSeq: 0,
    });
  });

  it('refuses what is not one of its tokens: not a string, empty, too long, not JSON, not an object, positions that are not integers, a negative seq', () => {
    for (const handoff of [
      42,
      '',
      'x'.repeat(513),
      Buffer.from('not json').toString('base64url'),
      b64(null),
      b64('a string'),
      b64({ w: 'w', s: 1 }),
      b64({ w: 'w', p: 1.5, s: 1 }),
      b64({ w: 'w', p: 1, s: 2.5 }),
      b64({ w: 'w', p: 1 }),
      b64({ w: 'w', p: 1, s: -1 }),
    ]) {
      expect(() => startAt({ workstreamId: 'w', handoff: handoff as string }), String(handoff)).toThrow(
        NOT_OURS_HANDOFF,
      );
    }
  });

  it("refuses another workstream's token as such", () => {
    expect(() => startAt({ workstreamId: 'w', handoff: handoffToken('other', 1, 1) })).toThrow(
      refusal('handoff', 'handoff was returned by the history of another workstream'),
    );
  });
});

describe('where a subscription starts', () => {
  it('live by default; after a last event id (E1), which must be a non-negative integer', () => {
    expect(startAt({ workstreamId: 'w' })).toEqual({ kind: 'live' });
    expect(startAt({ workstreamId: 'w', lastEventId: 0 })).toEqual({ kind: 'after', id: 0 });
    expect(startAt({ workstreamId: 'w', lastEventId: 12 })).toEqual({ kind: 'after', id: 12 });
    for (const lastEventId of [-1, 1.5, Number.NaN, 2 ** 53]) {
      expect(() => startAt({ workstreamId: 'w', lastEventId })).toThrow(
        refusal('lastEventId', 'lastEventId must be a non-negative integer (an event id)'),
      );
    }
  });

  it('refuses a last event id and a handoff together', () => {
    expect(() => startAt({ workstreamId: 'w', lastEventId: 1, handoff: handoffToken('w', 1, 1) })).toThrow(
      refusal('handoff', 'give lastEventId or handoff, not both'),
    );
  });
});

describe('history cursors', () => {
  const cursor = { position: 5, afterSeq: 9, limit: 50, incarnation: incarnationDigest('inc-1') };

  it('a cursor round-trips; the incarnation it holds is a short digest, not the incarnation', () => {
    expect(fromCursor(cursorToken('w', cursor), 'w')).toEqual(cursor);
    expect(incarnationDigest('inc-1')).toHaveLength(16);
    expect(incarnationDigest('inc-1')).not.toBe(incarnationDigest('inc-2'));
    expect(incarnationDigest('inc-1')).not.toContain('inc-1');
  });

  it('refuses what is not one of its cursors', () => {
    const good = { w: 'w', p: 1, s: 1, n: 10, i: 'abc' };
    for (const token of [
      7,
      '',
      'x'.repeat(513),
      Buffer.from('{oops').toString('base64url'),
      b64(null),
      b64({ ...good, p: -1 }),
      b64({ ...good, s: 1.5 }),
      b64({ ...good, n: 0 }),
      b64({ ...good, n: 1_001 }),
      b64({ ...good, i: 5 }),
      b64({ ...good, i: '' }),
    ]) {
      expect(() => fromCursor(token, 'w'), String(token)).toThrow(NOT_OURS_CURSOR);
    }
    expect(() => fromCursor(b64(good), 'other')).toThrow(
      refusal('cursor', 'cursor was returned by the history of another workstream'),
    );
  });
});
