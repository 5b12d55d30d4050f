/** The journal gate's persistence status, backoff and group limits, driven directly (P2, P3, P4). */
import { ErrorCode, TurnwardenError } from '@turnwarden/protocol';
import { type AppendInput, type AppendOutcome, openSqliteStore, type Store } from '@turnwarden/store';
import { faultyStore } from '@turnwarden/store/testing';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG, type JournalConfig } from '../config.js';
import { nodeTimers } from '../liveness/timers.js';
import { EventHub, type TurnwardenEvent } from '../streams/events.js';
import { JournalGate } from './journal-gate.js';

const logger = pino({ level: 'silent' });

async function gateOn(store: Store, ids: readonly string[], journal: Partial<JournalConfig> = {}) {
  for (const id of ids) {
    await store.createWorkstream({ id, tenantId: 't' });
    await store.nextGeneration(id);
  }
  const events = new EventHub(logger);
  const seen: TurnwardenEvent[] = [];
  const gone: string[] = [];
  const deleting = new Set<string>();
  for (const id of ids) events.subscribe(id, (e) => seen.push(e));
  const gate = new JournalGate({
    store,
    events,
    logger,
    turnOf: () => undefined,
    fenced: () => false,
    refused: () => {},
    workstreamGone: (id) => void gone.push(id),
    deleting: (id) => deleting.has(id),
    timers: nodeTimers,
    config: { journal: { ...DEFAULT_CONFIG.journal, ...journal } },
  });
  return { gate, seen, gone, deleting };
}

