/**
 * The notification channel between hosts (issue 25, item 6): how many PostgreSQL notifications
 * a second the channel carries to every host before it saturates, and how late they arrive.
 * Everything between hosts rides on it today — routed calls, journal announcements — and a relay
 * of live events would too; its saturation point bounds all of them.
 *
 * Ours: `PostgresStore.notify` (the store's pool) to three stores that `listen` (each its one
 * listening connection, as each host has). The baseline: raw `pg` — a pool running
 * `SELECT pg_notify($1, $2)` and three clients that `LISTEN` — on the same server. Senders run in
 * a closed loop at rising concurrency; the figure is the best delivery rate every listener saw,
 * and the delay from send to delivery at that rate. Payloads: a routed call's size (~200 B) and
 * the largest a notification carries (7,900 B of the 8,000 the server allows).
 */
import { openPostgresStore, type PostgresStore } from '@turnwarden/store';
import pg from 'pg';
import { median, quantile, sleep } from './stats.js';

const CHANNEL = 'bench_notify';
const LISTENERS = 3;
const CONCURRENCY = [1, 8, 32] as const;

export interface NotifyLevel {
  readonly concurrency: number;
  /** Notifications sent per second. */
  readonly sent: number;
  /** Notifications per second every listener received (the slowest listener's rate). */
  readonly delivered: number;
  /** Send → delivery, over every listener's deliveries (ms). */
  readonly p50: number;
  readonly p99: number;
}

export interface NotifyFigures {
  readonly bytes: number;
  readonly levels: readonly NotifyLevel[];
  /** The level with the highest delivered rate: the saturation point. */
  readonly peak: NotifyLevel;
}

interface Side {
  send(payload: string): Promise<void>;
  /** Registers `on` on every listener (index, payload); resolves once all listen. */
  listen(on: (listener: number, payload: string) => void): Promise<void>;
  close(): Promise<void>;
}

function ours(url: string, schema: string): Side {
  const stores: PostgresStore[] = [];
  let sender: PostgresStore | undefined;
  return {
    async listen(on) {
      sender = await openPostgresStore({ connectionString: url, schema });
      for (let i = 0; i < LISTENERS; i++) {
        const store = await openPostgresStore({ connectionString: url, schema });
        stores.push(store);
        await store.listen(CHANNEL, (payload) => on(i, payload));
      }
    },
    send: (payload) => sender!.notify(CHANNEL, payload),
    async close() {
      await Promise.all([...stores, ...(sender ? [sender] : [])].map((s) => s.close()));
    },
  };
}

function raw(url: string): Side {
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  const clients: pg.Client[] = [];
  return {
    async listen(on) {
      for (let i = 0; i < LISTENERS; i++) {
        const client = new pg.Client({ connectionString: url });
        await client.connect();
        client.on('notification', (n) => on(i, n.payload ?? ''));
        await client.query(`LISTEN ${CHANNEL}`);
        clients.push(client);
      }
    },
    send: async (payload) => {
      await pool.query('SELECT pg_notify($1, $2)', [CHANNEL, payload]);
    },
    async close() {
      await Promise.all([...clients.map((c) => c.end()), pool.end()]);
    },
  };
}

/** One payload size on one side: each concurrency for `windowMs`, then the drain. */
async function measure(side: Side, bytes: number, windowMs: number): Promise<NotifyFigures> {
  const received = Array.from({ length: LISTENERS }, () => 0);
  let delays: number[] = [];
  let counting = false;
  await side.listen((listener, payload) => {
    if (!counting) return;
    received[listener]! += 1;
    const sentAt = Number(payload.slice(0, payload.indexOf(' ')));
    delays.push(performance.now() - sentAt);
  });
  const levels: NotifyLevel[] = [];
  for (const concurrency of CONCURRENCY) {
    received.fill(0);
    delays = [];
    let sent = 0;
    let running = true;
    counting = true;
    const t0 = performance.now();
    const loops = Array.from({ length: concurrency }, async () => {
      while (running) {
        const stamp = `${performance.now()} `;
        await side.send(stamp + 'x'.repeat(Math.max(0, bytes - stamp.length)));
        sent++;
      }
    });
    await sleep(windowMs);
    running = false;
    await Promise.all(loops);
    const seconds = (performance.now() - t0) / 1000;
    // Whatever is still on its way arrives, or counts as not delivered within the window.
    const deadline = performance.now() + 2_000;
    while (Math.min(...received) < sent && performance.now() < deadline) await sleep(10);
    counting = false;
    levels.push({
      concurrency,
      sent: sent / seconds,
      delivered: Math.min(...received) / seconds,
      p50: median(delays),
      p99: quantile(delays, 0.99),
    });
  }
  const peak = levels.reduce((a, b) => (b.delivered > a.delivered ? b : a));
  return { bytes, levels, peak };
}

/** The channel's figures, ours beside raw `pg`, for a small and the largest payload. */
export async function notifyChannel(
  url: string,
  windowMs: number,
): Promise<{ ours: NotifyFigures[]; raw: NotifyFigures[] }> {
  const out = { ours: [] as NotifyFigures[], raw: [] as NotifyFigures[] };
  for (const bytes of [200, 7_900]) {
    const a = ours(url, 'bench_notify');
    try {
      out.ours.push(await measure(a, bytes, windowMs));
    } finally {
      await a.close();
    }
    const b = raw(url);
    try {
      out.raw.push(await measure(b, bytes, windowMs));
    } finally {
      await b.close();
    }
  }
  return out;
}
