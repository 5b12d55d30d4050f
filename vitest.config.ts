import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['packages/*/src/**/*.test.ts', 'apps/*/src/**/*.test.ts'],
    pool: 'forks',
    setupFiles: ['./vitest.setup.ts'],
    // One throwaway PostgreSQL cluster for the run, where the server binaries are installed.
    globalSetup: ['./vitest.postgres.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    reporters: process.env.CI ? ['default'] : ['default'],
  },
});