/** `inner` with its appendMany replaced. */
function withAppendMany(
  inner: ReturnType<typeof openSqliteStore>,
  appendMany: (inputs: readonly AppendInput[]) => Promise<AppendOutcome[]>,
): Store {
  return new Proxy(inner, {
    get(target, key, receiver) {
      if (key === 'appendMany') return appendMany;
      const value = Reflect.get(target, key, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

const row = (workstreamId: string, key: string): AppendInput => ({
  workstreamId,
  generation: 1,
  entries: [{ commitKey: key, message: { role: 'user', content: key } }],
});

describe('journal status', () => {
  it('D4: rows retrying when a delete of their workstream begins are never written — not by the backoff, not by the sweep', async () => {
    const base = openSqliteStore({ path: ':memory:' });
    const faults = faultyStore(base);
    faults.inject({ match: () => true, fault: 'transient', times: 1 });
    const { gate, deleting } = await gateOn(faults.store, ['a'], { retryBaseMs: 60_000, retryMaxMs: 60_000 });
    const ack = gate.append(row('a', 'a1'));
    for (let i = 0; i < 100 && gate.status('a').state !== 'retrying'; i++) {
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(gate.status('a').state).toBe('retrying');
    deleting.add('a'); // a delete of the workstream has begun (its tombstone is up)
    expect(gate.sweep()).toEqual(['a']);
    expect(await ack).toEqual([]);
    expect(gate.status('a')).toEqual({ state: 'healthy', pendingRows: 0 });
    expect(await base.readHistory('a')).toEqual([]);
    // A later batch is not written either while the tombstone stands.
    expect(await gate.append(row('a', 'a2'))).toEqual([]);
    expect(await base.readHistory('a')).toEqual([]);
  });

  it('P5: rows of a deleted workstream are discarded, not failed: no retry, no error state, the host told', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    const { gate, seen, gone } = await gateOn(inner, ['a', 'b'], { retryBaseMs: 60_000 });
    await inner.deleteWorkstream('a');
    // The batch resolves (no seqs: nothing became durable); the next one too.
    expect(await gate.append(row('a', 'a1'))).toEqual([]);
    expect(await gate.append(row('a', 'a2'))).toEqual([]);
    expect(gate.status('a')).toEqual({ state: 'healthy', pendingRows: 0 });
    expect(gate.sweep()).toEqual([]);
    expect(gone).toEqual(['a', 'a']);
    expect(seen.filter((e) => e.type === 'persistence')).toEqual([]);
    // A finalizer's write is discarded with the value it names; another write's refusal stands.
    const read = async (): Promise<number> => (await inner.readHistory('a')).length;
    expect(await gate.write('a', read, () => -1)).toBe(-1);
    await expect(gate.write('a', () => inner.readHistory('a'))).rejects.toMatchObject({
      code: ErrorCode.WORKSTREAM_NOT_FOUND,
    });
    // Another workstream is untouched.
    expect(await gate.append(row('b', 'b1'))).toEqual([1]);
  });

  it('P3: a batch not yet durable is pending, with its rows counted; durable, the journal is healthy again', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const store = withAppendMany(inner, (inputs) => held.then(() => inner.appendMany(inputs)));
    const { gate } = await gateOn(store, ['a']);
    const ack = gate.append({
      ...row('a', 'a1'),
      entries: [...row('a', 'a1').entries, ...row('a', 'a2').entries],
    });
    expect(gate.status('a')).toEqual({ state: 'pending', pendingRows: 2 });
    release();
    expect(await ack).toEqual([1, 2]);
    expect(gate.status('a')).toEqual({ state: 'healthy', pendingRows: 0 });
  });

  it('P3 P4: backoff n lies in [½, 1] × min(retryMaxMs, retryBaseMs × 2ⁿ⁻¹); retrying, retrying, then healthy is announced', async () => {
    const base = openSqliteStore({ path: ':memory:' });
    const faults = faultyStore(base);
    faults.inject({ match: () => true, fault: 'transient', times: 2 });
    const { gate, seen } = await gateOn(faults.store, ['a'], {
      retryBaseMs: 1_000,
      retryMaxMs: 60_000,
      sweepMs: 60_000,
      maxAttempts: 3,
    });
    const ack = gate.append(row('a', 'a1'));
    const retryIn = async (attempt: number) => {
      for (let i = 0; i < 100 && gate.status('a').attempts !== attempt; i++) {
        await new Promise((resolve) => setImmediate(resolve));
      }
      const s = gate.status('a');
      expect(s).toMatchObject({ state: 'retrying', attempts: attempt, pendingRows: 1 });
      return s.nextRetryAt! - Date.now();
    };
    const first = await retryIn(1);
    expect(first).toBeGreaterThanOrEqual(500 - 50);
    expect(first).toBeLessThanOrEqual(1_000);
    expect(gate.sweep()).toEqual(['a']);
    const second = await retryIn(2);
    expect(second).toBeGreaterThanOrEqual(1_000 - 50);
    expect(second).toBeLessThanOrEqual(2_000);
    expect(gate.sweep()).toEqual(['a']);
    expect(await ack).toEqual([1]);
    expect(seen.filter((e) => e.type === 'persistence').map((e) => [e.data.state, e.data.attempts])).toEqual([
      ['retrying', 1],
      ['retrying', 2],
      ['healthy', undefined],
    ]);
  });

  it('P3: when the attempts run out the writer gets the error and healthy is announced: nothing is left unresolved', async () => {
    const faults = faultyStore(openSqliteStore({ path: ':memory:' }));
    faults.inject({ match: () => true, fault: 'transient', times: 5 });
    const { gate, seen } = await gateOn(faults.store, ['a'], {
      retryBaseMs: 1,
      retryMaxMs: 1,
      maxAttempts: 2,
    });
    await expect(gate.append(row('a', 'a1'))).rejects.toMatchObject({
      code: ErrorCode.STORE_ERROR,
      retryable: true,
    });
    expect(seen.filter((e) => e.type === 'persistence').map((e) => e.data.state)).toEqual([
      'retrying',
      'healthy',
    ]);
    expect(gate.status('a')).toEqual({ state: 'healthy', pendingRows: 0 });
  });

  it('group commit carries at most 64 batches; the 65th goes in the next transaction', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    const groups: number[] = [];
    const store = withAppendMany(inner, (inputs) => {
      groups.push(inputs.length);
      return inner.appendMany(inputs);
    });
    const ids = Array.from({ length: 65 }, (_, i) => `w${i}`);
    const { gate } = await gateOn(store, ids);
    const acks = await Promise.all(ids.map((id) => gate.append(row(id, `${id}-1`))));
    expect(acks.every((a) => a.length === 1 && a[0] === 1)).toBe(true);
    expect(groups).toEqual([64, 1]);
  });

  it('a store whose appendMany returns fewer outcomes than batches fails the missing ones, typed', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    const store = withAppendMany(inner, async (inputs) => (await inner.appendMany(inputs)).slice(0, 1));
    const { gate } = await gateOn(store, ['a', 'b'], { maxAttempts: 1 });
    const [a, b] = await Promise.allSettled([gate.append(row('a', 'a1')), gate.append(row('b', 'b1'))]);
    expect(a).toEqual({ status: 'fulfilled', value: [1] });
    expect(b).toMatchObject({ status: 'rejected', reason: expect.any(TurnwardenError) });
    expect((b as PromiseRejectedResult).reason.message).toBe('appendMany returned no outcome');
  });
});
