/**
 * Model-based coverage: paths through the session machine, generated with `xstate/graph`
 * (simple paths, each extended by one more event so every transition appears), are turned into
 * real stimuli — a scripted-model script, a force cancel at the right state, an injected journal
 * failure, a close — and driven through a real supervisor and worker. A transition counts as
 * covered when the states the real session went through follow the path.
 */
import type { HarnessLink, SeamFault } from '@turnwarden/protocol';
import { SeamName } from '@turnwarden/protocol';
import { type SessionEvent, sessionMachine } from '@turnwarden/session';
import { openSqliteStore } from '@turnwarden/store';
import { Turnwarden, type TurnwardenEvent } from '@turnwarden/supervisor';
import { pino } from 'pino';
import { transition } from 'xstate';
import { getSimplePaths } from 'xstate/graph';

const EVENTS: SessionEvent[] = [
  { type: 'CLAIM', generation: 1 },
  { type: 'STREAM_START' },
  { type: 'ASSISTANT_FINAL' },
  { type: 'ASSISTANT_TOOLS', calls: 1 },
  { type: 'TOOL_RESULT' },
  { type: 'DEBT_PAID' },
  { type: 'ABORT', reason: 'cancel' },
  { type: 'FAIL' },
  { type: 'SETTLED' },
  { type: 'CLOSE' },
];

interface Step {
  readonly event: string;
  readonly from: string;
  readonly to: string;
}

export interface ModelPath {
  readonly steps: readonly Step[];
}

export interface CoverageReport {
  readonly transitions: number;
  readonly covered: number;
  readonly missing: readonly string[];
  readonly paths: number;
  /** Paths whose real run left the model's path (with the states the session really went through). */
  readonly deviations: readonly { readonly path: string; readonly observed: string }[];
}

const edgeKey = (s: Step) => `${s.from} --${s.event}--> ${s.to}`;
const stateOf = (snapshot: { value: unknown }) => String(snapshot.value);

/** Every transition of the machine, each on a path from the initial state. */
export function modelPaths(): { paths: ModelPath[]; transitions: string[] } {
  const options = {
    events: EVENTS,
    input: { workstreamId: 'model', generation: 0 },
    serializeState: (s: { value: unknown; context: { openCalls: number } }) =>
      JSON.stringify([s.value, s.context.openCalls]),
  };
  const simple = getSimplePaths(sessionMachine, options as never);
  const paths: ModelPath[] = [];
  const transitions = new Set<string>();
  const seen = new Set<string>();
  const add = (steps: Step[]) => {
    const key = steps.map(edgeKey).join(' | ');
    if (steps.length === 0 || seen.has(key)) return;
    seen.add(key);
    paths.push({ steps });
    for (const s of steps) transitions.add(edgeKey(s));
  };
  for (const p of simple) {
    const steps: Step[] = [];
    for (let i = 1; i < p.steps.length; i++) {
      const prev = p.steps[i - 1]!.state;
      const cur = p.steps[i]!;
      steps.push({ event: cur.event.type, from: stateOf(prev), to: stateOf(cur.state) });
    }
    add(steps);
    // One more event from the path's end reaches the transitions a simple path cannot take
    // (they return to a state already on the path, such as tool-debt → claimed).
    for (const event of EVENTS) {
      const [next] = transition(sessionMachine, p.state as never, event as never);
      const changed =
        stateOf(next) !== stateOf(p.state) || next.context.openCalls !== p.state.context.openCalls;
      if (changed) add([...steps, { event: event.type, from: stateOf(p.state), to: stateOf(next) }]);
    }
  }
  return { paths, transitions: [...transitions].sort() };
}

interface TurnPlan {
  readonly segments: unknown[][];
  /** Force-cancel when the session reaches this state for the n-th time in the turn (tool-debt: once a tool started). */
  cancelAt?: { readonly state: string; readonly nth: number };
  /** Reject the journal write of this call's result (FAIL in tool-debt). */
  journalFaultAt?: number;
}

interface Plan {
  readonly turns: readonly TurnPlan[];
  readonly close: boolean;
}

const FAIL_STEP = { fail: 'model failure (coverage)' };
const HOLD_STEP = { sleep: 60_000 };

