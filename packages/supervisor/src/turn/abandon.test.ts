/**
 * Finishing force-abandoning (abandon.ts, repair.ts) on a real store: the machine's steps, the
 * synthesized results (S2) and what is reported, a failed repair (S3).
 */
import { openToolCalls, type SessionSnapshotData } from '@turnwarden/protocol';
import { offer, stateNameOf } from '@turnwarden/session';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG } from '../config.js';
import { JournalGate } from '../journal/journal-gate.js';
import { nodeTimers } from '../liveness/timers.js';
import { Sessions } from '../sessions/sessions.js';
import { newCounters } from '../stats.js';
import { EventHub, type TurnwardenEvent } from '../streams/events.js';
import { abandon } from './abandon.js';
import { repairOpenCalls } from './repair.js';

async function world(options: { failRepair?: boolean; failSave?: boolean } = {}) {
  const inner = openSqliteStore({ path: ':memory:' });
  const logs: { level: number; msg: string; [k: string]: unknown }[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void logs.push(JSON.parse(s)) });
  const store: Store = new Proxy(inner, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof value !== 'function') return value;
      if (key === 'appendMessages' && options.failRepair) return () => Promise.reject(new Error('disk full'));
      if (key === 'saveSession' && options.failSave) return () => Promise.reject(new Error('disk gone'));
      return (value as (...a: unknown[]) => unknown).bind(target);
    },
  });
  const events: TurnwardenEvent[] = [];
  const hub = new EventHub(logger);
  hub.subscribe('ws', (e) => events.push(e));
  const sessions = new Sessions(store, hub, logger);
  const counters = newCounters();
  const gate = new JournalGate({
    store,
    events: hub,
    logger,
    turnOf: () => undefined,
    fenced: () => false,
    timers: nodeTimers,
    config: { journal: DEFAULT_CONFIG.journal },
    refused: () => {},
    workstreamGone: () => {},
    deleting: () => false,
  });
  await inner.createWorkstream({ id: 'ws', tenantId: 't' });
  const generation = await inner.nextGeneration('ws');
  const lease = (await inner.acquireLease('ws', 'me', 60_000))!;
  await inner.appendMessages({
    workstreamId: 'ws',
    generation,
    fencingToken: lease.token,
    entries: [
      { commitKey: 'u', message: { role: 'user', content: 'go' } },
      {
        commitKey: 'a',
        message: {
          role: 'assistant',
          content: '',
          toolCalls: [
            { id: 'c', name: 'echo', arguments: '{}' },
            { id: 'c', name: 'echo', arguments: '{}' },
          ],
        },
      },
    ],
  });
  const rec = sessions.record('ws');
  await sessions.load(rec);
  const claimed = offer(rec.snapshot!, { type: 'CLAIM', generation })!;
  const host = { store, gate, sessions, events: hub, counters };
  const log = logger.child({ workstreamId: 'ws', generation });
  return { inner, host, rec, claimed, lease, generation, logs, events, counters, log };
}

/** A cancel abandoning the claimed turn of `w` (no tool started). */
const cancelFromClaimed = (w: Awaited<ReturnType<typeof world>>) =>
  abandon(w.host, w.rec, {
    from: w.claimed,
    reason: 'cancel',
    why: 'cancelled',
    lease: w.lease,
    generation: w.generation,
    startedCalls: [],
    log: w.log,
  });

const transitions = (logs: { msg: string; [k: string]: unknown }[]) =>
  logs.filter((l) => l.msg === 'session transition').map((l) => `${l.from} --${l.via}--> ${l.to}`);

