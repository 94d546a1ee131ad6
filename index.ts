/**
 * Library entry: the Starfish-compatible API (`createSyncRouter`, `createEventsServerPlugin`),
 * the object stores, and the pieces the services are built from.
 */
export { createSyncRouter, jsonErrorHandler } from './services/api/router.js';
export type { SyncRouterOptions, RouterObserver, ErrorLog } from './services/api/router.js';
export { createEventsServerPlugin, PARQUET_MIME_TYPE } from './services/api/plugin.js';
export type {
  EventsPluginOptions,
  EventsServerPlugin,
  QueueBinding,
  PushResult,
  ListResult,
} from './services/api/plugin.js';
export type { PushOutcome, PushRequest } from './services/api/push/outcome.js';
export { AuthError, TokenRoles, firstOf, requireRoles, tokenRoleResolver } from './services/api/auth.js';
export type { AuthResult, RoleResolver } from './services/api/auth.js';
export { createJwtRoleResolver } from './services/api/edge/jwt.js';
export type { JwtResolverOptions } from './services/api/edge/jwt.js';
export type { CorsOptions } from './services/api/edge/cors.js';
export type { SecurityHeadersOptions } from './services/api/edge/security-headers.js';
export type { AuditEntry, AuditLogger } from './services/api/edge/audit.js';
export { MemoryCounterStore, RedisCounterStore } from './services/api/edge/counters.js';
export type { CounterStore } from './services/api/edge/counters.js';
export { FilesystemObjectStore, MemoryObjectStore, S3ObjectStore } from './shared/store/index.js';
export type {
  ObjectStore,
  StoredObject,
  PutOptions,
  ListOptions,
  ObjectMeta,
  ByteRange,
  StoreLocation,
  StoreCredentials,
} from './shared/store/index.js';
export { StoreError } from './shared/errors.js';
export { ApiError, ERROR_CODES, ERROR_CODE_LIST, HttpError } from './services/api/error-map.js';
export type { ErrorCode } from './services/api/error-map.js';
export { DEFAULT_SYNC_CONFIG, parseSyncConfig, parseEnv } from './shared/config.js';
export type { SyncConfig, SyncConfigInput, CollectionConfig, Env } from './shared/config.js';
export { BatchLedger } from './shared/ledger/ledger.js';
export { BATCH_ID_RE, isBatchId, batchIdMs } from './shared/ids.js';
export { encodeBatch, EVENT_COLUMNS } from './shared/parquet/encode.js';
export { startStack } from './services/stack.js';
export { duckdbReadParquetSql, sqlStringLiteral, ANY_PARAM } from './shared/duckdb.js';
export type { DuckdbReadParquetOptions, DuckdbReadParquet, DuckdbS3Credentials } from './shared/duckdb.js';
// The queue's job contract: what the API enqueues and an encoder (yours or ours) consumes.
export {
  JOB_NAME,
  BatchJobSchema,
  BatchGroupJobSchema,
  BATCH_JOB_OPTIONS,
  groupJobId,
  isGroupPayload,
  packBody,
  unpackBody,
} from './shared/redis/jobs/push.js';
export type { BatchJob, BatchGroupJob } from './shared/redis/jobs/push.js';
export { rollupViewSql as duckdbEventsViewSql, VIEW_COLUMNS } from './shared/rollup/view.js';
export type { RollupView } from './shared/rollup/view.js';
