/**
 * L12: queued work runs in arrival order, light items back to back within one loop turn's
 * budget, and a loop turn whose budget is spent yields to timers before the next item.
 */
import { describe, expect, it } from 'vitest';
import { LoopTurns } from './turns.js';

const loopTurn = () => new Promise((r) => setImmediate(r));

describe('loop turns', () => {
  it('L12: items within the budget run in one loop turn, in arrival order', async () => {
    const loop = new LoopTurns(1, () => 0); // no time passes: every item fits
    const ran: number[] = [];
    for (let i = 0; i < 5; i++) loop.run(() => ran.push(i));
    expect(ran).toEqual([]);
    await loopTurn();
    expect(ran).toEqual([0, 1, 2, 3, 4]);
    expect(loop.pending).toBe(0);
  });

  it('L12: once an item spends the budget the rest wait for the next loop turn, and a timer due meanwhile runs first', async () => {
    let t = 0;
    const loop = new LoopTurns(1, () => t);
    const ran: string[] = [];
    setTimeout(() => ran.push('timer'), 0);
    loop.run(() => {
      ran.push('heavy');
      t += 5; // spends the loop turn's budget
      // …and makes sure the timer above is due by the next loop turn's timers phase.
      const end = performance.now() + 3;
      while (performance.now() < end);
    });
    loop.run(() => ran.push('next'));
    await new Promise((r) => setTimeout(r, 10));
    expect(ran.indexOf('next')).toBeGreaterThan(ran.indexOf('heavy'));
    expect(ran.indexOf('next')).toBeGreaterThan(ran.indexOf('timer'));
    expect(loop.pending).toBe(0);
  });
});
