/**
 * `npm run start:rollup`: one rollup process (planner + worker; run any number against the same
 * Redis and store). Its metrics are on METRICS_PORT. `npm run start:rollup -- --replay-failed`
 * moves dead-lettered rollup and erasure jobs back to their queues and exits.
 */
import { resolve } from 'node:path';
import { ConfigError, parseEnv } from '../../shared/config.js';
import { processSlice, redisSlice, rollupSlice, storeSlice } from '../../shared/config-slices.js';
import { healthServer } from '../../shared/health-server.js';
import { type Component, Lifecycle, runUntilSignal } from '../../shared/lifecycle.js';
import {
  type RedisTarget,
  closeRedis,
  createRedisClient,
  redisTarget,
  waitReady,
} from '../../shared/redis/connection.js';
import { rollupQueueName } from '../../shared/redis/jobs/rollup.js';
import { openQueue, queueAddress } from '../../shared/redis/queues.js';
import { eraseQueueName } from '../../shared/redis/jobs/erase.js';
import { exitOnStartupError } from '../../shared/runtime.js';
import { recordedShardCount } from '../../shared/redis/shards.js';
import { withTimeout } from '../../shared/timeout.js';
import { SHUTDOWN_GRACE_MS, StackContext } from '../../shared/stack-context.js';
import { rollupService } from './components.js';

/** At most this many dead-lettered rollup jobs are replayed per call. */
const MAX_REPLAY = 1000;

async function replayFailed(target: RedisTarget, queueName: string): Promise<number> {
  const redis = createRedisClient(target, 'worker');
  const queue = openQueue(queueAddress.rollup(queueName, target.kind === 'cluster'), redis);
  // A one-shot command: an unreachable Redis fails waitReady below, which is reported; the queues'
  // re-emitted connection errors add nothing to that.
  queue.on('error', () => undefined);
  const erase = openQueue(queueAddress.erase(queueName, target.kind === 'cluster'), redis);
  erase.on('error', () => undefined);
  try {
    await waitReady(redis, 15_000);
    const failed = await queue.getFailed(0, MAX_REPLAY - 1);
    for (const job of failed) await job.retry('failed');
    process.stdout.write(`${failed.length} rollup job(s) back in queue ${rollupQueueName(queueName)}\n`);
    // Dead-lettered erasures too (their ids are still in their data: services/rollup/erasure/).
    const erasures = await erase.getFailed(0, MAX_REPLAY - 1);
    for (const job of erasures) await job.retry('failed');
    process.stdout.write(`${erasures.length} erasure job(s) back in queue ${eraseQueueName(queueName)}\n`);
    return 0;
  } finally {
    // A one-shot command's clean-up: its outcome was printed and the process exits next; a failed
    // close changes nothing, but is said on stderr rather than dropped.
    const closeFailed = (what: string) => (err: unknown) =>
      void process.stderr.write(
        `closing the ${what} queue failed: ${err instanceof Error ? err.message : String(err)}\n`,
      );
    await queue.close().catch(closeFailed('rollup'));
    await erase.close().catch(closeFailed('erase'));
    await closeRedis(redis, 1000);
  }
}

/**
 * Refuses to start with another QUEUE_SHARDS than the APIs and encoders recorded in Redis: the
 * rollup service reads each app's in-flight ids from the ledger of its shard. A Redis that cannot
 * be reached yet skips the check (every rollup job repeats it before it moves a watermark). It
 * only reads the layout (the APIs and encoders record it), on a connection of its own for the
 * check alone.
 */
function shardCountCheck(ctx: StackContext): Component {
  return {
    name: 'shard count check',
    async start() {
      const env = redisSlice(ctx.env);
      const redis = createRedisClient(ctx.target, 'worker');
      try {
        const recorded = await withTimeout(
          waitReady(redis, 5000).then(() => recordedShardCount(redis, env.QUEUE_NAME)),
          10_000,
          'shard count check',
        ).catch((err: unknown) => {
          // Skipped, not failed: every rollup job repeats the check before it moves a watermark.
          ctx.logger.warn(
            { redis: ctx.redisName, err: (err as Error).message },
            'shard count check skipped: Redis not reachable yet',
          );
          return null;
        });
        if (recorded !== null && recorded !== env.QUEUE_SHARDS) {
          throw new ConfigError(
            `environment variable QUEUE_SHARDS: is ${env.QUEUE_SHARDS}, but Redis holds queues laid out for QUEUE_SHARDS=${recorded}; run the rollup service with the count the APIs and encoders use`,
          );
        }
      } finally {
        redis.disconnect();
      }
    },
    stop: async () => undefined,
  };
}

try {
  const env = parseEnv();
  const redis = redisSlice(env);
  if (process.argv.includes('--replay-failed')) {
    process.exit(await replayFailed(redisTarget(redis), redis.QUEUE_NAME));
  }
  const store = storeSlice(env);
  if (rollupSlice(env).ROLLUP === 'off')
    throw new ConfigError('environment variable ROLLUP: is "off"; start:rollup has nothing to do');
  if (store.STORE === 'memory')
    throw new ConfigError(
      'environment variable STORE: rollups need STORE=fs or STORE=s3 (a memory store lives in one process)',
    );
  const ctx = new StackContext(env, { name: 'rollup' });
  const rollup = rollupService(ctx, { required: true });
  // Listed before the service, so /healthz still answers while its jobs finish.
  const { METRICS_PORT, HOST } = processSlice(env);
  const health = healthServer({
    registry: ctx.registry,
    port: METRICS_PORT,
    host: HOST,
    healthy: () => rollup.service?.worker.isRunning() ?? false,
  });
  await runUntilSignal(new Lifecycle([shardCountCheck(ctx), health, rollup], { logger: ctx.logger }), {
    logger: ctx.logger,
    graceMs: SHUTDOWN_GRACE_MS,
  });
  ctx.logger.info(
    {
      metrics: `${health.server?.url ?? ''}/metrics`,
      dataDir: store.STORE === 'fs' ? resolve(store.DATA_DIR) : undefined,
    },
    'rollup process started',
  );
} catch (err) {
  exitOnStartupError(err);
}
