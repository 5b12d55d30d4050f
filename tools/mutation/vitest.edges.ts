/**
 * The edges' own tests: the unit tests and the runtime tests of cluster routing, events and
 * streams, admission, the send queue (queue, close and delete tests), the PostgreSQL store, the
 * server, the providers and MCP. Not the CLI's demo and cluster tests, nor the harness: they
 * cover the same lines through whole runs, tens of seconds per mutant.
 * `npm run mutation -- --suite edges`.
 */
import { unitAnd } from './suites.js';

export default unitAnd(
  [
    'packages/supervisor/src/cluster/',
    'packages/supervisor/src/streams/',
    'packages/supervisor/src/capacity/',
    'packages/supervisor/src/commands/',
    'packages/supervisor/src/queue.test.ts',
    'packages/supervisor/src/close.test.ts',
    'packages/supervisor/src/close-fence.test.ts',
    'packages/supervisor/src/delete.test.ts',
    'packages/supervisor/src/tenancy-every-call.test.ts',
    'packages/store/src/',
    'apps/server/src/',
    'packages/providers/src/',
    'packages/mcp/src/',
  ],
  { postgres: true },
);
