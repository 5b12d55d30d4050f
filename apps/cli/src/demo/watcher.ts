/**
 * An SSE client that follows one workstream for the whole demo across several hosts: it reads
 * `GET …/events` as a browser's EventSource would and, whenever its connection breaks (a host
 * killed, a balancer that drops it), reconnects — through the balancer, or to the next live host —
 * with the last event id it saw (`Last-Event-ID`). Told to re-read (`replay_truncated`,
 * `history_resync`) it does what a client must: reads the history (`GET …/history`). What it
 * records is what the demo checks (E1 across hosts): no event at or below an id it already had,
 * every row it has — by its event, or by a re-read it was told to do — and how each reconnect was
 * answered (replayed, or `replay_truncated`).
 */
import { sseFrames } from '../sse.js';

interface Frame {
  readonly id: number;
  readonly type: string;
  readonly data: Record<string, unknown> & { readonly commitKey?: string; readonly seq?: number };
}

export interface WatchCounts {
  /** Connections after the first. */
  readonly reconnects: number;
  /** Reconnects replayed by Last-Event-ID (the first event was not `replay_truncated`). */
  readonly resumed: number;
  /** Reconnects answered `replay_truncated` (the client must re-read the history). */
  readonly truncated: number;
  /** Times it was told to re-read (`replay_truncated`, `history_resync`) and read the history. */
  readonly rereads: number;
  /** Events with an id at or below one already received (a duplicate, or out of order). */
  readonly outOfOrder: number;
  readonly events: number;
}

export class Watcher {
  private lastId: number | undefined;
  private readonly stopper = new AbortController();
  private running: Promise<void> = Promise.resolve();
  private counts = { reconnects: 0, resumed: 0, truncated: 0, rereads: 0, outOfOrder: 0, events: 0 };
  /** Rows it has — from `message` events and from the history re-reads — by commit key, and the highest seq. */
  readonly rows = new Set<string>();
  maxSeq = 0;
  private rereading: Promise<void> = Promise.resolve();
  /** The host it connects to (an index into `urls`). */
  private at = 0;
  private waiters: (() => void)[] = [];

  constructor(
    /** Where to connect, in order of preference (one: the balancer). */
    private readonly urls: readonly string[],
    private readonly token: string,
    readonly workstreamId: string,
  ) {}

  start(): void {
    this.running = this.loop();
  }

  get stats(): WatchCounts {
    return { ...this.counts };
  }

  /** Resolves once `done()` holds or `ms` passed (checked on every event). */
  until(done: () => boolean, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(finish, ms);
      const check = () => (done() ? finish() : this.waiters.push(check));
      function finish() {
        clearTimeout(timer);
        resolve();
      }
      check();
    });
  }

  async stop(): Promise<void> {
    this.stopper.abort();
    await this.running;
    await this.rereading;
  }

  private async loop(): Promise<void> {
    while (!this.stopper.signal.aborted) {
      const url = this.urls[this.at % this.urls.length]!;
      const outcome = await this.connect(url).catch(() => 'refused' as const);
      if (outcome === 'closed' || this.stopper.signal.aborted) return;
      if (outcome === 'refused') this.at++; // a dead host: the next one
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** The whole history, from the host it follows (or the next that answers): its rows are had. */
  private reread(): void {
    this.rereading = this.rereading.then(async () => {
      for (let attempt = 0; attempt < 3 * this.urls.length; attempt++) {
        if (this.stopper.signal.aborted) return;
        const url = this.urls[(this.at + attempt) % this.urls.length]!;
        if ((await this.history(url).catch(() => undefined)) !== undefined) {
          this.counts.rereads++;
          return;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      // Every host refused: the rows it lacks are the demo's failed check.
    });
  }

  /** `GET …/history` at `url`: its rows are had; its handoff token, or undefined when refused. */
  private async history(url: string): Promise<string | undefined> {
    const res = await fetch(`${url}/v1/workstreams/${this.workstreamId}/history`, {
      headers: { authorization: `Bearer ${this.token}` },
      signal: this.stopper.signal,
    });
    if (res.status !== 200) {
      await res.body?.cancel().catch(() => undefined);
      return undefined;
    }
    const body = (await res.json()) as { rows?: { commitKey: string; seq: number }[]; handoff?: string };
    for (const row of body.rows ?? []) {
      this.rows.add(row.commitKey);
      this.maxSeq = Math.max(this.maxSeq, row.seq);
    }
    for (const w of this.waiters.splice(0)) w();
    return body.handoff ?? '';
  }

  private connected = false;

  private async connect(url: string): Promise<'closed' | 'dropped' | 'refused'> {
    // No event yet: as a client starts — the history, then the events after it (E2's handoff),
    // so the turns the demo drives meanwhile are not missed by a connection still on its way.
    let query = '';
    if (this.lastId === undefined) {
      const handoff = await this.history(url);
      if (handoff === undefined) return 'refused';
      if (handoff !== '') query = `?handoff=${encodeURIComponent(handoff)}`;
    }
    const res = await fetch(`${url}/v1/workstreams/${this.workstreamId}/events${query}`, {
      headers: {
        authorization: `Bearer ${this.token}`,
        accept: 'text/event-stream',
        ...(this.lastId === undefined ? {} : { 'last-event-id': String(this.lastId) }),
      },
      signal: this.stopper.signal,
    });
    if (res.status !== 200 || res.body === null) {
      await res.body?.cancel().catch(() => undefined);
      return 'refused';
    }
    // A reconnect: its first event says whether the stream was resumed or truncated.
    let first = this.connected;
    if (this.connected) this.counts.reconnects++;
    this.connected = true;
    try {
      for await (const raw of sseFrames(res.body as unknown as AsyncIterable<Uint8Array>)) {
        const frame = parseFrame(raw.data);
        if (frame === undefined) continue;
        if (first) {
          // The reconnect's own answer: its replay, or `replay_truncated` (a `history_resync`
          // first is news after a replay of nothing: the reconnect itself was resumed).
          first = false;
          if (frame.type === 'replay_truncated') this.counts.truncated++;
          else this.counts.resumed++;
        }
        if (this.take(frame)) return 'closed';
      }
    } catch {
      // The connection broke (or the demo stopped): reconnect, unless stopped.
    }
    return 'dropped';
  }

  /** Records one event; true after `ws_closed`. */
  private take(frame: Frame): boolean {
    this.counts.events++;
    if (frame.type === 'replay_truncated' || frame.type === 'history_resync') {
      // A notice carries the last id it follows (or the host's position): not a new event.
      this.reread();
    } else if (this.lastId !== undefined && frame.id <= this.lastId) {
      this.counts.outOfOrder++;
    }
    if (this.lastId === undefined || frame.id > this.lastId) this.lastId = frame.id;
    if (frame.type === 'message' && typeof frame.data.commitKey === 'string') {
      this.rows.add(frame.data.commitKey);
      this.maxSeq = Math.max(this.maxSeq, Number(frame.data.seq ?? 0));
    }
    for (const w of this.waiters.splice(0)) w();
    return frame.type === 'ws_closed';
  }
}

/** One frame's data: the event (the server frames each event as its JSON). */
function parseFrame(data: string): Frame | undefined {
  try {
    const e = JSON.parse(data) as Frame;
    return typeof e.id === 'number' && typeof e.type === 'string' ? e : undefined;
  } catch {
    return undefined;
  }
}
