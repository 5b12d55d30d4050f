/**
 * The loopback server's pacing: a reply's chunks are due on a schedule from its start, so a
 * server that ran late catches up instead of carrying its lateness into every later gap (the
 * pacing's clock injected: the test makes the server late and reads the waits it asks for).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { type Chunk, LoopbackServer, type PacingTimers } from './server.js';

let server: LoopbackServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

/** The text a chat-completions stream from the server carries. */
async function streamed(url: string): Promise<string> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  const body = await res.text();
  return [...body.matchAll(/"content":"(\w)"/g)].map((m) => m[1]).join('');
}

/** A pacing clock whose first wake comes 50 ms late (a starved process), later ones on time. */
function lateClock(start: number): { timers: PacingTimers; waits: number[]; elapsed(): number } {
  let now = start;
  const waits: number[] = [];
  return {
    waits,
    elapsed: () => now - start,
    timers: {
      now: () => now,
      sleep: async (ms) => {
        waits.push(ms);
        now += ms + (waits.length === 1 ? 50 : 0);
      },
    },
  };
}

/** The text of a reply of these chunks, then a finish, played by a server on `timers`. */
async function play(timers: PacingTimers, chunks: readonly Chunk[]): Promise<string> {
  server = await LoopbackServer.start({ timers });
  server.script({ chunks: [...chunks, { finish: 'stop' }, { done: true }] });
  return streamed(server.url);
}

describe('loopback server pacing', () => {
  it('sends chunks on a schedule from the reply’s start: a late wake shortens the next waits, never lengthens the stream', async () => {
    const clock = lateClock(1_000);
    const chunks: Chunk[] = [{ text: 'a' }, { delayMs: 30 }, { text: 'b' }, { delayMs: 30 }, { text: 'c' }];
    expect(await play(clock.timers, [...chunks, { delayMs: 30 }, { text: 'd' }])).toBe('abcd');
    // Due at 30, 60 and 90 ms: woken at 80, 'c' (due at 60) goes at once, 'd' waits 10 ms more.
    expect(clock.waits).toEqual([30, 10]);
    expect(clock.elapsed()).toBe(90);
  });

  it('a pause is a silence of at least its length, whatever lateness came before it, and the pacing starts again at its end', async () => {
    const clock = lateClock(0);
    const chunks: Chunk[] = [{ text: 'a' }, { delayMs: 30 }, { text: 'b' }, { pauseMs: 100 }, { text: 'c' }];
    expect(await play(clock.timers, [...chunks, { delayMs: 30 }, { text: 'd' }])).toBe('abcd');
    // Late by 50 before the pause: the pause is still 100 (a schedule would have made it 50);
    // after it 'd' is due 30 ms after 'c'.
    expect(clock.waits).toEqual([30, 100, 30]);
  });
});
