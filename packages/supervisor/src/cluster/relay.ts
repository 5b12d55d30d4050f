/**
 * The event relay (issue 25, item 3): how the events a host authors reach the listeners other
 * hosts hold on the same workstream, under the author's ids, so a client resumes by its last
 * event id on any host (E1 across hosts).
 *
 * A relay carries batches of events per workstream, in the order their author issued them.
 * Two kinds stand behind one interface:
 * - **broadcast** (`ChannelRelay`, the default): every host receives every batch — the store's
 *   own notification channel (PostgreSQL `LISTEN/NOTIFY`, channel `turnwarden_events`). It keeps
 *   nothing: every ring a host holds in memory stays current while the channel is connected, and
 *   a reconnect the ring does not reach is `replay_truncated`.
 * - **log** (a broker, e.g. `@turnwarden/relay-redis`): one log per workstream, followed by the
 *   hosts that hold its stream in memory, retained up to a bound: a host that did not follow the
 *   workstream replays a reconnect from the log (`follow(ws, after)`).
 * A relay that may have lost events says so (`RelaySink.gap`): listeners re-read; never a silent
 * hole.
 */
import type { HistoryRow } from '@turnwarden/protocol';
import type { Logger } from 'pino';
import type { TurnwardenEvent, TurnwardenEventType } from '../streams/events.js';

/** Events one host authored for one workstream, in the order it issued them. */
export interface RelayedBatch {
  /** The author's lease holder: a host skips its own batches. */
  readonly from: string;
  /** The workstream's key (`<tenant>/<id>`). */
  readonly workstreamId: string;
  readonly events: readonly TurnwardenEvent[];
}

/** Events this host authored for one workstream, in order. */
export interface AuthoredBatch {
  readonly workstreamId: string;
  readonly events: readonly TurnwardenEvent[];
}

/** Where a relay delivers what other hosts authored. */
export interface RelaySink {
  /** A batch of a workstream this host follows (every workstream, for a broadcast relay). */
  events(batch: RelayedBatch): void;
  /** Events may have been lost: of one workstream, or of all (a dropped connection). */
  gap(workstreamId?: string): void;
}

/** A relay of events between hosts: the store's channel by default, a broker for larger fleets. */
export interface EventRelay {
  /** Every host receives every workstream's batches (nothing to follow, nothing retained). */
  readonly broadcast: boolean;
  /** Starts delivering to `sink`; `from` is this host's lease holder (its own batches are skipped). */
  start(from: string, sink: RelaySink): Promise<void>;
  /**
   * The events authored here since the last call, per workstream in the order they were issued
   * (the cluster hands them over once a tick). The order per workstream is kept.
   */
  publish(batches: readonly AuthoredBatch[]): void;
  /** Resolves once every event published before the call is in the relay (or was given up: a gap). */
  flush(): Promise<void>;
  /**
   * Delivers this workstream's batches from now on (a log relay; a broadcast one delivers all),
   * first the retained events after `after`. Resolves true when it delivered every event after
   * `after`, false when it cannot say (nothing retained that far, or a relay that keeps nothing).
   */
  follow(workstreamId: string, after: number): Promise<boolean>;
  unfollow(workstreamId: string): void;
  /**
   * The workstream's events after `after` up to `upTo` (a log relay keeps them): a reconnect
   * from further back than a ring that is listened to reaches. Undefined when it cannot give
   * all of them (nothing retained that far, or a relay that keeps nothing).
   */
  read(workstreamId: string, after: number, upTo: number): Promise<readonly unknown[] | undefined>;
  close(): Promise<void>;
}

/**
 * What the default relay needs of the store — and the cluster of it (cluster.ts `ClusterChannel`):
 * its notification channel (delivered after commit) and tail reads.
 */
export interface RelayChannel {
  notify(channel: string, payload: string): Promise<void>;
  listen(
    channel: string,
    onPayload: (payload: string) => void,
    onReconnect?: () => void,
  ): Promise<() => Promise<void>>;
  readHistoryAfter(workstreamId: string, afterSeq: number): Promise<HistoryRow[]>;
}

const EVENTS_CHANNEL = 'turnwarden_events';

/** A notification's payload stays under PostgreSQL's 8,000 bytes. */
const MAX_PAYLOAD = 7_500;
/** A `message` event larger than this travels as its row's seq; the follower reads the row. */
const MAX_INLINE_MESSAGE = 2_000;

