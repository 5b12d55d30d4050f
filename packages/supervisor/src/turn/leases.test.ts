/**
 * The turn lease at runtime (P6, L3): a turn whose lease another holder took over can write
 * nothing more, and a refresh that fails ends the turn as `lease_lost`. The lease is taken over
 * through the store's own clock: it expires, and an intruder acquires it.
 */
import { ErrorCode, type JournalEntry } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { within } from '../test-support/bounded.js';
import { leaseStore } from '../test-support/lease-store.js';
import { nextEvent, script, startRuntime } from '../test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const toolRow = (e: JournalEntry) => e.message.role === 'tool' && e.message.synthesized !== true;

describe('turn lease at runtime', () => {
  it('P6: once another holder takes the lease, the store refuses every row of the superseded turn', async () => {
    const s = leaseStore();
    let intruderToken = 0;
    s.beforeAppend(toolRow, async () => {
      intruderToken = (await s.steal(rt!.key)).token;
    });
    // Renewal would notice the loss only at its next period: make that period longer than the test.
    rt = await startRuntime({ store: s.store, lease: { ttlMs: 120_000, renewMs: 60_000 } });
    const turn = await rt.send(
      script({ tools: [{ name: 'echo', args: { text: 'side effect' } }] }, { text: 'never journaled' }),
    );
    const result = await within(turn.done, 10_000, 'the superseded turn settles');
    expect(intruderToken).toBeGreaterThan(0);
    expect(result.status).toBe('failed');
    expect(result.error?.code).toBe(ErrorCode.FENCED);
    // Nothing the superseded turn wrote after the takeover is durable: not the tool's result,
    // not the final answer, not a synthesized result.
    const rows = await s.readHistory(rt.key);
    expect(rows.map((r) => r.message.role)).toEqual(['user', 'assistant']);
    // The takeover stands: the intruder's lease is live and was not released by the old turn.
    expect(await s.getLease(rt.key)).toMatchObject({
      holder: 'intruder',
      token: intruderToken,
      released: false,
    });
  });

  it('L3 P6: a lease refresh that fails ends the turn as lease_lost and is not counted as a renewal', async () => {
    const s = leaseStore();
    rt = await startRuntime({ store: s.store, lease: { ttlMs: 3_000, renewMs: 20 } });
    const turn = await rt.send(script({ tools: [{ name: 'heartbeat', args: { ms: 60_000, everyMs: 20 } }] }));
    await nextEvent(rt.tw, rt.workstreamId, 'tool_started');
    await s.steal(rt.key);
    const renewalsAtSteal = rt.tw.stats().leaseRenewals;
    const refreshesAtSteal = s.refreshes.length;
    // Either the turn ends, or three more refreshes happen — which a turn that noticed the loss
    // never lets happen (its renewal stops at the first failure).
    await within(Promise.race([turn.done, s.refreshed(3)]), 10_000, 'the turn ends or keeps refreshing');
    const failedAfterSteal = s.refreshes.slice(refreshesAtSteal).filter((r) => !r.ok).length;
    expect(failedAfterSteal).toBe(1);
    expect(rt.tw.stats().leaseLosses).toBe(1);
    // A renewal in flight when the lease was taken may still land; none after it failed.
    expect(rt.tw.stats().leaseRenewals - renewalsAtSteal).toBeLessThanOrEqual(1);
    const result = await within(turn.done, 10_000, 'the turn that lost its lease settles');
    expect(result).toMatchObject({ status: 'interrupted', abortReason: 'lease_lost' });
    expect(rt.logged('turn lease lost; aborting turn')).toHaveLength(1);
    expect(rt.types()).toContain('turn_aborted');
    expect(rt.events.find((e) => e.type === 'turn_aborted')?.data).toEqual({ reason: 'lease_lost' });
  });
});
