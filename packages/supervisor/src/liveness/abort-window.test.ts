/**
 * The abort windows (L4, L6, L7), driven exactly: the supervisor is held between the stall
 * sample and the commit (the `beforeCommit` seam) while activity lands, or the seam throws.
 * Counterparts of the watchdog suite's decline tests in shared/seeds/000_….
 */
import { Worker } from 'node:worker_threads';
import { SlotStamp } from '@turnwarden/clock';
import { afterEach, describe, expect, it } from 'vitest';
import { leaseStore } from '../test-support/lease-store.js';
import { FAST_WATCHDOG, nextEvent, script, startRuntime } from '../test-support/runtime.js';
import { type StallInfo, testControls } from '../testing.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

let beforeCommit: (info: StallInfo) => void | Promise<void> = () => {};
const hooks = { beforeCommit: (info: StallInfo) => beforeCommit(info) };

function expectDeclinedAndCompleted(r: Rt, result: { status: string }) {
  expect(result.status).toBe('completed');
  expect(r.types()).toContain('watchdog_fired');
  expect(r.types()).not.toContain('turn_aborted');
  expect(r.logged('watchdog aborted turn; lease renewal stopped')).toHaveLength(0);
  const stages = r.events.filter((e) => e.type === 'warning').map((e) => (e.data as { stage: string }).stage);
  expect(stages).not.toContain('definitive');
  expect(r.tw.stats().abortsCommitted).toBe(0);
}

describe('abort commit windows', () => {
  it('L4: activity that resumes while the stall is being surfaced makes the abort decline; the lease keeps renewing', async () => {
    let held = 0;
    const leases = leaseStore();
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, hooks, store: leases.store });
    const r = rt;
    // Hold the window open until the resumed turn's stamp has landed (its token event follows the stamp).
    beforeCommit = async () => {
      held++;
      await nextEvent(r.tw, r.workstreamId, 'token');
    };
    const declined = nextEvent(r.tw, r.workstreamId, 'watchdog_declined');
    // The declined turn's final row waits until two more renewals have succeeded after the
    // decline (bounded: if renewal stopped, the assertions below say so).
    let renewalsAtDecline = 0;
    leases.beforeAppend(
      (e) => e.message.role === 'assistant' && e.message.content === 'resumed',
      async () => {
        await declined;
        renewalsAtDecline = r.tw.stats().leaseRenewals;
        await Promise.race([leases.refreshed(2), new Promise((resolve) => setTimeout(resolve, 3_000))]);
      },
    );
    const turn = await r.send(script({ sleep: 450 }, { text: 'resumed', chunks: 2 }));
    const result = await turn.done;
    expect(held).toBe(1);
    expectDeclinedAndCompleted(r, result);
    expect(r.events.find((e) => e.type === 'watchdog_declined')?.data).toEqual({ why: 'activity' });
    expect(r.tw.stats().abortsDeclined).toBe(1);
    // L2/L4: a declined abort leaves renewal running — it renewed after the decline.
    expect(r.tw.stats().leaseRenewals - renewalsAtDecline).toBeGreaterThanOrEqual(2);
    expect(r.logged('turn liveness watchdog fired; attempting recovery')).toHaveLength(1);
  });

  it('L4: activity at the last instant before the commit makes it decline (no separate revalidation window exists)', async () => {
    let injected = 0;
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, hooks });
    const r = rt;
    beforeCommit = (info) => {
      injected++;
      new SlotStamp(testControls(r.tw).clockBuffer, info.slot).touch(5);
    };
    const result = await (await r.send(script({ sleep: 500 }, { text: 'recovered' }))).done;
    expect(injected).toBeGreaterThanOrEqual(1);
    expectDeclinedAndCompleted(r, result);
    expect(r.tw.stats().abortsDeclined).toBe(injected);
  });

  it('L6: a stamp from another thread inside the commit window is ordered before the CAS — nothing is published', async () => {
    let entered!: (info: StallInfo) => void;
    const atSeam = new Promise<StallInfo>((resolve) => {
      entered = resolve;
    });
    let release!: () => void;
    beforeCommit = (info) => {
      entered(info);
      return new Promise<void>((resolve) => {
        release = resolve;
      });
    };
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, hooks });
    const turn = await rt.send(script({ sleep: 600 }, { text: 'alive' }));
    const info = await atSeam;
    // The supervisor is parked between sample and commit; a competing thread stamps the slot.
    const stamper = new Worker(new URL('../test-support/stamp-once.mjs', import.meta.url), {
      workerData: { clock: testControls(rt.tw).clockBuffer, slot: info.slot },
    });
    const stamped = await new Promise<{ ok: boolean }>((resolve) => stamper.once('message', resolve));
    expect(stamped.ok).toBe(true);
    expect(rt.types()).not.toContain('turn_aborted');
    release();
    const result = await turn.done;
    expectDeclinedAndCompleted(rt, result);
  });

  it('L6: a stamp after the commit cannot revive the turn', async () => {
    beforeCommit = () => {};
    // `block` holds the worker past the commit, then its result stamp meets the fence.
    rt = await startRuntime({ watchdog: { timeoutMs: 200, pollMs: 20, graceMs: 2_000 } });
    const result = await (
      await rt.send(script({ tools: [{ name: 'block', args: { ms: 500 } }] }, { text: 'never' }))
    ).done;
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'watchdog', workerTerminated: false });
    const assistantTexts = (await rt.history())
      .filter((r) => r.message.role === 'assistant')
      .map((r) => r.message.content);
    expect(assistantTexts).not.toContain('never');
  });

  it('L7: when publishing the abort throws, nothing is published, the watchdog keeps sampling and the lease keeps renewing', async () => {
    let raised = 0;
    beforeCommit = () => {
      raised++;
      throw new Error('synthetic abort publication failure');
    };
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, hooks });
    const renewalsBefore = rt.tw.stats().leaseRenewals;
    const result = await (await rt.send(script({ sleep: 800 }, { text: 'recovered' }))).done;
    expect(raised).toBeGreaterThanOrEqual(2); // it kept sampling and tried again
    expectDeclinedAndCompleted(rt, result);
    expect(rt.logged('watchdog abort declined: publish failed; still watching')).toHaveLength(raised);
    expect(rt.tw.stats().leaseRenewals).toBeGreaterThan(renewalsBefore);
  });

  it('L7: a rejected commit seam declines fail-closed as well', async () => {
    beforeCommit = () => Promise.reject(new Error('synthetic async failure'));
    rt = await startRuntime({ watchdog: FAST_WATCHDOG, hooks });
    const result = await (await rt.send(script({ sleep: 450 }, { text: 'recovered' }))).done;
    expectDeclinedAndCompleted(rt, result);
  });
});
