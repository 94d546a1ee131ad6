import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type { IncomingMessage } from 'node:http';
import type { Queue } from 'bullmq';
import type { Registry } from 'prom-client';
import { ShardSet } from '../../shared/shards.js';
import { API_ENCODE_MAX_BYTES_DEFAULT, type Env, MAX_INFLIGHT_BYTES_DEFAULT, QUEUE_GROUP_MAX_DEFAULT, type SyncConfig } from '../../shared/config.js';
import { ByteBudget, DRAIN_COLLECT_MIN_PEAK, DrainCollector } from '../../shared/byte-budget.js';
import { HttpError, StoreError } from '../../shared/errors.js';
import type { BatchLedger } from '../../shared/ledger/ledger.js';
import { type Logger, throttledWarn } from '../../shared/logger.js';
import { type RedisClient, isRedisUnavailable, redisAddress } from '../../shared/redis.js';
import { withTimeout } from '../../shared/timeout.js';
import type { ContinueRefusal } from '../../shared/http.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { TokenRoles } from './auth.js';
import { edgeFromEnv, type EdgeEnv } from './edge/from-env.js';
import { noImplicitConditional } from './edge/conditional.js';
import { pushLengthCheck } from './edge/expect-continue.js';
import { methodNotAllowed } from './edge/methods.js';
import { createApiMetrics, type ApiMetrics } from './metrics.js';
import { createEventsServerPlugin } from './plugin.js';
import { createAdminRouter } from './admin.js';
import { createSyncRouter, jsonErrorHandler } from './router.js';
import { Upkeep } from './upkeep.js';
import { LoadShedder } from './shedder.js';
import { ParquetEncodeThread, RETIRE_ABOVE_WASM_BYTES } from '../../shared/parquet/encode-thread-pool.js';

export interface ApiDeps {
  env: Pick<Env, 'BASE_PATH' | 'QUEUE_HIGH_WATER' | 'REDIS_MEMORY_HIGH_WATER' | 'IDEMPOTENCY_WINDOW_SECONDS' | 'ORPHAN_GRACE_SECONDS' | 'QUEUE_NAME'> &
    Partial<EdgeEnv> &
    Partial<Pick<Env, 'BODY_DEDUP_WINDOW_SECONDS' | 'MAX_INFLIGHT_BYTES' | 'APP_PATTERN' | 'QUEUE_GROUP_MAX' | 'API_ENCODE_MAX_BYTES'>>;
  config: SyncConfig;
  store: ObjectStore;
  /** Producer connection (no offline queue): one Redis or a Cluster. */
  redis: RedisClient;
  /** The queue and ledger of a single-shard deployment; with `shards`, shard 0's. */
  queue: Queue;
  ledger: BatchLedger;
  /** Every shard (QUEUE_SHARDS) and REDIS_WAIT_REPLICAS; default: `queue` and `ledger` as the one shard. */
  shards?: ShardSet;
  tokens: ReadonlyMap<string, readonly string[]>;
  registry: Registry;
  logger: Logger;
  /** Extra registries to serve on /metrics (the embedded encoder's). */
  extraMetrics?: () => Promise<string>;
}

export interface ApiApp {
  app: Express;
  metrics: ApiMetrics;
  shedder: LoadShedder;
  /** One pass of the background upkeep: gauges and orphan reaping. */
  upkeep(): Promise<void>;
  /** For the server's `checkContinue` (shared/http.ts): a push declaring a body over its limit is refused before `100 Continue`. */
  checkContinue(req: IncomingMessage): ContinueRefusal | null;
  /** Starts the background loops (shedder sampling, upkeep every few seconds). */
  start(): void;
  /** Stops the loops. Idempotent. */
  stop(): void;
}