const EVENT_TYPES: ReadonlySet<string> = new Set<TurnwardenEventType>([
  'turn_started',
  'state',
  'token',
  'tool_started',
  'tool_finished',
  'message',
  'watchdog_fired',
  'watchdog_declined',
  'turn_aborted',
  'warning',
  'tool_results_synthesized',
  'approval_requested',
  'stream_end',
  'idle',
  'persistence',
  'history_resync',
  'ws_closed',
]);

/** An event on the wire: itself, or (`r`) a `message` whose row the follower reads by seq. */
type Wire =
  | TurnwardenEvent
  | { readonly r: 1; readonly id: number; readonly g?: number; readonly seq: number };

interface Payload {
  readonly f: string;
  /** [workstream key, events] in publication order. */
  readonly b: readonly (readonly [string, readonly Wire[]])[];
}

/**
 * The default relay: batches of every workstream on the store's notification channel. Each tick's
 * events go out in as few notifications as fit (several workstreams share one), in order; a large
 * `message` travels as its seq and is read from the journal by the follower, in its place.
 */
export class ChannelRelay implements EventRelay {
  readonly broadcast = true;
  private from = '';
  /** How every payload this host sends begins: its own are recognised (and skipped) unparsed. */
  private ownPrefix = '{"f":"",';
  private sink: RelaySink | undefined;
  private stopListening: (() => Promise<void>) | undefined;
  /** The notifications sent so far, in order (one connection): `flush` waits for the last. */
  private sent: Promise<void> = Promise.resolve();
  /** Per workstream: batches waiting on a row read, so the next is delivered after them. */
  private readonly reading = new Map<string, Promise<void>>();
  private closed = false;

  constructor(
    private readonly channel: RelayChannel,
    private readonly logger: Logger,
  ) {}

  async start(from: string, sink: RelaySink): Promise<void> {
    this.from = from;
    this.ownPrefix = `{"f":${JSON.stringify(from)},`;
    this.sink = sink;
    this.stopListening = await this.channel.listen(
      EVENTS_CHANNEL,
      (p) => this.receive(p),
      () => sink.gap(),
    );
  }

  publish(batches: readonly AuthoredBatch[]): void {
    if (!this.closed) this.send(batches);
  }

  flush(): Promise<void> {
    return this.sent;
  }

  follow(): Promise<boolean> {
    return Promise.resolve(false);
  }

  unfollow(): void {}

  read(): Promise<undefined> {
    return Promise.resolve(undefined);
  }

  async close(): Promise<void> {
    // What is still on its way goes, unless the channel does not take it within a second.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.sent, new Promise<void>((r) => (timer = setTimeout(r, 1_000)))]);
    clearTimeout(timer);
    this.closed = true;
    await this.stopListening?.();
  }

  private send(batches: readonly AuthoredBatch[]): void {
    // Each event is serialized once, its size counted in bytes (PostgreSQL's bound is in bytes:
    // a token of multi-byte text weighs up to three times its length), and the payload is the
    // JSON of { f, b } assembled from those pieces.
    const payloads: string[] = [];
    let parts: [string, string[]][] = [];
    let bytes = 0;
    const out = () => {
      if (parts.length === 0) return;
      const b = parts.map(([ws, wires]) => `[${ws},[${wires.join(',')}]]`).join(',');
      payloads.push(`${this.ownPrefix}"b":[${b}]}`);
      parts = [];
      bytes = 0;
    };
    for (const { workstreamId, events } of batches) {
      const ws = JSON.stringify(workstreamId);
      let current: string[] = [];
      parts.push([ws, current]);
      bytes += Buffer.byteLength(ws) + 8;
      for (const event of events) {
        let wire = JSON.stringify(toWire(event));
        let size = Buffer.byteLength(wire) + 1;
        if (size > MAX_PAYLOAD - 200) {
          // Never larger than a notification: dropped, and the followers told (a gap, not a hole).
          this.logger.warn({ workstreamId, type: event.type, bytes: size }, 'event too large to relay');
          wire = JSON.stringify({ r: 1, id: event.id, seq: -1 } satisfies Wire);
          size = wire.length + 1;
        }
        if (bytes + size > MAX_PAYLOAD) {
          out();
          current = [];
          parts.push([ws, current]);
          bytes = Buffer.byteLength(ws) + 8;
        }
        current.push(wire);
        bytes += size;
      }
    }
    out();
    for (const payload of payloads) {
      this.sent = this.sent.then(() =>
        this.channel.notify(EVENTS_CHANNEL, payload).catch((err: unknown) => {
          // Followers would miss these: they cannot be told by this channel, which failed. Its
          // reconnect tells them (every listener re-reads); until then the log says so.
          this.logger.warn({ err }, 'events not relayed');
        }),
      );
    }
  }

