/**
 * T4 across hosts (issue 25): with `admission.maxActivePerTenantInCluster`, a tenant's turns on
 * all the hosts together are bounded — counted by the database as their leases are taken — and a
 * send over the bound waits until a turn of its tenant ends on any host; other tenants are not
 * held back. Three runtimes share a store and an in-memory notification channel.
 */
import { ErrorCode } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { refusal, within } from '../test-support/bounded.js';
import { script } from '../test-support/runtime.js';
import { threeHostCluster } from '../test-support/three-hosts.js';

const cluster = threeHostCluster();
afterEach(() => cluster.stop());

const WAITS = 'send waits for a turn of its tenant to end in the cluster';
const tenantA = { tenantId: 'tenant-a', principal: 'user-a' };
const tenantB = { tenantId: 'tenant-b', principal: 'user-b' };
const ref1 = { ...tenantA, workstreamId: 'ws-1' };

async function threeHosts(limit: number, limits: { maxQueuedSendsPerTenant?: number } = {}) {
  const { a, b, c } = await cluster.start({ admission: { maxActivePerTenantInCluster: limit }, limits });
  await a.tw.createWorkstream({ ...tenantA, workstreamId: 'ws-2' });
  await a.tw.createWorkstream({ ...tenantA, workstreamId: 'ws-3' });
  await a.tw.createWorkstream({ ...tenantB, workstreamId: 'ws-b' });
  return { a, b, c };
}

describe('a tenant’s turns across hosts (T4, issue 25)', () => {
  it('T4: a tenant at its bound on all the hosts together waits on any host — other tenants do not — and starts once its turn ends elsewhere', async () => {
    const { a, b, c } = await threeHosts(1);
    const g = cluster.gate();
    const first = await a.send(script({ tools: [{ name: 'gated', args: g.args }] }, { text: 'first' }));
    await within(g.waiting, 10_000, 'the gated tool runs on host A');
    // Another workstream of the same tenant, on host B: it waits (neither refused nor started).
    const waits = b.waitForLog(WAITS);
    const second = b.tw.send({ ...tenantA, workstreamId: 'ws-2', content: script({ text: 'second' }) });
    const outcome = await within(
      Promise.race([
        waits.then(() => 'waits'),
        second.then(
          () => 'started',
          (e: unknown) => e,
        ),
      ]),
      10_000,
      'the second send',
    );
    expect(outcome).toBe('waits');
    // Another tenant, on host C, is not held back.
    const other = await within(
      c.tw.send({ ...tenantB, workstreamId: 'ws-b', content: script({ text: 'other tenant' }) }),
      10_000,
      'the other tenant’s send',
    );
    expect((await within(other.done, 10_000, 'its turn')).status).toBe('completed');
    // The first turn ends on host A: host B's send starts (told over the channel).
    g.open();
    expect((await within(first.done, 10_000, 'the first turn')).status).toBe('completed');
    const started = await within(second, 10_000, 'the waiting send starts');
    expect((await within(started.done, 10_000, 'its turn')).finalText).toBe('second');
  });

  it('T4: a tenant’s sends waiting behind turns on all its workstreams and hosts are bounded (limits.maxQueuedSendsPerTenant): QUEUE_FULL, retryable, nothing written', async () => {
    const { a, b, c } = await threeHosts(2, { maxQueuedSendsPerTenant: 1 });
    const [g1, g2] = [cluster.gate(), cluster.gate()];
    const t1 = await a.send(script({ tools: [{ name: 'gated', args: g1.args }] }, { text: 'one' }));
    const t2 = await c.tw.send({
      ...tenantA,
      workstreamId: 'ws-2',
      content: script({ tools: [{ name: 'gated', args: g2.args }] }, { text: 'two' }),
    });
    await within(Promise.all([g1.waiting, g2.waiting]), 10_000, 'both tools run');
    // One send of the tenant waits (behind ws-1's turn, queued on host B) …
    const queued = b.waitForLog('send queued durably behind a turn on another host');
    const first = b.tw.send({ ...ref1, content: script({ text: 'behind one' }) });
    first.catch(() => undefined);
    await within(queued, 10_000, 'the first send is queued');
    // … so another behind ws-2's turn, on host C, is one too many.
    const queuedAgain = c.waitForLog('send queued durably behind a turn on another host');
    const second = c.tw.send({ ...tenantA, workstreamId: 'ws-2', content: script({ text: 'behind two' }) });
    const outcome = await within(
      Promise.race([
        queuedAgain.then(() => 'queued'),
        second.then(
          () => 'started',
          (e: unknown) => e,
        ),
      ]),
      10_000,
      'the second send',
    );
    expect(outcome).toMatchObject({ code: ErrorCode.QUEUE_FULL, retryable: true, details: { limit: 1 } });
    g1.open();
    g2.open();
    await within(Promise.all([t1.done, t2.done]), 10_000, 'the turns');
    expect((await within((await first).done, 10_000, 'the queued send’s turn')).finalText).toBe('behind one');
    const texts = (await c.tw.history({ ...tenantA, workstreamId: 'ws-2' })).rows.filter(
      (r) => r.message.role === 'user',
    );
    expect(texts).toHaveLength(1);
  });

  it('T4: the wait is bounded by maxWaitMs — CAPACITY_EXHAUSTED (wait_timeout, retryable), nothing written', async () => {
    const { a, c } = await threeHosts(1);
    const g = cluster.gate();
    const first = await a.send(script({ tools: [{ name: 'gated', args: g.args }] }, { text: 'first' }));
    await within(g.waiting, 10_000, 'the gated tool runs on host A');
    const e = await refusal(
      c.tw.send({ ...tenantA, workstreamId: 'ws-3', content: script({ text: 'late' }), maxWaitMs: 20 }),
    );
    expect(e).toMatchObject({
      code: ErrorCode.CAPACITY_EXHAUSTED,
      retryable: true,
      details: { reason: 'wait_timeout', tenantId: 'tenant-a' },
    });
    expect((await c.tw.history({ ...tenantA, workstreamId: 'ws-3' })).rows).toEqual([]);
    g.open();
    await within(first.done, 10_000, 'the first turn');
  });
});
