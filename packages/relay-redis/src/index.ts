/**
 * An event relay over Redis Streams for Turnwarden's cluster mode (docs/cluster.md).
 *
 * Each workstream has a stream `<prefix><workstream key>`. The author of an event appends it
 * under the event's own id (`0-<id>`): Redis keeps the entries in id order and refuses one at or
 * below the stream's last, so no host can place an event out of order. A host follows the
 * workstreams whose streams it holds in memory — one blocking `XREAD` over all of them — and,
 * asked to follow from an id its ring does not reach (a client reconnecting by `Last-Event-ID`),
 * first replays the entries after it (`XRANGE`).
 *
 * Retention: the last `maxLen` events of a workstream (approximately: Redis trims whole nodes),
 * and none older than `retentionMs`; a stream nobody writes to expires after `retentionMs`. A
 * replay that would reach an entry Redis trimmed, or an id older than the retention, is
 * refused (`follow` resolves false): the listener gets `replay_truncated`, never a hole; a live
 * follower that fell behind the trimming is told the same way.
 */
import { Redis, type RedisOptions } from 'ioredis';

/**
 * What the relay carries: an event of the runtime's (`RelayEvent`), by its id. The relay
 * stores and returns it as JSON; the runtime checks what comes back.
 */
export interface RelayEvent {
  readonly id: number;
}

/** Where the relay delivers (the runtime's `RelaySink`). */
export interface RelaySink {
  events(batch: {
    readonly from: string;
    readonly workstreamId: string;
    readonly events: readonly RelayEvent[];
  }): void;
  gap(workstreamId?: string): void;
}

export interface RedisRelayOptions {
  /** `redis://host:port/db`, or ioredis options. */
  readonly url?: string;
  readonly redis?: RedisOptions;
  /** Key prefix of the streams (default `turnwarden:events:`). */
  readonly prefix?: string;
  /**
   * Events kept per workstream (default 10,000). Followers read live events from the stream:
   * one that falls further behind than this is told of a gap (its listeners re-read), so keep it
   * above the longest burst of events a turn streams.
   */
  readonly maxLen?: number;
  /** How long an event is kept at most, and an idle stream (default 10 minutes). */
  readonly retentionMs?: number;
}

type Entry = [id: string, fields: string[]];

/** The stream id of an event id, and back. */
const entryId = (id: number): string => `0-${id}`;
const eventId = (entry: string): number => Number(entry.slice(entry.indexOf('-') + 1));

/** The Redis Streams relay (an `EventRelay`): give it to `Turnwarden.start({ relay })` on every host. */
export class RedisRelay {
  readonly broadcast = false;
  private readonly prefix: string;
  private readonly maxLen: number;
  private readonly retentionMs: number;
  /** Commands, catch-up reads and appends. */
  private readonly cmd: Redis;
  /** The blocking `XREAD` of the followed streams. */
  private readonly reader: Redis;
  private readerId: number | undefined;
  private from = '';
  private sink: RelaySink | undefined;
  private sent: Promise<void> = Promise.resolve();
  /** Followed workstreams: the stream id after which the reader goes on. */
  private readonly cursors = new Map<string, string>();
  /** A follow's replay in flight: the reader leaves the workstream alone until it is done. */
  private readonly replaying = new Map<string, number>();
  private followSeq = 0;
  private wake: (() => void) | undefined;
  private closed = false;
  private reading: Promise<void> = Promise.resolve();
  private disconnected = false;
  /** Workstreams whose appends failed: a gap entry is owed to their followers. */
  private readonly owed = new Map<string, number>();

  constructor(options: RedisRelayOptions = {}) {
    this.prefix = options.prefix ?? 'turnwarden:events:';
    this.maxLen = options.maxLen ?? 10_000;
    this.retentionMs = options.retentionMs ?? 600_000;
    if (!Number.isSafeInteger(this.maxLen) || this.maxLen < 1)
      throw new TypeError('maxLen must be a positive integer');
    if (!Number.isSafeInteger(this.retentionMs) || this.retentionMs < 1_000)
      throw new TypeError('retentionMs must be an integer of at least 1000');
    // A command fails rather than waiting for a Redis that stays away: the runtime bounds its
    // waits, and an append that failed is answered by a gap entry once Redis is back.
    const base: RedisOptions = { lazyConnect: true, maxRetriesPerRequest: 2, ...options.redis };
    this.cmd = options.url === undefined ? new Redis(base) : new Redis(options.url, base);
    this.reader = this.cmd.duplicate();
  }

