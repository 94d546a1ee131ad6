import { fileURLToPath } from 'node:url';
import { parseEnv, shutdownDrainMs } from '../shared/config.js';
import { redisSlice, storeSlice } from '../shared/config-slices.js';
import { type Component, Lifecycle, runUntilSignal, splitStartStop } from '../shared/lifecycle.js';
import { createLogger } from '../shared/logger.js';
import { type RedisHandle, ensureRedis } from '../shared/redis/private-server.js';
import { exitOnStartupError } from '../shared/runtime.js';
import { SHUTDOWN_GRACE_MS, StackContext, redisConnections } from '../shared/stack-context.js';
import { apiDrain, apiServer, apiUpkeep } from './api/components.js';
import { drainedStopGraceMs } from './api/drain.js';
import { encoderWorkers } from './encoder/components.js';
import { rollupService } from './rollup/components.js';
import { encoderProcesses } from './encoder/processes.js';

/**
 * The module each encoder process runs (./encoder-child.ts: the encoder, and in the first one the
 * rollup service), beside this one: .ts under tsx, .js from dist/.
 */
const ENCODER_CHILD = fileURLToPath(
  new URL(import.meta.url.endsWith('.ts') ? './encoder-child.ts' : './encoder-child.js', import.meta.url),
);

/**
 * The Redis `npm start` uses when REDIS_URL is not set: the one on the default port, or a private
 * `redis-server` it starts (shared/redis/private-server.ts) and stops last. A Redis Cluster or a
 * Sentinel group is always the operator's own.
 */
function privateRedis(ctx: StackContext): Component {
  let starting: Promise<RedisHandle | undefined> | undefined;
  return {
    name: 'private redis',
    async start() {
      starting ??= (async () => {
        const redis = redisSlice(ctx.env);
        if (redis.REDIS_CLUSTER_NODES || redis.REDIS_SENTINELS) return undefined;
        const handle = await ensureRedis({
          redisUrl: redis.REDIS_URL,
          dataDir: storeSlice(ctx.env).DATA_DIR,
          logger: ctx.logger,
        });
        ctx.useRedisUrl(handle.url);
        return handle;
      })();
      await starting;
    },
    async stop() {
      // A server still starting is stopped once it answers.
      let handle: RedisHandle | undefined;
      try {
        handle = await starting;
      } catch {
        return; // It did not start: nothing to stop (the start reports why).
      }
      await handle?.stop();
    },
  };
}

/**
 * `npm start`: the API, with its encoder as a child process at a lower CPU priority, and a private
 * Redis when none is configured.
 *
 * The stop on SIGTERM/SIGINT is armed before anything starts: a signal while it starts (a private
 * Redis coming up, the API listening while its encoders still start) stops what has started, in
 * the same order as later, instead of ending the process and leaving a Redis or a half-started
 * encoder behind.
 */
async function main(): Promise<void> {
  const parsed = parseEnv();
  const logger = createLogger({ level: parsed.LOG_LEVEL, name: 'ingest' });
  const ctx = new StackContext(parsed, { name: 'ingest', logger });
  let components: Component[];
  // SHUTDOWN_DRAIN_MS: 0 unless set (one process, usually alone: nowhere for clients to move to).
  const drainMs = shutdownDrainMs(parsed, 'single');
  if (storeSlice(parsed).STORE === 'memory') {
    // A memory store lives in one thread: keep the encoder (and the rollup service, which then
    // says it is off) beside the API.
    const api = apiServer(ctx, { encoderInProcess: true });
    components = [
      privateRedis(ctx),
      redisConnections(ctx),
      rollupService(ctx),
      encoderWorkers(ctx),
      api,
      apiUpkeep(api),
      apiDrain(ctx, api, drainMs),
    ];
  } else {
    // Rollups (the planner's store listings, DuckDB's compaction) run in the first encoder
    // process, at its lower priority, not beside the pushes.
    const encoders = encoderProcesses({
      entry: ENCODER_CHILD,
      env: () => ctx.env,
      count: parsed.ENCODER_PROCESSES,
      processStopping: () => lifecycle.isStopping,
    });
    const api = apiServer(ctx, { extraMetrics: () => encoders.metrics() });
    // The encoder processes start once the API answers, and close once it stopped taking pushes
    // (the stop runs in the reverse order): their stop is listed before the API, their start after.
    const { start: forkEncoders, stop: closeEncoders } = splitStartStop(encoders);
    components = [
      privateRedis(ctx),
      redisConnections(ctx),
      closeEncoders,
      api,
      apiUpkeep(api),
      forkEncoders,
      apiDrain(ctx, api, drainMs),
    ];
  }
  const lifecycle = new Lifecycle(components, { logger });
  await runUntilSignal(lifecycle, { logger, graceMs: drainedStopGraceMs(drainMs, SHUTDOWN_GRACE_MS) });
}

try {
  await main();
} catch (err) {
  exitOnStartupError(err);
}
