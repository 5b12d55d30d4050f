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

interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly [key: string]: unknown;
}

async function gateOn(store: Store, ids: readonly string[], journal: Partial<JournalConfig> = {}) {
  for (const id of ids) {
    await store.createWorkstream({ id, tenantId: 't' });
    await store.nextGeneration(id);
  }
  const events = new EventHub(logger);
  const seen: TurnwardenEvent[] = [];
  const gone: string[] = [];
  const logs: LogLine[] = [];
  const deleting = new Set<string>();
  for (const id of ids) events.subscribe(id, (e) => seen.push(e));
  const gate = new JournalGate({
    store,
    events,
    logger: pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line)) }),
    turnOf: () => undefined,
    fenced: () => false,
    refused: () => {},
    workstreamGone: (id) => void gone.push(id),
    deleting: (id) => deleting.has(id),
    timers: nodeTimers,
    config: { journal: { ...DEFAULT_CONFIG.journal, ...journal } },
  });
  return { gate, seen, gone, deleting, logs };
}

/** `inner` without appendMany: a store that writes batch by batch. */
function withoutAppendMany(inner: ReturnType<typeof openSqliteStore>): Store {
  return new Proxy(inner, {
    get(target, key, receiver) {
      if (key === 'appendMany') return undefined;
      const value = Reflect.get(target, key, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** Lets the loop turn until `done()` holds (bounded). */
async function until(done: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 1_000 && !done(); i++) await new Promise((resolve) => setImmediate(resolve));
  if (!done()) throw new Error(`never happened: ${what}`);
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
    const { gate, deleting, seen } = await gateOn(faults.store, ['a'], {
      retryBaseMs: 60_000,
      retryMaxMs: 60_000,
    });
    const ack = gate.append(row('a', 'a1'));
    await until(() => gate.status('a').state === 'retrying', 'the batch retrying');
    expect(gate.status('a').state).toBe('retrying');
    deleting.add('a'); // a delete of the workstream has begun (its tombstone is up)
    expect(gate.sweep()).toEqual(['a']);
    expect(await ack).toEqual([]);
    expect(gate.status('a')).toEqual({ state: 'healthy', pendingRows: 0 });
    // The retrying state it had announced is withdrawn: no listener is left reading "retrying".
    expect(seen.filter((e) => e.type === 'persistence').map((e) => e.data.state)).toEqual([
      'retrying',
      'healthy',
    ]);
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
    // Each of those writes told the host too.
    expect(gone).toEqual(['a', 'a', 'a', 'a']);
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
    expect(gate.stats()).toEqual({ pendingRows: 2, retrying: 0, conflicts: 0 });
    release();
    expect(await ack).toEqual([1, 2]);
    expect(gate.status('a')).toEqual({ state: 'healthy', pendingRows: 0 });
  });

  it('the gate keeps state only for workstreams with rows pending, retrying or in conflict: a healthy one leaves none behind', async () => {
    const base = openSqliteStore({ path: ':memory:' });
    const faults = faultyStore(base);
    const { gate } = await gateOn(faults.store, ['a', 'b', 'c'], { retryBaseMs: 60_000, retryMaxMs: 60_000 });
    expect(gate.tracked).toBe(0);
    // Written and durable: nothing kept, for any of them.
    const acks = [gate.append(row('a', 'a1')), gate.append(row('b', 'b1')), gate.append(row('c', 'c1'))];
    expect(gate.tracked).toBe(3);
    expect(await Promise.all(acks)).toEqual([[1], [1], [1]]);
    expect(gate.tracked).toBe(0);
    // Retrying: kept until it lands (the sweep retries it now), then dropped.
    faults.inject({ match: (entry) => entry.commitKey === 'a2', fault: 'transient', times: 1 });
    const retried = gate.append(row('a', 'a2'));
    await until(() => gate.status('a').state === 'retrying', 'a retrying');
    expect(gate.tracked).toBe(1);
    gate.sweep();
    expect(await retried).toEqual([2]);
    expect(gate.tracked).toBe(0);
    // A conflict is kept (its state is what status reports) …
    await expect(
      gate.append({
        ...row('b', 'b1'),
        entries: [{ commitKey: 'b1', message: { role: 'user', content: 'other' } }],
      }),
    ).rejects.toMatchObject({ code: ErrorCode.COMMIT_CONFLICT });
    expect([gate.tracked, gate.status('b').state]).toEqual([1, 'conflict']);
    // … until a later batch of that workstream is durable: then it is healthy and dropped.
    expect(await gate.append(row('b', 'b2'))).toEqual([2]);
    expect([gate.tracked, gate.status('b').state]).toEqual([0, 'healthy']);
    // A batch that fails for good (not retryable) leaves nothing either.
    faults.inject({ match: (entry) => entry.commitKey === 'c2', fault: 'reject', times: 1 });
    await expect(gate.append(row('c', 'c2'))).rejects.toMatchObject({ code: ErrorCode.STORE_ERROR });
    expect(gate.tracked).toBe(0);
  });

  it('P3: with two batches of a workstream queued, the first landing leaves the second pending', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    const releases: (() => void)[] = [];
    const store = withAppendMany(inner, (inputs) =>
      new Promise<void>((resolve) => releases.push(resolve)).then(() => inner.appendMany(inputs)),
    );
    const { gate } = await gateOn(store, ['a']);
    const first = gate.append(row('a', 'a1'));
    const second = gate.append({
      ...row('a', 'a2'),
      entries: [...row('a', 'a2').entries, ...row('a', 'a3').entries],
    });
    expect(gate.status('a')).toEqual({ state: 'pending', pendingRows: 3 });
    await until(() => releases.length === 1, 'the first batch reaches the store');
    releases[0]!();
    expect(await first).toEqual([1]);
    expect(gate.status('a')).toEqual({ state: 'pending', pendingRows: 2 });
    await until(() => releases.length === 2, 'the second batch reaches the store');
    releases[1]!();
    expect(await second).toEqual([2, 3]);
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

  it('P1 P3: a commit key that holds another row is a conflict — the writer hears it, never retried, logged, announced — until a write of the workstream succeeds', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    const { gate, seen, logs } = await gateOn(inner, ['a'], { retryBaseMs: 1, retryMaxMs: 1 });
    expect(await gate.append(row('a', 'k'))).toEqual([1]);
    const other: AppendInput = {
      workstreamId: 'a',
      generation: 1,
      entries: [{ commitKey: 'k', message: { role: 'user', content: 'another body' } }],
    };
    await expect(gate.append(other)).rejects.toMatchObject({ code: ErrorCode.COMMIT_CONFLICT });
    const status = gate.status('a');
    expect(status).toMatchObject({
      state: 'conflict',
      pendingRows: 0,
      error: { code: ErrorCode.COMMIT_CONFLICT },
    });
    expect(gate.stats()).toEqual({ pendingRows: 0, retrying: 0, conflicts: 1 });
    expect(gate.sweep()).toEqual([]);
    const persistence = () => seen.filter((e) => e.type === 'persistence').map((e) => e.data.state);
    expect(persistence()).toEqual(['conflict']);
    expect(logs.filter((l) => l.msg === 'journal conflict: a commit key holds another row')).toEqual([
      expect.objectContaining({
        level: 50,
        workstreamId: 'a',
        err: expect.objectContaining({ code: ErrorCode.COMMIT_CONFLICT }),
      }),
    ]);
    expect(logs.filter((l) => l.msg === 'journal write failed; retrying')).toEqual([]);
    // The next batch that lands clears it, and says so.
    expect(await gate.append(row('a', 'k2'))).toEqual([2]);
    expect(gate.status('a')).toEqual({ state: 'healthy', pendingRows: 0 });
    expect(gate.stats()).toEqual({ pendingRows: 0, retrying: 0, conflicts: 0 });
    expect(persistence()).toEqual(['conflict', 'healthy']);
  });

  it('P3: stats() sums the rows not yet durable over every workstream and counts the journals retrying and in conflict', async () => {
    const base = openSqliteStore({ path: ':memory:' });
    const faults = faultyStore(base);
    const { gate } = await gateOn(faults.store, ['a', 'b', 'c', 'd'], {
      retryBaseMs: 60_000,
      retryMaxMs: 60_000,
    });
    expect(gate.stats()).toEqual({ pendingRows: 0, retrying: 0, conflicts: 0 });
    // c: in conflict (no rows pending); a and b: retrying, 2 and 3 rows; d: healthy.
    await gate.append(row('c', 'k'));
    await expect(
      gate.append({
        ...row('c', 'k'),
        entries: [{ commitKey: 'k', message: { role: 'user', content: 'other' } }],
      }),
    ).rejects.toMatchObject({ code: ErrorCode.COMMIT_CONFLICT });
    faults.inject({ match: (e) => /^[ab]/.test(e.commitKey), fault: 'transient', times: 2 });
    const rows = (id: string, n: number): AppendInput => ({
      workstreamId: id,
      generation: 1,
      entries: Array.from({ length: n }, (_, i) => ({
        commitKey: `${id}${i}`,
        message: { role: 'user' as const, content: `${i}` },
      })),
    });
    const acks = [gate.append(rows('a', 2)), gate.append(rows('b', 3))];
    await until(() => gate.stats().retrying === 2, 'a and b retrying');
    expect(await gate.append(row('d', 'd1'))).toEqual([1]);
    expect(gate.stats()).toEqual({ pendingRows: 5, retrying: 2, conflicts: 1 });
    expect(gate.sweep().sort()).toEqual(['a', 'b']);
    expect(await Promise.all(acks)).toEqual([
      [1, 2],
      [1, 2, 3],
    ]);
    expect(gate.stats()).toEqual({ pendingRows: 0, retrying: 0, conflicts: 1 });
  });

  it('P3: a failure that is not a retryable STORE_ERROR reaches the writer at once: one attempt, no retry state', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    let attempts = 0;
    let failWith: unknown;
    const store = withAppendMany(inner, async (inputs) => {
      attempts++;
      if (failWith !== undefined) throw failWith;
      return inner.appendMany(inputs);
    });
    const { gate, seen } = await gateOn(store, ['a'], { retryBaseMs: 1, retryMaxMs: 1, maxAttempts: 5 });
    const refusals: unknown[] = [
      new Error('not a Turnwarden error'),
      new TurnwardenError(ErrorCode.STORE_ERROR, 'a store error marked final', { retryable: false }),
      new TurnwardenError(ErrorCode.TIMEOUT, 'retryable, but not a store error', { retryable: true }),
    ];
    for (const refusal of refusals) {
      failWith = refusal;
      attempts = 0;
      await expect(gate.append(row('a', 'a1'))).rejects.toBe(refusal);
      expect(attempts).toBe(1);
      expect(gate.status('a')).toEqual({ state: 'healthy', pendingRows: 0 });
    }
    expect(seen.filter((e) => e.type === 'persistence')).toEqual([]);
  });

  it('P3: each retry is logged with its attempt and delay; rows discarded for a deletion are logged with their count', async () => {
    const base = openSqliteStore({ path: ':memory:' });
    const faults = faultyStore(base);
    faults.inject({ match: () => true, fault: 'transient', times: 2 });
    const { gate, logs, deleting } = await gateOn(faults.store, ['a', 'b'], {
      retryBaseMs: 1,
      retryMaxMs: 1,
    });
    expect(await gate.append(row('a', 'a1'))).toEqual([1]);
    const retries = logs.filter((l) => l.msg === 'journal write failed; retrying');
    expect(retries).toEqual([
      expect.objectContaining({ level: 40, workstreamId: 'a', attempts: 1, retryInMs: 1 }),
      expect.objectContaining({ level: 40, workstreamId: 'a', attempts: 2, retryInMs: 1 }),
    ]);
    deleting.add('b');
    expect(
      await gate.append({
        ...row('b', 'b1'),
        entries: [...row('b', 'b1').entries, ...row('b', 'b2').entries],
      }),
    ).toEqual([]);
    expect(logs.filter((l) => l.msg === 'journal rows discarded: the workstream is being deleted')).toEqual([
      expect.objectContaining({ level: 30, workstreamId: 'b', rows: 2 }),
    ]);
    deleting.delete('b');
    await base.deleteWorkstream('b');
    expect(await gate.append(row('b', 'b3'))).toEqual([]);
    expect(logs.filter((l) => l.msg === 'journal rows discarded: the workstream was deleted')).toEqual([
      expect.objectContaining({ level: 30, workstreamId: 'b', rows: 1 }),
    ]);
  });

  it('E2: durable rows are announced as message events with their seqs; rows without a seq are not', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    const { gate, seen } = await gateOn(inner, ['a']);
    const entries = ['x', 'y', 'z'].map((k) => ({
      commitKey: k,
      message: { role: 'user' as const, content: k },
    }));
    gate.announceRows('a', 4, entries, [7, undefined as unknown as number, 9]);
    expect(seen.filter((e) => e.type === 'message').map((e) => [e.generation, e.data])).toEqual([
      [4, { seq: 7, commitKey: 'x', message: entries[0]!.message }],
      [4, { seq: 9, commitKey: 'z', message: entries[2]!.message }],
    ]);
    gate.announceRows('a', 4, entries, []);
    expect(seen.filter((e) => e.type === 'message')).toHaveLength(2);
    // Through append: the seqs the store gave, in order.
    expect(
      await gate.append({
        ...row('a', 'r1'),
        entries: [...row('a', 'r1').entries, ...row('a', 'r2').entries],
      }),
    ).toEqual([1, 2]);
    expect(seen.filter((e) => e.type === 'message').map((e) => (e.data as { seq: number }).seq)).toEqual([
      7, 9, 1, 2,
    ]);
  });

  it('P2: a store without appendMany is written batch by batch through appendMessages and saveSession', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    const { gate } = await gateOn(withoutAppendMany(inner), ['a', 'b']);
    const [a, b] = await Promise.all([gate.append(row('a', 'a1')), gate.append(row('b', 'b1'))]);
    expect([a, b]).toEqual([[1], [1]]);
    expect(gate.commitStats).toEqual({ groups: 0, batches: 0 });
    const lease = await inner.acquireLease('a', 'h', 60_000);
    const session = { value: 'idle', context: { label: 'batch by batch' } };
    await gate.saveSession({ workstreamId: 'a', generation: 1, fencingToken: lease!.token, session });
    expect((await inner.getWorkstream('a'))?.session).toEqual(session);
    expect(gate.commitStats).toEqual({ groups: 0, batches: 0 });
  });

  it('P2: batches ready in one loop turn are one group; nothing is sent for an empty one', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    const groups: number[] = [];
    const store = withAppendMany(inner, (inputs) => {
      groups.push(inputs.length);
      return inner.appendMany(inputs);
    });
    const { gate } = await gateOn(store, ['a', 'b', 'c']);
    await Promise.all(['a', 'b', 'c'].map((id) => gate.append(row(id, `${id}1`))));
    await new Promise((resolve) => setImmediate(resolve));
    expect(groups).toEqual([3]);
    expect(gate.commitStats).toEqual({ groups: 1, batches: 3 });
  });
});
