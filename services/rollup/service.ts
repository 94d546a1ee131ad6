/**
 * The rollup service: a planner loop that adds one BullMQ job per due (prefix, period)
 * (planner.ts), a worker that rolls them (roll-job.ts, roll.ts) and retention
 * (retention.ts), wired here. Run by `npm run start:rollup` and by `npm start`.
 */
import type { DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import { withTimeout } from '../../shared/timeout.js';
import { bestEffort } from '../../shared/best-effort.js';
import type { Queue, Worker } from 'bullmq';
import { openQueue } from '../../shared/redis/queues.js';
import type { Registry } from 'prom-client';
import type { SyncConfig } from '../../shared/config.js';
import type { RollupSlice } from '../../shared/config-slices.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import type { Logger } from '../../shared/logger.js';
import { parseStoragePath } from '../../shared/paths.js';
import { type RedisClient, type RedisTarget, closeRedis, createRedisClient } from '../../shared/redis/connection.js';
import { rollupQueueName, rollupQueuePrefix } from '../../shared/redis/jobs/rollup.js';
import { storeRootUrl } from '../../shared/duckdb.js';
import { removeStaleTempFiles } from './roll.js';
import { shardLayouts } from '../../shared/redis/shards.js';
import type { ObjectStore } from '../../shared/store/types.js';
import type { RollupDeps } from './context.js';
import { type RollupMetrics, createRollupMetrics } from './metrics.js';
import { type CollectionTemplate, RollupPlanner, planIntervalMs } from './planner.js';
import { IcebergCommitter } from './iceberg-committer.js';
import { retainPrefix } from './retention.js';
import { startRollWorker } from './roll-job.js';
import { startEraseWorker } from './erasure/job.js';
import { createEraseMetrics } from './erasure/metrics.js';
import { eraseQueueName } from '../../shared/redis/jobs/erase.js';

export { discoveryIntervalMs, planIntervalMs } from './planner.js';

export interface RollupServiceOptions {
  /** Its resolved slice of the environment (shared/config-slices.ts, `rollupSlice`). */
  env: RollupSlice;
  config: SyncConfig;
  store: ObjectStore;
  /** One Redis or a Cluster (REDIS_URL / REDIS_CLUSTER_NODES); QUEUE_SHARDS comes from `env`. */
  redis: RedisTarget;
  registry: Registry;
  logger: Logger;
  /** `start:rollup`: a missing DuckDB is a start-up error rather than "rollups off". */
  required?: boolean;
}

export interface RollupService {
  queue: Queue;
  worker: Worker;
  /** Runs erasure jobs (queue `<QUEUE_NAME>-erase`, ./erasure/). */
  eraseWorker: Worker;
  metrics: RollupMetrics;
  /** The Iceberg committer (ICEBERG=on), else null. */
  iceberg: IcebergCommitter | null;
  /** Runs one planning pass now (tests; the loop runs on its own). */
  planOnce(): Promise<void>;
  close(graceMs?: number): Promise<void>;
}

/** Why rollups cannot run on an install without DuckDB, and how to fix it. */
export const ROLLUP_NEEDS_DUCKDB = 'rollups need the @duckdb/node-api package (npm install @duckdb/node-api)';

/** Starts the planner and worker, or returns null when rollups are off or the store has no files DuckDB can read. */
export async function startRollupService(o: RollupServiceOptions): Promise<RollupService | null> {
  const { env, logger, store } = o;
  if (env.ROLLUP === 'off') return null;
  const location = store.location?.();
  if (location?.kind === 'memory') {
    logger.warn(
      { store: store.describe() },
      'rollups need a filesystem or S3 store (DuckDB cannot read a memory store); rollups are off',
    );
    return null;
  }
  // DuckDB opens filesystem keys in place; any other store's objects are copied to a local stage first.
  const rootUrl = location?.kind === 'file' ? storeRootUrl(store).rootUrl : null;
  const metrics = createRollupMetrics(o.registry);
  const templates: CollectionTemplate[] = o.config.collections.map((c) => ({
    name: c.name,
    template: parseStoragePath(c.storagePath),
  }));
  const db = await openDuckDb(o);
  if (!db) return null;

  const ns = env.QUEUE_NAME;
  const cluster = o.redis.kind === 'cluster';
  // With the logger: connection errors are logged, throttled per Redis (shared/redis/connection.ts), so the
  // queue's re-emitted 'error' below needs no log of its own.
  const conns = {
    queue: createRedisClient(o.redis, 'worker', logger),
    worker: createRedisClient(o.redis, 'worker', logger),
    cmd: createRedisClient(o.redis, 'worker', logger),
    erase: createRedisClient(o.redis, 'worker', logger),
  };
  const ledgers = shardLayouts(ns, env.QUEUE_SHARDS, cluster).map(
    (l) => new BatchLedger(conns.cmd, l.namespace, { shard: { index: l.index, count: l.count } }),
  );
  const deps: RollupDeps = { env, store, duck: db.duck, rootUrl, cmd: conns.cmd, ledgers, metrics, logger };
  const queuePrefix = rollupQueuePrefix(ns, cluster);
  const queue = openQueue({ name: rollupQueueName(ns), prefix: queuePrefix }, conns.queue);
  queue.on('error', () => undefined);

  const planner = new RollupPlanner(deps, {
    templates,
    queue,
    retain: (prefix, nowMs) => retainPrefix(deps, prefix, nowMs),
  });
  // Before the worker and the plan loop start: from now on every deletion asks the committer (RollupDeps.mayDelete).
  const iceberg =
    env.ICEBERG === 'on'
      ? new IcebergCommitter(deps, { templates, prefixes: () => planner.knownPrefixes(), registry: o.registry })
      : null;
  if (iceberg) deps.mayDelete = iceberg.mayDelete;
  const worker = startRollWorker(deps, {
    queueName: rollupQueueName(ns),
    prefix: queuePrefix,
    connection: conns.worker,
    // After a period is rolled, the prefix's next one may be due already (catching up a backlog);
    // failing that, the planner's next pass plans it.
    onRolled: (prefix) =>
      void bestEffort('plan_after_roll', planner.planOne(prefix), { logger, counter: metrics.bestEffortFailures }),
  });
  // Its own DuckDB connection: an erasure runs beside roll jobs of other prefixes.
  const eraseDuck = await db.instance.connect();
  const eraseWorker = startEraseWorker(
    {
      ...deps,
      duck: eraseDuck,
      eraseMetrics: createEraseMetrics(o.registry),
      tableOf: (prefix) => iceberg?.tableOf(prefix) ?? null,
      hashKey: env.ERASURE_HASH_KEY,
    },
    { queueName: eraseQueueName(ns), prefix: queuePrefix, connection: conns.erase },
  );
  const loop = startPlanLoop(planner, logger, planIntervalMs(env.ROLLUP_PERIOD_SECONDS));
  iceberg?.start();
  logger.info(
    {
      queue: rollupQueueName(ns),
      queuePrefix,
      shards: ledgers.length,
      periodSeconds: env.ROLLUP_PERIOD_SECONDS,
      delaySeconds: env.ROLLUP_DELAY_SECONDS,
      store: store.describe(),
      iceberg: env.ICEBERG === 'on' ? `every ${env.ICEBERG_COMMIT_SECONDS} s` : 'off',
    },
    'rollup service started',
  );

  let closing: Promise<void> | undefined;
  return {
    queue,
    worker,
    eraseWorker,
    metrics,
    iceberg,
    planOnce: loop.planOnce,
    close(graceMs = 15_000) {
      closing ??= closeRollup(
        {
          loop,
          iceberg,
          worker,
          eraseWorker,
          queue,
          conns: [conns.queue, conns.worker, conns.erase, conns.cmd],
          db,
          eraseDuck,
        },
        graceMs,
      );
      return closing;
    },
  };
}

interface DuckDb {
  instance: DuckDBInstance;
  duck: DuckDBConnection;
}

/**
 * DuckDB is an optional peer (a lean `npm ci --omit=dev` install has none): without it the
 * product runs, batch files stay where they are, and rollups are off (null) until it is installed.
 */
async function openDuckDb(o: Pick<RollupServiceOptions, 'logger' | 'required'>): Promise<DuckDb | null> {
  let duckdb: typeof import('@duckdb/node-api');
  try {
    duckdb = await import('@duckdb/node-api');
  } catch {
    if (o.required) throw new Error(ROLLUP_NEEDS_DUCKDB);
    o.logger.warn({}, `${ROLLUP_NEEDS_DUCKDB}; rollups are off`);
    return null;
  }
  const stale = await removeStaleTempFiles();
  if (stale > 0) o.logger.info({ files: stale }, 'removed temporary rollup files of stopped processes');
  const instance = await duckdb.DuckDBInstance.create(':memory:', {
    threads: '1',
    memory_limit: '1GB',
    preserve_insertion_order: 'false',
  });
  return { instance, duck: await instance.connect() };
}

interface PlanLoop {
  /** Runs a pass now, or joins the one running (one pass at a time); never rejects. */
  planOnce(): Promise<void>;
  /** Stops the timer; returns the pass still running, if any. */
  stop(): Promise<void> | undefined;
}

/** Runs the planner's passes one at a time: one now, then every `intervalMs`. */
function startPlanLoop(planner: RollupPlanner, logger: Logger, intervalMs: number): PlanLoop {
  let planning: Promise<void> | undefined;
  const planOnce = (): Promise<void> => {
    planning ??= planner
      .pass()
      .catch((err: unknown) => logger.warn({ err: (err as Error).message }, 'rollup planning pass failed'))
      .finally(() => {
        planning = undefined;
      });
    return planning;
  };
  const timer = setInterval(() => void planOnce(), intervalMs);
  timer.unref();
  void planOnce();
  return {
    planOnce,
    stop() {
      clearInterval(timer);
      return planning;
    },
  };
}

/** Stops the loop, lets the running job finish (forced after `graceMs`), then closes the queue, Redis and DuckDB. */
async function closeRollup(
  p: {
    loop: PlanLoop;
    iceberg: IcebergCommitter | null;
    worker: Worker;
    eraseWorker: Worker;
    queue: Queue;
    conns: RedisClient[];
    db: DuckDb;
    eraseDuck: DuckDBConnection;
  },
  graceMs: number,
): Promise<void> {
  const planning = p.loop.stop();
  // Every wait is bounded: with Redis unreachable a pass, a QUIT or a close never finishes
  // (the connections queue commands while offline), and shutdown must not wait on them, nor
  // on a close that fails: the process is going away.
  const bounded = (w: Promise<unknown> | undefined, ms: number, what: string): Promise<unknown> =>
    withTimeout(w ?? Promise.resolve(), ms, what).catch(() => undefined);
  await bounded(planning, graceMs, 'rollup planning');
  await bounded(p.iceberg?.stop(), graceMs, 'iceberg commit pass');
  const closed = await withTimeout(p.worker.close(), graceMs, 'rollup worker close').then(
    () => true,
    () => false,
  );
  if (!closed) await bounded(p.worker.close(true), Math.min(1000, graceMs), 'rollup worker force close');
  // An erasure is resumable: one still running is forced closed after the grace and retried by the next process.
  await bounded(p.eraseWorker.close(), graceMs, 'erasure worker close');
  await bounded(p.eraseWorker.close(true), Math.min(1000, graceMs), 'erasure worker force close');
  await bounded(p.queue.close(), Math.min(5000, graceMs), 'rollup queue close');
  for (const c of p.conns) await closeRedis(c, 1000);
  p.eraseDuck.closeSync();
  p.db.duck.closeSync();
  p.db.instance.closeSync();
}
