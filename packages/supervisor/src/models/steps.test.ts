/**
 * A worker's model call on the supervisor's side (steps.ts), against a fake set of threads: it
 * is admitted from the live turn only (L3, like a row), only after the worker's earlier events,
 * the turn holds it while it runs, and tokens of a turn whose end began reach no listener.
 */
import type { ModelStepRequest, ModelStepResult } from '@turnwarden/protocol';
import { isTurnwardenError } from '@turnwarden/protocol';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { EventHub, type TurnwardenEvent } from '../streams/events.js';
import type { Turn } from '../turn/turn.js';
import { ModelSteps } from './steps.js';
import type { CallTarget, ModelCall, ModelThreads } from './threads.js';

const req: ModelStepRequest = {
  workstreamId: 'ws',
  generation: 4,
  model: 'm',
  tools: [],
  eventsPosted: 7,
};

function world(
  turnState: { generation?: number; aborted?: boolean; ending?: boolean; fenced?: boolean } = {},
) {
  const hub = new EventHub(pino({ level: 'silent' }));
  const events: TurnwardenEvent[] = [];
  hub.subscribe('ws', (e) => events.push(e));
  const started: ModelCall[] = [];
  const ended: ModelCall[] = [];
  const turn = {
    generation: turnState.generation ?? 4,
    aborted: turnState.aborted ? { reason: 'cancel', at: 0 } : undefined,
    ending: turnState.ending ?? false,
    worker: { slot: 3 },
    modelCallStarted: (c: ModelCall) => void started.push(c),
    modelCallEnded: (c: ModelCall) => void ended.push(c),
  };
  const runs: { target: CallTarget; history: unknown; finish: (r: ModelStepResult) => void }[] = [];
  const threads = {
    readsContext: true,
    run(target: CallTarget, _model: string, _tools: unknown, history: unknown): ModelCall {
      let finish!: (r: ModelStepResult) => void;
      const result = new Promise<ModelStepResult>((r) => (finish = r));
      runs.push({ target, history, finish });
      return { result, abort: () => {} };
    },
  };
  let reads = 0;
  const steps = new ModelSteps(
    {
      store: {
        readHistory: async () => {
          reads++;
          return [];
        },
      },
      events: hub,
      turnOf: () => turn as unknown as Turn,
      fenced: () => turnState.fenced ?? false,
    },
    threads as unknown as ModelThreads,
  );
  return { steps, turn, runs, started, ended, events, threads, reads: () => reads };
}

const caught = () => Promise.resolve();

describe('model steps', () => {
  it('L3: a call of a turn that is no longer live — another generation, its abort committed, its end begun, its slot fenced — is refused FENCED and runs nothing', async () => {
    for (const state of [{ generation: 5 }, { aborted: true }, { ending: true }, { fenced: true }]) {
      const w = world(state);
      const refused = await w.steps.step(req, caught).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isTurnwardenError(refused) && refused.code).toBe('FENCED');
      expect(w.runs).toEqual([]);
    }
  });

  it('waits for the worker’s earlier events before the call starts (its streaming step reaches listeners first), and checks the turn again after', async () => {
    const w = world();
    let release!: () => void;
    let askedFor: number | undefined;
    const pending = w.steps.step(req, (_t, n) => {
      askedFor = n;
      return new Promise<void>((r) => (release = r));
    });
    await Promise.resolve();
    expect(askedFor).toBe(7);
    expect(w.runs).toEqual([]);
    // The turn's abort commits while the worker's events are on their way: nothing runs.
    (w.turn as { aborted: unknown }).aborted = { reason: 'cancel', at: 0 };
    release();
    await expect(pending).rejects.toMatchObject({ code: 'FENCED' });
    expect(w.runs).toEqual([]);
  });

  it('the turn holds the call while it runs; tokens reach listeners until the turn’s end begins; the result is the worker’s', async () => {
    const w = world();
    const pending = w.steps.step(req, caught);
    await new Promise((r) => setImmediate(r));
    expect(w.runs).toHaveLength(1);
    const [run] = w.runs;
    expect(run!.target).toMatchObject({ workstreamId: 'ws', generation: 4, slot: 3 });
    expect(run!.history).toBeUndefined(); // the thread reads the context itself
    expect(w.reads()).toBe(0);
    expect(w.started).toHaveLength(1);
    run!.target.onText('a');
    (w.turn as { ending: boolean }).ending = true;
    run!.target.onText('b');
    expect(w.events.filter((e) => e.type === 'token').map((e) => (e.data as { text: string }).text)).toEqual([
      'a',
    ]);
    run!.finish({ content: 'ab', calls: [] });
    expect(await pending).toEqual({ content: 'ab', calls: [] });
    expect(w.ended).toEqual(w.started);
  });

  it('where the threads cannot read the store, the call carries the history read here', async () => {
    const w = world();
    w.threads.readsContext = false;
    const pending = w.steps.step(req, caught);
    await new Promise((r) => setImmediate(r));
    expect(w.reads()).toBe(1);
    expect(w.runs[0]!.history).toEqual([]);
    w.runs[0]!.finish({ content: '', calls: [] });
    await pending;
  });
});
