/**
 * Relayed tokens (issue 25, item 6): a turn streams tokens on one `turnwarden serve` host while
 * an SSE client follows the workstream on every host. The single-host figure — the baseline, in
 * the same run — is the client on the host running the turn; ours is the slowest client on
 * another host, whose events came through the relay: PostgreSQL's `LISTEN/NOTIFY` (the default)
 * and, where Debian's `redis-server` is installed, Redis Streams. Tokens are the bench's ticker
 * model's (one event each, a macrotask apart: the worst case for the event path).
 */
import { fileURLToPath } from 'node:url';
import { type RedisServer, redisSkipReason, startRedis } from '@turnwarden/relay-redis/testing';
import { HostCluster } from '../cluster/hosts.js';
import { sseFrames } from '../sse.js';

const TOKEN = 'bench-relay-token-0123456789abcdef';
const TENANT = 'acme';
const RUNTIME = {
  lease: { ttlMs: 5_000, renewMs: 1_000 },
  watchdog: { timeoutMs: 60_000, pollMs: 500, graceMs: 500 },
  pool: { maxWorkers: 2, warmWorkers: 1 },
  // The clients read as fast as this machine lets them: the figure is the relay's, not E3's bound.
  events: { listenerBuffer: 100_000 },
  pluginModules: [fileURLToPath(new URL('./ticker-plugin.js', import.meta.url))],
  model: 'ticker',
};

export interface RelayFigures {
  readonly relay: string;
  readonly hosts: number;
  /** Tokens a second the client on the running host received (send → its last token). */
  readonly local: number;
  /** Tokens a second the slowest client on another host received (none with one host). */
  readonly remote: number | undefined;
  /** Its last token after the local client's (ms). */
  readonly lagMs: number | undefined;
  /** Tokens the slowest remote client missed (told to re-read instead): 0 expected. */
  readonly missed: number;
}

/** An SSE client counting the token events of one turn, and when the last came. */
function follow(url: string, workstreamId: string, want: number) {
  const stop = new AbortController();
  let tokens = 0;
  let last = 0;
  let resolveDone: () => void = () => {};
  const done = new Promise<void>((r) => {
    resolveDone = r;
  });
  const ready = fetch(`${url}/v1/workstreams/${workstreamId}/events`, {
    headers: { authorization: `Bearer ${TOKEN}`, accept: 'text/event-stream' },
    signal: stop.signal,
  }).then((res) => {
    void (async () => {
      try {
        for await (const frame of sseFrames(res.body as unknown as AsyncIterable<Uint8Array>)) {
          if (frame.event === 'token') {
            tokens++;
            last = performance.now();
          }
          if ((frame.event === 'idle' || frame.event === 'history_resync') && tokens > 0) resolveDone();
          if (tokens >= want) resolveDone();
        }
      } catch {
        // stopped
      }
      resolveDone();
    })();
  });
  return {
    ready,
    done,
    get tokens() {
      return tokens;
    },
    get last() {
      return last;
    },
    stop: () => stop.abort(),
  };
}

async function oneRun(
  url: string,
  hosts: number,
  tokens: number,
  redis: RedisServer | undefined,
): Promise<RelayFigures> {
  const schema = `bench_relay_${hosts}_${redis === undefined ? 'pg' : 'redis'}_${Date.now().toString(36)}`;
  const cluster = await HostCluster.start({
    postgres: url,
    schema,
    hosts,
    token: TOKEN,
    tenantId: TENANT,
    runtime: RUNTIME,
    logLevel: 'warn',
    ...(redis === undefined ? {} : { redis: redis.url }),
  });
  try {
    await cluster.api(0, 'POST', '/workstreams', { workstreamId: 'relay' });
    const clients = cluster.hosts.map((h) => follow(h.url, 'relay', tokens));
    await Promise.all(clients.map((c) => c.ready));
    const t0 = performance.now();
    await cluster.api(0, 'POST', '/workstreams/relay/messages', { content: String(tokens), wait: true });
    await Promise.race([Promise.all(clients.map((c) => c.done)), new Promise((r) => setTimeout(r, 60_000))]);
    for (const c of clients) c.stop();
    const rate = (c: (typeof clients)[number]) => c.tokens / ((c.last - t0) / 1000);
    const [local, ...others] = clients;
    const slowest = others.reduce<(typeof clients)[number] | undefined>(
      (s, c) => (s === undefined || c.last > s.last ? c : s),
      undefined,
    );
    return {
      relay: redis === undefined ? 'PostgreSQL LISTEN/NOTIFY' : 'Redis Streams',
      hosts,
      local: rate(local!),
      remote: slowest === undefined ? undefined : rate(slowest),
      lagMs: slowest === undefined ? undefined : slowest.last - local!.last,
      missed: slowest === undefined ? 0 : tokens - slowest.tokens,
    };
  } finally {
    await cluster.stop();
  }
}

/** Relayed tokens a second for 1–3 hosts, through each relay this machine has. */
export async function relayedTokens(url: string, tokens: number): Promise<RelayFigures[]> {
  const out: RelayFigures[] = [];
  for (const hosts of [1, 2, 3]) out.push(await oneRun(url, hosts, tokens, undefined));
  if (redisSkipReason() === undefined) {
    const redis = await startRedis();
    try {
      for (const hosts of [2, 3]) out.push(await oneRun(url, hosts, tokens, redis));
    } finally {
      await redis.stop();
    }
  }
  return out;
}