  private receive(raw: string): void {
    if (this.closed || raw.startsWith(this.ownPrefix)) return; // LISTEN/NOTIFY delivers to the sender too
    const payload = parsePayload(raw);
    if (payload === undefined) {
      this.logger.warn({ payload: raw.slice(0, 200) }, 'malformed relayed events ignored');
      return;
    }
    if (payload.f === this.from) return;
    for (const [ws, wires] of payload.b) {
      const waiting = this.reading.get(ws);
      if (waiting === undefined && wires.every((w) => !('r' in w))) {
        this.sink?.events({ from: payload.f, workstreamId: ws, events: wires as TurnwardenEvent[] });
        continue;
      }
      const next = (waiting ?? Promise.resolve()).then(() => this.resolve(payload.f, ws, wires));
      this.reading.set(ws, next);
      void next.finally(() => {
        if (this.reading.get(ws) === next) this.reading.delete(ws);
      });
    }
  }

  /** A batch with rows to read: read, then delivered whole and in place — or a gap. */
  private async resolve(from: string, ws: string, wires: readonly Wire[]): Promise<void> {
    const refs = wires.filter((w): w is Extract<Wire, { r: 1 }> => 'r' in w);
    const events: TurnwardenEvent[] = [];
    // The events before the first that cannot be delivered are; then the gap.
    const gap = () => {
      if (events.length > 0) this.sink?.events({ from, workstreamId: ws, events });
      this.sink?.gap(ws);
    };
    let rows: HistoryRow[] = [];
    if (refs.every((r) => r.seq >= 1)) {
      try {
        rows = await this.channel.readHistoryAfter(ws, Math.min(...refs.map((r) => r.seq)) - 1);
      } catch (err) {
        this.logger.warn({ err, workstreamId: ws }, 'relayed message not read; listeners re-read');
      }
    }
    const bySeq = new Map(rows.map((r) => [r.seq, r]));
    for (const w of wires) {
      if (!('r' in w)) {
        events.push(w);
        continue;
      }
      const row = bySeq.get(w.seq);
      if (row === undefined) {
        // Too large to relay, not read, or rewritten or deleted since: listeners re-read.
        gap();
        return;
      }
      const message = { seq: row.seq, commitKey: row.commitKey, message: row.message };
      events.push({
        id: w.id,
        workstreamId: ws,
        type: 'message',
        ...(w.g === undefined ? {} : { generation: w.g }),
        data: message,
      });
    }
    this.sink?.events({ from, workstreamId: ws, events });
  }
}

function toWire(event: TurnwardenEvent): Wire {
  if (event.type !== 'message') return event;
  if (JSON.stringify(event.data).length <= MAX_INLINE_MESSAGE) return event;
  return {
    r: 1,
    id: event.id,
    ...(event.generation === undefined ? {} : { g: event.generation }),
    seq: event.data.seq,
  };
}

/** Any database user can NOTIFY: a payload that is not one of ours is dropped, never trusted. */
function parsePayload(raw: string): Payload | undefined {
  let p: unknown;
  try {
    p = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (typeof p !== 'object' || p === null) return undefined;
  const { f, b } = p as { f?: unknown; b?: unknown };
  if (typeof f !== 'string' || !Array.isArray(b)) return undefined;
  for (const batch of b) {
    if (!Array.isArray(batch) || batch.length !== 2) return undefined;
    const [ws, wires] = batch as [unknown, unknown];
    if (typeof ws !== 'string' || ws.length === 0 || !Array.isArray(wires)) return undefined;
    for (const w of wires) if (!validWire(w)) return undefined;
  }
  return p as Payload;
}

export function validEvent(e: unknown): e is TurnwardenEvent {
  if (typeof e !== 'object' || e === null) return false;
  const v = e as Record<string, unknown>;
  return (
    Number.isSafeInteger(v.id) &&
    (v.id as number) > 0 &&
    typeof v.type === 'string' &&
    EVENT_TYPES.has(v.type) &&
    (v.generation === undefined || Number.isSafeInteger(v.generation)) &&
    typeof v.data === 'object' &&
    v.data !== null
  );
}

function validWire(w: unknown): boolean {
  if (typeof w === 'object' && w !== null && (w as { r?: unknown }).r === 1) {
    const v = w as Record<string, unknown>;
    return (
      Number.isSafeInteger(v.id) &&
      Number.isSafeInteger(v.seq) &&
      (v.g === undefined || Number.isSafeInteger(v.g))
    );
  }
  return validEvent(w);
}
