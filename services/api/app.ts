import express, {
  type Express,
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
  type Router,
} from 'express';
import type { IncomingMessage } from 'node:http';
import type { Queue } from 'bullmq';
import type { Registry } from 'prom-client';
import { ShardSet } from '../../shared/ledger/shard-set.js';
import type { ApiSlice } from '../../shared/config-slices.js';
import {
  API_ENCODE_MAX_BYTES_DEFAULT,
  MAX_INFLIGHT_BYTES_DEFAULT,
  QUEUE_GROUP_MAX_DEFAULT,
  type SyncConfig,
} from '../../shared/config.js';
import { ByteBudget, DRAIN_COLLECT_MIN_PEAK, DrainCollector } from '../../shared/byte-budget.js';
import type { BatchLedger } from '../../shared/ledger/ledger.js';
import { type Logger, type ThrottledWarn, throttledWarn } from '../../shared/logger.js';
import type { RedisClient } from '../../shared/redis/connection.js';
import type { ContinueRefusal } from '../../shared/http.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { TokenRoles } from './auth.js';
import { edgeFromEnv } from './edge-from-env.js';
import { noImplicitConditional } from './edge/conditional.js';
import { pushLengthCheck } from './edge/expect-continue.js';
import { createApiMetrics, pushStepTimer, type ApiMetrics } from './metrics.js';
import { type EventsPluginOptions, type QueueBinding, createEventsServerPlugin } from './plugin.js';
import { createAdminRouter } from './admin.js';
import { createEraseRouter } from './erase.js';
import { type RouterObserver, createSyncRouter } from './router.js';
import { ApiError, jsonErrorHandler } from './error-map.js';
import { createHealthRouter } from './health-routes.js';
import { createSegmentDoor } from './segment/mount.js';
import { Upkeep } from './upkeep.js';
import { documentOptionsOf, openApiDocument } from './contract/document.js';
import { createOpenApiRouter } from './contract/route.js';
import { LoadShedder } from './shedder.js';
import { EncodeThreadHolder, RETIRE_ABOVE_WASM_BYTES } from '../../shared/parquet/encode-thread-pool.js';

export interface ApiDeps {
  /** Its slice of the environment (shared/config-slices.ts, `apiSlice`); the rest default to the env's defaults. */
  env: Pick<
    ApiSlice,
    | 'BASE_PATH'
    | 'QUEUE_HIGH_WATER'
    | 'REDIS_MEMORY_HIGH_WATER'
    | 'IDEMPOTENCY_WINDOW_SECONDS'
    | 'ORPHAN_GRACE_SECONDS'
    | 'QUEUE_NAME'
  > &
    Partial<ApiSlice>;
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
  /** True once the process drains (./drain.ts): /readyz answers 503 and answers close their connections. Default never. */
  draining?: () => boolean;
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
  const shedder = loadShedder(deps, shards, metrics);
  // Started on the first push the API encodes itself (API_ENCODE_MAX_BYTES), and again if it died;
  // retired once idle with its wasm memory grown past ordinary batches, so idle RSS comes back.
  const encodeThread = new EncodeThreadHolder({ retireAboveWasmBytes: RETIRE_ABOVE_WASM_BYTES });
  const plugins = collectionPlugins(deps, shards, metrics, shedder, encodeThread);
  const tokens = new TokenRoles(deps.tokens);
  const edge = edgeFromEnv(deps.env, { tokens, redis, registry, logger, collections: config.collections });
  const inflight = inflightBudget(deps.env.MAX_INFLIGHT_BYTES ?? MAX_INFLIGHT_BYTES_DEFAULT, metrics);
  const observer: RouterObserver = { ...edge.observer, ...pushOutcomeObserver(metrics) };
  const shedReason = (): string | null => shedder.shedReason();
  const draining = deps.draining ?? ((): boolean => false);
  const router = createSyncRouter({
    store,
    config,
    plugins,
    auth: tokens,
    log: logger,
    // The Starfish collection manifest (fetchServerConfig): names and push limits only, open to all.
    configEndpoint: { auth: 'public' },
    ...edge.routerOptions,
    shedReason,
    ...(deps.env.APP_PATTERN ? { appPattern: deps.env.APP_PATTERN } : {}),
    inflightBudget: inflight.budget,
    observer,
  });
  // The Segment tracking API (/v1/*), a second door to the same push path, when write keys are configured.
  const file = deps.env.SEGMENT_WRITE_KEYS_FILE;
  const segment = file
    ? createSegmentDoor({
        file,
        config,
        plugins,
        edge: edge.routerOptions,
        appPattern: deps.env.APP_PATTERN,
        shedReason,
        inflightBudget: inflight.budget,
        observer,
      })
    : undefined;
  const health = createHealthRouter({
    basePath: deps.env.BASE_PATH,
    redis,
    store,
    registry,
    extraMetrics: deps.extraMetrics,
    maxLagMs: () => upkeep.maxLagMs(),
    shedReason: () => shedder.shedReason(),
    draining,
  });
  const admin = createAdminRouter({
    queue,
    ledger,
    redis,
    shards,
    tokens,
    roleResolver: edge.routerOptions.roleResolver,
    bestEffort: { logger, counter: metrics.bestEffortFailures },
  });
  const openapi = createOpenApiRouter(openApiDocument(config, documentOptionsOf(deps.env)));
  const app = expressApp({
    metrics,
    logger,
    redis,
    draining,
    basePath: deps.env.BASE_PATH,
    health,
    openapi,
    segment,
    sync: router,
    admin: [
      edge.adminAudit,
      admin,
      createEraseRouter({
        queueName: deps.env.QUEUE_NAME,
        redis,
        collections: config.collections,
        tokens,
        roleResolver: edge.routerOptions.roleResolver,
      }),
    ],
  });
  const upkeep = new Upkeep({ shards, queue, redis, metrics, logger, graceMs: deps.env.ORPHAN_GRACE_SECONDS * 1000 });

