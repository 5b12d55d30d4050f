/**
 * The watchdog's delegate alone (abort-protocol.ts) over one armed turn on a stub host: what the
 * observational stage and the declines report (L5, L4, L7), and that a commit reaches the turn.
 * The definitive stage itself is the turn's (turn/turn.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { turnWorld as world } from '../test-support/turn-world.js';
import { WatchedTurn } from './watchdog.js';

describe('abort protocol', () => {
  it('L5: the observational stage logs, counts and warns, and says nothing definitive', () => {
    const w = world();
    w.protocol.fired(w.watched, w.info());
    expect(w.counters.watchdogFired).toBe(1);
    expect(w.logs).toEqual([
      expect.objectContaining({
        level: 50,
        msg: 'turn liveness watchdog fired; attempting recovery',
        workstreamId: 'ws',
        generation: 4,
        idleMs: 1_234,
        lastActivity: 'toolStart',
        bound: 'idle',
      }),
    ]);
    expect(w.events.map((e) => [e.type, e.data])).toEqual([
      // Exactly what a host can act on: no clock slot, no sampled version.
      ['watchdog_fired', { idleMs: 1_234, bound: 'idle', lastActivity: 'toolStart' }],
      [
        'warning',
        { stage: 'observational', message: 'No progress for 1.2s (last: toolStart); attempting recovery.' },
      ],
    ]);
    expect(w.posted).toEqual([]);
  });

  it('a stage for a slot whose turn is gone is still reported, through the supervisor logger', () => {
    const w = world();
    const gone = new WatchedTurn(0, 'ws', 't', 4, 0, 0);
    w.protocol.fired(gone, { ...w.info(), slot: 0 });
    w.protocol.declined(gone, { ...w.info(), slot: 0 }, 'ended', undefined);
    // The turn's own logger would add its generation binding; the supervisor's has none.
    expect(w.logs.map((l) => [l.msg, l.generation])).toEqual([
      ['turn liveness watchdog fired; attempting recovery', undefined],
      ['watchdog abort declined', undefined],
    ]);
  });

  it('L4 L7: a decline is logged by why — a failed publish as a warning with its error — and announced', () => {
    const w = world();
    w.protocol.declined(w.watched, w.info(), 'activity', undefined);
    w.protocol.declined(w.watched, w.info(), 'failed', new Error('publish broke'));
    expect(w.counters.abortsDeclined).toBe(2);
    expect(
      w.logs.map((l) => [l.level, l.msg, l.why ?? (l.err as { message: string })?.message, l.workstreamId]),
    ).toEqual([
      [30, 'watchdog abort declined', 'activity', 'ws'],
      [40, 'watchdog abort declined: publish failed; still watching', 'publish broke', 'ws'],
    ]);
    expect(w.events.map((e) => [e.type, e.data])).toEqual([
      ['watchdog_declined', { why: 'activity' }],
      ['watchdog_declined', { why: 'failed' }],
    ]);
  });

  it('a commit reaches the turn on the slot — once; one for a turn no longer on its slot is ignored', () => {
    const w = world();
    w.clock.fence(1);
    w.protocol.committed(w.watched, w.info());
    w.protocol.committed(w.watched, w.info());
    expect(w.turn.aborted?.reason).toBe('watchdog');
    expect(w.counters.abortsCommitted).toBe(1);
    const other = world();
    other.protocol.committed(new WatchedTurn(1, 'ws', 't', 4, 0, 0), other.info());
    expect(other.turn.aborted).toBeUndefined();
    expect(other.counters.abortsCommitted).toBe(0);
  });
});