  async start(from: string, sink: RelaySink): Promise<void> {
    this.from = from;
    this.sink = sink;
    await this.cmd.connect();
    await this.reader.connect();
    this.readerId = (await this.reader.client('ID')) as number;
    // A connection that dropped may have missed nothing (the reader goes on from its cursors),
    // unless Redis trimmed past them meanwhile, or this host's appends failed: checked on return.
    for (const conn of [this.cmd, this.reader]) {
      conn.on('close', () => {
        this.disconnected = true;
      });
      conn.on('ready', () => {
        if (this.disconnected && !this.closed) {
          this.disconnected = false;
          void this.recheck();
          for (const [ws, id] of [...this.owed]) void this.markGap(ws, id);
        }
      });
      conn.on('error', () => {});
    }
    this.reading = this.readLoop();
  }

  /** The events a host authored since its last call, per workstream in order: one pipeline. */
  publish(
    batches: readonly { readonly workstreamId: string; readonly events: readonly RelayEvent[] }[],
  ): void {
    if (!this.closed && batches.length > 0) this.send(batches);
  }

  flush(): Promise<void> {
    return this.sent;
  }

  async follow(workstreamId: string, after: number): Promise<boolean> {
    const seq = ++this.followSeq;
    this.replaying.set(workstreamId, seq);
    this.cursors.delete(workstreamId);
    const key = this.prefix + workstreamId;
    try {
      const complete = await this.reaches(key, after);
      let cursor = entryId(after);
      for (;;) {
        const entries = (await this.cmd.xrange(key, `(${cursor}`, '+', 'COUNT', 500)) as Entry[];
        if (this.replaying.get(workstreamId) !== seq) return complete;
        this.deliver(workstreamId, entries);
        if (entries.length === 0) break;
        cursor = entries.at(-1)![0];
      }
      this.cursors.set(workstreamId, cursor);
      this.unblock();
      return complete;
    } finally {
      if (this.replaying.get(workstreamId) === seq) this.replaying.delete(workstreamId);
    }
  }

  /**
   * The events after `after` up to `upTo` (a reconnect from further back than a ring reaches);
   * undefined when Redis no longer holds all of them, or a gap entry lies among them.
   */
  async read(workstreamId: string, after: number, upTo: number): Promise<RelayEvent[] | undefined> {
    const key = this.prefix + workstreamId;
    if (!(await this.reaches(key, after))) return undefined;
    const events: RelayEvent[] = [];
    let cursor = entryId(after);
    for (;;) {
      const entries = (await this.cmd.xrange(key, `(${cursor}`, entryId(upTo), 'COUNT', 500)) as Entry[];
      for (const [, fields] of entries) {
        if (field(fields, 'g') !== undefined) return undefined;
        const raw = field(fields, 'e');
        try {
          events.push(JSON.parse(raw ?? 'null') as RelayEvent);
        } catch {
          return undefined;
        }
      }
      if (entries.length < 500) return events;
      cursor = entries.at(-1)![0];
    }
  }

  unfollow(workstreamId: string): void {
    this.replaying.delete(workstreamId);
    if (this.cursors.delete(workstreamId)) this.unblock();
  }

  async close(): Promise<void> {
    await Promise.race([this.flush(), new Promise((r) => setTimeout(r, 1_000).unref())]);
    this.closed = true;
    this.cursors.clear();
    this.unblock();
    this.reader.disconnect();
    await this.reading;
    await this.cmd.quit().catch(() => undefined);
  }

  /** Whether every entry after `after` is still in the stream. */
  private async reaches(key: string, after: number): Promise<boolean> {
    const info = await this.cmd.call('XINFO', 'STREAM', key).catch((e: unknown) => {
      if (e instanceof Error && /no such key/i.test(e.message)) return undefined;
      throw e;
    });
    if (info === undefined) {
      // No stream: nothing was written — or all of it expired, when `after` is that old.
      return after >= (Date.now() - this.retentionMs) * 1000;
    }
    const fields = info as unknown[];
    const get = (name: string) => {
      const at = fields.indexOf(name);
      return at >= 0 ? fields[at + 1] : undefined;
    };
    const last = eventId(String(get('last-generated-id') ?? '0-0'));
    if (after >= last) return true;
    // Nothing removed (trimmed or deleted) since the stream began: every entry is there.
    if (Number(get('entries-added')) === Number(get('length'))) return true;
    // Removed entries are all below the first one kept (trimming takes the oldest).
    const first = get('recorded-first-entry-id') ?? (get('first-entry') as unknown[] | undefined)?.[0];
    if (typeof first !== 'string') return false;
    return after >= eventId(first) - 1;
  }