describe('abandon', () => {
  it('S2: from mid-turn: ABORT, REPAIR, results synthesized under the lease, idle, reported once', async () => {
    const w = await world();
    const result = await abandon(w.host, w.rec, {
      from: w.claimed,
      reason: 'cancel',
      why: 'cancelled',
      lease: w.lease,
      generation: w.generation,
      startedCalls: [0],
      log: w.log,
    });
    expect(result).toEqual({ synthesized: 2, repaired: true });
    expect(transitions(w.logs)).toEqual([
      'claimed --ABORT--> force-abandoning.pending',
      'force-abandoning.pending --REPAIR--> force-abandoning.repairing',
      'force-abandoning.repairing --xstate.done.actor.repair--> idle',
    ]);
    const rows = await w.inner.readHistory('ws');
    expect(openToolCalls(rows)).toEqual([]);
    expect(
      w.logs.filter((l) => l.msg === 'tool cleanup failed; workstream refuses claims until repaired'),
    ).toEqual([]);
    expect(rows.slice(2).map((r) => r.message)).toEqual([
      {
        role: 'tool',
        toolCallId: 'c',
        callIndex: 0,
        name: 'echo',
        content: 'Tool call did not complete: the turn was cancelled. Its effect is unknown.',
        isError: true,
        effect: 'unknown',
        synthesized: true,
      },
      {
        role: 'tool',
        toolCallId: 'c',
        callIndex: 1,
        name: 'echo',
        content: 'Tool call not run: the turn was cancelled before it started.',
        isError: true,
        effect: 'none',
        synthesized: true,
      },
    ]);
    expect(rows.slice(2).map((r) => r.commitKey)).toEqual(['a:t0', 'a:t1']);
    // E2: each synthesized row, once durable, is announced to listeners with its seq (the handoff
    // from a history read before the repair loses none of them).
    expect(w.events.filter((e) => e.type === 'message').map((e) => [e.data.seq, e.data.commitKey])).toEqual(
      rows.slice(2).map((r) => [r.seq, r.commitKey]),
    );
    expect(w.counters.toolResultsSynthesized).toBe(2);
    expect(w.logs.filter((l) => l.msg === 'tool results synthesized')).toEqual([
      expect.objectContaining({ level: 40, count: 2, workstreamId: 'ws' }),
    ]);
    expect(w.events.filter((e) => e.type === 'tool_results_synthesized').map((e) => e.data)).toEqual([
      { count: 2 },
    ]);
    expect(w.events.filter((e) => e.type === 'state').map((e) => e.data.state)).toEqual([
      'claimed',
      'force-abandoning',
      'idle',
    ]);
    // The repaired snapshot is durable.
    expect(stateNameOf((await w.inner.getWorkstream('ws'))!.session as SessionSnapshotData)).toBe('idle');
  });

  it('from force-abandoning (the supervisor already moved it): no second ABORT', async () => {
    const w = await world();
    const pending = offer(w.claimed, { type: 'ABORT', reason: 'watchdog' })!;
    await abandon(w.host, w.rec, {
      from: pending,
      reason: 'watchdog',
      why: 'aborted by the liveness watchdog',
      lease: w.lease,
      generation: w.generation,
      startedCalls: undefined,
      log: w.log,
    });
    expect(transitions(w.logs)).toEqual([
      'force-abandoning.pending --REPAIR--> force-abandoning.repairing',
      'force-abandoning.repairing --xstate.done.actor.repair--> idle',
    ]);
    // Nothing is provably unstarted when the worker died: every effect is unknown.
    const tools = (await w.inner.readHistory('ws')).slice(2).map((r) => r.message);
    expect(tools.map((m) => (m.role === 'tool' ? m.effect : ''))).toEqual(['unknown', 'unknown']);
  });

  it('S3: a repair that fails leaves the session in force-abandoning, reported, nothing synthesized', async () => {
    const w = await world({ failRepair: true });
    const result = await cancelFromClaimed(w);
    expect(result).toEqual({ synthesized: 0, repaired: false });
    expect(w.rec.state).toBe('force-abandoning');
    expect(w.counters.toolResultsSynthesized).toBe(0);
    expect(w.events.filter((e) => e.type === 'tool_results_synthesized')).toEqual([]);
    expect(
      w.logs.filter((l) => l.msg === 'tool cleanup failed; workstream refuses claims until repaired'),
    ).toEqual([
      expect.objectContaining({ level: 50, err: expect.objectContaining({ message: 'disk full' }) }),
    ]);
    expect(transitions(w.logs).at(-1)).toBe(
      'force-abandoning.repairing --xstate.error.actor.repair--> force-abandoning.pending',
    );
  });

  it('P6: a repair the store refuses because the lease was lost leaves the session to its new holder: forgotten, not latched as debt', async () => {
    const w = await world();
    // Another holder took the workstream: this host's token is fenced.
    expect(await w.inner.releaseLease('ws', 'me', w.lease.token)).toBe(true);
    expect(await w.inner.acquireLease('ws', 'other', 60_000)).toBeDefined();
    const result = await cancelFromClaimed(w);
    expect(result).toEqual({ synthesized: 0, repaired: false });
    // What this host held of the session is stale: re-read from the store next time.
    expect(w.rec.snapshot).toBeUndefined();
    expect(
      w.logs.filter((l) => l.msg === 'repair refused: the lease was lost; the session is left to its holder'),
    ).toEqual([expect.objectContaining({ level: 40, err: expect.objectContaining({ code: 'FENCED' }) })]);
    expect(
      w.logs.filter((l) => l.msg === 'tool cleanup failed; workstream refuses claims until repaired'),
    ).toEqual([]);
    // Nothing was written under the lost lease.
    expect(openToolCalls(await w.inner.readHistory('ws'))).toHaveLength(2);
  });

  it('a snapshot that cannot be saved is logged; the session is still repaired in memory', async () => {
    const w = await world({ failSave: true });
    const result = await abandon(w.host, w.rec, {
      from: w.claimed,
      reason: 'cancel',
      why: 'cancelled',
      lease: w.lease,
      generation: w.generation,
      startedCalls: [0, 1],
      log: w.log,
    });
    expect(result.repaired).toBe(true);
    expect(w.rec.state).toBe('idle');
    expect(w.logs.filter((l) => l.msg === 'session snapshot not saved; the durable one is older')).toEqual([
      expect.objectContaining({ level: 40, err: expect.objectContaining({ message: 'disk gone' }) }),
    ]);
  });
});

describe('repairOpenCalls', () => {
  it('S2: writes nothing when the history is complete', async () => {
    const inner = openSqliteStore({ path: ':memory:' });
    await inner.createWorkstream({ id: 'w', tenantId: 't' });
    await inner.appendMessages({
      workstreamId: 'w',
      generation: 0,
      entries: [{ commitKey: 'u', message: { role: 'user', content: 'hi' } }],
    });
    let appends = 0;
    const store = {
      readHistory: (id: string) => inner.readHistory(id),
      appendMessages: () => {
        appends++;
        return Promise.resolve([]);
      },
    };
    const n = await repairOpenCalls({
      store,
      workstreamId: 'w',
      generation: 0,
      fencingToken: 1,
      why: 'x',
      startedCalls: [],
    });
    expect([n, appends]).toEqual([0, 0]);
  });
});
