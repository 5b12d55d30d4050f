/**
 * A host that stalls inside a transaction, in a thread of its own (postgres-store.test.ts): it
 * opens a PostgreSQL store (the built package) whose clock, once armed, blocks this thread —
 * as a paused process or a blocked event loop would — at the point where a write has sent its
 * row locks (`#lock` reads the clock after sending them) and not yet committed. The test's
 * thread goes on meanwhile.
 *
 * `flags` (Int32Array over a SharedArrayBuffer): [0] set to 1 once stalled; [1] set to 1 by the
 * test to let it go (or it goes after `maxStallMs`, so nothing can hang).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { openPostgresStore } from '@turnwarden/store';

const { url, schema, idleInTransactionTimeoutMs, maxStallMs } = workerData;
const flags = new Int32Array(workerData.flags);
let armed = false;
const store = await openPostgresStore({
  connectionString: url,
  schema,
  idleInTransactionTimeoutMs,
  applicationName: 'stalled-writer',
  now: () => {
    if (armed) {
      armed = false;
      Atomics.store(flags, 0, 1);
      Atomics.notify(flags, 0);
      Atomics.wait(flags, 1, 0, maxStallMs);
    }
    return Date.now();
  },
});
parentPort.on('message', async (m) => {
  if (m.type === 'save') {
    armed = true;
    const outcome = await store.saveSession(m.input).then(
      () => ({ ok: true }),
      (e) => ({ ok: false, code: e.code, retryable: e.retryable, message: String(e.message) }),
    );
    parentPort.postMessage({ type: 'saved', outcome });
  } else if (m.type === 'close') {
    await store.close();
    parentPort.postMessage({ type: 'closed' });
  }
});
parentPort.postMessage({ type: 'ready' });
