import http from 'node:http';
import type { Registry } from 'prom-client';
import { ConfigError, type Env, loadSyncConfig, loadTokens } from '../shared/config.js';
import { BatchLedger } from '../shared/ledger/ledger.js';
import { type Logger, createLogger } from '../shared/logger.js';
import { createRegistry } from '../shared/metrics.js';
import { type RunningServer, listen } from '../shared/http.js';
import { type RedisClient, createRedisClient, describeTarget, isRedisUnavailable, redisTarget, waitReady } from '../shared/redis.js';
import { ShardSet, type ShardLayout, ensureShardLayout, shardLayouts } from '../shared/shards.js';
import { withTimeout } from '../shared/timeout.js';
import { applyHeapGrowth } from '../shared/runtime.js';
import { storeFromEnv } from '../shared/store/from-env.js';
import type { ObjectStore } from '../shared/store/types.js';
import { type ApiApp, createApiApp } from './api/app.js';
import { type BurstOptions, type Encoder, createEncoder } from './encoder/worker.js';
import { type RollupService, startRollupService } from './rollup/service.js';

export interface StackParts {
  api: boolean;
  encoder: boolean;
  /** Serve the encoder's own /metrics on METRICS_PORT when there is no API (default true). */
  encoderMetricsServer?: boolean;
  /**
   * Node process metrics in this stack's registry (default true). `{ prefix }` names them apart:
   * `npm start`'s encoder processes report theirs as `ingest_encoder_process_cpu_seconds_total`
   * and so on, beside the API process's own in the same /metrics.
   */
  defaultMetrics?: boolean | { prefix: string };
  /** `service` label of every metric (default: api, encoder or ingest). */
  serviceLabel?: string;
  /** More metrics text appended to the API's /metrics (the encoder processes', in `npm start`). */
  extraMetrics?: () => Promise<string>;
  /** Make the encoder a burst encoder (`npm start`'s extra encoder processes; see EncoderOptions.burst). */
  encoderBurst?: BurstOptions;
  /** Run the rollup planner and worker too (unless ROLLUP=off); `npm start` does. */
  rollup?: boolean;
}

export interface RunningStack {
  logger: Logger;
  store: ObjectStore;
  /** Where Redis is, as logs name it: host:port, `unix:<socket>` or `cluster <seed nodes>` (never a password). */
  redisName: string;
  registry: Registry;
  api?: { server: RunningServer; app: ApiApp };
  encoder?: Encoder;
  rollup?: RollupService;
  metricsServer?: RunningServer;
  /** Graceful stop: stop accepting, finish in-flight requests and jobs, close connections. Idempotent. */
  close(): Promise<void>;
}

/**
 * Starts the API and/or the encoder from a parsed environment. Config is read and validated
 * before anything listens, so a bad config never leaves a half-started process.
 */
