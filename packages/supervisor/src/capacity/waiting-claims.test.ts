/**
 * Claims waiting for a worker (T4): served in arrival order, refused only after the pool made no
 * progress for the bound — a slow ramp refuses nothing, a stuck pool refuses in time.
 */
import { describe, expect, it } from 'vitest';
import { Timeline } from '../test-support/turn-world.js';
import { WaitingClaims } from './waiting-claims.js';

function claims(timeoutMs = 1_000) {
  const timers = new Timeline();
  let now = 0;
  const q = new WaitingClaims<string>(
    timeoutMs,
    timers,
    () => now,
    () => new Error('refused'),
  );
  return {
    q,
    timers,
    advance: (ms: number) => {
      now += ms;
      timers.run(ms);
    },
  };
}

const outcome = (p: Promise<string>) => {
  const seen: { value?: string; error?: string } = {};
  p.then(
    (v) => (seen.value = v),
    (e: Error) => (seen.error = e.message),
  );
  return seen;
};
const flush = () => new Promise((r) => setImmediate(r));

describe('waiting claims', () => {
  it('T4: served in arrival order; serving with nobody waiting says so', async () => {
    const { q } = claims();
    const a = q.wait();
    const b = q.wait();
    expect(q.length).toBe(2);
    expect(q.serve('w1')).toBe(true);
    expect(q.serve('w2')).toBe(true);
    expect(await a).toBe('w1');
    expect(await b).toBe('w2');
    expect(q.serve('w3')).toBe(false);
  });

  it('T4: a ramp slower than the bound refuses nothing while workers keep becoming ready', async () => {
    const { q, advance } = claims(1_000);
    const waiting = [q.wait(), q.wait(), q.wait(), q.wait()].map(outcome);
    // One worker every 900 ms: 3.6 s in all, each step inside the 1 s bound.
    for (let i = 0; i < 4; i++) {
      advance(900);
      q.serve(`w${i}`);
      await flush();
    }
    expect(waiting.map((w) => w.value)).toEqual(['w0', 'w1', 'w2', 'w3']);
    expect(waiting.some((w) => w.error)).toBe(false);
  });

  it('T4: a pool without progress refuses every waiting claim once the bound has passed since its last progress', async () => {
    const { q, advance } = claims(1_000);
    const first = outcome(q.wait());
    advance(600);
    q.progress(); // a slot freed: the bound counts from here
    const second = outcome(q.wait());
    advance(999);
    await flush();
    expect(first).toEqual({});
    expect(second).toEqual({});
    advance(1);
    await flush();
    expect(first).toEqual({ error: 'refused' });
    expect(second).toEqual({ error: 'refused' });
    expect(q.length).toBe(0);
  });

  it('rejectAll refuses every waiting claim and cancels its timer', async () => {
    const { q, timers } = claims();
    const a = outcome(q.wait());
    q.rejectAll(new Error('closed'));
    await flush();
    expect(a).toEqual({ error: 'closed' });
    expect(timers.pending).toBe(0);
  });
});
