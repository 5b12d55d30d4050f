/**
 * (Over 300 lines on purpose: ids, the replay ring, handoff filtering and the terminal quiesce
 * are one stream's state, read and written in one synchronous step per event — E1–E3, D6.)
 *
 * Event streams, per workstream.
 *
 * **Ids (E1).** One clock for the process, in microseconds: each id is the wall clock's, or one
 * above the last id when the clock has not moved past it. Ids increase monotonically within a
 * workstream (and across workstreams); a process that restarts continues above the ids its
 * predecessor handed out, and hosts whose clocks agree issue ids in the order they issue them
 * (unless a wall clock went back).
 *
 * **Relay (E1 across hosts, issue 25).** In cluster mode every event authored here is handed to
 * the relay (`HubRelay.authored`), and the events other hosts authored come back through
 * `relayed`, with their author's id: each host's ring of a workstream holds the same events under
 * the same ids, so a client resumes by its last event id on any host. The clock takes every
 * relayed id in (ids issued here afterwards are above it). A relayed event at or below the last
 * id of its stream (hosts' clocks apart by more than a turn's handoff) cannot be placed: the
 * listeners get `history_resync` (`replay_truncated`) and re-read, never a duplicate; so they do
 * when the relay lost events (`gap`).
 *
 * **Replay (E1).** Each workstream's recent events are kept in a bounded ring; the ring knows
 * after which id it is complete. A listener that registers with the last id it saw receives
 * what it missed, then the live stream; when the ring no longer reaches back that far it
 * receives `replay_truncated` instead. So does one whose id is above any this process issued: a
 * predecessor's, whose wall clock ran ahead of this one's — what followed it is not known here,
 * and replaying nothing would tell the client it missed nothing. Rings of workstreams nobody listens to are dropped, the
 * least recently active first, beyond `events.maxIdleStreams`: memory is bounded (E3).
 *
 * **Handoff (E2).** A history read captures the stream's position *before* it reads; a listener
 * registered with that position and the read's last seq receives every event after the
 * position except the `message` events of rows the read already returned — no gap, no
 * duplicate — or, when the ring no longer reaches back, `history_resync`.
 *
 * **Terminal quiesce (D6).** `closeWorkstream` delivers `ws_closed` to every listener and
 * removes them; the ring remembers it, so a listener registering afterwards — by any path — is
 * closed at once.
 *
 * **Names.** Streams are kept by workstream key (`<tenant>/<id>`, T2); an event names its workstream
 * by the id its tenant gave (`workstreamId`), as every answer of the API does.
 *
 * Registration, replay and the start of live delivery happen in one synchronous step: nothing
 * emitted in between is lost or delivered twice. A listener that throws is logged and kept.
 */
import {
  type AbortReason,
  type HistoryMessage,
  keyWorkstreamId,
  type SessionState,
  type TurnStatus,
} from '@turnwarden/protocol';
import type { Logger } from 'pino';
import type { EventsConfig } from '../config.js';
import type { StallBound } from '../liveness/watchdog.js';
import type { ApprovalRequest, PersistenceStatus } from '../types.js';

/** What each event type carries. Nothing internal: no clock slots, sampled versions or leases. */
export interface EventData {
  /** A turn was claimed and dispatched to a worker. */
  turn_started: { readonly workerId: number };
  /** The session machine moved. */
  state: { readonly state: SessionState };
  /** Streamed text. */
  token: { readonly text: string };
  tool_started: { readonly callIndex: number; readonly id: string; readonly name: string };
  tool_finished: { readonly callIndex: number; readonly isError: boolean };
  /** A row became durable, at `seq`. */
  message: { readonly seq: number; readonly commitKey: string; readonly message: HistoryMessage };
  /** Observational stage of the watchdog (L5): a stall was seen; it may still decline. */
  watchdog_fired: { readonly bound: StallBound; readonly idleMs: number; readonly lastActivity: string };
  watchdog_declined: { readonly why: string };
  /** The abort committed (definitive stage). */
  turn_aborted: { readonly reason: AbortReason };
  /** Text for the user; the definitive one only after the abort committed. */
  warning: { readonly stage: 'observational' | 'definitive'; readonly message: string };
  tool_results_synthesized: { readonly count: number };
  /**
   * The turn's call waits for a person's approval (issue 26): decide it with `token` (`approve`,
   * `deny`) before `expiresAt`, or it is denied. The turn's `stream_end` follows; no `idle`.
   */
  approval_requested: ApprovalRequest;
  stream_end: { readonly status: TurnStatus };
  /** The workstream accepts the next message. */
  idle: Record<string, never>;
  /** The journal's status changed (P3). */
  persistence: PersistenceStatus;
  /**
   * What a listener shows of the history is stale: re-read it. `rewritten`: a compaction or
   * rewind; `workstream_gone`: deleted under its session (P5); `replay_truncated`: a handoff
   * whose position the ring no longer reaches (E2).
   */
  history_resync: { readonly reason: 'rewritten' | 'workstream_gone' | 'replay_truncated' };
  /** A reconnect asked for events after `after`; the ring starts later (E1). Sent to that listener only. */
  replay_truncated: { readonly after: number; readonly firstAvailable: number };
  /** The listener fell `limit` events behind and was closed (E3). Sent to that listener only. */
  stream_overflow: { readonly limit: number };
  /** The workstream closed (or was deleted); the listener is removed (D6). */
  ws_closed: { readonly reason: 'closed' | 'deleted' };
}