export async function startStack(env: Env, parts: StackParts, logger = createLogger({ level: env.LOG_LEVEL, name: parts.api && parts.encoder ? 'ingest' : parts.api ? 'api' : 'encoder' })): Promise<RunningStack> {
  applyHeapGrowth(env.HEAP_GROWING_PERCENT);
  const config = loadSyncConfig(env);
  const tokens = loadTokens(env);
  const store = storeFromEnv(env);
  const target = redisTarget(env);
  const redisName = describeTarget(target);
  const layouts = shardLayouts(env.QUEUE_NAME, env.QUEUE_SHARDS, target.kind === 'cluster');
  const registry = createRegistry(parts.serviceLabel ?? (parts.api && parts.encoder ? 'ingest' : parts.api ? 'api' : 'encoder'), parts.defaultMetrics ?? true);
  const connections: RedisClient[] = [];
  const shardSets: ShardSet[] = [];
  const stack: RunningStack = { logger, store, redisName, registry, close: async () => undefined };
  /** A start refused after connections were opened: drop them, then fail. */
  const abandon = async (err: unknown): Promise<never> => {
    await stack.encoder?.close(250).catch(() => undefined);
    for (const c of connections) c.disconnect();
    throw err;
  };

  if (parts.encoder) {
    const workerConn = createRedisClient(target, 'worker', logger);
    const ledgerConn = createRedisClient(target, 'worker', logger);
    connections.push(workerConn, ledgerConn);
    await checkLayout(ledgerConn, env, layouts, logger).catch(abandon);
    stack.encoder = createEncoder({
      queueName: env.QUEUE_NAME,
      connection: workerConn,
      ledger: new BatchLedger(ledgerConn, env.QUEUE_NAME),
      shards: layouts.map((l) => ({ queueName: l.queueName, prefix: l.queuePrefix, ledger: new BatchLedger(ledgerConn, l.namespace, { shard: { index: l.index, count: l.count } }) })),
      store,
      registry,
      logger,
      concurrency: env.ENCODER_CONCURRENCY,
      lockDurationMs: env.ENCODER_LOCK_SECONDS * 1000,
      listIndexSeconds: env.LIST_INDEX_SECONDS,
      maxInflightBytes: env.ENCODER_MAX_INFLIGHT_BYTES,
      ...(parts.encoderBurst ? { burst: parts.encoderBurst } : {}),
    });
    if (!parts.api && (parts.encoderMetricsServer ?? true)) {
      stack.metricsServer = await listen(
        (req, res) => {
          if (req.url === '/metrics') {
            void registry.metrics().then((text) => res.writeHead(200, { 'Content-Type': registry.contentType }).end(text));
          } else if (req.url === '/healthz') {
            res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ ok: stack.encoder?.worker.isRunning() ?? false }));
          } else res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":"not found"}');
        },
        env.METRICS_PORT,
        env.HOST,
      );
      logger.info({ metrics: `${stack.metricsServer.url}/metrics`, queue: env.QUEUE_NAME, shards: layouts.length, concurrency: env.ENCODER_CONCURRENCY, store: store.describe(), heapGrowingPercent: env.HEAP_GROWING_PERCENT }, 'encoder started');
    }
  }

  if (parts.api) {
    const producer = createRedisClient(target, 'producer', logger);
    connections.push(producer);
    // Pushes fail fast while Redis is away; give it a moment at start so the first ones do not.
    await waitReady(producer, 5000).catch(() => logger.warn({ redis: redisName }, 'Redis not reachable yet: pushes answer 503 until it is'));
    if (!parts.encoder) await checkLayout(producer, env, layouts, logger).catch(abandon);
    const shards = ShardSet.open(producer, layouts, { replicas: env.REDIS_WAIT_REPLICAS, timeoutMs: env.REDIS_WAIT_TIMEOUT_MS });
    shardSets.push(shards);
    const [first] = shards.shards;
    if (!first) throw new Error('no queue shard');
    const app = createApiApp({ env, config, store, redis: producer, queue: first.queue, ledger: first.ledger, shards, tokens, registry, logger, extraMetrics: parts.extraMetrics });
    app.start();
    const server = await listen(app.app as http.RequestListener, env.PORT, env.HOST, { checkContinue: (req) => app.checkContinue(req) });
    stack.api = { server, app };
    logger.info(
      { url: server.url, redis: redisName, store: store.describe(), collections: config.collections.map((c) => c.name), queue: env.QUEUE_NAME, shards: layouts.length, waitReplicas: env.REDIS_WAIT_REPLICAS, encoder: parts.encoder, heapGrowingPercent: env.HEAP_GROWING_PERCENT },
      'api listening',
    );
    for (const c of config.collections) {
      if (!c.readRoles.includes('public') && tokens.size === 0) logger.warn({ collection: c.name }, 'no tokens configured (ADMIN_TOKEN/TOKENS_FILE): list and pull will answer 401');
    }
  }

  if (parts.rollup) stack.rollup = (await startRollupService({ env, config, store, redis: target, registry, logger })) ?? undefined;

  // A 200 means "in Redis"; say so loudly when this Redis would lose it on restart.
  void (async () => {
    try {
      const [, aof] = (await connections[0]?.config('GET', 'appendonly')) as [string, string];
      if (aof !== 'yes') logger.warn({ redis: redisName }, 'Redis runs without AOF (appendonly no): acknowledged batches still queued are lost if Redis restarts');
    } catch {
      /* CONFIG may be disabled (managed Redis); nothing to warn about then */
    }
  })();

  let closing: Promise<void> | undefined;
  stack.close = () => {
    closing ??= (async () => {
      // With Redis unreachable nothing can finish: an active job cannot be released, a QUIT is
      // never answered (worker connections queue commands while offline). Waiting would only
      // delay the exit (it took ~23 s); the jobs come back as stalled once Redis returns.
      const redisUp = connections.length > 0 && connections.every((c) => c.status === 'ready');
      const steps: (() => Promise<unknown>)[] = [
        async () => stack.api?.app.stop(),
        async () => stack.api?.server.close(redisUp ? 10_000 : 1000),
        async () => stack.encoder?.close(redisUp ? 15_000 : 250),
        async () => stack.rollup?.close(redisUp ? 15_000 : 250),
        async () => stack.metricsServer?.close(1000),
        ...shardSets.map((q) => () => withTimeout(q.close(), redisUp ? 5000 : 250, 'queue close')),
        ...connections.map((c) => async () => {
          if (c.status !== 'ready') return c.disconnect();
          await withTimeout(c.quit(), 1000, 'redis quit').catch(() => c.disconnect());
        }),
      ];
      for (const step of steps) {
        try {
          await step();
        } catch (err) {
          logger.warn({ err: (err as Error).message }, 'close step failed');
        }
      }
    })();
    return closing;
  };
  return stack;
}

/**
 * Checks QUEUE_SHARDS against the layout recorded in Redis (see ensureShardLayout). A refused
 * change stops the start. With the default layout (one shard, one Redis) an unreachable Redis
 * only skips the check, as a push then answers 503 anyway; a sharded layout waits for Redis.
 */
async function checkLayout(conn: RedisClient, env: Env, layouts: readonly ShardLayout[], logger: Logger): Promise<void> {
  const legacy = layouts.length === 1 && layouts[0]?.queuePrefix === 'bull';
  try {
    await waitReady(conn, legacy ? 2000 : 30_000);
    const r = await withTimeout(ensureShardLayout(conn, env.QUEUE_NAME, layouts), 10_000, 'shard layout check');
    if (r.changedFrom !== undefined) logger.warn({ from: r.changedFrom, to: layouts.length }, 'QUEUE_SHARDS changed on a drained queue: new shard layout recorded');
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    if (legacy && (isRedisUnavailable(err) || /not ready|timed out/i.test((err as Error).message))) {
      logger.warn({ err: (err as Error).message }, 'Redis not reachable at start: the QUEUE_SHARDS layout check is skipped');
      return;
    }
    throw new ConfigError(`could not check the queue shard layout in Redis: ${(err as Error).message}`);
  }
}
