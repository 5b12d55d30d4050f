/**
 * Model-based coverage of the session machine. The model's transitions come from the machine
 * itself (`xstate/graph` simple paths over every event the machine reacts to, each extended by
 * one event so transitions back into a state on the path appear). Journeys are real stimuli —
 * a script, a force cancel in a given state, a watchdog abort, a worker killed at a seam, a
 * failing write, a close — whose expected path is computed on the model and driven through a
 * real supervisor and worker. What the production code did is read from its own reports (the
 * `session transition` debug log, emitted wherever the machine ran: worker or supervisor). A
 * transition counts as covered when a journey took it, in the model's order.
 */
import type { HarnessLink, SeamFault } from '@turnwarden/protocol';
import { SeamName, workstreamKey } from '@turnwarden/protocol';
import { type SessionEvent, sessionMachine } from '@turnwarden/session';
import { openSqliteStore, type Store } from '@turnwarden/store';
import type { Turnwarden } from '@turnwarden/supervisor/harness';
import { startForTesting, testControls } from '@turnwarden/supervisor/harness';
import { pino } from 'pino';
import { initialTransition, transition } from 'xstate';
import { getSimplePaths } from 'xstate/graph';
import { ManualTimers } from './manual-timers.js';

/** Every event the machine reacts to, invoked actors' completions included. */
type ModelEvent = SessionEvent | { type: string; output?: unknown; error?: unknown };
const done = (id: string, output?: unknown): ModelEvent => ({ type: `xstate.done.actor.${id}`, output });
const failed = (id: string): ModelEvent => ({ type: `xstate.error.actor.${id}`, error: new Error(id) });

const EVENTS: readonly ModelEvent[] = [
  { type: 'CLAIM', generation: 1 },
  { type: 'STREAM' },
  { type: 'FAIL', reason: 'step limit' },
  { type: 'ABORT', reason: 'cancel' },
  { type: 'REPAIR' },
  { type: 'CLOSE' },
  done('stream', { calls: 0 }),
  done('stream', { calls: 2 }),
  failed('stream'),
  done('tool'),
  done('tool', { awaiting: { nonce: 'n', expiresAt: 1 } }),
  { type: 'DECIDE', nonce: 'n', approved: true },
  failed('tool'),
  done('repair', 1),
  failed('repair'),
];

export interface Edge {
  readonly from: string;
  readonly via: string;
  readonly to: string;
}

const edgeKey = (e: Edge): string => `${e.from} --${e.via}--> ${e.to}`;

function nameOf(value: unknown): string {
  if (typeof value === 'string') return value;
  const [top, sub] = Object.entries(value as Record<string, unknown>)[0]!;
  return `${top}.${nameOf(sub)}`;
}

type Snap = ReturnType<typeof initialTransition<typeof sessionMachine>>[0];
const step = (snap: Snap, event: ModelEvent): Snap =>
  transition(sessionMachine, snap, event as SessionEvent)[0];

/** Every transition of the machine, found by walking it. */
export function modelEdges(): string[] {
  const edges = new Set<string>();
  const serializeState = (s: Snap) => JSON.stringify([s.value, s.context.openCalls.length]);
  const paths = getSimplePaths(sessionMachine, {
    events: EVENTS as SessionEvent[],
    input: { workstreamId: 'model' },
    serializeState,
  } as never);
  const full = (s: Snap) => JSON.stringify([s.value, s.context]);
  for (const p of paths) {
    for (const event of EVENTS) {
      const from = p.state as unknown as Snap;
      const next = step(from, event);
      // The machine took the event when its state or context moved.
      if (full(next) !== full(from)) {
        edges.add(edgeKey({ from: nameOf(from.value), via: event.type, to: nameOf(next.value) }));
      }
    }
  }
  return [...edges].sort();
}

/** The path the model says a sequence of events takes, from a new session. */
export function expectedPath(events: readonly ModelEvent[]): Edge[] {
  let snap = initialTransition(sessionMachine, { workstreamId: 'model' })[0];
  const path: Edge[] = [];
  for (const event of events) {
    const next = step(snap, event);
    const edge = { from: nameOf(snap.value), via: event.type, to: nameOf(next.value) };
    if (edge.from === edge.to && !event.type.startsWith('xstate.done')) {
      throw new Error(`the model does not take ${event.type} in ${edge.from}`);
    }
    path.push(edge);
    snap = next;
  }
  return path;
}

const TOOLS = (n: number, name = 'echo') =>
  Array.from({ length: n }, (_, i) =>
    name === 'echo' ? { name, args: { text: `result ${i}` } } : { name, args: {} },
  );
const script = (...steps: unknown[]) => JSON.stringify({ script: steps });
const HOLD = { name: 'sleep', args: { ms: 600_000 } };

