/**
 * postgres — several hosts on one PostgreSQL database (issue 13), on a throwaway cluster from
 * the machine's server binaries with fsync on (a commit costs what it costs in production):
 *
 * - journal rows per second through the PostgreSQL store — the supervisor's JournalGate (group
 *   commit) over `PostgresStore`, 8 workstreams writing at once, each awaiting its
 *   acknowledgement before its next row as a turn does — against a raw `pg` loop of single-row
 *   INSERTs from 8 writers on the same server (target ≥ 1.5×);
 * - failover: from a host's SIGKILL mid-turn to the next turn of that workstream started by
 *   another host — the send waits in the database's queue until the dead host's lease expires
 *   and the session is repaired (target ≤ lease TTL + one renewal period);
 * - queued sends across hosts (issue 25): sends queued behind a turn on host 1 from host 2,
 *   against the same sends queued on host 1 itself — the gap from one turn's last row to the
 *   next turn's user row, and how many queued turns a second run one after another;
 * - cancel latency: a cancel called on the host that does not run the turn (routed through
 *   LISTEN/NOTIFY) against one called where the turn runs;
 * - the notification channel's saturation point (notify.ts): notifications a second every one of
 *   three hosts receives, and their delay, against raw `pg` on the same server;
 * - relayed tokens (relay.ts): tokens a second an SSE client on another host receives of a turn
 *   streaming on one host, for 2 and 3 hosts and each relay, against the client on the running
 *   host (the single-host figure, same run).
 */
import { workstreamKey } from '@turnwarden/protocol';
import { redisSkipReason } from '@turnwarden/relay-redis/testing';
import { openPostgresStore, type PostgresStore } from '@turnwarden/store';
import { type Postgres, startPostgres } from '@turnwarden/store/testing';
import pg from 'pg';
import { HostCluster } from '../cluster/hosts.js';
import type { BenchContext } from './common.js';
import { benchGate } from './journal.js';
import { type NotifyLevel, notifyChannel } from './notify.js';
import { relayedTokens } from './relay.js';
import { row, type SectionResult, target } from './report.js';
import { median, quantile, sleep } from './stats.js';

const WRITERS = 8;
const BODY = 'r'.repeat(200);
const TOKEN = 'bench-postgres-token-0123456789';
/** The tenant the hosts' token serves: the store keys its workstreams by it (T2). */
const TENANT = 'acme';
const LEASE = { ttlMs: 1_000, renewMs: 250 };
const RUNTIME = {
  lease: LEASE,
  watchdog: { timeoutMs: 60_000, pollMs: 500, graceMs: 500 },
  pool: { maxWorkers: 2, warmWorkers: 2 },
};
const script = (...steps: unknown[]) => JSON.stringify({ script: steps });
const SLEEPING = script({ tools: [{ name: 'sleep', args: { ms: 600_000 } }] });

async function journalRows(url: string, windowMs: number, ctx: BenchContext) {
  const store = await openPostgresStore({ connectionString: url, schema: 'bench_journal' });
  try {
    const ids = Array.from({ length: WRITERS }, (_, i) => `ws-${i}`);
    for (const id of ids) {
      await store.createWorkstream({ id, tenantId: 'bench' });
      await store.nextGeneration(id);
    }
    const gate = benchGate(store, ctx);
    const latency: number[] = [];
    let rows = 0;
    let running = true;
    const t0 = performance.now();
    const writers = ids.map(async (workstreamId) => {
      for (let i = 0; running; i++) {
        const accepted = performance.now();
        await gate.append({
          workstreamId,
          generation: 1,
          entries: [{ commitKey: `r${i}`, message: { role: 'user', content: BODY } }],
        });
        latency.push(performance.now() - accepted);
        rows++;
      }
    });
    await sleep(windowMs);
    running = false;
    await Promise.all(writers);
    const elapsed = (performance.now() - t0) / 1000;
    return { rowsPerSec: rows / elapsed, latency, ...gate.commitStats };
  } finally {
    await store.close();
  }
}

/**
 * `writers` writers, each a connection of its own, INSERTing one row per statement (autocommit):
 * with 1, the issue's raw loop; with 8, what 8 concurrent writers get from PostgreSQL's own
 * grouping of concurrent commits' WAL flushes.
 */
