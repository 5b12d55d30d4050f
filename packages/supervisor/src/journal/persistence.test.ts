/** The journal's persistence status (P3), its retries and maintenance sweep (P4). */
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { within } from '../test-support/bounded.js';
import { assistantRow, faultyStore } from '../test-support/faulty-store.js';
import { nextEvent, script, startRuntime } from '../test-support/runtime.js';
import { testControls } from '../testing.js';
import type { PersistenceStatus } from '../types.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

const transient = () =>
  new TurnwardenError(ErrorCode.STORE_ERROR, 'injected: database is locked', {
    retryable: true,
    details: { sqliteCode: 'SQLITE_BUSY' },
  });
const conflict = () => new TurnwardenError(ErrorCode.COMMIT_CONFLICT, 'injected: the key holds another row');
/** Backoff and sweep periods no test outlives: only an explicit sweep retries. */
const journal = { retryBaseMs: 600_000, retryMaxMs: 600_000, sweepMs: 600_000 };

describe('persistence status', () => {
  it('P3 P4: a transient failure makes the journal retrying (attempts, next retry, error); the sweep retries it before its backoff; once durable it is healthy, written once', async () => {
    const faulty = faultyStore();
    rt = await startRuntime({ store: faulty.store, journal });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    faulty.rejectWith(2, assistantRow, transient);
    const retrying = nextEvent(rt.tw, rt.workstreamId, 'persistence');
    const turn = await rt.send(script({ text: 'kept' }));
    // Whichever comes first: the journal reporting retrying, or the turn ending (it must not).
    const outcome = await within(
      Promise.race([retrying.then((e) => e.data), turn.done.then((r) => ({ turnEnded: r.status }))]),
      10_000,
      'the journal reports retrying',
    );
    expect(outcome).toMatchObject({ state: 'retrying', attempts: 1, pendingRows: 1 });
    const first = outcome as unknown as PersistenceStatus;
    expect(first.error?.code).toBe(ErrorCode.STORE_ERROR);
    // Jittered backoff: between half and all of the base delay from now.
    expect(first.nextRetryAt! - Date.now()).toBeGreaterThan(250_000);
    expect((await rt.tw.status(ref)).persistence).toEqual(first);

    // P4: the sweep retries now (the backoff has minutes to go); the second attempt fails too.
    const again = nextEvent(rt.tw, rt.workstreamId, 'persistence');
    expect(testControls(rt.tw).sweepJournal()).toEqual([rt.key]);
    expect(
      ((await within(again, 10_000, 'the second attempt')).data as unknown as PersistenceStatus).attempts,
    ).toBe(2);
    const healthy = nextEvent(rt.tw, rt.workstreamId, 'persistence');
    expect(testControls(rt.tw).sweepJournal()).toEqual([rt.key]);
    expect((await within(healthy, 10_000, 'the third attempt')).data).toEqual({
      state: 'healthy',
      pendingRows: 0,
    });

    expect((await within(turn.done, 10_000, 'the turn completes')).status).toBe('completed');
    expect(faulty.attempts(assistantRow)).toBe(3);
    const rows = await rt.history();
    expect(rows.map((r) => [r.message.role, r.message.content])).toEqual([
      ['user', expect.any(String)],
      ['assistant', 'kept'],
    ]);
    expect((await rt.tw.status(ref)).persistence).toEqual({ state: 'healthy', pendingRows: 0 });
    expect(testControls(rt.tw).sweepJournal()).toEqual([]);
  });

  it('P3: journal.maxAttempts bounds the retries; then the writer gets the store error and nothing is left retrying', async () => {
    const faulty = faultyStore();
    rt = await startRuntime({
      store: faulty.store,
      journal: { maxAttempts: 2, retryBaseMs: 1, retryMaxMs: 1 },
    });
    faulty.rejectWith(5, assistantRow, transient);
    const result = await (await rt.send(script({ text: 'lost' }))).done;
    expect(result.status).toBe('failed');
    expect(result.error?.code).toBe(ErrorCode.STORE_ERROR);
    expect(faulty.attempts(assistantRow)).toBe(2);
    const status = await rt.tw.status({
      tenantId: 'tenant-a',
      principal: 'user-a',
      workstreamId: rt.workstreamId,
    });
    expect(status.persistence).toEqual({ state: 'healthy', pendingRows: 0 });
    expect((await rt.history()).map((r) => r.message.role)).toEqual(['user']);
  });

  it('P1 P3: a commit conflict is reported as conflict and never retried; the next durable write clears it', async () => {
    const faulty = faultyStore();
    rt = await startRuntime({ store: faulty.store, journal });
    const ref = { tenantId: 'tenant-a', principal: 'user-a', workstreamId: rt.workstreamId };
    faulty.rejectWith(1, assistantRow, conflict);
    const result = await (await rt.send(script({ text: 'diverged' }))).done;
    expect(result.error?.code).toBe(ErrorCode.COMMIT_CONFLICT);
    // Reported before the turn ended (the writer heard of it after the event).
    const reported = rt.events
      .filter((e) => e.type === 'persistence')
      .map((e) => e.data as unknown as PersistenceStatus);
    expect(reported).toEqual([expect.objectContaining({ state: 'conflict', pendingRows: 0 })]);
    expect(reported[0]?.error?.code).toBe(ErrorCode.COMMIT_CONFLICT);
    expect((await rt.tw.status(ref)).persistence.state).toBe('conflict');
    // Never retried, by backoff or sweep.
    expect(testControls(rt.tw).sweepJournal()).toEqual([]);
    expect(faulty.attempts(assistantRow)).toBe(1);
    // The next turn's rows are durable: the conflict is cleared.
    expect((await (await rt.send('again')).done).status).toBe('completed');
    expect((await rt.tw.status(ref)).persistence).toEqual({ state: 'healthy', pendingRows: 0 });
  });
});
