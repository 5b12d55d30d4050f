/**
 * A start that is refused starts nothing and creates nothing: for every refusal that can come
 * from the configuration — a model no plugin provides, a plugin module the workers refuse or
 * cannot import, workers that exit or never become ready, a host tool module that fails to
 * import — the directory of the store's file holds exactly what it held before (a fresh path:
 * nothing, not even its directory; an existing database, open elsewhere with its -wal and -shm:
 * the same bytes and mtimes), and no worker thread or timer of the start is left running.
 */
import { createHook } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import dc from 'node:diagnostics_channel';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Worker } from 'node:worker_threads';
import { ErrorCode } from '@turnwarden/protocol';
import { openSqliteStore, type Store } from '@turnwarden/store';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Turnwarden, type TurnwardenOptions } from './index.js';
import { refusal } from './test-support/bounded.js';
import { SCRIPTED } from './test-support/runtime.js';

const plugin = (name: string) => new URL(`./test-support/${name}`, import.meta.url).href;

interface Refusal {
  readonly name: string;
  readonly options: Partial<TurnwardenOptions>;
  readonly code: ErrorCode;
  readonly field?: string;
}

const REFUSALS: readonly Refusal[] = [
  {
    name: 'a model no plugin provides',
    options: { model: 'no-such-model' },
    code: ErrorCode.INVALID_CONFIG,
    field: 'model',
  },
  {
    name: 'a model no plugin provides (no warm worker: the probe worker)',
    options: { model: 'no-such-model', pool: { maxWorkers: 2, warmWorkers: 0 } },
    code: ErrorCode.INVALID_CONFIG,
    field: 'model',
  },
  {
    name: 'a plugin module that throws at import in the workers',
    options: { pluginModules: [SCRIPTED, plugin('broken-plugin.mjs')] },
    code: ErrorCode.INVALID_CONFIG,
    field: 'pluginModules[1]',
  },
  {
    name: 'a plugin module the workers’ registry refuses (a second tool named echo)',
    options: { pluginModules: [SCRIPTED, plugin('duplicate-tool-plugin.mjs')] },
    code: ErrorCode.INVALID_CONFIG,
    field: 'pluginModules[1]',
  },
  {
    name: 'a pluginModules URL that names no file',
    options: { pluginModules: [SCRIPTED, plugin('no-such-plugin.mjs')] },
    code: ErrorCode.INVALID_CONFIG,
    field: 'pluginModules[1]',
  },
  {
    name: 'a pluginModules URL the workers cannot import',
    options: { pluginModules: [SCRIPTED, 'data:text/javascript,export const tools = [;'] },
    code: ErrorCode.INVALID_CONFIG,
    field: 'pluginModules[1]',
  },
  {
    name: 'a plugin module that ends its worker at import',
    options: { pluginModules: [SCRIPTED, plugin('exiting-plugin.mjs')] },
    code: ErrorCode.WORKER_EXITED,
  },
  {
    name: 'a plugin module whose import never finishes',
    options: {
      pluginModules: [SCRIPTED, plugin('hanging-plugin.mjs')],
      pool: { maxWorkers: 1, warmWorkers: 1, startTimeoutMs: 300 },
    },
    code: ErrorCode.TIMEOUT,
  },
  {
    name: 'a model no plugin provides, host tools loaded (their connection is closed)',
    options: { model: 'no-such-model', hostToolModules: [plugin('connected-host-tools.mjs')] },
    code: ErrorCode.INVALID_CONFIG,
    field: 'model',
  },
  {
    name: 'a plugin module the workers refuse, host tools loaded (their connection is closed)',
    options: {
      pluginModules: [SCRIPTED, plugin('broken-plugin.mjs')],
      hostToolModules: [plugin('connected-host-tools.mjs')],
    },
    code: ErrorCode.INVALID_CONFIG,
    field: 'pluginModules[1]',
  },
  {
    name: 'a host tool module that fails to import',
    options: { hostToolModules: [plugin('broken-plugin.mjs')] },
    code: ErrorCode.INVALID_CONFIG,
    field: 'hostToolModules[0]',
  },
];

