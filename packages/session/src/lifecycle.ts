/**
 * The session machine as the supervisor uses it: on persisted snapshots, between turns and after
 * a worker is gone. Every lifecycle decision the supervisor makes is an event the machine
 * accepts or refuses here; nothing else holds a session's state.
 */
import type { SessionSnapshotData, SessionState } from '@turnwarden/protocol';
import { type AnyActorScope, createActor, fromPromise, initialTransition } from 'xstate';
import {
  type Approval,
  persistable,
  type SessionContext,
  type SessionEvent,
  type SessionSnapshot,
  sessionMachine,
  sessionState,
  stateName,
  type Transition,
  watchTransitions,
} from './machine.js';

let template: SessionSnapshotData | undefined;

/**
 * A brand-new session: idle, no turn yet. The machine's initial snapshot is computed once; each
 * new session is a copy of it with its own workstream id (computing it costs an actor's start,
 * paid on every claim of a workstream that never ran a turn).
 */
export function newSession(workstreamId: string): SessionSnapshotData {
  if (template === undefined) {
    const [snapshot] = initialTransition(sessionMachine, { workstreamId: '' });
    template = persistable(snapshot);
  }
  const copy = structuredClone(template) as SessionSnapshotData & {
    context: { workstreamId: string };
  };
  copy.context.workstreamId = workstreamId;
  return copy;
}

function resolve(data: SessionSnapshotData): SessionSnapshot {
  return sessionMachine.resolveState({
    value: data.value as SessionSnapshot['value'],
    context: data.context as SessionContext,
  });
}

export function stateOf(data: SessionSnapshotData): SessionState {
  return sessionState(data);
}

export function contextOf(data: SessionSnapshotData): SessionContext {
  return data.context as SessionContext;
}

/** The approval a session waits for (in `tool-debt.awaiting-approval`), or undefined. */
export function waitingApproval(data: SessionSnapshotData): Approval | undefined {
  return stateNameOf(data) === 'tool-debt.awaiting-approval' ? contextOf(data).approval : undefined;
}

/** Whether the machine takes `event` in `data`'s state (`offer` without computing the result). */
export function accepts(data: SessionSnapshotData, event: SessionEvent): boolean {
  return resolve(data).can(event);
}

/**
 * Offers an event to the machine. `next` is the snapshot after it, when the machine takes it;
 * undefined when the machine refuses it in its state.
 */
export function offer(data: SessionSnapshotData, event: SessionEvent): SessionSnapshotData | undefined {
  const snapshot = resolve(data);
  if (!snapshot.can(event)) return undefined;
  return persistable(sessionMachine.transition(snapshot, event, inertScope()));
}

let inert: AnyActorScope | undefined;

/**
 * The actor scope every `offer` computes its transition in. xstate's pure `transition(logic,
 * snapshot, event)` builds a new inert scope per call — an actor, and with it the machine's whole
 * initial state — which was 130 µs of the supervisor's thread per offer and most of a claim's
 * garbage (a burst of a thousand claims: a major collection in the watchdog's way, issue 24).
 * This scope is built once, the same way: its actor is never started, its actions are not run
 * (`offer` keeps the next snapshot only, and the supervisor does what the event means), and the
 * children a transition into `streaming` or a tool state declares are never started, so none is
 * registered in its system. `offer.test.ts` holds it to xstate's `transition` for every state and
 * event.
 */
function inertScope(): AnyActorScope {
  if (inert === undefined) {
    const self = createActor(sessionMachine, { input: { workstreamId: '' } });
    inert = {
      self,
      id: '',
      sessionId: '',
      system: self.system,
      logger: () => {},
      defer: () => {},
      stopChild: () => {},
      emit: () => {},
      actionExecutor: () => {},
    };
  }
  return inert;
}

/** What repairing a session's history does (the supervisor's writer provides it). */
export type RepairFn = (input: { generation: number; reason: string | undefined }) => Promise<number>;

export interface Abandoned {
  /** idle once repaired; force-abandoning when the repair failed (claims stay refused, S3). */
  readonly snapshot: SessionSnapshotData;
  /** Results the repair synthesized (0 when the repair failed or nothing was open). */
  readonly synthesized: number;
  /** Why the repair failed. */
  readonly error: unknown;
}

/**
 * Finishes force-abandoning with the same machine: from `data` (the worker's last snapshot, or
 * the last durable one when the worker is gone), ABORT if the session is still mid-turn, then
 * REPAIR — the `repair` actor runs `repairFn` — until the machine is idle (repaired) or back in
 * force-abandoning (the repair failed).
 */
export async function finishAbandoning(
  data: SessionSnapshotData,
  reason: string,
  repairFn: RepairFn,
  onTransition?: (t: Transition) => void,
): Promise<Abandoned> {
  let synthesized = 0;
  let error: unknown;
  const state = stateOf(data);
  if (state === 'idle' || state === 'closed') return { snapshot: data, synthesized, error };
  // A snapshot persisted while its repair ran (a process killed then, S7) carries no repair
  // actor — persisted snapshots carry no child actors — and restored as it is nothing would ever
  // finish it (the start-up recovery would wait forever): it is restored as pending, and REPAIR
  // runs the repair again (its rows are idempotent on their commit keys, P1).
  const from: SessionSnapshotData =
    stateName(data) === 'force-abandoning.repairing'
      ? { ...data, value: { 'force-abandoning': 'pending' } }
      : data;
  const machine = sessionMachine.provide({
    actors: {
      repair: fromPromise(async ({ input }) => {
        try {
          synthesized = await repairFn(input);
          return synthesized;
        } catch (e) {
          error = e;
          throw e;
        }
      }),
    },
  });
  let self: unknown;
  const actor = createActor(machine, {
    snapshot: from as unknown as SessionSnapshot,
    input: { workstreamId: contextOf(from).workstreamId },
    ...(onTransition
      ? {
          inspect: watchTransitions(
            from,
            () => self,
            (t) => onTransition(t),
          ),
        }
      : {}),
  });
  self = actor;
  const done = new Promise<SessionSnapshot>((resolveDone) => {
    actor.subscribe((snap) => {
      if (snap.matches('idle') || snap.matches({ 'force-abandoning': 'pending' })) {
        if (snap.matches('idle') || error !== undefined) resolveDone(snap);
      }
    });
  });
  actor.start();
  if (state !== 'force-abandoning') actor.send({ type: 'ABORT', reason });
  actor.send({ type: 'REPAIR' });
  const end = await done;
  actor.stop();
  return { snapshot: persistable(end), synthesized, error };
}

/** The full state of a persisted snapshot (`force-abandoning.pending`), for transition reports. */
export function stateNameOf(data: SessionSnapshotData): string {
  return stateName(data);
}