async function rawRows(url: string, windowMs: number, writers: number): Promise<number> {
  const pool = new pg.Pool({ connectionString: url, max: writers });
  try {
    await pool.query(
      'CREATE TABLE IF NOT EXISTS raw_rows (ws TEXT NOT NULL, seq BIGINT NOT NULL, commit_key TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (ws, seq), UNIQUE (ws, commit_key))',
    );
    let rows = 0;
    let running = true;
    const t0 = performance.now();
    const loops = Array.from({ length: writers }, async (_, w) => {
      for (let seq = 1; running; seq++) {
        await pool.query('INSERT INTO raw_rows (ws, seq, commit_key, body) VALUES ($1, $2, $3, $4)', [
          `ws-${writers}-${w}`,
          seq,
          `r${seq}`,
          JSON.stringify({ role: 'user', content: BODY }),
        ]);
        rows++;
      }
    });
    await sleep(windowMs);
    running = false;
    await Promise.all(loops);
    return rows / ((performance.now() - t0) / 1000);
  } finally {
    await pool.end();
  }
}

async function until<T>(ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (performance.now() > deadline) throw new Error(`a condition was not met within ${ms} ms`);
    await sleep(5);
  }
}

/** Two `turnwarden serve` hosts on `schema` of the bench's database. */
function twoHosts(url: string, schema: string): Promise<HostCluster> {
  return HostCluster.start({
    postgres: url,
    schema,
    hosts: 2,
    token: TOKEN,
    tenantId: TENANT,
    runtime: RUNTIME,
    logLevel: 'warn',
  });
}

const inTool = (store: PostgresStore, ws: string) => () =>
  store.readHistory(ws).then((rows) => (rows.some((r) => r.message.role === 'assistant') ? true : undefined));

/** SIGKILL the host running a turn; another host's client retries until its turn starts. */
async function failover(url: string, round: number) {
  const schema = `bench_failover_${round}`;
  const store = await openPostgresStore({ connectionString: url, schema });
  const cluster = await twoHosts(url, schema);
  try {
    await cluster.api(0, 'POST', '/workstreams', { workstreamId: 'w' });
    await cluster.api(0, 'POST', '/workstreams/w/messages', { content: SLEEPING });
    await until(10_000, inTool(store, workstreamKey(TENANT, 'w')));
    const t0 = performance.now();
    await cluster.kill(0);
    let refusals = 0;
    for (;;) {
      const r = await cluster.api(1, 'POST', '/workstreams/w/messages', {
        content: script({ text: 'next' }),
      });
      if (r.status === 202) break;
      if (r.body?.error?.code !== 'LEASED_ELSEWHERE')
        throw new Error(`failover send: HTTP ${r.status} ${JSON.stringify(r.body)}`);
      refusals++;
      await sleep(10);
    }
    return { ms: performance.now() - t0, refusals };
  } finally {
    await cluster.stop();
    await store.close();
  }
}

const HANDOFF_SENDS = 8; // limits.maxQueuedSends' default: every one queues

/**
 * `n` sends queued behind a turn running on host 1 (index 0), from host `from`: each queued turn
 * is a text answer. From the journal's own timestamps (the database's clock): the gap from each
 * turn's last row to the next turn's user row, and the queued turns a second.
 */
async function handoffs(cluster: HostCluster, store: PostgresStore, from: number, n: number, id: string) {
  const key = workstreamKey(TENANT, id);
  await cluster.api(0, 'POST', '/workstreams', { workstreamId: id });
  const first = await cluster.api(0, 'POST', `/workstreams/${id}/messages`, {
    content: script({ tools: [{ name: 'sleep', args: { ms: 300 } }] }, { text: 'first' }),
  });
  if (first.status !== 202) throw new Error(`handoff bench: HTTP ${first.status}`);
  await until(10_000, inTool(store, key));
  const sent = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      cluster.api(from, 'POST', `/workstreams/${id}/messages`, { content: script({ text: `queued ${i}` }) }),
    ),
  );
  const refused = sent.filter((r) => r.status !== 202);
  if (refused.length > 0)
    throw new Error(`handoff bench: HTTP ${refused[0]!.status} ${JSON.stringify(refused[0]!.body)}`);
  const rows = await until(20_000, async () => {
    const all = await store.readHistory(key);
    const users = all.filter((r) => r.message.role === 'user').length;
    return users === n + 1 && all.at(-1)?.message.role === 'assistant' ? all : undefined;
  });
  const gaps: number[] = [];
  for (let i = 1; i < rows.length; i++) {
    if (rows[i]!.message.role === 'user') gaps.push(rows[i]!.createdAt - rows[i - 1]!.createdAt);
  }
  const firstEnd = rows[rows.findIndex((r, i) => i > 0 && r.message.role === 'user') - 1]!.createdAt;
  const spanMs = Math.max(1, rows.at(-1)!.createdAt - firstEnd);
  return { gaps, perSec: (n * 1000) / spanMs };
}

