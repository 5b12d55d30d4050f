/**
 * The unit tests only: every test file of the workspace except those that start a runtime, a
 * worker pool or the harness (real threads, seconds per file). `npm run mutation -- --unit`
 * mutates against these: a mutant such tests kill costs a second, where the whole suite costs
 * minutes per mutant of a file every runtime test covers (turn/turn.ts). A score measured this
 * way is a lower bound of the full one: a mutant only a runtime test kills counts as survived.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';
import base from '../../vitest.config.js';

// What starts threads or servers: a runtime, a pool, a server, PostgreSQL, the harness's explorer.
const RUNTIME =
  /Turnwarden\.start|startRuntime|new WorkerPool|spawnWorker|runtimeFor|withRuntime|startServer|buildApp|startPg|pgCluster|explore\(|runSchedule/;
const include = ['packages/*/src/**/*.test.ts', 'apps/*/src/**/*.test.ts'];

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : testFiles(path);
    return e.name.endsWith('.test.ts') ? [path] : [];
  });
}
const runtimeTests = ['packages', 'apps']
  .flatMap((top) => readdirSync(top).map((name) => join(top, name, 'src')))
  .flatMap((src) => {
    try {
      return testFiles(src);
    } catch {
      return [];
    }
  })
  .filter((file) => RUNTIME.test(readFileSync(file, 'utf8')));

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include,
    exclude: ['**/node_modules/**', ...runtimeTests],
    // One throwaway PostgreSQL cluster for the run, as the whole suite has: the PostgreSQL
    // store's contract tests are unit tests, and without it each of their runs — one per mutant
    // of a store file — would initialise and start a cluster of its own (seconds each).
    globalSetup: base.test?.globalSetup,
  },
});
