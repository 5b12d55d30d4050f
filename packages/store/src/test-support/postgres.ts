/** The throwaway PostgreSQL cluster now lives in the testing entry (src/pg-cluster.ts). */
export type { Postgres, StartPostgresOptions } from '../pg-cluster.js';
export { postgresBin, postgresSkipReason, startPostgres } from '../pg-cluster.js';
