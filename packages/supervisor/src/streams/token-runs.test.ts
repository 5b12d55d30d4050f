/**
 * E1 with tokens kept compact: the replay ring stores consecutive tokens of a generation as a run
 * of ids and texts (events.ts `TokenRun`), not an object each. A reconnect from any id — inside a
 * run, at a run's edge, where the ring's eviction cut a run in two, across generations — replays
 * exactly the events delivered live after it, equal field for field.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { EventHub, type TurnwardenEvent } from './events.js';

const logger = pino({ level: 'silent' });

function feed(hub: EventHub): TurnwardenEvent[] {
  const live: TurnwardenEvent[] = [];
  hub.subscribe('ws', (e) => live.push(e));
  const token = (generation: number | undefined, text: string) =>
    hub.emit('ws', 'token', generation, { text });
  token(1, 'a');
  token(1, 'b');
  token(1, 'c');
  hub.emit('ws', 'state', 1, { state: 'tool-debt' });
  token(1, 'd');
  token(1, 'e');
  token(2, 'f'); // another generation: another run
  token(undefined, 'g');
  hub.emit('ws', 'idle', 2, {});
  token(2, 'h');
  return live;
}

function replayFrom(hub: EventHub, after: number): TurnwardenEvent[] {
  const got: TurnwardenEvent[] = [];
  const off = hub.subscribe('ws', (e) => got.push(e), { kind: 'after', id: after });
  off();
  return got;
}

describe('E1: tokens in the replay ring', () => {
  it('E1: a reconnect from every id replays exactly the live events after it, tokens rebuilt field for field', () => {
    const hub = new EventHub(logger, { replayLimit: 100 });
    const live = feed(hub);
    expect(live).toHaveLength(10);
    expect(hub.stats().buffered).toBe(10);
    for (let i = 0; i < live.length; i++) {
      expect([i, replayFrom(hub, live[i]!.id)]).toEqual([i, live.slice(i + 1)]);
    }
  });

  it('E1: where eviction cuts a run in two, the ring is complete after the last dropped token: a reconnect there replays the rest, one before it is told it missed some', () => {
    const hub = new EventHub(logger, { replayLimit: 8 });
    const live = feed(hub); // 10 events: 'a' and 'b' (the first run's first two) are dropped
    expect(hub.stats().buffered).toBe(8);
    expect(replayFrom(hub, live[1]!.id)).toEqual(live.slice(2));
    expect(replayFrom(hub, live[0]!.id).map((e) => e.type)).toEqual(['replay_truncated']);
    expect(replayFrom(hub, live[0]!.id)[0]!.data).toEqual({
      after: live[0]!.id,
      firstAvailable: live[2]!.id,
    });
  });
});
