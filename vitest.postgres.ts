/**
 * vitest global setup: one throwaway PostgreSQL cluster for the whole run, when the machine has
 * the server binaries, instead of one per test file (each `startPostgres()` in a test then
 * returns it; every user works in schemas of its own). Its URL reaches the test processes through
 * TURNWARDEN_TEST_POSTGRES_URL; it is stopped and removed when the run ends.
 */
import { postgresSkipReason, startPostgres } from './packages/store/src/pg-cluster.js';

export default async function setup(): Promise<(() => void) | undefined> {
  if (process.env.TURNWARDEN_TEST_POSTGRES_URL !== undefined || postgresSkipReason() !== undefined) {
    return undefined;
  }
  const pg = await startPostgres();
  if ('skip' in pg) return undefined;
  process.env.TURNWARDEN_TEST_POSTGRES_URL = pg.url;
  return () => {
    delete process.env.TURNWARDEN_TEST_POSTGRES_URL;
    pg.stop();
  };
}