export type TurnwardenEventType = keyof EventData;

/** One event: a discriminated union on `type`. */
export type TurnwardenEvent = {
  [K in TurnwardenEventType]: {
    /** Monotonic per workstream (E1). */
    readonly id: number;
    readonly workstreamId: string;
    readonly type: K;
    readonly generation?: number;
    readonly data: EventData[K];
  };
}[TurnwardenEventType];

export type Listener = (event: TurnwardenEvent) => void;

/** What the event streams hold in memory (E3). */
export interface EventStats {
  /** Workstreams with a replay ring. */
  readonly streams: number;
  readonly listeners: number;
  /** Events held in replay rings, over all streams. */
  readonly buffered: number;
}

/** Where a new listener starts. */
export type StartAt =
  | { readonly kind: 'live' }
  /** E1: after the last event id this client saw. */
  | { readonly kind: 'after'; readonly id: number }
  /** E2: after a history read's position, without the rows it returned. */
  | { readonly kind: 'handoff'; readonly position: number; readonly lastSeq: number };

/** What the hub tells the relay (cluster mode): the events authored here, its streams in memory. */
export interface HubRelay {
  /** An event authored here, in the order of its stream. */
  authored(workstreamId: string, event: TurnwardenEvent): void;
  /** A stream came into memory, holding every event after `after` from now on. */
  opened(workstreamId: string, after: number): void;
  /** A stream left memory. */
  dropped(workstreamId: string): void;
}

/**
 * A log relay's events of a workstream after `after` up to `upTo` (cluster.ts `catchUp`): they
 * bridge a reconnect from `after` to a ring complete from `upTo` on (or earlier).
 */
export interface Earlier {
  readonly after: number;
  readonly upTo: number;
  readonly events: readonly TurnwardenEvent[];
}

/** `completeAfter` of a stream whose relayed events have a gap, until the next one arrives. */
const GAP = Number.MAX_SAFE_INTEGER;

/**
 * Consecutive `token` events of one generation, kept compact in the ring: their ids and texts,
 * not an object each. A thousand streaming sessions hold hundreds of thousands of recent tokens;
 * as objects they filled the supervisor's heap and its collections paused the thread (L12). The
 * events are rebuilt, equal to those delivered live, when a reconnect replays them.
 */
class TokenRun {
  readonly ids: number[] = [];
  readonly texts: string[] = [];
  /** Events before this index were dropped from the ring (the oldest go first). */
  start = 0;

  constructor(readonly generation: number | undefined) {}

  get size(): number {
    return this.ids.length - this.start;
  }
}

type RingEntry = TurnwardenEvent | TokenRun;

class Stream {
  readonly listeners = new Set<Listener>();
  /** Recent events, oldest first, at most `replayLimit` (a run of tokens counts each). */
  readonly ring: RingEntry[] = [];
  /** Events in the ring. */
  size = 0;
  /** The ring holds every event of the workstream with an id above this (GAP: none, for now). */
  completeAfter: number;
  /** The id of the stream's last event (or where it began). */
  lastId: number;
  /** The seq of the last row announced (`message`), 0 before the first or after a rewrite. */
  lastSeq = 0;
  /** `ws_closed` was emitted: later registrations are closed at once (D6). */
  closed: TurnwardenEvent | undefined;
  /** The workstream's id as its tenant names it: its events carry it. */
  readonly workstreamId: string;