interface World {
  readonly tw: Turnwarden;
  readonly store: Store;
  readonly workstreamId: string;
  send(content: string): Promise<void>;
  /** Resolves at the next event of this type (and, for `state`, this state). */
  next(type: string, state?: string): Promise<void>;
  /** Fault for the worker's tool→journal seam (a journal rejection or a crash). */
  faultAtToolJournal(fault: SeamFault | undefined): void;
  /** Holds the next dispatch until the returned release is called. */
  holdDispatch(): Promise<() => void>;
  /** The next repair write is rejected. */
  failNextRepair(): void;
  stall(): void;
}

interface Journey {
  readonly name: string;
  readonly events: readonly ModelEvent[];
  run(w: World): Promise<void>;
}

const CLAIM: ModelEvent = { type: 'CLAIM', generation: 1 };
const STREAM: ModelEvent = { type: 'STREAM' };
const ABORT: ModelEvent = { type: 'ABORT', reason: 'cancel' };
const REPAIR: ModelEvent = { type: 'REPAIR' };
const AWAIT: ModelEvent = done('tool', { awaiting: { nonce: 'n', expiresAt: 1 } });
const DECIDE: ModelEvent = { type: 'DECIDE', nonce: 'n', approved: true };
/** A call that needs approval (the runtime's `approvals.tools`, below). */
const APPROVED = { name: 'heartbeat', args: { ms: 1, everyMs: 1 } };