async function queuedAcrossHosts(url: string, rounds: number) {
  const schema = 'bench_queued';
  const store = await openPostgresStore({ connectionString: url, schema });
  const cluster = await twoHosts(url, schema);
  const cross = { gaps: [] as number[], perSec: [] as number[] };
  const same = { gaps: [] as number[], perSec: [] as number[] };
  try {
    for (let r = 0; r < rounds; r++) {
      for (const [from, into] of [
        [0, same],
        [1, cross],
      ] as const) {
        const h = await handoffs(cluster, store, from, HANDOFF_SENDS, `q-${r}-${from}`);
        into.gaps.push(...h.gaps);
        into.perSec.push(h.perSec);
      }
    }
    return { cross, same };
  } finally {
    await cluster.stop();
    await store.close();
  }
}

/** Cancels of a turn in a tool call: from the other host (routed), then from the one running it. */
async function cancels(url: string, n: number) {
  const schema = 'bench_cancel';
  const store = await openPostgresStore({ connectionString: url, schema });
  const cluster = await twoHosts(url, schema);
  const routed: number[] = [];
  const local: number[] = [];
  try {
    await cluster.api(0, 'POST', '/workstreams', { workstreamId: 'c' });
    for (let i = 0; i < 2 * n; i++) {
      const from = i % 2 === 0 ? 1 : 0;
      const sent = await cluster.api(0, 'POST', '/workstreams/c/messages', { content: SLEEPING });
      if (sent.status !== 202) throw new Error(`cancel bench send: HTTP ${sent.status}`);
      const rowsBefore = (await store.readHistory(workstreamKey(TENANT, 'c'))).length;
      await until(10_000, () =>
        store
          .readHistory(workstreamKey(TENANT, 'c'))
          .then((rows) => (rows.length > rowsBefore ? true : undefined)),
      );
      await until(10_000, () =>
        store
          .readHistory(workstreamKey(TENANT, 'c'))
          .then((rows) => (rows.at(-1)?.message.role === 'assistant' ? true : undefined)),
      );
      const t0 = performance.now();
      const r = await cluster.api(from, 'POST', '/workstreams/c/cancel');
      const ms = performance.now() - t0;
      if (r.status !== 200 || r.body?.cancelled !== true)
        throw new Error(`cancel: HTTP ${r.status} ${JSON.stringify(r.body)}`);
      (from === 1 ? routed : local).push(ms);
    }
    return { routed, local };
  } finally {
    await cluster.stop();
    await store.close();
  }
}

