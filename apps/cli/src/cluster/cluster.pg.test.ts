/**
 * Several hosts as real processes (`turnwarden serve --postgres … --host-id …`) on a throwaway
 * PostgreSQL cluster (issue 13). A host paused with SIGSTOP past its lease and resumed writes
 * nothing into the turn another host took over (P6, L3); a host killed with SIGKILL mid-turn is
 * taken over once its lease expires, its dangling call repaired (S2, S7) and the next turn
 * served; a cancel called on one host reaches the turn running on another.
 */
import { randomBytes } from 'node:crypto';
import { openToolCalls } from '@turnwarden/protocol';
import { openPostgresStore, type PostgresStore } from '@turnwarden/store';
import { type Postgres, slowPostgresSkipReason, startPostgres } from '@turnwarden/store/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HostCluster } from './hosts.js';

const TOKEN = 'cluster-test-token-0123456789';
const LEASE = { ttlMs: 1_000, renewMs: 250 };
const RUNTIME = {
  lease: LEASE,
  // The watchdog stays out of the way: the pause, not a stall, is what these tests are about.
  watchdog: { timeoutMs: 60_000, pollMs: 500, graceMs: 500 },
  pool: { maxWorkers: 2, warmWorkers: 1 },
};

const skip = slowPostgresSkipReason();
if (skip !== undefined) process.stdout.write(`cluster.pg.test: skipped — ${skip}\n`);
let pg: Postgres | undefined;
let cluster: HostCluster | undefined;
let store: PostgresStore | undefined;
let schemaN = 0;

beforeAll(async () => {
  if (skip !== undefined) return;
  const started = await startPostgres();
  if ('skip' in started) throw new Error(`PostgreSQL could not start: ${started.skip}`);
  pg = started;
}, 60_000);
afterAll(() => pg?.stop());
afterEach(async () => {
  await cluster?.stop();
  await store?.close();
  cluster = undefined;
  store = undefined;
});

/** A fresh database schema per test, the hosts and the test's own connection on it. */
async function hosts(n: number): Promise<{ cluster: HostCluster; store: PostgresStore }> {
  const schema = `c${++schemaN}_${randomBytes(3).toString('hex')}`;
  store = await openPostgresStore({ connectionString: pg!.url, schema });
  // The hosts' token serves tenant acme (HostCluster's default): the store keys w1 as acme/w1 (T2).
  cluster = await HostCluster.start({ postgres: pg!.url, schema, hosts: n, token: TOKEN, runtime: RUNTIME });
  return { cluster, store };
}

/** Workstream w1 on the first host, running a ten-minute tool whose call is durable. */
async function longTurnOnFirstHost(c: HostCluster, db: PostgresStore): Promise<void> {
  await c.api(0, 'POST', '/workstreams', { workstreamId: 'w1' });
  await c.api(0, 'POST', '/workstreams/w1/messages', { content: sleepTool(600_000) });
  await until('the tool call is durable', 10_000, async () =>
    (await db.readHistory('acme/w1')).some((r) => r.message.role === 'assistant') ? true : undefined,
  );
}

