/**
 * (Over 300 lines on purpose: ids, the replay ring, handoff filtering and the terminal quiesce
 * are one stream's state, read and written in one synchronous step per event — E1–E3, D6.)
 *
 * Event streams, per workstream.
 *
 * **Ids (E1).** One counter for the process, started at the wall clock in microseconds: ids
 * increase monotonically within a workstream (and across workstreams), and a process that
 * restarts continues above the ids its predecessor handed out (unless the wall clock went back).
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
import type { PersistenceStatus } from '../types.js';

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
  /** The ring holds every event of the workstream with an id above this. */
  completeAfter: number;
  /** `ws_closed` was emitted: later registrations are closed at once (D6). */
  closed: TurnwardenEvent | undefined;

  constructor(
    completeAfter: number,
    /** The workstream's id as its tenant names it: its events carry it. */
    readonly workstreamId: string,
  ) {
    this.completeAfter = completeAfter;
  }
}

export class EventHub {
  private nextId = Date.now() * 1000;
  private readonly streams = new Map<string, Stream>();
  /** Streams nobody listens to, least recently active first (E3). */
  private readonly idle = new Map<string, Stream>();
  private readonly limits: EventsConfig;

  constructor(
    private readonly logger: Logger,
    limits: Partial<EventsConfig> = {},
  ) {
    this.limits = { replayLimit: 1_024, maxIdleStreams: 1_000, listenerBuffer: 1_024, ...limits };
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
  subscribe(workstreamId: string, listener: Listener, from: StartAt = { kind: 'live' }): () => void {
    if (from.kind === 'handoff') listener = this.withoutRowsRead(listener, from.lastSeq);
    const stream = this.streamOf(workstreamId, false);
    if (from.kind !== 'live') this.replay(stream, listener, from);
    if (stream.closed !== undefined) {
      // A replay may have delivered the notice already.
      const told = from.kind !== 'live' && this.replayed(stream, from);
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
    stream.closed = this.append(stream, 'ws_closed', undefined, data);
    stream.listeners.clear();
    // Idle now, the most recently active (`streamOf` moved it to the end if it was idle already).
    this.idle.set(workstreamId, stream);
    this.evictIdle();
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
    const id = ++this.nextId;
    const { workstreamId } = stream;
    const event = (
      generation === undefined
        ? { id, workstreamId, type, data }
        : { id, workstreamId, type, generation, data }
    ) as TurnwardenEvent;
    this.keep(stream, event);
    while (stream.size > this.limits.replayLimit) this.dropOldest(stream);
    for (const listener of [...stream.listeners]) this.deliver(listener, event);
    this.evictIdle();
    return event;
  }

  private replay(stream: Stream, listener: Listener, from: Exclude<StartAt, { kind: 'live' }>): void {
    const { workstreamId } = stream;
    const after = from.kind === 'after' ? from.id : from.position;
    if (!this.reaches(stream, after)) {
      const id = this.nextId;
      this.deliver(
        listener,
        from.kind === 'after'
          ? {
              id,
              workstreamId,
              type: 'replay_truncated',
              data: { after, firstAvailable: stream.completeAfter + 1 },
            }
          : { id, workstreamId, type: 'history_resync', data: { reason: 'replay_truncated' } },
      );
      return;
    }
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
  private replayed(stream: Stream, from: Exclude<StartAt, { kind: 'live' }>): boolean {
    const after = from.kind === 'after' ? from.id : from.position;
    return this.reaches(stream, after) && stream.closed !== undefined && stream.closed.id > after;
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
      stream = new Stream(this.nextId, keyWorkstreamId(workstreamId));
      this.streams.set(workstreamId, stream);
      this.idle.set(workstreamId, stream);
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
    }
  }
}
