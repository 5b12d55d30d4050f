// A test model: `ticker` streams as many tokens as the user message says, each after a
// macrotask, so every token is an event of its own — enough to fill a slow client's socket.
const yieldMacrotask = () => new Promise((resolve) => setImmediate(resolve));

async function* tick(req, ctx) {
  const last = req.history.at(-1);
  const n = last?.role === 'user' ? Number.parseInt(last.content, 10) : 0;
  for (let i = 0; i < n; i++) {
    await yieldMacrotask();
    if (ctx.signal.aborted) return;
    yield { type: 'text', text: 'tick-tock-' };
  }
  if (!(n > 0)) yield { type: 'text', text: 'done' };
}

export const models = [{ name: 'ticker', stream: tick }];
