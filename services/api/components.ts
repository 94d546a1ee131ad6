import type http from 'node:http';
import { type RunningServer, listen } from '../../shared/http.js';
import { type Component, settled } from '../../shared/lifecycle.js';
import { ShardSet } from '../../shared/ledger/shard-set.js';
import { withTimeout } from '../../shared/timeout.js';
import { apiSlice, listenSlice, redisSlice } from '../../shared/config-slices.js';
import type { StackContext } from '../../shared/stack-context.js';
import { type ApiApp, createApiApp } from './app.js';

export interface ApiComponent extends Component {
  /** Set once started. */
  readonly api: { server: RunningServer; app: ApiApp } | undefined;
}

/**
 * The HTTP API on PORT: its queues (one per shard) and its app. Stops by refusing new connections
 * and finishing the requests in flight (10 s), then closes its queues.
 */
export function apiServer(
  ctx: StackContext,
  o: { extraMetrics?: () => Promise<string>; encoderInProcess?: boolean } = {},
): ApiComponent {
  ctx.use('producer');
  // Read before anything starts: a bad TOKENS_FILE stops the start before anything listens.
  const tokens = ctx.tokens;
  let shards: ShardSet | undefined;
  let api: { server: RunningServer; app: ApiApp } | undefined;
  let starting: Promise<void> | undefined;
  const start = async (): Promise<void> => {
    const { config, store, logger } = ctx;
    const redis = redisSlice(ctx.env);
    const { PORT, HOST } = listenSlice(ctx.env);
    const producer = ctx.connection('producer');
    shards = ShardSet.open(producer, ctx.layouts, {
      replicas: redis.REDIS_WAIT_REPLICAS,
      timeoutMs: redis.REDIS_WAIT_TIMEOUT_MS,
    });
    const [first] = shards.shards;
    if (!first) throw new Error('no queue shard');
    const app = createApiApp({
      env: apiSlice(ctx.env),
      config,
      store,
      redis: producer,
      queue: first.queue,
      ledger: first.ledger,
      shards,
      tokens,
      registry: ctx.registry,
      logger,
      extraMetrics: o.extraMetrics,
    });
    const server = await listen(app.app as http.RequestListener, PORT, HOST, {
      checkContinue: (req) => app.checkContinue(req),
    });
    api = { server, app };
    logger.info(
      {
        url: server.url,
        redis: ctx.redisName,
        store: store.describe(),
        collections: config.collections.map((c) => c.name),
        queue: redis.QUEUE_NAME,
        shards: shards.count,
        waitReplicas: redis.REDIS_WAIT_REPLICAS,
        encoder: o.encoderInProcess ?? false,
        heapGrowingPercent: ctx.env.HEAP_GROWING_PERCENT,
      },
      'api listening',
    );
    for (const c of config.collections) {
      if (!c.readRoles.includes('public') && tokens.size === 0)
        logger.warn(
          { collection: c.name },
          'no tokens configured (ADMIN_TOKEN/TOKENS_FILE): list and pull will answer 401',
        );
    }
  };
  return {
    name: 'api server',
    get api() {
      return api;
    },
    start: () => (starting ??= start()),
    async stop(graceMs) {
      const started = Date.now();
      await settled(starting);
      await api?.server.close(Math.min(ctx.stopBound(10_000, 1000), graceMs));
      const left = Math.max(0, graceMs - (Date.now() - started));
      if (shards) await withTimeout(shards.close(), Math.min(ctx.stopBound(5000, 250), left), 'queue close');
    },
  };
}

/** The API app's background loops (load shedder sampling, upkeep: reaper and gauges); stopped before its server. */
export function apiUpkeep(api: ApiComponent): Component {
  return {
    name: 'upkeep',
    async start() {
      if (!api.api) throw new Error('list the api server before its upkeep');
      api.api.app.start();
    },
    async stop() {
      api.api?.app.stop();
    },
  };
}