  private send(
    batches: readonly { readonly workstreamId: string; readonly events: readonly RelayEvent[] }[],
  ): void {
    const pipeline = this.cmd.pipeline();
    const minId = entryId(Math.max(1, (Date.now() - this.retentionMs) * 1000));
    for (const { workstreamId: ws, events } of batches) {
      const key = this.prefix + ws;
      for (const event of events) {
        pipeline.xadd(
          key,
          'MINID',
          '~',
          minId,
          entryId(event.id),
          'f',
          this.from,
          'e',
          JSON.stringify(event),
        );
      }
      pipeline.xtrim(key, 'MAXLEN', '~', this.maxLen);
      pipeline.pexpire(key, this.retentionMs);
    }
    this.sent = this.sent.then(async () => {
      const results = await pipeline.exec().catch((err: unknown) => [[err, null]] as [Error, null][]);
      const failed = new Map<string, number>();
      let i = 0;
      for (const { workstreamId: ws, events } of batches) {
        for (const event of events) {
          if (results?.[i]?.[0] != null || results === null)
            failed.set(ws, Math.max(failed.get(ws) ?? 0, event.id));
          i++;
        }
        i += 2;
      }
      // Followers would miss them: a gap entry tells them to re-read, in their place.
      for (const [ws, id] of failed) {
        this.owed.set(ws, Math.max(this.owed.get(ws) ?? 0, id));
        await this.markGap(ws, this.owed.get(ws)!);
      }
    });
  }

  /** A gap entry in the workstream's stream, above `id` and the stream's last entry. */
  private async markGap(workstreamId: string, id: number): Promise<void> {
    const key = this.prefix + workstreamId;
    try {
      const last = (await this.cmd.xrevrange(key, '+', '-', 'COUNT', 1)) as Entry[];
      const top = last.length === 0 ? 0 : eventId(last[0]![0]);
      await this.cmd.xadd(key, entryId(Math.max(top, id) + 1), 'f', this.from, 'g', '1');
      if (this.owed.get(workstreamId) === id) this.owed.delete(workstreamId);
    } catch {
      // Redis is unreachable from here: written when this host's connection is back.
    }
  }

  /** After a reconnect: followed streams Redis trimmed past their cursor are a gap. */
  private async recheck(): Promise<void> {
    for (const [ws, cursor] of [...this.cursors]) {
      const complete = await this.reaches(this.prefix + ws, eventId(cursor)).catch(() => false);
      if (!complete) this.sink?.gap(ws);
    }
  }

  private unblock(): void {
    this.wake?.();
    if (this.readerId !== undefined && !this.closed) {
      void this.cmd.client('UNBLOCK', this.readerId).catch(() => undefined);
    }
  }

  private async readLoop(): Promise<void> {
    while (!this.closed) {
      const followed = [...this.cursors].filter(([ws]) => !this.replaying.has(ws));
      if (followed.length === 0) {
        await new Promise<void>((resolve) => {
          this.wake = resolve;
        });
        this.wake = undefined;
        continue;
      }
      const keys = followed.map(([ws]) => this.prefix + ws);
      const ids = followed.map(([, cursor]) => cursor);
      let got: [string, Entry[]][] | null;
      try {
        got = (await this.reader.xread('COUNT', 1_000, 'BLOCK', 0, 'STREAMS', ...keys, ...ids)) as
          | [string, Entry[]][]
          | null;
      } catch {
        if (this.closed) return;
        await new Promise((r) => setTimeout(r, 100));
        continue;
      }
      const cursorOf = new Map(followed);
      const batches = got ?? [];
      // A follower that fell behind the trimming would skip what was trimmed without a word:
      // whether entries after its cursors were removed is checked (all at once) before it goes on.
      const whole = await Promise.all(
        batches.map(([key]) => {
          const before = cursorOf.get(key.slice(this.prefix.length));
          return before === undefined ? false : this.reaches(key, eventId(before)).catch(() => false);
        }),
      );
      for (const [i, [key, entries]] of batches.entries()) {
        const ws = key.slice(this.prefix.length);
        const before = cursorOf.get(ws);
        // Unfollowed, or followed again (a replay) while the read was out: its cursor is the replay's.
        if (before === undefined || this.cursors.get(ws) !== before) continue;
        if (!whole[i]) this.sink?.gap(ws);
        this.deliver(ws, entries);
        if (entries.length > 0) this.cursors.set(ws, entries.at(-1)![0]);
      }
    }
  }

  private deliver(workstreamId: string, entries: readonly Entry[]): void {
    let batch: RelayEvent[] = [];
    let from = '';
    const out = () => {
      if (batch.length > 0) this.sink?.events({ from, workstreamId, events: batch });
      batch = [];
    };
    for (const [, fields] of entries) {
      const f = field(fields, 'f') ?? '';
      // This host's own events come back: not parsed (the runtime skips them anyway).
      if (f === this.from && field(fields, 'g') === undefined) continue;
      if (field(fields, 'g') !== undefined) {
        out();
        if (f !== this.from) this.sink?.gap(workstreamId);
        continue;
      }
      if (f !== from) out();
      from = f;
      const raw = field(fields, 'e');
      let event: unknown;
      try {
        event = raw === undefined ? undefined : JSON.parse(raw);
      } catch {
        event = undefined;
      }
      // Checked by the runtime (a malformed event is a gap there).
      batch.push(event as RelayEvent);
    }
    out();
  }
}

function field(fields: readonly string[], name: string): string | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === name) return fields[i + 1];
  return undefined;
}