  constructor(
    /** Where the stream began: relayed events at or below it came before it, and are not its. */
    readonly openedAfter: number,
    /** The workstream's key (`<tenant>/<id>`): the hub's and the relay's name for it. */
    readonly key: string,
  ) {
    this.workstreamId = keyWorkstreamId(key);
    this.completeAfter = openedAfter;
    this.lastId = openedAfter;
  }
}

export class EventHub {
  private nextId = Date.now() * 1000;
  private readonly streams = new Map<string, Stream>();
  /** Streams nobody listens to, least recently active first (E3). */
  private readonly idle = new Map<string, Stream>();
  private readonly limits: EventsConfig;
  private relay: HubRelay | undefined;

  constructor(
    private readonly logger: Logger,
    limits: Partial<EventsConfig> = {},
  ) {
    this.limits = { replayLimit: 1_024, maxIdleStreams: 1_000, listenerBuffer: 1_024, ...limits };
  }

  /** Cluster mode: events authored here go to a relay (`relayTo`). */
  get relaying(): boolean {
    return this.relay !== undefined;
  }

  /** Cluster mode: the events authored here go to `relay`, and it hears of the streams in memory. */
  relayTo(relay: HubRelay): void {
    this.relay = relay;
    for (const [id, stream] of this.streams) relay.opened(id, stream.lastId);
  }

  /**
   * An event another host authored (cluster mode), under its author's id: kept and delivered as
   * if emitted here, when this host has the workstream's stream in memory (nobody here listens
   * to it otherwise). One at or below the stream's last id cannot be placed in order: `gap`.
   */
  relayed(workstreamId: string, event: TurnwardenEvent): void {
    // Every relayed id, kept or not: a stream opened later begins after it.
    if (event.id > this.nextId) this.nextId = event.id;
    const stream = this.streams.get(workstreamId);
    if (stream === undefined || stream.closed !== undefined) return;
    if (event.id <= stream.openedAfter) return; // from before this stream began
    if (event.id <= stream.lastId) {
      this.logger.warn(
        { workstreamId, id: event.id, lastId: stream.lastId },
        'relayed event out of order (host clocks apart?); listeners re-read',
      );
      this.gapIn(stream);
      return;
    }
    if (event.type === 'message' && stream.lastSeq > 0 && event.data.seq > stream.lastSeq + 1) {
      // A row whose event never came (its author died between its commit and the relay): the
      // listeners re-read; the ring goes on from this event.
      this.logger.warn(
        { workstreamId, seq: event.data.seq, lastSeq: stream.lastSeq },
        'relayed rows missing (their host stopped before it relayed them); listeners re-read',
      );
      this.gapIn(stream);
    }
    if (stream.completeAfter === GAP) stream.completeAfter = event.id - 1;
    // Named as this host names it (the author's name is the same; a broker's copy may not be).
    const own =
      event.workstreamId === stream.workstreamId
        ? event
        : ({ ...event, workstreamId: stream.workstreamId } as TurnwardenEvent);
    if (own.type === 'ws_closed') {
      this.place(stream, own, false);
      this.terminal(workstreamId, stream, own);
      return;
    }
    if (stream.listeners.size === 0) {
      // The most recently active of the idle ones.
      this.idle.delete(workstreamId);
      this.idle.set(workstreamId, stream);
    }
    this.place(stream, own, true);
  }

  /**
   * The relay may have lost events of these workstreams (all, when none named): their listeners
   * get `history_resync` (`replay_truncated`) and re-read; a reconnect after an id before the
   * next relayed event gets `replay_truncated` (E1). Streams for which `authored(ws)` holds
   * are left alone: their events are issued here.
   */
  gap(authored: (workstreamId: string) => boolean = () => false): void {
    for (const [id, stream] of this.streams) if (!authored(id)) this.gapIn(stream);
  }