/** The API's Express app: sync routes for every collection plus /healthz, /readyz and /metrics. */
export function createApiApp(deps: ApiDeps): ApiApp {
  const { config, store, redis, queue, ledger, registry, logger } = deps;
  const shards = deps.shards ?? ShardSet.single(queue, ledger, redis);
  // Refreshed when the registry is read (each scrape), so queue depth is never 5 s stale.
  const metrics = createApiMetrics(registry, { refreshQueueGauges: () => upkeep.refreshGauges() });
  const shedder = new LoadShedder({
    queue: shards.shards.map((s) => s.queue),
    redis,
    maxWaiting: deps.env.QUEUE_HIGH_WATER,
    maxMemoryRatio: deps.env.REDIS_MEMORY_HIGH_WATER,
    onSample: (s) => metrics.redisUsedMemoryRatio.set(s.memoryRatio),
  });
  const encodeFailedWarn = throttledWarn(logger, 'Parquet encode in the API failed; the batch was queued as JSON for an encoder');
  // Started on the first push the API encodes itself (API_ENCODE_MAX_BYTES), and again if it died.
  let parquetThread: ParquetEncodeThread | undefined;
  const encodeThread = (): ParquetEncodeThread => {
    // Retired once idle with its wasm memory grown past ordinary batches, so idle RSS comes back.
    if (!parquetThread || parquetThread.gone) parquetThread = new ParquetEncodeThread({ retireAboveWasmBytes: RETIRE_ABOVE_WASM_BYTES });
    return parquetThread;
  };
  const plugins = config.collections.map((c) =>
    createEventsServerPlugin({
      store,
      collection: c,
      storagePath: c.storagePath,
      queue: { queue, ledger, shards, idempotencyWindowSeconds: deps.env.IDEMPOTENCY_WINDOW_SECONDS, bodyDedupWindowSeconds: deps.env.BODY_DEDUP_WINDOW_SECONDS, groupMax: deps.env.QUEUE_GROUP_MAX ?? QUEUE_GROUP_MAX_DEFAULT,
        encodeMaxBytes: deps.env.API_ENCODE_MAX_BYTES ?? API_ENCODE_MAX_BYTES_DEFAULT,
        encodeThread,
      },
      observe: {
        mintSeconds: (s) => metrics.mintDuration.observe(s),
        enqueueSeconds: (s) => metrics.enqueueDuration.observe(s),
        enqueuedBytes: (n) => shedder.noteWrite(n),
        groupSize: (n) => metrics.enqueueGroupBatches.observe(n),
        enqueueUnknown: () => metrics.enqueueUnknown.inc(),
        encodeSeconds: (s) => metrics.encodeDuration.observe(s),
        encodeFailed: (err) => {
          metrics.encodeFailures.inc();
          encodeFailedWarn({ err: err.message });
        },
      },
      bestEffort: { logger, counter: metrics.bestEffortFailures },
    }),
  );
  const tokens = new TokenRoles(deps.tokens);
  const edge = edgeFromEnv(deps.env, { tokens, redis, registry, logger, collections: config.collections });
  const inflightLimit = deps.env.MAX_INFLIGHT_BYTES ?? MAX_INFLIGHT_BYTES_DEFAULT;
  // Once a burst of large pushes has drained, its dead bodies are collected (shared/byte-budget.ts).
  const drained = new DrainCollector({ minPeak: DRAIN_COLLECT_MIN_PEAK });
  metrics.inflightBytesLimit.set(inflightLimit);
  const router = createSyncRouter({
    store,
    config,
    plugins,
    auth: tokens,
    log: logger,
    // The Starfish collection manifest (fetchServerConfig): names and push limits only, open to all.
    configEndpoint: { auth: 'public' },
    ...edge.routerOptions,
    shedReason: () => shedder.shedReason(),
    ...(deps.env.APP_PATTERN ? { appPattern: deps.env.APP_PATTERN } : {}),
    inflightBudget: new ByteBudget(inflightLimit, (used) => {
      metrics.inflightBytes.set(used);
      drained.note(used);
    }),
    observer: {
      ...edge.observer,
      rejected: (reason) => {
        metrics.pushes.inc({ outcome: 'rejected' });
        metrics.rejections.inc({ reason });
      },
      shed: (reason) => {
        metrics.pushes.inc({ outcome: 'shed' });
        metrics.shed.inc({ reason });
      },
      unavailable: () => metrics.pushes.inc({ outcome: 'unavailable' }),
      pushed: (r, bytes) => {
        if (r.batchId === null) return void metrics.pushes.inc({ outcome: 'empty' });
        if (r.deduplicated) return void metrics.pushes.inc({ outcome: 'deduplicated' });
        metrics.pushes.inc({ outcome: 'accepted' });
        metrics.eventsAccepted.inc(r.events);
        metrics.bytesAccepted.inc(bytes);
      },
    },
  });

  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  // No empty 304 from Express for `If-None-Match: *` on /healthz, /readyz, /admin/*: only pull answers conditionals.
  app.use(noImplicitConditional);

  app.use(function accessLog(req: Request, res: Response, next: NextFunction) {
    const start = performance.now();
    res.on('finish', () => {
      const route = req.route ? `${req.baseUrl}${String((req.route as { path: unknown }).path)}` : 'unmatched';
      const seconds = (performance.now() - start) / 1000;
      metrics.httpDuration.observe({ route, method: req.method, status: String(res.statusCode) }, seconds);
      const line = { method: req.method, route, status: res.statusCode, ms: Math.round(seconds * 1000), bytesIn: Number(req.headers['content-length'] ?? 0) };
      if (res.statusCode >= 500) logger.warn(line, 'request');
      else logger.info(line, 'request');
    });
    next();
  });

  app.get('/healthz', (_req, res) => {
    res.json({ ok: true });
  });
  // The Starfish reference's name for it, also under BASE_PATH where a client's baseUrl points.
  app.get(deps.env.BASE_PATH ? ['/health', `${deps.env.BASE_PATH}/health`] : '/health', (_req, res) => {
    res.json({ ok: true });
  });

  // Names what is down (Redis by host:port, the store by its description) and nothing else:
  // driver error texts can carry internals and change between versions.
  const redisName = `redis ${redisAddress(redis)}`;
  const storeName = `store ${store.describe()}`;
  app.get('/readyz', async (_req, res) => {
    const checks: Record<string, string> = {};
    const [redisOk, storeOk] = await Promise.all([
      withTimeout(redis.ping(), 1000).then(() => true, () => false),
      withTimeout(store.healthcheck(), 2000).then(() => true, () => false),
    ]);
    checks.redis = redisOk ? 'ok' : `${redisName} unreachable`;
    checks.store = storeOk ? 'ok' : `${storeName} unreachable`;
    // null = unknown (Redis did not answer); 0 would claim nothing is held back.
    let watermarkLagSeconds: number | null = null;
    if (redisOk) watermarkLagSeconds = await withTimeout(upkeep.maxLagMs(), 1000).then((ms) => ms / 1000, () => null);
    const ok = redisOk && storeOk;
    if (!ok) res.set('Retry-After', '5');
    res.status(ok ? 200 : 503).json({ ok, checks, watermarkLagSeconds, shedding: shedder.shedReason() });
  });

  app.get('/metrics', async (_req, res) => {
    const own = await registry.metrics();
    const extra = deps.extraMetrics ? await deps.extraMetrics() : '';
    res.setHeader('Content-Type', registry.contentType);
    res.send(extra ? `${own}\n${extra}` : own);
  });
  app.all(['/healthz', '/readyz', '/metrics'], methodNotAllowed(['GET', 'HEAD']));
  app.all(deps.env.BASE_PATH ? ['/health', `${deps.env.BASE_PATH}/health`] : '/health', methodNotAllowed(['GET', 'HEAD']));

  app.use(deps.env.BASE_PATH || '/', router);
  app.use(deps.env.BASE_PATH || '/', edge.adminAudit, createAdminRouter({ queue, ledger, redis, shards, tokens, roleResolver: edge.routerOptions.roleResolver, bestEffort: { logger, counter: metrics.bestEffortFailures } }));

  app.use((req, _res, next) => next(new HttpError(404, `no route for ${req.method} ${req.path}`)));

  // Any route that reached Redis while it is away (or whose error says so): an outage, not a bug.
  app.use(function redisDownErrors(err: unknown, _req: Request, res: Response, next: NextFunction) {
    const status = (err as { status?: unknown }).status;
    const known = err instanceof HttpError || err instanceof StoreError || (typeof status === 'number' && status >= 400 && status < 500);
    if (!known && !res.headersSent && (isRedisUnavailable(err) || redis.status !== 'ready')) {
      logger.warn({ err: err instanceof Error ? err.name : 'unknown', redis: redisAddress(redis) }, 'request failed: Redis unavailable');
      res.status(503).set('Retry-After', '5').json({ error: 'Redis unavailable; retry later' });
      return;
    }
    next(err);
  });
  app.use(jsonErrorHandler(logger));

  const upkeep = new Upkeep({ shards, queue, redis, metrics, logger, graceMs: deps.env.ORPHAN_GRACE_SECONDS * 1000 });

  const overLength = pushLengthCheck(config.collections, deps.env.BASE_PATH);
  function checkContinue(req: IncomingMessage): ContinueRefusal | null {
    const refusal = overLength(req);
    if (refusal) {
      metrics.pushes.inc({ outcome: 'rejected' });
      metrics.rejections.inc({ reason: 'too_large' });
    }
    return refusal;
  }

  return {
    app,
    metrics,
    shedder,
    upkeep: () => upkeep.runOnce(),
    checkContinue,
    start() {
      shedder.start();
      upkeep.start();
    },
    stop() {
      shedder.stop();
      drained.stop();
      // Stopping: a thread that fails to close cleanly ends with the process.
      void parquetThread?.close().catch(() => undefined);
      parquetThread = undefined;
      upkeep.stop();
    },
  };
}
