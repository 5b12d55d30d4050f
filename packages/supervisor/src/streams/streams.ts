/**
 * What the public API adds to the event hub: history-handoff tokens (E2), the cursors of a history
 * read a page at a time (which carry the handoff's position from page to page), and the async
 * iterator form of a subscription, bounded, with backpressure and an AbortSignal (E3).
 */
import { createHash } from 'node:crypto';
import { Bounds, inBound, Lengths, ofLength } from '@turnwarden/protocol';
import { invalid } from '../input.js';
import type { StartAt, TurnwardenEvent } from './events.js';

/** Mints the opaque handoff token of a history read: the stream position, the rows it returned. */
export function handoffToken(workstreamId: string, position: number, lastSeq: number): string {
  return Buffer.from(JSON.stringify({ w: workstreamId, p: position, s: lastSeq })).toString('base64url');
}

/** Where a listener registered with `token` starts; INVALID_INPUT (field `handoff`) when it is not one of ours. */
function fromHandoff(token: unknown, workstreamId: string): StartAt {
  if (!ofLength(token, Lengths.handoff)) {
    throw invalid('handoff must be a token returned by history()', 'handoff');
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  } catch {
    throw invalid('handoff must be a token returned by history()', 'handoff');
  }
  const t = parsed as { w?: unknown; p?: unknown; s?: unknown };
  if (
    typeof parsed !== 'object' ||
    parsed === null ||
    !Number.isSafeInteger(t.p) ||
    !Number.isSafeInteger(t.s) ||
    (t.s as number) < 0
  ) {
    throw invalid('handoff must be a token returned by history()', 'handoff');
  }
  if (t.w !== workstreamId)
    throw invalid('handoff was returned by the history of another workstream', 'handoff');
  return { kind: 'handoff', position: t.p as number, lastSeq: t.s as number };
}

/**
 * Where a history read a page at a time goes on. `position` is the stream position taken before
 * its *first* page, carried to the last, whose handoff token holds it: an event after it — a row
 * announced, a rewrite's `history_resync` — while the pages were read reaches the listener (E2).
 */
export interface HistoryCursor {
  /** The stream position before the first page (E2). */
  readonly position: number;
  /** The last seq read: the next page starts after it. */
  readonly afterSeq: number;
  /** The page size, the next page's unless it names its own. */
  readonly limit: number;
  /** A digest of the incarnation read (D1): a workstream created again is not read on. */
  readonly incarnation: string;
}

/** The digest of an incarnation a cursor holds: short (a cursor's length is bounded), not the token. */
export function incarnationDigest(incarnation: string): string {
  return createHash('sha256').update(incarnation).digest('base64url').slice(0, 16);
}

/** Mints the opaque `nextCursor` of a history page. */
export function cursorToken(workstreamId: string, cursor: HistoryCursor): string {
  const { position: p, afterSeq: s, limit: n, incarnation: i } = cursor;
  return Buffer.from(JSON.stringify({ w: workstreamId, p, s, n, i })).toString('base64url');
}

/**
 * A `nextCursor` of this workstream's history, decoded before anything is read; INVALID_INPUT
 * (field `cursor`) when it is not one of ours, or another workstream's (T5).
 */
export function fromCursor(token: unknown, workstreamId: string): HistoryCursor {
  const refused = () => invalid('cursor must be a nextCursor returned by history()', 'cursor');
  if (!ofLength(token, Lengths.cursor)) throw refused();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  } catch {
    throw refused();
  }
  const t = (typeof parsed === 'object' && parsed !== null ? parsed : {}) as Record<string, unknown>;
  if (
    !inBound(t.p, { min: 0, max: Number.MAX_SAFE_INTEGER }) ||
    !inBound(t.s, { min: 0, max: Number.MAX_SAFE_INTEGER }) ||
    !inBound(t.n, Bounds.historyLimit) ||
    typeof t.i !== 'string' ||
    t.i.length === 0
  ) {
    throw refused();
  }
  if (t.w !== workstreamId)
    throw invalid('cursor was returned by the history of another workstream', 'cursor');
  return { position: t.p, afterSeq: t.s, limit: t.n, incarnation: t.i };
}