/** Every file of `dir` (recursively): its bytes' digest, size and mtime. */
function snapshot(dir: string): Record<string, { sha256: string; size: number; mtimeMs: number }> {
  const out: Record<string, { sha256: string; size: number; mtimeMs: number }> = {};
  for (const name of readdirSync(dir, { recursive: true }) as string[]) {
    const path = join(dir, name);
    const st = statSync(path);
    if (!st.isFile()) continue;
    out[name] = {
      sha256: createHash('sha256').update(readFileSync(path)).digest('hex'),
      size: st.size,
      mtimeMs: st.mtimeMs,
    };
  }
  return out;
}

/** Worker threads created in this process, each with whether it has exited. */
const threads: { worker: Worker; exited: boolean }[] = [];
const onWorker = (message: unknown) => {
  const entry = { worker: (message as { worker: Worker }).worker, exited: false };
  entry.worker.once('exit', () => {
    entry.exited = true;
  });
  threads.push(entry);
};
beforeAll(() => dc.subscribe('worker_threads', onWorker));
afterAll(() => dc.unsubscribe('worker_threads', onWorker));

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Timers created while a start runs, until they are cleared or have fired. */
const liveTimers = new Map<number, string>();
let tracking = false;
const timerHook = createHook({
  init(asyncId, type) {
    if (tracking && (type === 'Timeout' || type === 'Immediate')) {
      liveTimers.set(asyncId, new Error(type).stack ?? type);
    }
  },
  destroy(asyncId) {
    liveTimers.delete(asyncId);
  },
});
beforeAll(() => timerHook.enable());
afterAll(() => timerHook.disable());

/** Starts with `options` on the store at `path`: refused as `expected`, nothing left running. */
async function refusedStart(expected: Refusal, path: string): Promise<void> {
  const before = threads.length;
  liveTimers.clear();
  tracking = true;
  const started = Turnwarden.start({
    model: 'scripted',
    pluginModules: [SCRIPTED],
    pool: { maxWorkers: 2, warmWorkers: 1 },
    logger: pino({ level: 'silent' }),
    ...expected.options,
    store: { path },
  });
  const e = await refusal(started).finally(() => {
    tracking = false;
  });
  expect(e.code).toBe(expected.code);
  if (expected.field !== undefined) expect(e.details).toEqual({ field: expected.field });
  // Every worker thread the start spawned has exited by the time it is refused; no timer stays.
  const spawned = threads.slice(before);
  expect(spawned.filter((t) => !t.exited).map((t) => t.worker.threadId)).toEqual([]);
  // A cleared timer's destroy hook is delivered on the loop's next turns, not at clearTimeout.
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
  expect([...liveTimers.values()]).toEqual([]);
}

describe('a refused start creates nothing and leaves nothing running', () => {
  for (const r of REFUSALS) {
    it(`T5: ${r.name} — refused with its typed error; a fresh path gets no file (nor its directory)`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'turnwarden-refused-'));
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
      const path = join(dir, 'data', 'turnwarden.db');
      await refusedStart(r, path);
      expect(existsSync(join(dir, 'data'))).toBe(false);
      expect(readdirSync(dir)).toEqual([]);
    });

    it(`T5: ${r.name} — refused with its typed error; an existing database open elsewhere, its -wal and -shm, keep their bytes and mtimes`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'turnwarden-refused-'));
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
      const path = join(dir, 'turnwarden.db');
      // Another process's connection, say: it keeps the -wal and -shm in place.
      const other: Store = openSqliteStore({ path });
      cleanups.push(() => other.close());
      await other.createWorkstream({ id: 'ws-1', tenantId: 'tenant-a' });
      const files = snapshot(dir);
      expect(Object.keys(files).sort()).toEqual(['turnwarden.db', 'turnwarden.db-shm', 'turnwarden.db-wal']);
      await refusedStart(r, path);
      expect(snapshot(dir)).toEqual(files);
      expect((await other.getWorkstream('ws-1'))?.tenantId).toBe('tenant-a');
    });
  }
});

describe('a store that cannot be opened', () => {
  it('T5: the start is refused with the store’s error, and the workers and host tools it started first are stopped', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'turnwarden-refused-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    // The path names a directory: SQLite cannot open it as a database.
    const path = join(dir, 'turnwarden.db');
    mkdirSync(path);
    await refusedStart(
      {
        name: 'a store path that is a directory',
        options: { hostToolModules: [plugin('connected-host-tools.mjs')] },
        code: ErrorCode.STORE_ERROR,
      },
      path,
    );
    expect(readdirSync(dir)).toEqual(['turnwarden.db']);
    expect(readdirSync(path)).toEqual([]);
  });
});