/** Real stimuli, each with the events the model must see; together they take every transition. */
export const JOURNEYS: readonly Journey[] = [
  {
    name: 'a plain answer: claimed → streaming → idle',
    events: [CLAIM, STREAM, done('stream', { calls: 0 })],
    run: (w) => w.send('hello'),
  },
  {
    name: 'two tool calls, then an answer: tool-debt re-entered per occurrence, then claimed again',
    events: [
      CLAIM,
      STREAM,
      done('stream', { calls: 2 }),
      done('tool'),
      done('tool'),
      STREAM,
      done('stream', { calls: 0 }),
    ],
    run: (w) => w.send(script({ tools: TOOLS(2) }, { text: 'done' })),
  },
  {
    name: 'the model fails while streaming: force-abandoning, nothing to repair, idle',
    events: [CLAIM, STREAM, failed('stream'), REPAIR, done('repair', 0)],
    run: (w) => w.send(script({ fail: 'model down (coverage)' })),
  },
  {
    name: 'out of model steps in claimed: FAIL to idle',
    events: [
      CLAIM,
      STREAM,
      done('stream', { calls: 2 }),
      done('tool'),
      done('tool'),
      STREAM,
      done('stream', { calls: 2 }),
      done('tool'),
      done('tool'),
      { type: 'FAIL', reason: 'step limit' },
    ],
    run: (w) => w.send(script({ tools: TOOLS(2) }, { tools: TOOLS(2) }, { text: 'never' })),
  },
  {
    name: 'force cancel in claimed (before the worker started): force-abandoning → idle',
    events: [CLAIM, ABORT, REPAIR, done('repair', 1)],
    run: async (w) => {
      const release = await w.holdDispatch();
      const sent = w.send('never answered');
      await w.next('turn_started');
      const cancelled = w.tw.cancel({ tenantId: 'model', principal: 'user', workstreamId: w.workstreamId });
      release();
      await Promise.all([sent, cancelled]);
    },
  },
  {
    name: 'force cancel while streaming: force-abandoning → idle',
    events: [CLAIM, STREAM, ABORT, REPAIR, done('repair', 1)],
    run: async (w) => {
      const started = w.next('state', 'streaming');
      const sent = w.send(script({ sleep: 600_000 }));
      await started;
      await w.tw.cancel({ tenantId: 'model', principal: 'user', workstreamId: w.workstreamId });
      await sent;
    },
  },
  {
    name: 'force cancel in tool-debt: unknown result synthesized, force-abandoning → idle',
    events: [CLAIM, STREAM, done('stream', { calls: 2 }), ABORT, REPAIR, done('repair', 1)],
    run: async (w) => {
      const started = w.next('tool_started');
      const sent = w.send(script({ tools: [HOLD, ...TOOLS(1)] }));
      await started;
      await w.tw.cancel({ tenantId: 'model', principal: 'user', workstreamId: w.workstreamId });
      await sent;
    },
  },
  {
    name: 'a tool result the journal rejects (S5): force-abandoning → idle',
    events: [CLAIM, STREAM, done('stream', { calls: 2 }), failed('tool'), REPAIR, done('repair', 1)],
    run: async (w) => {
      w.faultAtToolJournal({ kind: 'throw', message: 'journal rejected (coverage)' });
      await w.send(script({ tools: TOOLS(2) }));
      w.faultAtToolJournal(undefined);
    },
  },
  {
    name: 'a repair that fails stays in force-abandoning (S3); a later cancel repairs',
    events: [
      CLAIM,
      STREAM,
      done('stream', { calls: 2 }),
      ABORT,
      REPAIR,
      failed('repair'),
      REPAIR,
      done('repair', 1),
    ],
    run: async (w) => {
      const started = w.next('tool_started');
      const sent = w.send(script({ tools: [HOLD, ...TOOLS(1)] }));
      await started;
      w.failNextRepair();
      await w.tw.cancel({ tenantId: 'model', principal: 'user', workstreamId: w.workstreamId });
      await sent;
      await w.tw.cancel({ tenantId: 'model', principal: 'user', workstreamId: w.workstreamId });
    },
  },
  {
    name: 'the watchdog aborts a wedged tool; its worker is terminated after grace: force-abandoning → idle',
    events: [CLAIM, STREAM, done('stream', { calls: 2 }), ABORT, REPAIR, done('repair', 1)],
    run: async (w) => {
      const started = w.next('tool_started');
      const sent = w.send(script({ tools: [{ name: 'wedge', args: {} }, ...TOOLS(1)] }));
      await started;
      w.stall();
      await sent;
    },
  },
  {
    name: 'the worker dies holding a result (T7): force-abandoning → idle from the last snapshot',
    events: [CLAIM, STREAM, done('stream', { calls: 2 }), ABORT, REPAIR, done('repair', 1)],
    run: async (w) => {
      w.faultAtToolJournal({ kind: 'crash' });
      await w.send(script({ tools: TOOLS(2) }));
      w.faultAtToolJournal(undefined);
    },
  },
  {
    name: 'a call that needs approval waits (awaiting-approval); approved, it runs and the turn goes on',
    events: [
      CLAIM,
      STREAM,
      done('stream', { calls: 2 }),
      AWAIT,
      DECIDE,
      done('tool'),
      done('tool'),
      STREAM,
      done('stream', { calls: 0 }),
    ],
    run: async (w) => {
      const waiting = w.next('approval_requested');
      await w.send(script({ tools: [APPROVED, ...TOOLS(1)] }, { text: 'done' }));
      await waiting;
      const { awaitingApproval } = await w.tw.status({
        tenantId: 'model',
        principal: 'user',
        workstreamId: w.workstreamId,
      });
      const decided = await w.tw.approve({
        tenantId: 'model',
        principal: 'user',
        workstreamId: w.workstreamId,
        token: awaitingApproval!.token,
      });
      if (decided.status === 'resumed') await decided.turn.done;
    },
  },
  {
    name: 'a wait for approval cancelled: force-abandoning → idle, the call not run',
    events: [CLAIM, STREAM, done('stream', { calls: 2 }), AWAIT, ABORT, REPAIR, done('repair', 1)],
    run: async (w) => {
      const waiting = w.next('approval_requested');
      await w.send(script({ tools: [APPROVED, ...TOOLS(1)] }));
      await waiting;
      await w.tw.cancel({ tenantId: 'model', principal: 'user', workstreamId: w.workstreamId });
    },
  },
  {
    name: 'close: idle → closed (final)',
    events: [{ type: 'CLOSE' }],
    run: (w) => w.tw.close({ tenantId: 'model', principal: 'user', workstreamId: w.workstreamId }),
  },
];

export interface CoverageReport {
  readonly transitions: number;
  readonly covered: number;
  readonly missing: readonly string[];
  readonly journeys: number;
  /** Journeys whose real run did not take the model's path (with what it did). */
  readonly deviations: readonly {
    readonly journey: string;
    readonly expected: string;
    readonly observed: string;
  }[];
}

interface TransitionLog {
  readonly msg: string;
  readonly workstreamId?: string;
  readonly from?: string;
  readonly to?: string;
  readonly via?: string;
}

const JOURNEY_TIMEOUT_MS = 5_000;