  return {
    app,
    metrics,
    shedder,
    upkeep: () => upkeep.runOnce(),
    checkContinue: continueCheck(config.collections, deps.env.BASE_PATH, metrics),
    start() {
      shedder.start();
      upkeep.start();
    },
    stop() {
      shedder.stop();
      inflight.drained.stop();
      // Stopping: a thread that fails to close cleanly ends with the process.
      void encodeThread.close().catch(() => undefined);
      upkeep.stop();
    },
  };
}

/** Sheds pushes while the queues are past QUEUE_HIGH_WATER or Redis' memory past REDIS_MEMORY_HIGH_WATER. */
function loadShedder(deps: ApiDeps, shards: ShardSet, metrics: ApiMetrics): LoadShedder {
  return new LoadShedder({
    queue: shards.shards.map((s) => s.queue),
    redis: deps.redis,
    maxWaiting: deps.env.QUEUE_HIGH_WATER,
    maxMemoryRatio: deps.env.REDIS_MEMORY_HIGH_WATER,
    onSample: (s) => metrics.redisUsedMemoryRatio.set(s.memoryRatio),
  });
}

/** One events plugin per collection, all over the same queue binding settings and push metrics. */
function collectionPlugins(
  deps: ApiDeps,
  shards: ShardSet,
  metrics: ApiMetrics,
  shedder: LoadShedder,
  encodeThread: EncodeThreadHolder,
): ReturnType<typeof createEventsServerPlugin>[] {
  const { env, store, queue, ledger, logger } = deps;
  const encodeFailedWarn = throttledWarn(
    logger,
    'Parquet encode in the API failed; the batch was queued as JSON for an encoder',
  );
  const binding = (): QueueBinding => ({
    queue,
    ledger,
    shards,
    idempotencyWindowSeconds: env.IDEMPOTENCY_WINDOW_SECONDS,
    bodyDedupWindowSeconds: env.BODY_DEDUP_WINDOW_SECONDS,
    groupMax: env.QUEUE_GROUP_MAX ?? QUEUE_GROUP_MAX_DEFAULT,
    encodeMaxBytes: env.API_ENCODE_MAX_BYTES ?? API_ENCODE_MAX_BYTES_DEFAULT,
    encodeThread: encodeThread.get,
  });
  return deps.config.collections.map((c) =>
    createEventsServerPlugin({
      store,
      collection: c,
      storagePath: c.storagePath,
      queue: binding(),
      observe: pushStepObserver(metrics, shedder, encodeFailedWarn),
      bestEffort: { logger, counter: metrics.bestEffortFailures },
    }),
  );
}

/** The push path's timings and sizes, as API metrics (and the shedder's write estimate). */
function pushStepObserver(
  metrics: ApiMetrics,
  shedder: LoadShedder,
  encodeFailedWarn: ThrottledWarn,
): NonNullable<EventsPluginOptions['observe']> {
  return {
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
    stepSeconds: pushStepTimer(metrics.pushStepDuration),
  };
}

