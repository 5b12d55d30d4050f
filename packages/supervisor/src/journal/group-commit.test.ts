/** The journal's group commit: rows ready together share one transaction; each writer hears its own outcome (P2). */
import { ErrorCode } from '@turnwarden/protocol';
import { type AppendInput, openSqliteStore, type Store } from '@turnwarden/store';
import { faultyStore } from '@turnwarden/store/testing';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG } from '../config.js';
import { nodeTimers } from '../liveness/timers.js';
import { EventHub } from '../streams/events.js';
import { JournalGate } from './journal-gate.js';

const logger = pino({ level: 'silent' });

/** A gate on `store` with no turn running and no retries (one attempt per batch). */
function gateOn(store: Store): JournalGate {
  return new JournalGate({
    store,
    events: new EventHub(logger),
    logger,
    turnOf: () => undefined,
    fenced: () => false,
    refused: () => {},
    workstreamGone: () => {},
    deleting: () => false,
    timers: nodeTimers,
    config: { journal: { ...DEFAULT_CONFIG.journal, maxAttempts: 1 } },
  });
}

async function fixture(ids: readonly string[]) {
  const inner = openSqliteStore({ path: ':memory:' });
  const groups: number[] = [];
  const store: Store = new Proxy(inner, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (key === 'appendMany') {
        return (inputs: readonly AppendInput[]) => {
          groups.push(inputs.length);
          return inner.appendMany(inputs);
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  for (const id of ids) {
    await store.createWorkstream({ id, tenantId: 't' });
    await store.nextGeneration(id);
  }
  return { gate: gateOn(store), store, groups };
}

const row = (workstreamId: string, key: string, role: 'user' | 'assistant' = 'user'): AppendInput => ({
  workstreamId,
  generation: 1,
  entries: [{ commitKey: key, message: { role, content: key } }],
});

describe('group commit', () => {
  it('P2 P6: session snapshots of several turns ready together are one appendMany, each fenced, each in its workstream’s order with its rows', async () => {
    const { gate, store, groups } = await fixture(['a', 'b', 'c']);
    const leases = await Promise.all(['a', 'b', 'c'].map((id) => store.acquireLease(id, 'me', 60_000)));
    const snapshot = (label: string) => ({ value: 'streaming', context: { label } });
    const [a, b, c] = leases.map((l) => l!.token);
    await Promise.all([
      gate.saveSession({ workstreamId: 'a', generation: 1, fencingToken: a!, session: snapshot('a') }),
      gate.saveSession({ workstreamId: 'b', generation: 1, fencingToken: b!, session: snapshot('b') }),
      // A stale token: refused alone (FENCED); the others commit.
      gate
        .saveSession({ workstreamId: 'c', generation: 1, fencingToken: c! + 1, session: snapshot('c') })
        .catch((e: { code?: string }) => e.code),
    ]).then((outcomes) => expect(outcomes[2]).toBe(ErrorCode.FENCED));
    expect(groups).toEqual([3]);
    expect((await store.getWorkstream('a'))?.session).toEqual(snapshot('a'));
    expect((await store.getWorkstream('b'))?.session).toEqual(snapshot('b'));
    expect((await store.getWorkstream('c'))?.session).toBeUndefined();
    // In order with the workstream's rows: a row then a snapshot, the snapshot lands after it.
    const order: string[] = [];
    await Promise.all([
      gate.append({ ...row('a', 'a1'), fencingToken: a! }).then(() => order.push('row')),
      gate
        .saveSession({ workstreamId: 'a', generation: 1, fencingToken: a!, session: snapshot('a2') })
        .then(() => order.push('snapshot')),
    ]);
    expect(order).toEqual(['row', 'snapshot']);
    expect(groups).toEqual([3, 1, 1]);
  });

  it('P2: batches of different workstreams ready in one loop turn go to the store in one appendMany; each writer gets its own seqs', async () => {
    const { gate, store, groups } = await fixture(['a', 'b', 'c']);
    const acks = await Promise.all([
      gate.append(row('a', 'a1')),
      gate.append(row('b', 'b1')),
      gate.append(row('c', 'c1')),
    ]);
    expect(acks).toEqual([[1], [1], [1]]);
    expect(groups).toEqual([3]);
    expect(gate.commitStats).toEqual({ groups: 1, batches: 3 });
    expect((await store.readHistory('b')).map((r) => r.commitKey)).toEqual(['b1']);
  });

  it('P2: a workstream’s second batch waits for its first (never in the same group out of order)', async () => {
    const { gate, store, groups } = await fixture(['a', 'b']);
    const acks = await Promise.all([
      gate.append(row('a', 'a1')),
      gate.append(row('a', 'a2', 'assistant')),
      gate.append(row('b', 'b1')),
    ]);
    expect(acks).toEqual([[1], [2], [1]]);
    expect(groups).toEqual([2, 1]);
    expect((await store.readHistory('a')).map((r) => r.commitKey)).toEqual(['a1', 'a2']);
  });

  it('S4: a batch refused inside a group fails alone; the others in its group are durable', async () => {
    const { gate, store, groups } = await fixture(['a', 'b']);
    const results = await Promise.allSettled([
      gate.append(row('a', 'a1')),
      // b has no generation 7: refused by the store, alone.
      gate.append({ ...row('b', 'b1'), generation: 7 }),
    ]);
    expect(groups).toEqual([2]);
    expect(results[0]).toEqual({ status: 'fulfilled', value: [1] });
    expect(results[1]).toMatchObject({ status: 'rejected', reason: { code: ErrorCode.INVALID_INPUT } });
    expect((await store.readHistory('a')).map((r) => r.commitKey)).toEqual(['a1']);
    expect(await store.readHistory('b')).toEqual([]);
  });

  it('a store that throws instead of rejecting fails every batch of the group, typed, and the gate goes on', async () => {
    const { store } = await fixture(['a', 'b']);
    const f = faultyStore(store);
    f.inject({ match: (e) => e.commitKey === 'b1', fault: 'throw' });
    const thrower = gateOn(f.store);
    const results = await Promise.allSettled([
      thrower.append(row('a', 'a1')),
      thrower.append(row('b', 'b1')),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(results[1]).toMatchObject({ reason: { code: ErrorCode.STORE_ERROR } });
    expect(await thrower.append(row('a', 'a1'))).toEqual([1]);
  });
});