/** Drives every journey through a real supervisor and worker and reports what was covered. */
export async function modelCoverage(): Promise<CoverageReport> {
  const transitions = modelEdges();
  const logs: TransitionLog[] = [];
  let toolFault: SeamFault | undefined;
  let dispatchHold: ((release: () => void) => void) | undefined;
  const link: HarnessLink = {
    controller: {
      mutations: new Set(),
      reach: (name) => {
        if (name !== SeamName.claimCaptureToDispatch || dispatchHold === undefined) return undefined;
        const hold = dispatchHold;
        dispatchHold = undefined;
        return new Promise((resolve) => hold(() => resolve(undefined)));
      },
    },
    workerArrived: (_id, arrival, release) =>
      release(arrival.name === SeamName.workerToolToJournal ? toolFault : undefined),
  };
  const inner = openSqliteStore({ path: ':memory:' });
  let rejectRepair = false;
  const store: Store = new Proxy(inner, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof value !== 'function') return value;
      if (key !== 'appendMessages') return (value as (...a: unknown[]) => unknown).bind(target);
      return (input: Parameters<Store['appendMessages']>[0]) => {
        if (rejectRepair && input.entries.some((e) => e.message.role === 'tool' && e.message.synthesized)) {
          rejectRepair = false;
          return Promise.reject(new Error('repair write rejected (coverage)'));
        }
        return target.appendMessages(input);
      };
    },
  });
  const time = { now: 0 };
  const timers = new ManualTimers();
  const config = {
    watchdog: { timeoutMs: 1_000, pollMs: 100, graceMs: 500 },
    lease: { ttlMs: 60_000, renewMs: 1_000 },
  };
  const tw = await startForTesting(
    {
      store,
      logger: pino(
        { level: 'debug' },
        { write: (s: string) => void logs.push(JSON.parse(s) as TransitionLog) },
      ),
      ...config,
      pluginModules: ['@turnwarden/session/scripted'],
      model: 'scripted',
      pool: { maxWorkers: 2, warmWorkers: 1 },
      // The journeys are walked through the session worker's seams (see runtime.ts).
      models: { placement: 'session' },
      limits: { maxModelSteps: 2 },
      approvals: { tools: [APPROVED.name] },
    },
    { harness: link, manualWatchdog: true, now: () => time.now, timers },
  );
  const covered = new Set<string>();
  const deviations: { journey: string; expected: string; observed: string }[] = [];
  try {
    let n = 0;
    for (const journey of JOURNEYS) {
      const workstreamId = `model-${++n}`;
      await tw.createWorkstream({ tenantId: 'model', principal: 'user', workstreamId });
      const waiters: { type: string; state: string | undefined; resolve: () => void }[] = [];
      await tw.subscribe({
        tenantId: 'model',
        principal: 'user',
        workstreamId,
        listener: (e) => {
          for (const w of waiters.splice(0)) {
            if (
              w.type === e.type &&
              (w.state === undefined || (e.type === 'state' && w.state === e.data.state))
            )
              w.resolve();
            else waiters.push(w);
          }
        },
      });
      const world: World = {
        tw,
        store,
        workstreamId,
        send: async (content) => {
          await (await tw.send({ tenantId: 'model', principal: 'user', workstreamId, content })).done;
        },
        next: (type, state) => new Promise((resolve) => waiters.push({ type, state, resolve })),
        faultAtToolJournal: (fault) => {
          toolFault = fault;
        },
        holdDispatch: async () => {
          let go: (() => void) | undefined;
          let released = false;
          dispatchHold = (proceed) => {
            if (released) proceed();
            else go = proceed;
          };
          return () => {
            released = true;
            go?.();
          };
        },
        failNextRepair: () => {
          rejectRepair = true;
        },
        stall: () => {
          // A poll sees the turn's last stamps; no progress for longer than the timeout; a poll
          // commits the abort; the grace period passes without the wedged worker unwinding.
          testControls(tw).pollWatchdog();
          time.now += config.watchdog.timeoutMs + config.watchdog.pollMs;
          testControls(tw).pollWatchdog();
          timers.advance(config.watchdog.graceMs);
        },
      };
      const expected = expectedPath(journey.events);
      let timer: NodeJS.Timeout | undefined;
      const finished = await Promise.race([
        journey.run(world).then(() => true),
        new Promise<false>((resolve) => {
          timer = setTimeout(() => resolve(false), JOURNEY_TIMEOUT_MS);
        }),
      ]);
      clearTimeout(timer);
      const observed = logs
        // Logs name a workstream by its key (T2).
        .filter(
          (l) => l.msg === 'session transition' && l.workstreamId === workstreamKey('model', workstreamId),
        )
        .map((l) => ({ from: l.from!, via: l.via!, to: l.to! }));
      const same =
        finished &&
        observed.length === expected.length &&
        observed.every((o, i) => edgeKey(o) === edgeKey(expected[i]!));
      if (same) for (const e of observed) covered.add(edgeKey(e));
      else {
        deviations.push({
          journey: journey.name,
          expected: expected.map(edgeKey).join(' | '),
          observed: `${observed.map(edgeKey).join(' | ')}${finished ? '' : ` … (unfinished after ${JOURNEY_TIMEOUT_MS} ms)`}`,
        });
      }
    }
  } finally {
    await tw.shutdown();
    await inner.close();
  }
  return {
    transitions: transitions.length,
    covered: transitions.filter((t) => covered.has(t)).length,
    missing: transitions.filter((t) => !covered.has(t)),
    journeys: JOURNEYS.length,
    deviations,
  };
}
