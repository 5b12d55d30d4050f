export { MAX_COMMIT_KEY_LENGTH } from './entries.js';
export type { FenceReason } from './leases.js';
export type { Migration } from './migrations.js';
export { MIGRATIONS, SCHEMA_VERSION } from './migrations.js';
export type { SqliteStoreOptions } from './options.js';
export type { PostgresStoreOptions } from './pg-options.js';
export { openPostgresStore, PostgresStore } from './postgres-store.js';
export type {
  EnqueueSendInput,
  QueuedSend,
  QueuedSendState,
  QueuedSends,
  TakeQueuedSendInput,
} from './queued-sends.js';
export { queuedCommitKey, queuedSendsOf } from './queued-sends.js';
export type { SqlitePragmas } from './sqlite-store.js';
export { openSqliteStore, SqliteStore } from './sqlite-store.js';
export type {
  AcquireLeaseOptions,
  AdminStore,
  AppendInput,
  AppendOutcome,
  CompactInput,
  CompactResult,
  CreateWorkstreamInput,
  HistoryPageQuery,
  Lease,
  SaveSessionInput,
  Store,
  StoreStats,
  TruncateInput,
  TruncateResult,
  TurnStore,
  WorkstreamDebt,
  WorkstreamFilter,
  WorkstreamRecord,
  WorkstreamStatus,
} from './types.js';
