/**
 * Several hosts behind a real load balancer (issue 25): three `turnwarden serve` processes on a
 * throwaway PostgreSQL cluster, Debian's HAProxy in front of them (round robin, health checks on
 * `/readyz`), every client call through it. Messages typed during a turn land on whichever host
 * the balancer picks: each is queued durably — never LEASED_ELSEWHERE — and they run in the
 * order they were sent; a killed host's share goes to the others.
 */
import { randomBytes } from 'node:crypto';
import { openPostgresStore, type PostgresStore } from '@turnwarden/store';
import { type Postgres, slowPostgresSkipReason, startPostgres } from '@turnwarden/store/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Balancer, balancerSkipReason, startBalancer } from './balancer.js';
import { type ApiResponse, HostCluster } from './hosts.js';

const TOKEN = 'balancer-test-token-0123456789';
const RUNTIME = {
  lease: { ttlMs: 1_000, renewMs: 250 },
  watchdog: { timeoutMs: 60_000, pollMs: 500, graceMs: 500 },
  pool: { maxWorkers: 2, warmWorkers: 1 },
};

const skip = slowPostgresSkipReason() ?? balancerSkipReason();
if (skip !== undefined) process.stdout.write(`balancer.pg.test: skipped — ${skip}\n`);
let pg: Postgres | undefined;
let cluster: HostCluster | undefined;
let balancer: Balancer | undefined;
let store: PostgresStore | undefined;

beforeAll(async () => {
  if (skip !== undefined) return;
  const started = await startPostgres();
  if ('skip' in started) throw new Error(`PostgreSQL could not start: ${started.skip}`);
  pg = started;
}, 60_000);
afterAll(() => pg?.stop());
afterEach(async () => {
  await balancer?.stop();
  await cluster?.stop();
  await store?.close();
  balancer = undefined;
  cluster = undefined;
  store = undefined;
});

const script = (...steps: unknown[]) => JSON.stringify({ script: steps });

/** A call through the balancer. */
async function api(method: string, path: string, body?: unknown): Promise<ApiResponse> {
  const res = await fetch(`${balancer!.url}/v1${path}`, {
    method,
    headers: {
      authorization: `Bearer ${TOKEN}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
}

async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined | false>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline)
      expect.fail(`${what}: not within ${ms} ms\n${balancer?.lines.slice(-10).join('\n')}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.skipIf(skip !== undefined)('several hosts behind a load balancer', () => {
  it('C7 T3: messages typed during a turn, through a round-robin balancer, are queued on whatever host gets them — none LEASED_ELSEWHERE — and run in the order sent; with a host killed, the others serve', async () => {
    const schema = `b_${randomBytes(4).toString('hex')}`;
    store = await openPostgresStore({ connectionString: pg!.url, schema });
    cluster = await HostCluster.start({
      postgres: pg!.url,
      schema,
      hosts: 3,
      token: TOKEN,
      runtime: RUNTIME,
    });
    balancer = await startBalancer(cluster.hosts.map((h) => ({ id: h.id, url: h.url })));
    expect((await api('POST', '/workstreams', { workstreamId: 'w1' })).status).toBe(201);
    const first = await api('POST', '/workstreams/w1/messages', {
      content: script({ tools: [{ name: 'sleep', args: { ms: 1_500 } }] }, { text: 'first' }),
    });
    expect(first.status).toBe(202);
    await until('the first turn is in its tool call', 10_000, async () =>
      (await store!.readHistory('acme/w1')).some((r) => r.message.role === 'assistant'),
    );
    // Typed one after another while the first turn runs: each request waits for its turn to
    // start, so the next is sent once the one before is queued.
    const typed: Promise<ApiResponse>[] = [];
    for (const [n, text] of ['one', 'two', 'three'].entries()) {
      let early: ApiResponse | undefined;
      const sent = api('POST', '/workstreams/w1/messages', { content: script({ text }), wait: true });
      typed.push(sent);
      void sent.then((r) => {
        early = r;
      });
      await until(
        `message "${text}" is queued (or answered)`,
        10_000,
        async () => early !== undefined || (await store!.countQueuedSends('acme/w1')) === n + 1,
      );
      // Answered before the first turn ended: refused (LEASED_ELSEWHERE, say), not queued.
      expect(early?.body?.error?.code).toBeUndefined();
    }
    const answers = await Promise.all(typed);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(answers.map((a) => a.body.finalText)).toEqual(['one', 'two', 'three']);
    expect(answers.map((a) => a.body.generation)).toEqual([2, 3, 4]);
    // The balancer spread them: hosts other than the one running the first turn queued them.
    const users = (await store.readHistory('acme/w1')).filter((r) => r.message.role === 'user');
    expect(
      users.map(
        (r) => (JSON.parse(r.message.content) as { script: { text?: string }[] }).script.at(-1)?.text,
      ),
    ).toEqual(['first', 'one', 'two', 'three']);
    const queuedBy = new Set(
      cluster.hosts.flatMap((h, i) =>
        cluster!.logged(i, 'send queued durably behind a turn on another host').length > 0 ? [h.id] : [],
      ),
    );
    expect(queuedBy.size).toBeGreaterThanOrEqual(2);
    // One host dies: its share of the requests goes to the others (refused connections are
    // redispatched; its health checks take it out of the rotation).
    await cluster.kill(0);
    for (const text of ['after one', 'after two', 'after three']) {
      const r = await api('POST', '/workstreams/w1/messages', { content: script({ text }), wait: true });
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ status: 'completed', finalText: text });
    }
  }, 90_000);
});
