/**
 * Test selections for `npm run mutation -- --suite <name>`: every unit test
 * (tools/mutation/vitest.unit.ts) plus the runtime tests of the named folders and files. Each
 * is a subset of the whole suite, so a score measured against it is a lower bound of the whole
 * suite's; it leaves out the hundreds of runtime tests that cover the same lines through an
 * ordinary turn (minutes per mutant of a file every turn runs through).
 */
import { defineConfig } from 'vitest/config';
import base from '../../vitest.config.js';
import unit from './vitest.unit.js';

export function unitAnd(paths: readonly string[], options: { postgres: boolean }) {
  const exclude = (unit.test?.exclude ?? []).filter((file) => !paths.some((path) => file.startsWith(path)));
  return defineConfig({
    ...base,
    test: {
      ...base.test,
      include: unit.test?.include,
      exclude,
      // The throwaway PostgreSQL cluster only where a selected test needs it.
      globalSetup: options.postgres ? base.test?.globalSetup : [],
    },
  });
}
