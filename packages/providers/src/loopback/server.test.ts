/**
 * The loopback server's pacing: a reply's chunks are due on a schedule from its start, so a
 * server that ran late catches up instead of carrying its lateness into every later gap (the
 * pacing's clock injected: the test makes the server late and reads the waits it asks for).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { LoopbackServer, type PacingTimers } from './server.js';

let server: LoopbackServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

describe('loopback server pacing', () => {
  it('sends chunks on a schedule from the reply’s start: a late wake shortens the next waits, never lengthens the stream', async () => {
    let now = 1_000;
    const waits: number[] = [];
    const timers: PacingTimers = {
      now: () => now,
      sleep: async (ms) => {
        waits.push(ms);
        // The first wake comes 50 ms late (a starved process); later ones on time.
        now += ms + (waits.length === 1 ? 50 : 0);
      },
    };
    server = await LoopbackServer.start({ timers });
    server.script({
      chunks: [
        { text: 'a' },
        { delayMs: 30 },
        { text: 'b' },
        { delayMs: 30 },
        { text: 'c' },
        { delayMs: 30 },
        { text: 'd' },
        { finish: 'stop' },
        { done: true },
      ],
    });
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const body = await res.text();
    const text = [...body.matchAll(/"content":"(\w)"/g)].map((m) => m[1]).join('');
    expect(text).toBe('abcd');
    // Due at 30, 60 and 90 ms: woken at 80, 'c' (due at 60) goes at once, 'd' waits 10 ms more.
    expect(waits).toEqual([30, 10]);
    expect(now - 1_000).toBe(90);
  });
});
