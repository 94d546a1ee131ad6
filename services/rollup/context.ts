/**
 * What the rollup service's parts (planner.ts, roll-job.ts, retention.ts) share: one process's
 * store, DuckDB connection, Redis command connection, the shards' ledgers and its settings.
 */
import { randomBytes } from 'node:crypto';
import type { DuckDBConnection } from '@duckdb/node-api';
import type { Env } from '../../shared/config.js';
import type { BatchLedger } from '../../shared/ledger/ledger.js';
import type { Logger } from '../../shared/logger.js';
import type { RedisClient } from '../../shared/redis/connection.js';
import { type PrefixLock, acquirePrefixLock } from '../../shared/redis/rollup-keys.js';
import { type RollContext, RollupNotReadyError } from './roll.js';
import { recordedShardCount, shardIndex } from '../../shared/redis/shards.js';
import type { ObjectStore } from '../../shared/store/types.js';
import type { RollupMetrics } from './metrics.js';

/** The settings the rollup service's parts read (their slice of Env). */
export type RollupEnv = Pick<
  Env,
  | 'QUEUE_NAME'
  | 'QUEUE_SHARDS'
  | 'ROLLUP_PERIOD_SECONDS'
  | 'ROLLUP_DELAY_SECONDS'
  | 'RAW_RETENTION_SECONDS'
  | 'RETENTION_DAYS'
  | 'ICEBERG'
  | 'ICEBERG_COMMIT_SECONDS'
  | 'ICEBERG_SNAPSHOT_RETENTION_SECONDS'
  | 'ICEBERG_TEST_COMMIT_DELAY_MS'
> &
  Partial<Pick<Env, 'ERASURE_HASH_KEY' | 'ERASURE_TEST_STEP_DELAY_MS'>>;

export interface RollupDeps {
  env: RollupEnv;
  store: ObjectStore;
  duck: DuckDBConnection;
  /** Where DuckDB opens store keys in place, or null to stage them (RollContext.rootUrl). */
  rootUrl: string | null;
  /** The service's own keys (prefix locks, replay notes) and the ledgers' reads. */
  cmd: RedisClient;
  /**
   * One ledger per shard (QUEUE_SHARDS), read only: each list prefix's in-flight ids, written
   * index and clock live in the ledger of its shard (the layout the API and encoders use).
   */
  ledgers: readonly BatchLedger[];
  metrics: RollupMetrics;
  logger: Logger;
  /** With ICEBERG=on: which of a prefix's keys may leave the store now (iceberg-committer.ts; RollContext.mayDelete). */
  mayDelete?: (prefix: string, keys: readonly string[]) => Promise<readonly string[]>;
}

/** The ledger of the shard `prefix` is minted on. */
export function ledgerOf(deps: RollupDeps, prefix: string): BatchLedger {
  return deps.ledgers[shardIndex(prefix, deps.ledgers.length)] as BatchLedger;
}

/**
 * A job moves a watermark only while Redis is laid out for this process's QUEUE_SHARDS: with
 * another count, a prefix's in-flight ids sit in another shard's ledger than the one read here,
 * and a period could look final while a batch of it is still coming.
 */
export async function assertLayout(deps: RollupDeps): Promise<void> {
  const { env } = deps;
  const recorded = await recordedShardCount(deps.cmd, env.QUEUE_NAME);
  if (recorded !== null && recorded !== env.QUEUE_SHARDS)
    throw new RollupNotReadyError(
      `Redis is laid out for QUEUE_SHARDS=${recorded}, this rollup process runs with QUEUE_SHARDS=${env.QUEUE_SHARDS}`,
    );
}

/** The context of rollPeriod and of retention on `prefix`, held under `lock` (checked before every manifest write). */
/**
 * Takes `prefix`'s rollup lock for `owner` (a random suffix added), or null when another job
 * holds it; failed renewals and releases are logged and counted (ingest_best_effort_failures_total).
 */
export function takePrefixLock(deps: RollupDeps, prefix: string, owner: string): Promise<PrefixLock | null> {
  return acquirePrefixLock(deps.cmd, deps.env.QUEUE_NAME, prefix, `${owner}:${randomBytes(6).toString('hex')}`, {
    logger: deps.logger,
    counter: deps.metrics.bestEffortFailures,
  });
}

export function lockedRollContext(deps: RollupDeps, prefix: string, lock: PrefixLock): RollContext {
  return {
    store: deps.store,
    duck: deps.duck,
    periodSeconds: deps.env.ROLLUP_PERIOD_SECONDS,
    rootUrl: deps.rootUrl,
    assertLocked: async () => {
      if (!(await lock.held())) throw new Error(`lost the rollup lock of ${prefix}`);
    },
    ...(deps.mayDelete
      ? {
          mayDelete: (keys: readonly string[]) =>
            (deps.mayDelete as NonNullable<RollupDeps['mayDelete']>)(prefix, keys),
        }
      : {}),
  };
}
