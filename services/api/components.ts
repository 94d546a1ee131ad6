import type http from 'node:http';
import { type RunningServer, listen } from '../../shared/http.js';
import { type Component, settled } from '../../shared/lifecycle.js';
import { ShardSet } from '../../shared/ledger/shard-set.js';
import { withTimeout } from '../../shared/timeout.js';
import { apiSlice, listenSlice, redisSlice } from '../../shared/config-slices.js';
import type { StackContext } from '../../shared/stack-context.js';
import { type ApiApp, createApiApp } from './app.js';
import { DrainState, drainWindowMs } from './drain.js';

export interface ApiComponent extends Component {
  /** Set once started. */
  readonly api: { server: RunningServer; app: ApiApp } | undefined;
  /** Its drain (./drain.ts): /readyz and `Connection: close` follow it; `apiDrain` starts it. */
  readonly drain: DrainState;
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
  const drain = new DrainState();
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
      draining: () => drain.draining,
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
    drain,
    start: () => (starting ??= start()),
    async stop(graceMs) {
      const started = Date.now();
      await settled(starting);
      drain.close();
      await api?.server.close(Math.min(ctx.stopBound(10_000, 1000), graceMs));
      const left = Math.max(0, graceMs - (Date.now() - started));
      if (shards) await withTimeout(shards.close(), Math.min(ctx.stopBound(5000, 250), left), 'queue close');
    },
  };
}

/**
 * The API's drain window (./drain.ts), listed last so its stop runs first: on SIGTERM /readyz
 * answers 503 and every answer carries `Connection: close` while the API keeps serving for
 * `drainMs` (SHUTDOWN_DRAIN_MS; its upkeep and load shedder still run); then the api server's
 * own stop closes the listener. The process's stop bound must include `drainMs`
 * (drainedStopGraceMs).
 */
export function apiDrain(ctx: StackContext, api: ApiComponent, drainMs: number): Component {
  return {
    name: 'drain',
    async start() {
      return undefined;
    },
    async stop(graceMs) {
      const first = api.drain.begin();
      const ms = drainWindowMs({
        drainMs,
        graceMs,
        elapsedMs: api.drain.elapsedMs,
        listening: api.api !== undefined,
        redisUp: ctx.stopBound(1, 0) === 1,
      });
      if (first) ctx.logger.info({ drainMs: ms }, 'draining: /readyz answers 503, answers close their connections');
      if (ms > 0) await new Promise((r) => setTimeout(r, ms));
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
