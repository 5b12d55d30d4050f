/**
 * LISTEN/NOTIFY for the multi-host layer: ONE dedicated connection (not from the pool, which
 * would hand a LISTENing connection to other work) carries every LISTEN of a store. When it
 * drops, it is reconnected with exponential backoff, every channel is listened to again, and
 * each subscriber's `onReconnect` is called: notifications sent while it was down are lost,
 * so a subscriber resyncs from the tables.
 */
import pg from 'pg';
import { IDENTIFIER } from './pg-options.js';

interface Subscriber {
  readonly onPayload: (payload: string) => void;
  readonly onReconnect: (() => void) | undefined;
}

const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 5_000;

/** Schedules `fn` after `ms`; returns what cancels it. Tests inject one to drive the backoff. */
export type Schedule = (fn: () => void, ms: number) => () => void;

const realTimer: Schedule = (fn, ms) => {
  const t = setTimeout(fn, ms);
  t.unref();
  return () => clearTimeout(t);
};

export function isChannelName(channel: unknown): channel is string {
  return typeof channel === 'string' && IDENTIFIER.test(channel);
}

export class PgListener {
  readonly #config: pg.ClientConfig;
  readonly #channels = new Map<string, Set<Subscriber>>();
  #client: pg.Client | undefined;
  /** Every use of the connection, one after another (connects, LISTENs, UNLISTENs). */
  #chain: Promise<unknown> = Promise.resolve();
  #closed = false;
  #backoffMs = FIRST_BACKOFF_MS;
  #cancelTimer: () => void = () => {};
  readonly #schedule: Schedule;

  constructor(config: pg.ClientConfig, schedule: Schedule = realTimer) {
    // TCP keep-alive: a half-open socket (a database failover) is noticed and reconnected.
    this.#config = { ...config, keepAlive: true };
    this.#schedule = schedule;
  }

  /** Subscribes; resolves once the LISTEN is in force. Resolves to the unsubscribe. */
  async listen(
    channel: string,
    onPayload: (payload: string) => void,
    onReconnect?: () => void,
  ): Promise<() => Promise<void>> {
    const subscriber: Subscriber = { onPayload, onReconnect };
    await this.#serial(async () => {
      // A reconnect is pending (its backoff): reconnect now, for every channel, not this one alone.
      if (this.#client === undefined && this.#channels.size > 0) await this.#reconnect();
      let set = this.#channels.get(channel);
      if (set === undefined) {
        await this.#listenOnce(channel);
        set = new Set();
        this.#channels.set(channel, set);
      }
      set.add(subscriber);
    });
    let done = false;
    return async () => {
      if (done) return;
      done = true;
      await this.#serial(async () => {
        const set = this.#channels.get(channel);
        if (set === undefined || !set.delete(subscriber) || set.size > 0) return;
        this.#channels.delete(channel);
        // While disconnected there is nothing to UNLISTEN: the reconnect listens to what is left.
        // An UNLISTEN that fails failed with its connection, whose LISTENs died with it.
        if (this.#client !== undefined && !this.#closed)
          await this.#client.query(`UNLISTEN ${channel}`).catch(() => undefined);
      });
    };
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#cancelTimer();
    this.#channels.clear();
    // After whatever uses the connection now (a connect in flight ends its client itself).
    await this.#serial(async () => {
      const client = this.#client;
      this.#client = undefined;
      if (client !== undefined) await client.end().catch(() => undefined);
    }).catch(() => undefined);
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#chain.then(fn);
    this.#chain = run.catch(() => undefined);
    return run;
  }

  /**
   * LISTENs to a new channel. The connection can die under the statement (killed before its
   * error event reached us): then it is dropped and reconnected at once, every channel listened
   * to again, and the LISTEN retried once on the new connection.
   */
  async #listenOnce(channel: string): Promise<void> {
    const client = await this.#connected();
    try {
      await client.query(`LISTEN ${channel}`); // validated: [a-z_][a-z0-9_]*
    } catch (e) {
      // A valid name's LISTEN fails only with its connection; one retry, on a new one.
      if (this.#closed) throw e;
      this.#lost(client);
      await this.#reconnect();
      const fresh = await this.#connected();
      await fresh.query(`LISTEN ${channel}`);
    }
  }

  /** The live connection, connecting if there is none. */
  async #connected(): Promise<pg.Client> {
    if (this.#client !== undefined) return this.#client;
    if (this.#closed) throw new Error('the listener is closed');
    const client = new pg.Client(this.#config);
    // Until connected, an error rejects `connect()`; after, it means the connection is gone.
    client.on('error', () => this.#lost(client));
    client.on('end', () => this.#lost(client));
    client.on('notification', (n) => {
      const set = this.#channels.get(n.channel);
      if (set === undefined) return;
      const payload = n.payload ?? '';
      // Outside pg's parsing of the stream: a throwing subscriber cannot corrupt the connection.
      for (const s of set) {
        queueMicrotask(() => {
          try {
            s.onPayload(payload);
          } catch {
            // A subscriber's bug is its own: the connection and the other subscribers go on.
          }
        });
      }
    });
    try {
      await client.connect();
    } catch (e) {
      await client.end().catch(() => undefined);
      throw e;
    }
    if (this.#closed) {
      // Closed while connecting: this connection must not outlive the store.
      await client.end().catch(() => undefined);
      throw new Error('the listener is closed');
    }
    this.#client = client;
    return client;
  }

  #lost(client: pg.Client): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    client.end().catch(() => undefined);
    if (!this.#closed && this.#channels.size > 0) this.#retryLater();
  }

  #retryLater(): void {
    this.#cancelTimer();
    this.#cancelTimer = this.#schedule(() => {
      this.#serial(() => this.#reconnect()).catch(() => {
        this.#backoffMs = Math.min(this.#backoffMs * 2, MAX_BACKOFF_MS);
        if (!this.#closed && this.#client === undefined) this.#retryLater();
      });
    }, this.#backoffMs);
  }

  async #reconnect(): Promise<void> {
    if (this.#closed || this.#client !== undefined) return;
    const client = await this.#connected();
    try {
      for (const channel of this.#channels.keys()) await client.query(`LISTEN ${channel}`);
    } catch (e) {
      this.#lost(client);
      throw e;
    }
    this.#backoffMs = FIRST_BACKOFF_MS;
    for (const set of this.#channels.values()) {
      for (const s of set) {
        const resync = s.onReconnect;
        if (resync === undefined) continue;
        queueMicrotask(() => {
          try {
            resync();
          } catch {
            // as for payloads
          }
        });
      }
    }
  }
}