  /**
   * Cluster mode, a reconnect after `after` that the ring does not reach: when nobody listens to
   * the stream here, it begins again after `after`, for the relay to fill. False when it cannot
   * (listened to, or closed): the reconnect is then `replay_truncated`.
   */
  restart(workstreamId: string, after: number): boolean {
    const stream = this.streams.get(workstreamId);
    if (stream !== undefined && (stream.listeners.size > 0 || stream.closed !== undefined)) return false;
    if (stream !== undefined) this.relay?.dropped(workstreamId);
    const fresh = new Stream(after, workstreamId);
    this.streams.set(workstreamId, fresh);
    this.idle.delete(workstreamId);
    this.idle.set(workstreamId, fresh);
    this.relay?.opened(workstreamId, after);
    this.evictIdle();
    return true;
  }

  /** An id the relay holds (its log's last): the clock takes it in, as it does relayed events'. */
  saw(id: number): void {
    if (id > this.nextId) this.nextId = id;
  }

  /**
   * Where the ring of a workstream this host holds is complete from (its events after this id),
   * when a relay could bridge a reconnect from further back to it; undefined when none can.
   */
  ringFrom(workstreamId: string): number | undefined {
    const stream = this.streams.get(workstreamId);
    return stream === undefined || stream.completeAfter === GAP ? undefined : stream.completeAfter;
  }

  /** Whether a listener registering after `after` would be replayed all it missed (E1, E2). */
  covers(workstreamId: string, after: number): boolean {
    const stream = this.streams.get(workstreamId);
    return stream !== undefined && this.reaches(stream, after);
  }

  emit<K extends TurnwardenEventType>(
    workstreamId: string,
    type: K,
    generation: number | undefined,
    data: EventData[K],
  ): TurnwardenEvent {
    return this.append(this.streamOf(workstreamId, true), type, generation, data);
  }

  /**
   * Registers a listener: what it missed (per `from`) is delivered first, synchronously, then
   * live events. Returns the function that removes it. A closed workstream's listener receives
   * `ws_closed` at once and is not kept (D6).
   */
  subscribe(
    workstreamId: string,
    listener: Listener,
    from: StartAt = { kind: 'live' },
    earlier?: Earlier,
  ): () => void {
    if (from.kind === 'handoff') listener = this.withoutRowsRead(listener, from.lastSeq);
    const stream = this.streamOf(workstreamId, false);
    if (from.kind !== 'live') this.replay(stream, listener, from, earlier);
    if (stream.closed !== undefined) {
      // A replay may have delivered the notice already.
      const told = from.kind !== 'live' && this.replayed(stream, from, earlier);
      if (this.closeLate(listener, () => (told ? undefined : stream.closed))) {
        this.evictIdle();
        return () => {};
      }
    }
    stream.listeners.add(listener);
    this.idle.delete(workstreamId);
    this.evictIdle();
    return () => {
      if (!stream.listeners.delete(listener) || stream.listeners.size > 0) return;
      if (this.streams.get(workstreamId) !== stream) return;
      this.idle.set(workstreamId, stream);
      this.evictIdle();
    };
  }

  /** The id of the workstream's last event: a history read's handoff position (E2). */
  position(workstreamId: string): number {
    this.streamOf(workstreamId, false);
    this.evictIdle();
    return this.nextId;
  }

  /** Terminal quiesce: every listener receives `ws_closed`, then is removed (D6). */
  closeWorkstream(workstreamId: string, data: EventData['ws_closed']): void {
    const stream = this.streamOf(workstreamId, true);
    this.terminal(workstreamId, stream, this.append(stream, 'ws_closed', undefined, data));
  }

  /**
   * D6: a listener registering after `ws_closed` is closed at once and not kept: `off` removes
   * what registration it has, then it receives the notice (none when a replay delivered it).
   * Also for a workstream whose stream left memory since: the facade learns of its close from
   * the store. True: it was closed.
   */
  closeLate(
    listener: Listener,
    notice: () => TurnwardenEvent | undefined,
    off: () => void = () => {},
  ): boolean {
    off();
    const closed = notice();
    if (closed !== undefined) this.deliver(listener, closed);
    return true;
  }

  /** A workstream created (again) under the id: a fresh stream, not the closed one's (D4, D6). */
  reopen(workstreamId: string): void {
    if (this.streams.get(workstreamId)?.closed === undefined) return;
    this.streams.delete(workstreamId);
    this.idle.delete(workstreamId);
    this.relay?.dropped(workstreamId);
  }

  listenerCount(workstreamId: string): number {
    return this.streams.get(workstreamId)?.listeners.size ?? 0;
  }

