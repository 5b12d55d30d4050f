/** Event order across the worker's two channels (control events and RPC). */
import type { AssistantMessage } from '@turnwarden/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { script, startRuntime } from '../test-support/runtime.js';

type Rt = Awaited<ReturnType<typeof startRuntime>>;
let rt: Rt | undefined;
afterEach(async () => {
  await rt?.tw.shutdown();
  rt = undefined;
});

describe('event order', () => {
  it("a turn's tokens reach listeners before the message they make up, and nothing follows stream_end but idle", async () => {
    rt = await startRuntime();
    const text = 'one two three four five six seven eight nine ten';
    for (let i = 0; i < 5; i++) {
      const before = rt.events.length;
      // delayMs 0: the model streams through microtasks only, the hardest case for ordering.
      const result = await (await rt.send(script({ text, chunks: 10 }))).done;
      expect(result.status).toBe('completed');
      const turn = rt.events.slice(before);
      const tokens = turn.filter((e) => e.type === 'token').map((e) => String(e.data.text));
      const messageAt = turn.findIndex(
        (e) => e.type === 'message' && (e.data.message as AssistantMessage).role === 'assistant',
      );
      const lastTokenAt = turn.map((e) => e.type).lastIndexOf('token');
      expect(tokens.join('')).toBe(text);
      expect(lastTokenAt).toBeLessThan(messageAt);
      expect(turn.slice(-2).map((e) => e.type)).toEqual(['stream_end', 'idle']);
      // Ids increase monotonically within the workstream.
      const ids = turn.map((e) => e.id);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
    }
  });
});