/** Each push's outcome, counted by outcome and reason, and its admission steps' times (the edge's observers add theirs). */
function pushOutcomeObserver(metrics: ApiMetrics): RouterObserver {
  return {
    stepSeconds: pushStepTimer(metrics.pushStepDuration),
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
  };
}

/** MAX_INFLIGHT_BYTES: the body bytes the process holds at once, as a gauge. */
function inflightBudget(limit: number, metrics: ApiMetrics): { budget: ByteBudget; drained: DrainCollector } {
  // Once a burst of large pushes has drained, its dead bodies are collected (shared/byte-budget.ts).
  const drained = new DrainCollector({ minPeak: DRAIN_COLLECT_MIN_PEAK });
  metrics.inflightBytesLimit.set(limit);
  const budget = new ByteBudget(limit, (used) => {
    metrics.inflightBytes.set(used);
    drained.note(used);
  });
  return { budget, drained };
}

interface AppParts {
  metrics: ApiMetrics;
  logger: Logger;
  redis: RedisClient;
  draining: () => boolean;
  basePath: string | undefined;
  /** /healthz, /readyz, /metrics (health-routes.ts). */
  health: Router;
  /** The Segment tracking API (/v1/*), under BASE_PATH, when configured. */
  segment?: Router;
  /** `GET /openapi.json` (contract/route.ts), under BASE_PATH. */
  openapi: Router;
  /** The collections' sync routes, under BASE_PATH. */
  sync: Router;
  /** The admin routes and what runs before them (the audit log), under BASE_PATH. */
  admin: RequestHandler[];
}

/** The middleware in its order: drain, conditionals, access log, health, sync, admin, 404, then the error handlers. */
function expressApp(p: AppParts): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  app.use(closeWhileDraining(p.draining));
  // No empty 304 from Express for `If-None-Match: *` on /healthz, /readyz, /admin/*: only pull answers conditionals.
  app.use(noImplicitConditional);
  app.use(accessLog(p.metrics, p.logger));
  app.use(p.health);
  app.use(p.basePath || '/', p.openapi);
  if (p.segment) app.use(p.basePath || '/', p.segment);
  app.use(p.basePath || '/', p.sync);
  app.use(p.basePath || '/', ...p.admin);
  app.use((req, _res, next) => next(new ApiError('not_found', `no route for ${req.method} ${req.path}`)));
  app.use(jsonErrorHandler(p.logger));
  return app;
}

/**
 * While the process drains, every answer carries `Connection: close`: Node closes the socket once
 * it is sent, so a keep-alive client (a load balancer's pool, an SDK's agent) opens its next
 * connection through the load balancer, to an instance that stays, instead of reusing one that
 * is about to stop listening.
 */
function closeWhileDraining(draining: () => boolean): RequestHandler {
  return function closeWhileDraining(_req: Request, res: Response, next: NextFunction) {
    if (draining()) res.setHeader('Connection', 'close');
    next();
  };
}

/** Times every request by route (never by path: a path can carry ids) and logs one line per answer. */
function accessLog(metrics: ApiMetrics, logger: Logger): RequestHandler {
  return function accessLog(req: Request, res: Response, next: NextFunction) {
    const start = performance.now();
    res.on('finish', () => {
      const route = req.route ? `${req.baseUrl}${String((req.route as { path: unknown }).path)}` : 'unmatched';
      const seconds = (performance.now() - start) / 1000;
      metrics.httpDuration.observe({ route, method: req.method, status: String(res.statusCode) }, seconds);
      const line = {
        method: req.method,
        route,
        status: res.statusCode,
        ms: Math.round(seconds * 1000),
        bytesIn: Number(req.headers['content-length'] ?? 0),
      };
      if (res.statusCode >= 500) logger.warn(line, 'request');
      else logger.info(line, 'request');
    });
    next();
  };
}

/** The server's `checkContinue`: a push declaring a body over its limit is refused, and counted, before `100 Continue`. */
function continueCheck(
  collections: SyncConfig['collections'],
  basePath: string | undefined,
  metrics: ApiMetrics,
): (req: IncomingMessage) => ContinueRefusal | null {
  const overLength = pushLengthCheck(collections, basePath);
  return function checkContinue(req: IncomingMessage): ContinueRefusal | null {
    const refusal = overLength(req);
    if (refusal) {
      metrics.pushes.inc({ outcome: 'rejected' });
      metrics.rejections.inc({ reason: 'too_large' });
    }
    return refusal;
  };
}
