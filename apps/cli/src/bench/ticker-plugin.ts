/**
 * A model plugin for the events bench only: `ticker` streams as many one-character tokens as
 * the user message says, each after a macrotask (setImmediate), so that every token is an
 * event of its own — the worker does not coalesce them — the worst case for the event path.
 */
import type { ModelProvider, ModelRequest, TurnSignals } from '@turnwarden/session';

const yieldMacrotask = () => new Promise<void>((resolve) => setImmediate(resolve));

async function* tick(req: ModelRequest, ctx: TurnSignals) {
  const last = req.history.at(-1);
  const n = last?.role === 'user' ? Number.parseInt(last.content, 10) : 0;
  if (!(n > 0)) {
    yield { type: 'text' as const, text: 'done' };
    return;
  }
  for (let i = 0; i < n; i++) {
    await yieldMacrotask();
    if (ctx.signal.aborted) return;
    yield { type: 'text' as const, text: 'x' };
  }
}

export const models: readonly ModelProvider[] = [{ name: 'ticker', stream: tick }];
export const tools = [];
