/**
 * Each component's resolved slice of the environment. `parseEnv` applies every default once (the
 * zod schema in ./config.ts); a slice is a plain object holding only the variables its component
 * reads, already resolved, so a component never re-applies a default nor sees another's settings.
 * The library's own fallbacks (createApiApp, createEncoder, the edge) use the same constants as
 * the schema's defaults (the `*_DEFAULT` exports of ./config.ts).
 */
import type { Env } from './config.js';

/** Copies `keys` of `env` (those it holds: an unset optional variable stays absent). */
function pick<K extends keyof Env>(env: Env, keys: readonly K[]): Pick<Env, K> {
  const out: Partial<Pick<Env, K>> = {};
  for (const k of keys) if (env[k] !== undefined) out[k] = env[k];
  return out as Pick<Env, K>;
}

/** Where Redis is and how the queues are laid out in it (every process). */
export const REDIS_KEYS = [
  'REDIS_URL',
  'REDIS_CLUSTER_NODES',
  'REDIS_SENTINELS',
  'REDIS_SENTINEL_NAME',
  'REDIS_SENTINEL_PASSWORD',
  'REDIS_PASSWORD',
  'REDIS_TLS',
  'QUEUE_NAME',
  'QUEUE_SHARDS',
  'REDIS_WAIT_REPLICAS',
  'REDIS_WAIT_TIMEOUT_MS',
] as const;
export type RedisSlice = Pick<Env, (typeof REDIS_KEYS)[number]>;
export const redisSlice = (env: Env): RedisSlice => pick(env, REDIS_KEYS);

/** The object store (every process). */
export const STORE_KEYS = [
  'STORE',
  'DATA_DIR',
  'S3_BUCKET',
  'S3_PREFIX',
  'S3_ENDPOINT',
  'S3_REGION',
  'S3_FORCE_PATH_STYLE',
] as const;
export type StoreSlice = Pick<Env, (typeof STORE_KEYS)[number]>;
export const storeSlice = (env: Env): StoreSlice => pick(env, STORE_KEYS);

/** The edge of the API: CORS, timeouts, rate limits, audit, JWT and cap-cert auth. */
export const EDGE_KEYS = [
  'QUEUE_NAME',
  'CORS_ORIGINS',
  'TRUSTED_PROXY_HOPS',
  'REQUEST_TIMEOUT_MS',
  'RATE_LIMIT_PUSH_ON_ERROR',
  'AUDIT_PUSH',
  'JWT_JWKS_URL',
  'JWT_PUBLIC_KEY',
  'JWT_ISSUER',
  'JWT_AUDIENCE',
  'JWT_ROLES_CLAIM',
  'JWT_ALLOW_NO_EXP',
  'CAP_AUTH',
  'CAP_ADMINS',
  'CAP_REVOCATIONS_FILE',
  'TOKENS_FILE',
] as const;
export type EdgeSlice = Pick<Env, (typeof EDGE_KEYS)[number]>;
export const edgeSlice = (env: Env): EdgeSlice => pick(env, EDGE_KEYS);

/** The API app (createApiApp's `env`): its push path, shedder, upkeep and edge. */
export const API_KEYS = [
  ...EDGE_KEYS,
  'BASE_PATH',
  'QUEUE_HIGH_WATER',
  'REDIS_MEMORY_HIGH_WATER',
  'IDEMPOTENCY_WINDOW_SECONDS',
  'BODY_DEDUP_WINDOW_SECONDS',
  'ORPHAN_GRACE_SECONDS',
  'MAX_INFLIGHT_BYTES',
  'APP_PATTERN',
  'QUEUE_GROUP_MAX',
  'API_ENCODE_MAX_BYTES',
  'SEGMENT_WRITE_KEYS_FILE',
] as const;
export type ApiSlice = Pick<Env, (typeof API_KEYS)[number]>;
export const apiSlice = (env: Env): ApiSlice => pick(env, API_KEYS);

/** Where the API listens (the api server component). */
export const LISTEN_KEYS = ['PORT', 'HOST'] as const;
export type ListenSlice = Pick<Env, (typeof LISTEN_KEYS)[number]>;
export const listenSlice = (env: Env): ListenSlice => pick(env, LISTEN_KEYS);

/** An encoder's workers (createEncoder's settings). */
export const ENCODER_KEYS = [
  'QUEUE_NAME',
  'ENCODER_CONCURRENCY',
  'ENCODER_LOCK_SECONDS',
  'LIST_INDEX_SECONDS',
  'ENCODER_MAX_INFLIGHT_BYTES',
] as const;
export type EncoderSlice = Pick<Env, (typeof ENCODER_KEYS)[number]>;
export const encoderSlice = (env: Env): EncoderSlice => pick(env, ENCODER_KEYS);

/** The Iceberg committer (services/rollup/iceberg-committer.ts); part of the rollup slice. */
export const ICEBERG_KEYS = [
  'ICEBERG',
  'ICEBERG_COMMIT_SECONDS',
  'ICEBERG_SNAPSHOT_RETENTION_SECONDS',
  'ICEBERG_TEST_COMMIT_DELAY_MS',
] as const;
export type IcebergSlice = Pick<Env, (typeof ICEBERG_KEYS)[number]>;
export const icebergSlice = (env: Env): IcebergSlice => pick(env, ICEBERG_KEYS);

/** The rollup service: planner, roll jobs, retention, erasure and its Iceberg committer. */
export const ROLLUP_KEYS = [
  'ROLLUP',
  'QUEUE_NAME',
  'QUEUE_SHARDS',
  'ROLLUP_PERIOD_SECONDS',
  'ROLLUP_DELAY_SECONDS',
  'RAW_RETENTION_SECONDS',
  'RETENTION_DAYS',
  'ERASURE_HASH_KEY',
  'ERASURE_TEST_STEP_DELAY_MS',
  ...ICEBERG_KEYS,
] as const;
export type RollupSlice = Pick<Env, (typeof ROLLUP_KEYS)[number]>;
export const rollupSlice = (env: Env): RollupSlice => pick(env, ROLLUP_KEYS);

/** The process itself: logging, heap growth, and the metrics/health port. */
export const PROCESS_KEYS = ['LOG_LEVEL', 'HEAP_GROWING_PERCENT', 'METRICS_PORT', 'HOST'] as const;
export type ProcessSlice = Pick<Env, (typeof PROCESS_KEYS)[number]>;
export const processSlice = (env: Env): ProcessSlice => pick(env, PROCESS_KEYS);
