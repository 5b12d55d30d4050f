/**
 * The definitive stage of a committed abort (turn/abort.ts, L5) on its own: what a host, its
 * listeners and the turn's worker are told for each reason, and that a step that throws is
 * logged while the rest still run.
 */
import { ABORT_REASONS, type AbortReason } from '@turnwarden/protocol';
import { describe, expect, it } from 'vitest';
import { LogMessage } from '../liveness/reporting.js';
import type { StallInfo } from '../liveness/watchdog.js';
import type { SessionRecord } from '../sessions/sessions.js';
import { type AbortedTurn, type AnnounceHost, announceAbort } from './abort.js';

const INFO: StallInfo = {
  workstreamId: 'ws',
  tenantId: 't',
  generation: 7,
  slot: 3,
  bound: 'idle',
  idleMs: 12_345,
  lastActivity: 'tool_heartbeat',
  sampledVersion: 41,
};

function world(options: { throwing?: 'log' | 'emit' | 'apply' | 'post'; ownTurn?: boolean } = {}) {
  const logs: { level: 'error' | 'warn'; fields: Record<string, unknown>; msg: string }[] = [];
  const events: { workstreamId: string; type: string; generation: number; data: unknown }[] = [];
  const applied: { event: unknown; generation: number | undefined }[] = [];
  const posted: unknown[] = [];
  const fail = (what: typeof options.throwing) => {
    if (options.throwing === what) throw new Error(`${what} failed`);
  };
  const log = {
    error(fields: Record<string, unknown>, msg: string) {
      if (msg !== 'abort step failed after commit') fail('log');
      logs.push({ level: 'error', fields, msg });
    },
    warn(fields: Record<string, unknown>, msg: string) {
      fail('log');
      logs.push({ level: 'warn', fields, msg });
    },
  };
  const turn = {
    workstreamId: 'ws',
    generation: 7,
    log,
    worker: {
      control: {
        postMessage(message: unknown) {
          fail('post');
          posted.push(message);
        },
      },
    },
  } as unknown as AbortedTurn;
  const rec = { turn: options.ownTurn === false ? { other: true } : turn } as unknown as SessionRecord;
  const host = {
    events: {
      emit(workstreamId: string, type: string, generation: number, data: unknown) {
        fail('emit');
        events.push({ workstreamId, type, generation, data });
      },
    },
    sessions: {
      apply(_rec: SessionRecord, event: unknown, generation?: number) {
        fail('apply');
        applied.push({ event, generation });
        return undefined;
      },
    },
  } as unknown as AnnounceHost;
  return { host, rec, turn, logs, events, applied, posted };
}