/** Turns a path into what makes a real session walk it. */
export function planFor(path: ModelPath): Plan {
  const turns: TurnPlan[] = [];
  let close = false;
  let visits = new Map<string, number>();
  const turn = () => turns[turns.length - 1]!;
  const seg = () => turn().segments[turn().segments.length - 1]!;
  path.steps.forEach((step, i) => {
    const next = path.steps[i + 1];
    if (step.event === 'CLAIM') {
      turns.push({ segments: [[]] });
      visits = new Map();
    }
    visits.set(step.to, (visits.get(step.to) ?? 0) + 1);
    switch (step.event) {
      case 'CLAIM':
      case 'DEBT_PAID':
        if (step.event === 'DEBT_PAID') turn().segments.push([]);
        if (next?.event === 'ABORT') seg().push(HOLD_STEP);
        if (next?.event === 'FAIL') seg().push(FAIL_STEP);
        break;
      case 'STREAM_START':
        seg().push({ text: 'token', chunks: 1 });
        if (next?.event === 'ABORT') seg().push(HOLD_STEP);
        if (next?.event === 'FAIL') seg().push(FAIL_STEP);
        break;
      case 'ASSISTANT_TOOLS': {
        // The results that follow, then what ends the debt: one more call if a FAIL or an ABORT
        // comes after some results (the failing or held call), else exactly the results.
        let results = 0;
        while (path.steps[i + 1 + results]?.event === 'TOOL_RESULT') results++;
        const after = path.steps[i + 1 + results]?.event;
        const calls: unknown[] = [];
        for (let c = 0; c < results; c++) calls.push({ name: 'echo', args: { text: `result ${c}` } });
        if (after === 'ABORT') calls.push({ name: 'sleep', args: { ms: 60_000 } });
        if (after === 'FAIL') {
          calls.push({ name: 'echo', args: { text: 'unjournaled' } });
          turn().journalFaultAt = calls.length - 1;
        }
        if (calls.length === 0) calls.push({ name: 'echo', args: { text: 'covered' } });
        seg().push({ tools: calls });
        break;
      }
      case 'ABORT':
        turn().cancelAt = { state: step.from, nth: visits.get(step.from) ?? 1 };
        break;
      case 'CLOSE':
        close = true;
        break;
    }
  });
  return { turns, close };
}

function scriptOf(plan: TurnPlan): string {
  const steps: unknown[] = [];
  plan.segments.forEach((segment, i) => {
    steps.push(...segment);
    // A segment that did not end in tool calls ends the assistant message; one that did is
    // followed by the next segment's model call.
    if (
      i < plan.segments.length - 1 &&
      !segment.some((s) => typeof s === 'object' && s !== null && 'tools' in s)
    ) {
      steps.push({ tools: [{ name: 'echo', args: { text: 'bridge' } }] });
    }
  });
  return JSON.stringify({ script: steps });
}

/** Drives every model path through a real supervisor and worker and reports what was covered. */
export async function modelCoverage(): Promise<CoverageReport> {
  const { paths, transitions } = modelPaths();
  let journalFaultAt: number | undefined;
  const link: HarnessLink = {
    controller: { mutations: new Set(), reach: () => undefined },
    workerArrived: (_id, arrival, release) => {
      const fault: SeamFault | undefined =
        arrival.name === SeamName.workerToolToJournal && arrival.ctx.detail === journalFaultAt
          ? { kind: 'throw', message: 'journal rejected (coverage)' }
          : undefined;
      release(fault);
    },
  };
  const store = openSqliteStore({ path: ':memory:' });
  const tw = await Turnwarden.start({
    store,
    logger: pino({ level: 'silent' }),
    harness: link,
    watchdog: { timeoutMs: 60_000, pollMs: 1_000, graceMs: 2_000 },
    lease: { ttlMs: 120_000, renewMs: 10_000 },
    pool: { maxWorkers: 2, warmWorkers: 1 },
  });
  const covered = new Set<string>();
  const deviations: { path: string; observed: string }[] = [];
  try {
    let n = 0;
    for (const path of paths) {
      const plan = planFor(path);
      const workstreamId = `model-${++n}`;
      await tw.createWorkstream({ tenantId: 'model', workstreamId });
      const observed: string[] = ['idle'];
      const note = (state: string) => {
        if (observed[observed.length - 1] !== state) observed.push(state);
      };
      let current: TurnPlan | undefined;
      let visits = new Map<string, number>();
      const cancel = () => void tw.cancel('model', workstreamId).catch(() => {});
      await tw.subscribe({ tenantId: 'model', workstreamId }, (e: TurnwardenEvent) => {
        if (e.type === 'state') {
          const state = String(e.data.state);
          if (state !== observed[observed.length - 1]) visits.set(state, (visits.get(state) ?? 0) + 1);
          note(state);
          const at = current?.cancelAt;
          if (at && at.state === state && at.state !== 'tool-debt' && visits.get(state) === at.nth) cancel();
        } else if (e.type === 'tool_started') {
          if (current?.cancelAt?.state === 'tool-debt') cancel();
        } else if (e.type === 'idle') {
          note('idle');
        } else if (e.type === 'ws_closed') {
          note('closed');
        }
      });
      for (const turnPlan of plan.turns) {
        current = turnPlan;
        visits = new Map();
        journalFaultAt = turnPlan.journalFaultAt;
        const handle = await tw.send({ tenantId: 'model', workstreamId, content: scriptOf(turnPlan) });
        await handle.done;
      }
      current = undefined;
      journalFaultAt = undefined;
      if (plan.close) await tw.close('model', workstreamId);
      const expected = [path.steps[0]!.from, ...path.steps.map((s) => s.to)].filter(
        (s, i, all) => i === 0 || s !== all[i - 1],
      );
      const ok = expected.every((s, i) => observed[i] === s);
      if (ok) for (const s of path.steps) covered.add(edgeKey(s));
      else
        deviations.push({ path: path.steps.map((s) => s.event).join(' '), observed: observed.join(' → ') });
    }
  } finally {
    await tw.shutdown();
    await store.close();
  }
  return {
    transitions: transitions.length,
    covered: transitions.filter((t) => covered.has(t)).length,
    missing: transitions.filter((t) => !covered.has(t)),
    paths: paths.length,
    deviations,
  };
}
