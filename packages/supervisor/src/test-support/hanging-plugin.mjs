// A plugin module whose import never finishes (a top-level await that hangs while the thread
// stays busy): a worker that loads it never becomes ready.
await new Promise(() => {
  setInterval(() => {}, 1_000);
});
export const tools = [];