export async function benchPostgres(ctx: BenchContext): Promise<Omit<SectionResult, 'durationMs'>> {
  const started = await startPostgres({ durable: true });
  if ('skip' in started) throw new Error(`no PostgreSQL to measure: ${started.skip}`);
  const server: Postgres = started;
  try {
    const windowMs = ctx.quick ? 1_500 : 4_000;
    const ours = await journalRows(server.url, windowMs, ctx);
    const raw = await rawRows(server.url, windowMs, 1);
    const raw8 = await rawRows(server.url, windowMs, WRITERS);
    const rounds = ctx.quick ? 1 : 3;
    const failovers: { ms: number; refusals: number }[] = [];
    for (let r = 0; r < rounds; r++) failovers.push(await failover(server.url, r));
    const c = await cancels(server.url, ctx.quick ? 6 : 20);
    const q = await queuedAcrossHosts(server.url, ctx.quick ? 1 : 3);
    const channel = await notifyChannel(server.url, ctx.quick ? 1_000 : 2_000);
    const relayTokens = ctx.quick ? 2_000 : 10_000;
    const relayed = await relayedTokens(server.url, relayTokens);
    const single = relayed.find((f) => f.hosts === 1);
    const bound = LEASE.ttlMs + LEASE.renewMs;
    const worst = Math.max(...failovers.map((f) => f.ms));
    return {
      name: 'postgres',
      title: 'several hosts on PostgreSQL',
      ours: `JournalGate over PostgresStore, ${WRITERS} workstreams at once, each awaiting its acknowledgement (${windowMs / 1000} s); hosts are 'turnwarden serve' processes (lease ${LEASE.ttlMs} ms, renewal every ${LEASE.renewMs} ms)`,
      baseline: `a raw pg loop of single-row INSERTs (autocommit; one connection, then ${WRITERS} at once), same server, same table shape (both unique keys); failover's bound is lease TTL + one renewal period; cancels called, and sends queued, on the host running the turn`,
      rows: [
        row('journal rows per second (8 workstreams) vs a raw loop', 'rows/s', ours.rowsPerSec, {
          baseline: raw,
          target: target('≥ 1.5× raw', ours.rowsPerSec >= 1.5 * raw),
        }),
        row('… vs 8 raw loops at once (8 connections)', 'rows/s', ours.rowsPerSec, { baseline: raw8 }),
        row('row accepted → durable p50', 'ms', median(ours.latency)),
        row('row accepted → durable p99', 'ms', quantile(ours.latency, 0.99)),
        row(`failover: SIGKILL → next turn started on another host (worst of ${rounds})`, 'ms', worst, {
          baseline: bound,
          target: target(`≤ TTL + renewal (${bound} ms)`, worst <= bound),
        }),
        row('failover p50', 'ms', median(failovers.map((f) => f.ms))),
        row(
          'queued send across hosts: one turn’s end → the next one’s user row p50',
          'ms',
          median(q.cross.gaps),
          {
            baseline: median(q.same.gaps),
          },
        ),
        row('… p99', 'ms', quantile(q.cross.gaps, 0.99), { baseline: quantile(q.same.gaps, 0.99) }),
        row(
          `queued turns a second, ${HANDOFF_SENDS} queued on the other host`,
          'turns/s',
          median(q.cross.perSec),
          {
            baseline: median(q.same.perSec),
          },
        ),
        row('cross-host cancel p50', 'ms', median(c.routed), { baseline: median(c.local) }),
        row('cross-host cancel p99', 'ms', quantile(c.routed, 0.99), { baseline: quantile(c.local, 0.99) }),
        ...channel.ours.flatMap((o, i) => {
          const r = channel.raw[i]!;
          return [
            row(
              `notifications/s each of 3 hosts receives at saturation, ${o.bytes} B`,
              'msg/s',
              o.peak.delivered,
              {
                baseline: r.peak.delivered,
              },
            ),
            row(`… send → delivery p99 at that rate (${o.bytes} B)`, 'ms', o.peak.p99, {
              baseline: r.peak.p99,
            }),
          ];
        }),
        ...relayed
          .filter((f) => f.remote !== undefined)
          .flatMap((f) => [
            row(
              `relayed tokens/s, ${f.hosts} hosts (${f.relay}): the slowest client on another host`,
              'tokens/s',
              f.remote!,
              { baseline: single?.local ?? f.local },
            ),
            row(
              `… its last token after the running host’s client (${f.hosts} hosts, ${f.relay})`,
              'ms',
              f.lagMs!,
            ),
          ]),
      ],
      notes: [
        `relayed tokens: a turn of ${relayTokens} tokens (the ticker model: one event each, a macrotask apart) on host 1, an SSE client on every host; baseline: the client on the running host with one host (${single === undefined ? '-' : single.local.toFixed(0)} tokens/s); the running host's own client with 2–3 hosts: ${relayed
          .filter((f) => f.hosts > 1)
          .map((f) => `${f.local.toFixed(0)} (${f.hosts}, ${f.relay})`)
          .join(
            ', ',
          )}; tokens a remote client missed: ${relayed.map((f) => f.missed).join(', ')}${redisSkipped()}`,
        `group commit: ${ours.batches} batches in ${ours.groups} transactions (${(ours.batches / Math.max(1, ours.groups)).toFixed(1)} per commit)`,
        `failover rounds: ${failovers.map((f) => `${f.ms.toFixed(0)} ms (${f.refusals} sends refused LEASED_ELSEWHERE first)`).join(', ')}; the send waits in the database's queue until the session is repaired`,
        `queued sends: ${HANDOFF_SENDS} sends behind a 300 ms turn on one host, sent to the other host (ours) or to that host itself (baseline, queued in the same table: every queued send of a cluster is), ${q.cross.perSec.length} rounds; gaps from the journal's timestamps (the database's clock, 1 ms)`,
        `cancels: ${c.routed.length} routed, ${c.local.length} local; a cancel returns once the turn ended with its call's result synthesized, on either host`,
        'the cluster runs with fsync on; both sides write to the same server',
        ...channel.ours.map((o, i) => {
          const level = (l: NotifyLevel) =>
            `${l.concurrency} senders: ${l.sent.toFixed(0)} sent/s, ${l.delivered.toFixed(0)} delivered/s, p50 ${l.p50.toFixed(1)} ms, p99 ${l.p99.toFixed(1)} ms`;
          return `notifications of ${o.bytes} B — ours: ${o.levels.map(level).join('; ')} — raw pg: ${channel.raw[i]!.levels.map(level).join('; ')}`;
        }),
        // Senders, listeners and the server share this machine: where every notification sent
        // arrived, the senders' CPU set the ceiling, not the channel.
        [...channel.ours, ...channel.raw].every((f) => f.levels.every((l) => l.delivered >= 0.99 * l.sent))
          ? 'notifications: every one sent arrived at every listener at every level — the ceiling is the senders’ (this machine’s CPU), not the channel’s'
          : 'notifications: at some level listeners received fewer than were sent — the channel (or a listener) saturated there',
      ],
    };
  } finally {
    server.stop();
  }
}

/** Why the Redis rows are missing, if they are. */
function redisSkipped(): string {
  const why = redisSkipReason();
  return why === undefined ? '' : ` (Redis rows skipped: ${why})`;
}
