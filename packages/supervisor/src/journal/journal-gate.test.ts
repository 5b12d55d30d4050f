/**
 * The journal gate alone, with a stub host and store: each admission condition on its own (L3),
 * the per-workstream write queue (P2), what listeners and the worker get back.
 */
import {
  attachSeamController,
  detachSeamController,
  ErrorCode,
  type JournalRequest,
} from '@turnwarden/protocol';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG } from '../config.js';
import { nodeTimers } from '../liveness/timers.js';
import { EventHub, type TurnwardenEvent } from '../streams/events.js';
import type { Turn } from '../turn/turn.js';
import { type GateHost, JournalGate } from './journal-gate.js';

type Deferred = { resolve: (seqs: number[]) => void; reject: (e: unknown) => void; input: JournalRequest };

function world(level: 'debug' | 'info' = 'debug') {
  const calls: Deferred[] = [];
  const logs: { msg: string; [k: string]: unknown }[] = [];
  const events: TurnwardenEvent[] = [];
  const hub = new EventHub(pino({ level: 'silent' }));
  hub.subscribe('ws', (e) => events.push(e));
  let turn: Partial<Turn> | undefined = { generation: 3, aborted: undefined };
  let fenced = false;
  let refused = 0;
  const host: GateHost = {
    store: {
      saveSession: async () => {},
      appendMessages: (input) =>
        new Promise<number[]>((resolve, reject) =>
          calls.push({ resolve, reject, input: input as JournalRequest }),
        ),
    },
    events: hub,
    turnOf: (id) => (id === 'ws' ? (turn as Turn | undefined) : undefined),
    fenced: () => fenced,
    refused: () => void refused++,
    workstreamGone: () => {},
    deleting: () => false,
    logger: pino({ level }, { write: (s: string) => void logs.push(JSON.parse(s)) }),
    timers: nodeTimers,
    config: { journal: DEFAULT_CONFIG.journal },
  };
  const gate = new JournalGate(host);
  const req = (key: string, generation = 3): JournalRequest => ({
    workstreamId: 'ws',
    generation,
    fencingToken: 5,
    entries: [{ commitKey: key, message: { role: 'user', content: key } }],
  });
  return {
    gate,
    calls,
    logs,
    events,
    req,
    refusedCount: () => refused,
    setTurn: (t: Partial<Turn> | undefined) => {
      turn = t;
    },
    setFenced: (f: boolean) => {
      fenced = f;
    },
  };
}

