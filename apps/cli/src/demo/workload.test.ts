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
    const seen: Record<TurnKind, number> = { normal: 0, tools: 0, heartbeat: 0, stall: 0, wedge: 0 };
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
      [1, 5],
    ] as const) {
      const plan = planWorkload({ workstreams, turns, seed, timeoutMs: 300 });
      const kinds = new Set(plan.workstreams.flatMap((w) => w.turns.map((t) => t.kind)));
      expect([...kinds].sort()).toEqual([...TURN_KINDS].sort());
    }
  });

  it('puts the recovery kinds first when there are fewer turns than kinds', () => {
    expect(kindCounts(2)).toEqual({ normal: 0, tools: 0, heartbeat: 1, stall: 1, wedge: 0 });
  });

  it('writes valid scripts scaled to the timeout: heartbeats run ≈ 2.5 × timeoutMs', () => {
    const plan = planWorkload({ ...base, timeoutMs: 400 });
    for (const ws of plan.workstreams) {
      for (const t of ws.turns) {
        expect(parseScript(t.content)).toBeDefined();
        if (t.kind === 'heartbeat') expect(t.content).toMatch(/"(ms|heartbeat)":1000\b/);
        if (t.kind === 'stall') expect(t.content).toMatch(/"stall":true|"ignoreAbort":true/);
        if (t.kind === 'wedge') expect(t.content).toMatch(/"wedge":true|"name":"wedge"/);
        // Silences in turns that must complete stay well under the timeout (no false aborts by design).
        if (EXPECTED[t.kind] === 'completed') {
          for (const m of t.content.matchAll(/"(?:delayMs|ms)":(\d+)/g)) {
            if (t.kind !== 'heartbeat') expect(Number(m[1])).toBeLessThanOrEqual(400 / 5);
          }
        }
      }
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
});
