import http from 'node:http';
import type { Queue } from 'bullmq';
import { createProducerQueue } from '../shared/queue.js';
import type { Redis } from 'ioredis';
import type { Registry } from 'prom-client';
import { type Env, loadSyncConfig, loadTokens } from '../shared/config.js';
import { BatchLedger } from '../shared/ledger/ledger.js';
import { type Logger, createLogger } from '../shared/logger.js';
import { createRegistry } from '../shared/metrics.js';
import { type RunningServer, listen } from '../shared/http.js';
import { DEFAULT_REDIS_URL, createRedis, waitReady } from '../shared/redis.js';
import { withTimeout } from '../shared/timeout.js';
import { storeFromEnv } from '../shared/store/from-env.js';
import type { ObjectStore } from '../shared/store/types.js';
import { type ApiApp, createApiApp } from './api/app.js';
import { type Encoder, createEncoder } from './encoder/worker.js';
import { type RollupService, startRollupService } from './rollup/service.js';

export interface StackParts {
  api: boolean;
  encoder: boolean;
  /** Serve the encoder's own /metrics on METRICS_PORT when there is no API (default true). */
  encoderMetricsServer?: boolean;
  /** Node process metrics in this stack's registry (default true; off in a worker thread, whose process the main thread already reports). */
  defaultMetrics?: boolean;
  /** `service` label of every metric (default: api, encoder or ingest). */
  serviceLabel?: string;
  /** More metrics text appended to the API's /metrics (the encoder thread's, in `npm start`). */
  extraMetrics?: () => Promise<string>;
  /** Run the rollup planner and worker too (unless ROLLUP=off); `npm start` does. */
  rollup?: boolean;
}

export interface RunningStack {
  logger: Logger;
  store: ObjectStore;
  redisUrl: string;
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
  const config = loadSyncConfig(env);
  const tokens = loadTokens(env);
  const store = storeFromEnv(env);
  const redisUrl = env.REDIS_URL ?? DEFAULT_REDIS_URL;
  const registry = createRegistry(parts.serviceLabel ?? (parts.api && parts.encoder ? 'ingest' : parts.api ? 'api' : 'encoder'), parts.defaultMetrics ?? true);
  const connections: Redis[] = [];
  const queues: Queue[] = [];
  const stack: RunningStack = { logger, store, redisUrl, registry, close: async () => undefined };

  if (parts.encoder) {
    const workerConn = createRedis(redisUrl, 'worker', {}, logger);
    const ledgerConn = createRedis(redisUrl, 'worker', {}, logger);
    connections.push(workerConn, ledgerConn);
    stack.encoder = createEncoder({
      queueName: env.QUEUE_NAME,
      connection: workerConn,
      ledger: new BatchLedger(ledgerConn, env.QUEUE_NAME),
      store,
      registry,
      logger,
      concurrency: env.ENCODER_CONCURRENCY,
      lockDurationMs: env.ENCODER_LOCK_SECONDS * 1000,
      listIndexSeconds: env.LIST_INDEX_SECONDS,
      maxInflightBytes: env.ENCODER_MAX_INFLIGHT_BYTES,
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
      logger.info({ metrics: `${stack.metricsServer.url}/metrics`, queue: env.QUEUE_NAME, concurrency: env.ENCODER_CONCURRENCY, store: store.describe() }, 'encoder started');
    }
  }

  if (parts.api) {
    const producer = createRedis(redisUrl, 'producer', {}, logger);
    connections.push(producer);
    // Pushes fail fast while Redis is away; give it a moment at start so the first ones do not.
    await waitReady(producer, 5000).catch(() => logger.warn({ redis: redisUrl }, 'Redis not reachable yet: pushes answer 503 until it is'));
    const queue = createProducerQueue(env.QUEUE_NAME, producer);
    queue.on('error', () => undefined);
    queues.push(queue);
    const ledger = new BatchLedger(producer, env.QUEUE_NAME);
    const app = createApiApp({ env, config, store, redis: producer, queue, ledger, tokens, registry, logger, extraMetrics: parts.extraMetrics });
    app.start();
    const server = await listen(app.app as http.RequestListener, env.PORT, env.HOST);
    stack.api = { server, app };
    logger.info(
      { url: server.url, redis: redisUrl, store: store.describe(), collections: config.collections.map((c) => c.name), queue: env.QUEUE_NAME, encoder: parts.encoder },
      'api listening',
    );
    for (const c of config.collections) {
      if (!c.readRoles.includes('public') && tokens.size === 0) logger.warn({ collection: c.name }, 'no tokens configured (ADMIN_TOKEN/TOKENS_FILE): list and pull will answer 401');
    }
  }

  if (parts.rollup) stack.rollup = (await startRollupService({ env, config, store, redisUrl, registry, logger })) ?? undefined;

  // A 200 means "in Redis"; say so loudly when this Redis would lose it on restart.
  void (async () => {
    try {
      const [, aof] = (await connections[0]?.config('GET', 'appendonly')) as [string, string];
      if (aof !== 'yes') logger.warn({ redis: redisUrl }, 'Redis runs without AOF (appendonly no): acknowledged batches still queued are lost if Redis restarts');
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
        ...queues.map((q) => () => withTimeout(q.close(), redisUp ? 5000 : 250, 'queue close')),
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