  /** Streams (replay rings) in memory, listened to or not, and their listeners (E3). */
  stats(): EventStats {
    let listeners = 0;
    let buffered = 0;
    for (const s of this.streams.values()) {
      listeners += s.listeners.size;
      buffered += s.size;
    }
    return { streams: this.streams.size, listeners, buffered };
  }

  /** The buffer limit of `events()` iterators (E3). */
  get listenerBuffer(): number {
    return this.limits.listenerBuffer;
  }

  private append<K extends TurnwardenEventType>(
    stream: Stream,
    type: K,
    generation: number | undefined,
    data: EventData[K],
  ): TurnwardenEvent {
    const now = Math.floor((performance.timeOrigin + performance.now()) * 1000);
    const id = this.nextId >= now ? this.nextId + 1 : now;
    this.nextId = id;
    const { workstreamId } = stream;
    const event = (
      generation === undefined
        ? { id, workstreamId, type, data }
        : { id, workstreamId, type, generation, data }
    ) as TurnwardenEvent;
    this.relay?.authored(stream.key, event);
    this.place(stream, event, type !== 'ws_closed');
    return event;
  }

  /** Into the ring (at its end: `event.id` is above every id in it), then to the listeners. */
  private place(stream: Stream, event: TurnwardenEvent, evict: boolean): void {
    stream.lastId = event.id;
    if (event.type === 'message') stream.lastSeq = event.data.seq;
    else if (event.type === 'history_resync') stream.lastSeq = 0;
    this.keep(stream, event);
    while (stream.size > this.limits.replayLimit) this.dropOldest(stream);
    for (const listener of [...stream.listeners]) this.deliver(listener, event);
    if (evict) this.evictIdle();
  }

  /** D6: the stream's `ws_closed`: every listener removed, the stream idle, the most recently active. */
  private terminal(workstreamId: string, stream: Stream, closed: TurnwardenEvent): void {
    stream.closed = closed;
    stream.listeners.clear();
    this.idle.delete(workstreamId);
    this.idle.set(workstreamId, stream);
    this.evictIdle();
  }

  /** Listeners re-read (`history_resync`, under the last id: it takes no id of its own); no reconnect before the next event is served from the ring. */
  private gapIn(stream: Stream): void {
    stream.completeAfter = GAP;
    stream.lastSeq = 0;
    const notice = {
      id: stream.lastId,
      workstreamId: stream.workstreamId,
      type: 'history_resync',
      data: { reason: 'replay_truncated' },
    } as const;
    for (const listener of [...stream.listeners]) this.deliver(listener, notice);
  }

  private replay(
    stream: Stream,
    listener: Listener,
    from: Exclude<StartAt, { kind: 'live' }>,
    earlier: Earlier | undefined,
  ): void {
    const { workstreamId } = stream;
    const after = from.kind === 'after' ? from.id : from.position;
    if (!this.reaches(stream, after) && this.bridges(stream, after, earlier)) {
      // The relay's events from `after` to where the ring is complete, then the ring.
      for (const e of earlier!.events) {
        if (e.id > after && e.id <= stream.completeAfter)
          this.deliver(listener, { ...e, workstreamId } as TurnwardenEvent);
      }
      this.replayRing(stream, listener, stream.completeAfter);
      return;
    }
    if (!this.reaches(stream, after)) {
      const id = this.nextId;
      this.deliver(
        listener,
        from.kind === 'after'
          ? {
              id,
              workstreamId,
              type: 'replay_truncated',
              data: { after, firstAvailable: this.firstAvailable(stream) },
            }
          : { id, workstreamId, type: 'history_resync', data: { reason: 'replay_truncated' } },
      );
      return;
    }
    this.replayRing(stream, listener, after);
  }

  /** Whether `earlier` holds every event from `after` to where the ring is complete. */
  private bridges(stream: Stream, after: number, earlier: Earlier | undefined): boolean {
    return (
      earlier !== undefined &&
      earlier.after === after &&
      stream.completeAfter !== GAP &&
      after < stream.completeAfter &&
      earlier.upTo >= stream.completeAfter
    );
  }