describe('announceAbort: the definitive stage of a committed abort (L5)', () => {
  it('by the watchdog: the error log with the silence, turn_aborted, ABORT to the machine, the definitive warning, then the abort message to the worker', () => {
    const w = world();
    announceAbort(w.host, w.rec, w.turn, 'watchdog', INFO);
    expect(w.logs).toEqual([
      {
        level: 'error',
        fields: { idleMs: 12_345, lastActivity: 'tool_heartbeat', bound: 'idle' },
        msg: LogMessage.aborted,
      },
    ]);
    expect(w.events).toEqual([
      { workstreamId: 'ws', type: 'turn_aborted', generation: 7, data: { reason: 'watchdog' } },
      {
        workstreamId: 'ws',
        type: 'warning',
        generation: 7,
        data: {
          stage: 'definitive',
          message: 'Turn aborted by the liveness watchdog after 12.3s without progress. You can retry.',
        },
      },
    ]);
    expect(w.applied).toEqual([{ event: { type: 'ABORT', reason: 'watchdog' }, generation: 7 }]);
    expect(w.posted).toEqual([{ t: 'abort', generation: 7, reason: 'watchdog' }]);
  });

  it('the deadline and the dispatch bound are the watchdog’s too: the error log and a definitive warning of their own', () => {
    for (const reason of ['deadline', 'dispatch'] as const) {
      const w = world();
      announceAbort(w.host, w.rec, w.turn, reason, { ...INFO, bound: reason });
      expect(w.logs.map((l) => [l.level, l.msg, l.fields.bound])).toEqual([
        ['error', LogMessage.aborted, reason],
      ]);
      const warning = w.events.find((e) => e.type === 'warning');
      expect(warning?.data).toMatchObject({ stage: 'definitive' });
      expect(String((warning?.data as { message?: string } | undefined)?.message)).toMatch(
        reason === 'deadline' ? /exceeded its deadline/ : /no worker started it within 12\.3s/,
      );
      expect(w.posted).toEqual([{ t: 'abort', generation: 7, reason }]);
    }
  });

  it('every other reason: a warning log naming it, turn_aborted and ABORT with it, no definitive warning to listeners', () => {
    const others = ABORT_REASONS.filter((r) => r !== 'watchdog' && r !== 'deadline' && r !== 'dispatch');
    expect(others.length).toBeGreaterThan(0);
    for (const reason of others) {
      const w = world();
      announceAbort(w.host, w.rec, w.turn, reason, undefined);
      expect(w.logs).toEqual([{ level: 'warn', fields: { reason }, msg: LogMessage.abortedOther }]);
      expect(w.events).toEqual([
        { workstreamId: 'ws', type: 'turn_aborted', generation: 7, data: { reason } },
      ]);
      expect(w.applied).toEqual([{ event: { type: 'ABORT', reason }, generation: 7 }]);
      expect(w.posted).toEqual([{ t: 'abort', generation: 7, reason }]);
    }
  });

  it('a watchdog abort without its stall record (a missing info) still logs and warns, the silence read as 0', () => {
    const w = world();
    announceAbort(w.host, w.rec, w.turn, 'watchdog', undefined);
    expect(w.logs[0]).toMatchObject({ level: 'error', msg: LogMessage.aborted });
    expect(w.logs[0]!.fields).toEqual({ idleMs: undefined, lastActivity: undefined, bound: undefined });
    expect(w.events[1]?.data).toEqual({
      stage: 'definitive',
      message: 'Turn aborted by the liveness watchdog after 0.0s without progress. You can retry.',
    });
  });

  it('a record that holds another turn (a successor, or none) is not told ABORT: the machine is no longer this turn’s', () => {
    const w = world({ ownTurn: false });
    announceAbort(w.host, w.rec, w.turn, 'cancel', undefined);
    expect(w.applied).toEqual([]);
    // Everything else is still said: the abort is committed whatever the record holds now.
    expect(w.events.map((e) => e.type)).toEqual(['turn_aborted']);
    expect(w.posted).toHaveLength(1);
  });

  it('a step that throws is logged and every later step still runs (the fence stands whatever happens here)', () => {
    const reasons: AbortReason[] = ['watchdog', 'cancel'];
    for (const throwing of ['log', 'emit', 'apply', 'post'] as const) {
      for (const reason of reasons) {
        const w = world({ throwing });
        expect(() => announceAbort(w.host, w.rec, w.turn, reason, INFO)).not.toThrow();
        const failures = w.logs.filter((l) => l.msg === 'abort step failed after commit');
        // Each step that threw is logged once with its error; the events step runs twice for the
        // watchdog (turn_aborted, the warning).
        const expected = throwing === 'emit' && reason === 'watchdog' ? 2 : 1;
        expect([throwing, reason, failures.length]).toEqual([throwing, reason, expected]);
        expect(failures.every((l) => l.level === 'error' && l.fields.err instanceof Error)).toBe(true);
        if (throwing !== 'apply') expect(w.applied).toHaveLength(1);
        if (throwing !== 'post') expect(w.posted).toEqual([{ t: 'abort', generation: 7, reason }]);
        if (throwing !== 'emit') expect(w.events[0]?.type).toBe('turn_aborted');
      }
    }
  });
});
