import { parseScript } from '@turnwarden/session';
import { describe, expect, it } from 'vitest';
import { EXPECTED, kindCounts, planWorkload, TURN_KINDS, type TurnKind } from './workload.js';

const base = { workstreams: 24, turns: 4, seed: 1, timeoutMs: 1000 };

describe('demo workload plan', () => {
  it('is deterministic for a seed', () => {
    expect(planWorkload(base)).toEqual(planWorkload(base));
    expect(JSON.stringify(planWorkload({ ...base, seed: 7 }))).toBe(
      JSON.stringify(planWorkload({ ...base, seed: 7 })),
    );
  });

  it('differs between seeds', () => {
    expect(JSON.stringify(planWorkload(base))).not.toBe(JSON.stringify(planWorkload({ ...base, seed: 2 })));
  });

  it('has the planned shape: ids, turn indexes, counts per kind', () => {
    const plan = planWorkload(base);
    expect(plan.workstreams.map((w) => w.id)).toEqual(
      Array.from({ length: 24 }, (_, i) => `ws-${String(i + 1).padStart(2, '0')}`),
    );
    const seen = Object.fromEntries(TURN_KINDS.map((k) => [k, 0])) as Record<TurnKind, number>;
    for (const ws of plan.workstreams) {
      expect(ws.turns.map((t) => t.index)).toEqual([1, 2, 3, 4]);
      for (const t of ws.turns) seen[t.kind]++;
    }
    expect(seen).toEqual(plan.counts);
    expect(Object.values(seen).reduce((a, b) => a + b, 0)).toBe(96);
  });

  it.each([1, 2, 3, 42, 4096])('contains every kind (seed %i), and small plans too', (seed) => {
    for (const [workstreams, turns] of [
      [24, 4],
      [4, 3],
      [1, 14],
    ] as const) {
      const plan = planWorkload({ workstreams, turns, seed, timeoutMs: 300 });
      const kinds = new Set(plan.workstreams.flatMap((w) => w.turns.map((t) => t.kind)));
      expect([...kinds].sort()).toEqual([...TURN_KINDS].sort());
    }
  });

  it('puts the recovery kinds first when there are fewer turns than kinds', () => {
    expect(kindCounts(2)).toEqual({
      normal: 0,
      tools: 0,
      heartbeat: 1,
      stall: 1,
      wedge: 0,
      cancel: 0,
      'store-fault': 0,
      'store-reject': 0,
      approval: 0,
      'double-text': 0,
    });
  });

  it('A1–A4: approval turns, each decided one way (approve, deny, timeout), a transfer call in each; none where the driver cannot decide them', () => {
    const plan = planWorkload({ ...base, seed: 7 });
    const approvals = plan.workstreams.flatMap((w) => w.turns.filter((t) => t.kind === 'approval'));
    expect(approvals.length).toBe(plan.counts.approval);
    expect(approvals.length).toBeGreaterThan(0);
    for (const t of approvals) {
      expect(['approve', 'deny', 'timeout']).toContain(t.variant);
      expect(t.content).toContain('"name":"transfer"');
    }
    const without = planWorkload({ ...base, seed: 7, approvals: false });
    expect(without.counts.approval).toBe(0);
    expect(without.counts.normal).toBe(plan.counts.normal + plan.counts.approval);
  });

  it('M1–M4: double-text turns, each with one policy (reject, enqueue, interrupt, rollback): a long heartbeating tool, and a second message; none where the driver does not double-text', () => {
    const plan = planWorkload({ ...base, seed: 7 });
    const doubled = plan.workstreams.flatMap((w) => w.turns.filter((t) => t.kind === 'double-text'));
    expect(doubled.length).toBe(plan.counts['double-text']);
    expect(doubled.length).toBeGreaterThan(0);
    for (const t of doubled) {
      expect(['reject', 'enqueue', 'interrupt', 'rollback']).toContain(t.variant);
      expect(t.content).toContain('"name":"heartbeat"');
      expect(parseScript(t.followUp!)).not.toBeUndefined();
    }
    const without = planWorkload({ ...base, seed: 7, doubleTexts: false });
    expect(without.counts['double-text']).toBe(0);
    expect(without.counts.normal).toBe(plan.counts.normal + plan.counts['double-text']);
  });

  it('writes valid scripts scaled to the timeout whose steps produce the expected outcome', () => {
    const timeoutMs = 400;
    const plan = planWorkload({ ...base, timeoutMs });
    for (const ws of plan.workstreams) {
      for (const t of ws.turns) {
        const parsed = parseScript(t.content);
        expect(parsed, `${ws.id} turn ${t.index} is a script`).not.toBeUndefined();
        const steps = parsed!.steps;
        const calls = steps.flatMap((s) => (s.kind === 'tools' ? s.calls : []));
        const kinds = new Set(steps.map((s) => s.kind));
        // What makes the turn end as expected is in the script.
        switch (t.kind) {
          case 'stall':
            expect(kinds.has('stall') || calls.some((c) => c.arguments.includes('"ignoreAbort":true'))).toBe(
              true,
            );
            break;
          case 'wedge':
            expect(kinds.has('wedge') || calls.some((c) => c.name === 'wedge')).toBe(true);
            break;
          case 'heartbeat': {
            // Progress without output for ≈ 2.5 × timeoutMs (L2), beating well inside the timeout.
            const beat = steps.find((s) => s.kind === 'heartbeat');
            const tool = calls.find((c) => c.name === 'heartbeat');
            const args =
              beat ?? (tool ? (JSON.parse(tool.arguments) as { ms: number; everyMs: number }) : undefined);
            expect(args?.ms).toBe(2.5 * timeoutMs);
            expect(args?.everyMs).toBeLessThanOrEqual(timeoutMs / 5);
            break;
          }
          default:
            expect(kinds.has('stall') || kinds.has('wedge') || kinds.has('fail')).toBe(false);
        }
        // Silences in turns that must complete stay well under the timeout (no false aborts by design).
        if (EXPECTED[t.kind] === 'completed') {
          for (const s of steps) {
            if (s.kind === 'text') expect(s.delayMs).toBeLessThanOrEqual(timeoutMs / 5);
            if (s.kind === 'sleep') expect(s.ms).toBeLessThanOrEqual(timeoutMs / 5);
          }
          for (const c of calls.filter((x) => x.name === 'sleep')) {
            expect((JSON.parse(c.arguments) as { ms: number }).ms).toBeLessThanOrEqual(timeoutMs / 5);
          }
        }
      }
      // The idle check is plain text: the scripted model echoes it.
      expect(parseScript(ws.idleCheck)).toBeUndefined();
    }
  });

  it('includes tool calls with duplicate ids', () => {
    const plan = planWorkload(base);
    const tools = plan.workstreams.flatMap((w) => w.turns).filter((t) => t.kind === 'tools');
    expect(
      tools.some((t) => t.variant === 'dup-ids' && (t.content.match(/"id":"dup"/g) ?? []).length === 2),
    ).toBe(true);
  });

  it('C3 P3 S5: cancel turns sleep in a tool for the host to cancel; store turns carry their own fault, marked in their script', () => {
    const plan = planWorkload(base);
    const turns = plan.workstreams.flatMap((w) => w.turns);
    for (const t of turns) {
      if (t.kind === 'cancel') expect(t.content).toContain('"name":"sleep"');
      if (t.kind === 'store-fault' || t.kind === 'store-reject') {
        expect(t.fault).toBeDefined();
        expect(t.content).toContain(t.fault!.marker);
        expect(t.fault!.fault === 'reject').toBe(t.kind === 'store-reject');
      } else {
        expect(t.fault).toBeUndefined();
      }
    }
    // Every marker is its turn's own.
    const markers = turns.flatMap((t) => (t.fault ? [t.fault.marker] : []));
    expect(new Set(markers).size).toBe(markers.length);
    expect(markers.length).toBe(plan.counts['store-fault'] + plan.counts['store-reject']);
  });
});
