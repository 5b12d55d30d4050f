/**
 * `offer` computes the machine's transition in one inert actor scope kept for the process
 * (lifecycle.ts) instead of xstate's `transition()`, which builds a new actor per call. Held here
 * to xstate's own `transition()` for every state of the machine and every event the supervisor
 * offers: the same next snapshot, or the same refusal. An xstate upgrade that changes what a
 * scope must provide fails this test, not a claim in production.
 */
import type { SessionSnapshotData } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { type AnyStateNode, transition } from 'xstate';
import { accepts, newSession, offer } from './lifecycle.js';
import { persistable, type SessionContext, type SessionEvent, sessionMachine } from './machine.js';

type StateValue = string | { [key: string]: StateValue };

/** Every leaf state of the machine as a state value (`'idle'`, `{ 'tool-debt': 'running' }`, …). */
function leaves(node: AnyStateNode): StateValue[] {
  const children = Object.entries(node.states ?? {}) as [string, AnyStateNode][];
  if (children.length === 0) return [];
  return children.flatMap(([key, child]): StateValue[] => {
    const inner = leaves(child);
    return inner.length === 0 ? [key] : inner.map((v) => ({ [key]: v }));
  });
}

const EVENTS: SessionEvent[] = [
  { type: 'CLAIM', generation: 7 },
  { type: 'STREAM' },
  { type: 'FAIL', reason: 'step limit' },
  { type: 'ABORT', reason: 'watchdog' },
  { type: 'REPAIR' },
  { type: 'CLOSE' },
];

/** xstate's own answer: the persisted next snapshot, or undefined where the machine refuses. */
function reference(data: SessionSnapshotData, event: SessionEvent): SessionSnapshotData | undefined {
  const snapshot = sessionMachine.resolveState({
    value: data.value as never,
    context: data.context as SessionContext,
  });
  if (!snapshot.can(event)) return undefined;
  const [next] = transition(sessionMachine, snapshot, event);
  return persistable(next);
}

describe('offer', () => {
  const base = newSession('w');
  const states = leaves(sessionMachine.root);

  it('walks every state of the machine', () => {
    // idle, claimed, streaming, tool-debt's substates, force-abandoning, closed — at least.
    expect(states.length).toBeGreaterThanOrEqual(6);
    expect(states).toContain('idle');
    expect(states).toContain('closed');
  });

  it('answers as xstate’s transition() does, for every state and every event, and again (the scope is reused)', () => {
    let taken = 0;
    for (const value of states) {
      const data = { ...structuredClone(base), value } as SessionSnapshotData;
      for (const event of EVENTS) {
        const expected = reference(data, event);
        for (let again = 0; again < 2; again++) {
          const got = offer(data, event);
          expect(got, `${JSON.stringify(value)} + ${event.type}`).toEqual(expected);
          expect(accepts(data, event)).toBe(expected !== undefined);
        }
        if (expected !== undefined) taken++;
      }
    }
    // Not vacuous: the machine takes a good share of these pairs.
    expect(taken).toBeGreaterThanOrEqual(8);
  });

  it('a CLAIM from idle carries its generation into the next snapshot and leaves the offered one unchanged', () => {
    const before = structuredClone(base);
    const next = offer(base, { type: 'CLAIM', generation: 42 });
    if (next === undefined) throw new Error('idle refused a CLAIM');
    expect(next.value).toBe('claimed');
    expect((next.context as SessionContext).generation).toBe(42);
    expect(base).toEqual(before);
    expect(offer(next, { type: 'CLAIM', generation: 43 })).toBeUndefined();
  });
});
