// A plugin module that provides only a model. When TW_TEST_IMPORTS names a file, every import
// of the module appends a line to it: a test counts which threads loaded provider code.
import { appendFileSync } from 'node:fs';
import { isMainThread, threadId } from 'node:worker_threads';

if (process.env.TW_TEST_IMPORTS)
  appendFileSync(process.env.TW_TEST_IMPORTS, `${isMainThread ? 'main' : threadId}\n`);

export const models = [
  {
    name: 'counted',
    async *stream() {
      yield { type: 'text', text: 'counted' };
    },
  },
  {
    // Ends its thread in the middle of a call (a provider that crashes its thread).
    name: 'exits',
    async *stream() {
      yield { type: 'text', text: 'about to exit' };
      await new Promise((resolve) => setTimeout(resolve, 10));
      process.exit(3);
    },
  },
];