const noCatchUp = () => Promise.resolve();
const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('journal gate', () => {
  it('L3: admits a live turn’s rows, writes them with the token, acknowledges seqs and tells listeners once durable', async () => {
    const w = world();
    const ack = w.gate.journal(w.req('k1'), noCatchUp);
    await tick();
    expect(w.calls).toHaveLength(1);
    expect(w.calls[0]!.input).toEqual(w.req('k1'));
    expect(w.events.filter((e) => e.type === 'message')).toEqual([]);
    w.calls[0]!.resolve([7]);
    expect(await ack).toEqual({ seqs: [7] });
    expect(w.events.filter((e) => e.type === 'message').map((e) => [e.generation, e.data.commitKey])).toEqual(
      [[3, 'k1']],
    );
    expect(w.logs.filter((l) => l.msg === 'journal admitted')).toEqual([
      expect.objectContaining({ workstreamId: 'ws', generation: 3, commitKeys: ['k1'] }),
    ]);
  });

  it('L3: refuses, writing nothing, when there is no turn, another generation, a committed abort, or a fenced slot — each on its own', async () => {
    const cases: [string, (w: ReturnType<typeof world>) => void, number][] = [
      ['no turn', (w) => w.setTurn(undefined), 3],
      ['another generation', () => {}, 2],
      ['abort committed', (w) => w.setTurn({ generation: 3, aborted: { reason: 'cancel', at: 0 } }), 3],
      ['slot fenced', (w) => w.setFenced(true), 3],
    ];
    for (const [name, arrange, generation] of cases) {
      const w = world();
      arrange(w);
      const e = await w.gate.journal(w.req('late', generation), noCatchUp).then(
        () => undefined,
        (err: unknown) => err as { code: string; message: string },
      );
      expect([name, e?.code, e?.message]).toEqual([
        name,
        ErrorCode.FENCED,
        `turn ${generation} of ws is no longer live`,
      ]);
      expect([name, w.calls.length, w.refusedCount()]).toEqual([name, 0, 1]);
      expect(w.logs.filter((l) => l.msg === 'journal admitted')).toEqual([]);
    }
  });

  it('P2: writes of one workstream run one at a time in admission order; the queue empties when they settle', async () => {
    const w = world();
    const first = w.gate.journal(w.req('a'), noCatchUp);
    const second = w.gate.journal(w.req('b'), noCatchUp);
    await tick();
    expect(w.calls.map((c) => c.input.entries[0]!.commitKey)).toEqual(['a']);
    expect(w.gate.busy).toBe(1);
    w.calls[0]!.reject(new Error('store hiccup'));
    await expect(first).rejects.toThrow('store hiccup');
    await tick();
    // The failed write still lets the next one go, after it.
    expect(w.calls.map((c) => c.input.entries[0]!.commitKey)).toEqual(['a', 'b']);
    // 'a' settling does not forget 'b', still in flight: a third write waits behind it.
    expect(w.gate.busy).toBe(1);
    const third = w.gate.journal(w.req('c'), noCatchUp);
    await tick();
    expect(w.calls.map((c) => c.input.entries[0]!.commitKey)).toEqual(['a', 'b']);
    w.calls[1]!.resolve([1]);
    await second;
    await tick();
    expect(w.calls.map((c) => c.input.entries[0]!.commitKey)).toEqual(['a', 'b', 'c']);
    w.calls[2]!.resolve([2]);
    await third;
    await tick();
    expect(w.gate.busy).toBe(0);
  });

  it('P2: other workstreams are not held behind one another', async () => {
    const w = world();
    const order: string[] = [];
    const slow = w.gate.write('ws-a', () =>
      new Promise<void>((r) => setTimeout(r, 20)).then(() => void order.push('a')),
    );
    const fast = w.gate.write('ws-b', async () => void order.push('b'));
    await Promise.all([slow, fast]);
    expect(order).toEqual(['b', 'a']);
  });

  it('waits for the events the worker posted before the request, only when it says how many', async () => {
    const w = world();
    const asked: number[] = [];
    let release!: () => void;
    const caughtUp = (_t: Turn, n: number) => {
      asked.push(n);
      return new Promise<void>((r) => {
        release = r;
      });
    };
    const ack = w.gate.journal({ ...w.req('k'), eventsPosted: 4 }, caughtUp);
    await tick();
    expect(asked).toEqual([4]);
    expect(w.calls).toHaveLength(0);
    release();
    await tick();
    expect(w.calls).toHaveLength(1);
    // eventsPosted is the worker's bookkeeping: it is not written.
    expect(w.calls[0]!.input).toEqual(w.req('k'));
    w.calls[0]!.resolve([1]);
    await ack;
    const none = world();
    const asked2: number[] = [];
    const ack2 = none.gate.journal(none.req('k'), (_t, n) => {
      asked2.push(n);
      return Promise.resolve();
    });
    await tick();
    none.calls[0]!.resolve([1]);
    await ack2;
    expect(asked2).toEqual([]);
  });

  it('logs admissions only at debug level', async () => {
    const w = world('info');
    const ack = w.gate.journal(w.req('k'), noCatchUp);
    await tick();
    w.calls[0]!.resolve([1]);
    await ack;
    expect(w.logs).toEqual([]);
  });

  it('S6: a lost acknowledgement (harness fault) leaves the rows written and the worker with a STORE_ERROR', async () => {
    const w = world();
    const controller = {
      mutations: new Set<never>(),
      reach: (name: string) =>
        name === 'journal.admit' ? Promise.resolve({ kind: 'lose-ack' as const }) : undefined,
    };
    attachSeamController(controller);
    try {
      const ack = w.gate.journal(w.req('k'), noCatchUp);
      await tick();
      await tick();
      expect(w.calls).toHaveLength(1);
      w.calls[0]!.resolve([1]);
      await expect(ack).rejects.toMatchObject({
        code: ErrorCode.STORE_ERROR,
        message: 'journal acknowledgement lost',
        details: { injected: true },
      });
    } finally {
      detachSeamController(controller);
    }
  });

  it('a seam that passes without a fault admits as usual', async () => {
    const w = world();
    const controller = {
      mutations: new Set<never>(),
      reach: (name: string) => (name === 'journal.admit' ? Promise.resolve(undefined) : undefined),
    };
    attachSeamController(controller);
    try {
      const ack = w.gate.journal(w.req('k'), noCatchUp);
      await tick();
      await tick();
      w.calls[0]!.resolve([9]);
      expect(await ack).toEqual({ seqs: [9] });
    } finally {
      detachSeamController(controller);
    }
  });
});