/** E1: where a listener reconnecting with the last event id it saw starts. */
function fromLastEventId(id: unknown): StartAt {
  if (!Number.isSafeInteger(id) || (id as number) < 0) {
    throw invalid('lastEventId must be a non-negative integer (an event id)', 'lastEventId');
  }
  return { kind: 'after', id: id as number };
}

/** Where a subscription starts: live, after `lastEventId` (E1) or after a history read (E2). */
export function startAt(input: {
  readonly workstreamId: string;
  readonly lastEventId?: number;
  readonly handoff?: string;
}): StartAt {
  if (input.lastEventId !== undefined && input.handoff !== undefined) {
    throw invalid('give lastEventId or handoff, not both', 'handoff');
  }
  if (input.lastEventId !== undefined) return fromLastEventId(input.lastEventId);
  if (input.handoff !== undefined) return fromHandoff(input.handoff, input.workstreamId);
  return { kind: 'live' };
}

/**
 * A subscription read as an async iterator. Events wait in a buffer of at most `limit`; a
 * reader that falls further behind receives `stream_overflow` and the iteration ends (E3). It
 * also ends after `ws_closed`, when `signal` aborts, or when the reader returns early.
 */
export class EventIterator implements AsyncIterableIterator<TurnwardenEvent> {
  private readonly buffer: TurnwardenEvent[] = [];
  private waiting: ((r: IteratorResult<TurnwardenEvent>) => void) | undefined;
  private ended = false;
  private unsubscribe: () => void = () => {};
  /** The subscription (its ownership check): the first `next()` waits for it, so a refusal reaches the reader. */
  private subscribed: Promise<unknown> | undefined;
  private readonly onAbort = () => this.end();

  constructor(
    private readonly limit: number,
    private readonly signal: AbortSignal | undefined,
  ) {
    if (signal?.aborted) this.ended = true;
    else signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  /** The subscription feeding `push` (it may deliver before it resolves). */
  attach(subscription: Promise<() => void>): void {
    this.subscribed = subscription.then(
      (unsubscribe) => {
        if (this.ended) unsubscribe();
        else this.unsubscribe = unsubscribe;
      },
      (err: unknown) => {
        this.end();
        throw err;
      },
    );
    this.subscribed.catch(() => {});
  }

  /** The subscription's listener. */
  readonly push = (event: TurnwardenEvent): void => {
    if (this.ended) return;
    const terminal = event.type === 'ws_closed';
    if (this.waiting !== undefined) {
      const resolve = this.waiting;
      this.waiting = undefined;
      resolve({ value: event, done: false });
    } else if (this.buffer.length >= this.limit) {
      this.buffer.push({
        id: event.id,
        workstreamId: event.workstreamId,
        type: 'stream_overflow',
        data: { limit: this.limit },
      });
      this.end(false);
      return;
    } else {
      this.buffer.push(event);
    }
    if (terminal) this.end(false);
  };

  /** Ends the iteration: what is buffered is still read (unless `drop`), then `done`. */
  end(drop = true): void {
    if (this.ended && this.waiting === undefined) return;
    this.ended = true;
    if (drop) this.buffer.length = 0;
    this.signal?.removeEventListener('abort', this.onAbort);
    this.unsubscribe();
    const resolve = this.waiting;
    this.waiting = undefined;
    resolve?.({ value: undefined, done: true });
  }

  async next(): Promise<IteratorResult<TurnwardenEvent>> {
    const subscribed = this.subscribed;
    if (subscribed !== undefined) {
      this.subscribed = undefined;
      await subscribed;
    }
    const event = this.buffer.shift();
    if (event !== undefined) return { value: event, done: false };
    if (this.ended) return { value: undefined, done: true };
    return new Promise((resolve) => {
      this.waiting = resolve;
    });
  }

  return(): Promise<IteratorResult<TurnwardenEvent>> {
    this.end();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<TurnwardenEvent> {
    return this;
  }
}