  /** The ring's events after `after`, in order. */
  private replayRing(stream: Stream, listener: Listener, after: number): void {
    const { workstreamId } = stream;
    for (const entry of stream.ring) {
      if (!(entry instanceof TokenRun)) {
        if (entry.id > after) this.deliver(listener, entry);
        continue;
      }
      for (let i = entry.start; i < entry.ids.length; i++) {
        const id = entry.ids[i]!;
        if (id <= after) continue;
        const token = { id, workstreamId, type: 'token', data: { text: entry.texts[i]! } } as const;
        this.deliver(
          listener,
          (entry.generation === undefined
            ? token
            : { ...token, generation: entry.generation }) as TurnwardenEvent,
        );
      }
    }
  }

  /** The id of the first event a reconnect can be replayed (one above the last, when none is). */
  private firstAvailable(stream: Stream): number {
    if (stream.completeAfter === GAP) return stream.lastId + 1;
    const first = stream.ring[0];
    if (first === undefined) return stream.lastId + 1;
    return first instanceof TokenRun ? first.ids[first.start]! : first.id;
  }

  /** Into the ring: a token joins the run of its generation's tokens it follows, or starts one. */
  private keep(stream: Stream, event: TurnwardenEvent): void {
    stream.size++;
    if (event.type !== 'token') {
      stream.ring.push(event);
      return;
    }
    const last = stream.ring.at(-1);
    const run =
      last instanceof TokenRun && last.generation === event.generation
        ? last
        : new TokenRun(event.generation);
    if (run !== last) stream.ring.push(run);
    run.ids.push(event.id);
    run.texts.push(event.data.text);
  }

  /** The ring's oldest event leaves it: the ring is complete after its id from now on (E1). */
  private dropOldest(stream: Stream): void {
    const first = stream.ring[0];
    if (first === undefined) return;
    stream.size--;
    if (!(first instanceof TokenRun)) {
      stream.completeAfter = first.id;
      stream.ring.shift();
      return;
    }
    stream.completeAfter = first.ids[first.start]!;
    first.start++;
    if (first.size === 0) stream.ring.shift();
  }

  /**
   * E1: whether the ring holds every event after `after` — it is complete after an id no later
   * than `after`, and `after` is an id this process issued (not a predecessor's above ours).
   */
  private reaches(stream: Stream, after: number): boolean {
    return after >= stream.completeAfter && after <= this.nextId;
  }

  /** Whether a replay from `from` delivered the stream's `ws_closed`. */
  private replayed(
    stream: Stream,
    from: Exclude<StartAt, { kind: 'live' }>,
    earlier: Earlier | undefined,
  ): boolean {
    const after = from.kind === 'after' ? from.id : from.position;
    return (
      (this.reaches(stream, after) || this.bridges(stream, after, earlier)) &&
      stream.closed !== undefined &&
      stream.closed.id > after
    );
  }

  /**
   * E2: a handoff listener is not told again of the rows its history read returned — a row
   * durable before the read may be announced after the position, in the replay or live. Until a
   * `history_resync`: after it the client re-reads, and seqs may have been renumbered.
   */
  protected withoutRowsRead(listener: Listener, lastSeq: number): Listener {
    let filtering = true;
    return (event) => {
      if (event.type === 'history_resync') filtering = false;
      if (filtering && event.type === 'message' && event.data.seq <= lastSeq) return;
      listener(event);
    };
  }

  private deliver(listener: Listener, event: TurnwardenEvent): void {
    try {
      listener(event);
    } catch (err) {
      this.logger.warn({ err, workstreamId: event.workstreamId, type: event.type }, 'event listener threw');
    }
  }

  /**
   * The workstream's stream; one created now is complete from here on. `recent`: it emits, so
   * it becomes the most recently active of the idle ones. Eviction is the caller's, afterwards.
   */
  private streamOf(workstreamId: string, recent: boolean): Stream {
    let stream = this.streams.get(workstreamId);
    if (stream === undefined) {
      stream = new Stream(this.nextId, workstreamId);
      this.streams.set(workstreamId, stream);
      this.idle.set(workstreamId, stream);
      this.relay?.opened(workstreamId, stream.openedAfter);
    } else if (recent && stream.listeners.size === 0) {
      this.idle.delete(workstreamId);
      this.idle.set(workstreamId, stream);
    }
    return stream;
  }

  /** E3: beyond `maxIdleStreams` streams without listeners, the least recently active are dropped. */
  private evictIdle(): void {
    while (this.idle.size > this.limits.maxIdleStreams) {
      const [id] = this.idle.keys();
      this.idle.delete(id!);
      this.streams.delete(id!);
      this.relay?.dropped(id!);
    }
  }
}
