/**
 * `npm run start:rollup`: one rollup process (planner + worker; run any number against the same
 * Redis and store). Its metrics are on METRICS_PORT. `npm run start:rollup -- --replay-failed`
 * moves dead-lettered rollup jobs back to the queue and exits.
 */
import { resolve } from 'node:path';
import { Queue } from 'bullmq';
import { ConfigError, loadSyncConfig, parseEnv } from '../../shared/config.js';
import { listen } from '../../shared/http.js';
import { createLogger } from '../../shared/logger.js';
import { createRegistry } from '../../shared/metrics.js';
import { type RedisTarget, createRedisClient, redisTarget, waitReady } from '../../shared/redis.js';
import { rollupQueueName, rollupQueuePrefix } from '../../shared/rollup/queue.js';
import { applyHeapGrowth, exitOnStartupError, handleShutdown } from '../../shared/runtime.js';
import { storeFromEnv } from '../../shared/store/from-env.js';
import { recordedShardCount } from '../../shared/shards.js';
import { withTimeout } from '../../shared/timeout.js';
import { startRollupService } from './service.js';

/** At most this many dead-lettered rollup jobs are replayed per call. */
const MAX_REPLAY = 1000;

async function replayFailed(target: RedisTarget, queueName: string): Promise<number> {
  const redis = createRedisClient(target, 'worker');
  const queue = new Queue(rollupQueueName(queueName), { connection: redis, prefix: rollupQueuePrefix(queueName, target.kind === 'cluster') });
  queue.on('error', () => undefined);
  try {
    await waitReady(redis, 15_000);
    const failed = await queue.getFailed(0, MAX_REPLAY - 1);
    for (const job of failed) await job.retry('failed');
    process.stdout.write(`${failed.length} rollup job(s) back in queue ${rollupQueueName(queueName)}\n`);
    return 0;
  } finally {
    await queue.close().catch(() => undefined);
    await redis.quit().catch(() => redis.disconnect());
  }
}

/**
 * Refuses to start with another QUEUE_SHARDS than the APIs and encoders recorded in Redis: the
 * rollup service reads each app's in-flight ids from the ledger of its shard. A Redis that cannot
 * be reached yet skips the check (every rollup job repeats it before it moves a watermark).
 */
async function checkShardCount(target: RedisTarget, queueName: string, shards: number): Promise<void> {
  const redis = createRedisClient(target, 'worker');
  try {
    const recorded = await withTimeout(
      waitReady(redis, 5000).then(() => recordedShardCount(redis, queueName)),
      10_000,
      'shard count check',
    ).catch(() => null);
    if (recorded !== null && recorded !== shards) {
      throw new ConfigError(`environment variable QUEUE_SHARDS: is ${shards}, but Redis holds queues laid out for QUEUE_SHARDS=${recorded}; run the rollup service with the count the APIs and encoders use`);
    }
  } finally {
    redis.disconnect();
  }
}

try {
  const env = parseEnv();
  const target = redisTarget(env);
  if (process.argv.includes('--replay-failed')) {
    process.exit(await replayFailed(target, env.QUEUE_NAME));
  }
  if (env.ROLLUP === 'off') throw new ConfigError('environment variable ROLLUP: is "off"; start:rollup has nothing to do');
  if (env.STORE === 'memory') throw new ConfigError('environment variable STORE: rollups need STORE=fs or STORE=s3 (a memory store lives in one process)');
  applyHeapGrowth(env.HEAP_GROWING_PERCENT);
  const logger = createLogger({ level: env.LOG_LEVEL, name: 'rollup' });
  const registry = createRegistry('rollup');
  const store = storeFromEnv(env);
  await checkShardCount(target, env.QUEUE_NAME, env.QUEUE_SHARDS);
  const service = await startRollupService({ env, config: loadSyncConfig(env), store, redis: target, registry, logger, required: true });
  const metricsServer = await listen(
    (req, res) => {
      if (req.url === '/metrics') void registry.metrics().then((text) => res.writeHead(200, { 'Content-Type': registry.contentType }).end(text));
      else if (req.url === '/healthz') res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ ok: service?.worker.isRunning() ?? false }));
      else res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":"not found"}');
    },
    env.METRICS_PORT,
    env.HOST,
  );
  logger.info({ metrics: `${metricsServer.url}/metrics`, dataDir: env.STORE === 'fs' ? resolve(env.DATA_DIR) : undefined }, 'rollup process started');
  handleShutdown(logger, [async () => service?.close(), () => metricsServer.close(1000)]);
} catch (err) {
  exitOnStartupError(err);
}