/** Waits for a condition the processes bring about, checking every 20 ms, failing after `ms`. */
async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) {
      // What the hosts said, to tell why (their warnings and errors).
      const said = (cluster?.hosts ?? []).map(
        (h) =>
          `${h.id} (${h.state}):\n${h.lines
            .filter(
              (l) => !l.includes('"msg":"request completed"') && !l.includes('"msg":"incoming request"'),
            )
            .slice(-15)
            .join('\n')}`,
      );
      const lease = store === undefined ? undefined : await store.getLease('acme/w1').catch(() => undefined);
      expect.fail(`${what}: not within ${ms} ms\nlease: ${JSON.stringify(lease)}\n${said.join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

const script = (...steps: unknown[]) => JSON.stringify({ script: steps });
const sleepTool = (ms: number, text = 'late answer') =>
  script({ tools: [{ name: 'sleep', args: { ms } }] }, { text });

describe.skipIf(skip !== undefined)('several hosts on PostgreSQL', () => {
  it('P6 L3: a host paused past its lease and resumed has every write for the lost turn refused; the other host took over, repaired and served', async () => {
    const { cluster, store } = await hosts(2);
    expect((await cluster.api(0, 'POST', '/workstreams', { workstreamId: 'w1' })).status).toBe(201);
    // h1 runs a turn whose tool sleeps a minute: it is mid-call whenever the pause comes.
    expect(
      (await cluster.api(0, 'POST', '/workstreams/w1/messages', { content: sleepTool(60_000, 'from h1') }))
        .status,
    ).toBe(202);
    await until('the tool call is durable', 10_000, async () =>
      (await store.readHistory('acme/w1')).some((r) => r.message.role === 'assistant') ? true : undefined,
    );
    const before = (await store.getLease('acme/w1'))!;
    expect(before.holder.startsWith('h1:')).toBe(true);
    cluster.pause(0);
    // h2's sweep finds the lease expired and repairs the session under a new token.
    await until('h2 takes the lease over', 10_000, async () => {
      const l = await store.getLease('acme/w1');
      return l !== undefined && l.token > before.token && l.holder.startsWith('h2:') ? l : undefined;
    });
    await until('the dangling call is repaired', 10_000, async () =>
      openToolCalls(await store.readHistory('acme/w1')).length === 0 ? true : undefined,
    );
    // h2 serves the next turn; its own tool call (a minute long) is open when h1 resumes.
    const sent = await cluster.api(1, 'POST', '/workstreams/w1/messages', {
      content: sleepTool(60_000, 'from h2'),
    });
    expect(sent.status).toBe(202);
    await until('h2’s tool call is durable', 10_000, async () =>
      (await store.readHistory('acme/w1')).length === 5 ? true : undefined,
    );
    const h2Token = (await store.getLease('acme/w1'))!.token;
    // h1 resumes: its renewal fails and it abandons the turn it lost. Its repair finds h2's call
    // open and tries to answer it — with its old token: refused by the store (FENCED).
    cluster.resume(0);
    await until('h1 notices it lost the lease', 15_000, async () =>
      cluster.logged(0, 'turn lease lost; aborting turn').length > 0 ? true : undefined,
    );
    const ended = (i: number) => async () => {
      const m = await cluster.api(i, 'GET', '/workstreams/w1/status');
      return m.status === 200 && m.body.activeTurn === undefined ? true : undefined;
    };
    await until('h1 ends the turn it lost', 15_000, ended(0));
    // Its repair found h2's call open and tried to answer it with its old token: refused (FENCED).
    // The log line comes over h1's stdout, which a loaded machine may deliver after the status
    // answer above: waited for, bounded.
    const repairRefused = 'repair refused: the lease was lost; the session is left to its holder';
    await until('h1 logs its refused repair', 15_000, async () =>
      cluster.logged(0, repairRefused).length > 0 ? true : undefined,
    );
    const refused = cluster.logged(0, repairRefused);
    expect(refused).toHaveLength(1);
    expect(JSON.stringify(refused[0])).toContain('FENCED');
    // h2's turn is untouched: its call is still open — nothing of h1's answered it.
    expect(openToolCalls(await store.readHistory('acme/w1'))).toHaveLength(1);
    expect((await cluster.api(1, 'GET', '/workstreams/w1/status')).body.activeTurn).toBeDefined();
    // h2's own cancel ends it, answering its call under its own lease.
    expect((await cluster.api(1, 'POST', '/workstreams/w1/cancel')).status).toBe(200);
    await until('h2 ends its turn', 15_000, ended(1));
    const rows = await store.readHistory('acme/w1');
    expect(rows.map((r) => r.message.role)).toEqual([
      'user',
      'assistant',
      'tool',
      'user',
      'assistant',
      'tool',
    ]);
    expect(rows[2]?.message).toMatchObject({ role: 'tool', synthesized: true, effect: 'unknown' });
    expect(rows[5]?.message).toMatchObject({ role: 'tool', synthesized: true });
    expect(JSON.stringify(rows[5]?.message)).toContain('cancelled');
    // Tokens never decrease along the history: no row from a superseded holder.
    const tokens = rows.flatMap((r) => (r.fencingToken === undefined ? [] : [r.fencingToken]));
    expect(tokens).toEqual([...tokens].sort((x, y) => x - y));
    expect(rows.slice(3).every((r) => r.fencingToken === h2Token)).toBe(true);
    // h1 let the session go instead of latching debt it could not repair: it serves it again.
    const again = await cluster.api(0, 'POST', '/workstreams/w1/messages', {
      content: script({ text: 'h1 again' }),
      wait: true,
    });
    expect(again.status).toBe(200);
    expect(again.body.status).toBe('completed');
  }, 90_000);

  it('S2 S7: a host killed mid-turn is taken over after its lease expires; the call is repaired and another host serves the next turn', async () => {
    const { cluster, store } = await hosts(2);
    await longTurnOnFirstHost(cluster, store);
    const killedAt = Date.now();
    await cluster.kill(0);
    await until('the dangling call is repaired by h2', 10_000, async () => {
      const rows = await store.readHistory('acme/w1');
      return rows.length === 3 && openToolCalls(rows).length === 0 ? true : undefined;
    });
    const failoverMs = Date.now() - killedAt;
    // h2's sweep did it (before any send asked), and counts it in its metrics (once the repair returned).
    await until('h2 counts the takeover', 5_000, async () => {
      const metrics = await (await fetch(`${cluster.host(1).url}/metrics`)).text();
      return metrics.split('\n').includes('turnwarden_cluster_failovers_total 1') ? true : undefined;
    });
    // The bound: the lease runs out, then one sweep period (plus this test's polling).
    expect(failoverMs).toBeLessThan(LEASE.ttlMs + LEASE.renewMs + 2_000);
    const next = await cluster.api(1, 'POST', '/workstreams/w1/messages', {
      content: script({ text: 'after failover' }),
      wait: true,
    });
    expect(next.body.status).toBe('completed');
    const rows = await store.readHistory('acme/w1');
    expect(openToolCalls(rows)).toEqual([]);
    expect(rows[2]?.message).toMatchObject({ role: 'tool', synthesized: true, effect: 'unknown' });
  }, 60_000);

  it('S7: a send queued behind a host that is killed is not lost — another host repairs the session, then starts it; its request answers on the host it was sent to', async () => {
    const { cluster, store } = await hosts(2);
    await longTurnOnFirstHost(cluster, store);
    const queued = cluster.api(1, 'POST', '/workstreams/w1/messages', {
      content: script({ text: 'typed during the turn' }),
      wait: true,
    });
    const row = await until('the send waits in the store', 10_000, () => store.nextQueuedSend('acme/w1'));
    await cluster.kill(0);
    const answered = await queued;
    expect(answered.status).toBe(200);
    expect(answered.body).toMatchObject({
      workstreamId: 'w1',
      generation: 2,
      status: 'completed',
      finalText: 'typed during the turn',
    });
    const rows = await store.readHistory('acme/w1');
    // The killed turn's call repaired first, then the queued send's turn, under its queue key.
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool', 'user', 'assistant']);
    expect(rows[2]?.message).toMatchObject({ role: 'tool', synthesized: true });
    expect(rows[3]?.commitKey).toBe(`q${row.id}:u`);
    expect(openToolCalls(rows)).toEqual([]);
  }, 60_000);

  it('C7: a send to the host not running the turn is queued durably, not refused; a cancel there reaches the turn and revokes it (409 SEND_REVOKED, nothing of it written)', async () => {
    const { cluster, store } = await hosts(2);
    await longTurnOnFirstHost(cluster, store);
    // Answered once its turn starts — or, here, once it is revoked.
    const queued = cluster.api(1, 'POST', '/workstreams/w1/messages', { content: 'hello' });
    const row = await until('the send waits in the store', 10_000, () => store.nextQueuedSend('acme/w1'));
    expect(row).toMatchObject({
      state: 'waiting',
      principal: expect.any(String),
      origin: expect.stringMatching(/^h2:/),
    });
    const cancelled = await cluster.api(1, 'POST', '/workstreams/w1/cancel');
    expect(cancelled.status).toBe(200);
    const revoked = await queued;
    expect(revoked.status).toBe(409);
    expect(revoked.body.error).toMatchObject({ code: 'SEND_REVOKED', details: { reason: 'cancel' } });
    const rows = await store.readHistory('acme/w1');
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant', 'tool']);
    expect(rows[2]?.message).toMatchObject({ synthesized: true });
    expect((await store.getLease('acme/w1'))?.released).toBe(true);
  }, 60_000);
});
