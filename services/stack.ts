import http from 'node:http';
import type { Registry } from 'prom-client';
import { ConfigError, type Env, type SyncConfig, loadSyncConfig, loadTokens } from '../shared/config.js';
import { RedisUnavailable, TimeoutError } from '../shared/errors.js';
import { BatchLedger } from '../shared/ledger/ledger.js';
import { type Logger, createLogger } from '../shared/logger.js';
import { createRegistry } from '../shared/metrics.js';
import { type HealthServer, healthServer } from '../shared/health-server.js';
import { type RunningServer, listen } from '../shared/http.js';
import { type Component, Lifecycle, settled } from '../shared/lifecycle.js';
import { type RedisClient, type RedisTarget, closeRedis, createRedisClient, describeTarget, redisTarget, waitReady } from '../shared/redis/connection.js';
import { LEGACY_QUEUE_PREFIX, ShardSet, type ShardLayout, ensureShardLayout, shardLayouts } from '../shared/redis/shards.js';
import { withTimeout } from '../shared/timeout.js';
import { applyHeapGrowth } from '../shared/runtime.js';
import { storeFromEnv } from '../shared/store/from-env.js';
import { apiSlice, encoderSlice, listenSlice, processSlice, redisSlice, rollupSlice, storeSlice } from '../shared/config-slices.js';
import type { ObjectStore } from '../shared/store/types.js';
import { type ApiApp, createApiApp } from './api/app.js';
import { type BurstOptions, type Encoder, createEncoder } from './encoder/worker.js';
import { type RollupService, startRollupService } from './rollup/service.js';

/** One bound for a whole stop; past it the process exits 1 (docs/reliability.md, "Shutdown bounds"). */
export const SHUTDOWN_GRACE_MS = 30_000;

/** The Redis connections a process's components may use (each opened at most once). */
type ConnectionName = 'worker' | 'ledger' | 'producer';

/**
 * What the components of one process share: the parsed environment, the config (read and
 * validated when this is made, before anything starts or listens), the store, the metrics
 * registry, the logger, and the Redis connections the components use. A component asks for a
 * connection when it is made (`use`); the `redis` component opens them all first and closes them
 * last.
 */
export class StackContext {
  private currentEnv: Env;
  readonly logger: Logger;
  readonly registry: Registry;
  readonly config: SyncConfig;
  readonly store: ObjectStore;
  private tokenMap: ReadonlyMap<string, readonly string[]> | undefined;
  private redisTargetMemo: RedisTarget | undefined;
  private readonly wanted: ConnectionName[] = [];
  private readonly conns = new Map<ConnectionName, RedisClient>();
  private upAtStop: boolean | undefined;

  /**
   * `name` names the logger (unless `logger` is given) and, unless `serviceLabel`, every metric's
   * `service` label. `defaultMetrics`: Node process metrics in the registry (default true);
   * `{ prefix }` names them apart (`npm start`'s encoder processes report theirs as
   * `ingest_encoder_process_cpu_seconds_total` and so on, beside the API process's own).
   */
  constructor(env: Env, o: { name: string; serviceLabel?: string; defaultMetrics?: boolean | { prefix: string }; logger?: Logger }) {
    this.currentEnv = env;
    this.logger = o.logger ?? createLogger({ level: env.LOG_LEVEL, name: o.name });
    applyHeapGrowth(env.HEAP_GROWING_PERCENT);
    this.config = loadSyncConfig(env);
    this.store = storeFromEnv(storeSlice(env));
    this.registry = createRegistry(o.serviceLabel ?? o.name, o.defaultMetrics ?? true);
  }

  get env(): Env {
    return this.currentEnv;
  }

  /** Points the context at another Redis (`npm start`'s private one, known once it started). */
  useRedisUrl(url: string): void {
    this.currentEnv = { ...this.currentEnv, REDIS_URL: url };
    this.redisTargetMemo = undefined;
  }

  /** The bearer tokens (ADMIN_TOKEN, TOKENS_FILE), read on first use. */
  get tokens(): ReadonlyMap<string, readonly string[]> {
    this.tokenMap ??= loadTokens(this.currentEnv);
    return this.tokenMap;
  }

  get target(): RedisTarget {
    this.redisTargetMemo ??= redisTarget(redisSlice(this.currentEnv));
    return this.redisTargetMemo;
  }

  /** Where Redis is, as logs name it: host:port, `unix:<socket>` or `cluster <seed nodes>` (never a password). */
  get redisName(): string {
    return describeTarget(this.target);
  }

  get layouts(): ShardLayout[] {
    return shardLayouts(this.currentEnv.QUEUE_NAME, this.currentEnv.QUEUE_SHARDS, this.target.kind === 'cluster');
  }

  /** Asks for a connection (when a component is made); the `redis` component opens it. */
  use(name: ConnectionName): void {
    if (!this.wanted.includes(name)) this.wanted.push(name);
  }

  /** Opens the connections asked for, in the order they were asked for. */
  openConnections(): void {
    for (const name of this.wanted) if (!this.conns.has(name)) this.conns.set(name, createRedisClient(this.target, name === 'producer' ? 'producer' : 'worker', this.logger));
  }

  /** The connection `name` if it is open. */
  opened(name: ConnectionName): RedisClient | undefined {
    return this.conns.get(name);
  }

  connection(name: ConnectionName): RedisClient {
    const c = this.conns.get(name);
    if (!c) throw new Error(`Redis connection "${name}" is not open: list the redis component before the components that use it`);
    return c;
  }

  get connections(): RedisClient[] {
    return [...this.conns.values()];
  }

  /**
   * A stop's bound: `upMs` while Redis answers, else `downMs`. With Redis unreachable nothing can
   * finish: an active job cannot be released, a QUIT is never answered (worker connections queue
   * commands while offline). Waiting would only delay the exit (it took ~23 s); the jobs come back
   * as stalled once Redis returns. Decided once, at the first stop, from this process's own
   * connections (none: nothing says Redis is away).
   */
  stopBound(upMs: number, downMs: number): number {
    this.upAtStop ??= this.connections.every((c) => c.status === 'ready');
    return this.upAtStop ? upMs : downMs;
  }
}

/**
 * The process's Redis connections: opens the ones its components use, checks QUEUE_SHARDS
 * against the layout recorded in Redis (see checkLayout), and warns when Redis runs without AOF;
 * stops last, after everything that used them (QUIT, at most 1 s each).
 */
export function redisConnections(ctx: StackContext): Component {
  return {
    name: 'redis',
    async start() {
      ctx.openConnections();
      const ledger = ctx.opened('ledger');
      const producer = ctx.opened('producer');
      if (ledger) await checkLayout(ledger, ctx.env, ctx.layouts, ctx.logger);
      if (producer) {
        // Pushes fail fast while Redis is away; give it a moment at start so the first ones do not.
        await waitReady(producer, 5000).catch(() => ctx.logger.warn({ redis: ctx.redisName }, 'Redis not reachable yet: pushes answer 503 until it is'));
        if (!ledger) await checkLayout(producer, ctx.env, ctx.layouts, ctx.logger);
      }
      const [first] = ctx.connections;
      if (first) void warnWithoutAof(first, ctx.redisName, ctx.logger);
    },
    async stop(graceMs) {
      for (const c of ctx.connections) await closeRedis(c, Math.min(1000, graceMs));
    },
  };
}

/** A 200 means "in Redis"; say so loudly when this Redis would lose it on restart. */
async function warnWithoutAof(conn: RedisClient, redisName: string, logger: Logger): Promise<void> {
  try {
    const [, aof] = (await conn.config('GET', 'appendonly')) as [string, string];
    if (aof !== 'yes') logger.warn({ redis: redisName }, 'Redis runs without AOF (appendonly no): acknowledged batches still queued are lost if Redis restarts');
  } catch {
    /* CONFIG may be disabled (managed Redis); nothing to warn about then */
  }
}

export interface EncoderComponent extends Component {
  /** Set once started. */
  readonly encoder: Encoder | undefined;
}

/** The encoder's workers (one per queue shard): take jobs until stopped, then finish or return the active ones (15 s). */
export function encoderWorkers(ctx: StackContext, o: { burst?: BurstOptions } = {}): EncoderComponent {
  ctx.use('worker');
  ctx.use('ledger');
  let encoder: Encoder | undefined;
  return {
    name: 'encoder',
    get encoder() {
      return encoder;
    },
    async start() {
      const env = encoderSlice(ctx.env);
      const ledgerConn = ctx.connection('ledger');
      encoder = createEncoder({
        queueName: env.QUEUE_NAME,
        connection: ctx.connection('worker'),
        ledger: new BatchLedger(ledgerConn, env.QUEUE_NAME),
        shards: ctx.layouts.map((l) => ({ queueName: l.queueName, prefix: l.queuePrefix, ledger: new BatchLedger(ledgerConn, l.namespace, { shard: { index: l.index, count: l.count } }) })),
        store: ctx.store,
        registry: ctx.registry,
        logger: ctx.logger,
        concurrency: env.ENCODER_CONCURRENCY,
        lockDurationMs: env.ENCODER_LOCK_SECONDS * 1000,
        listIndexSeconds: env.LIST_INDEX_SECONDS,
        maxInflightBytes: env.ENCODER_MAX_INFLIGHT_BYTES,
        ...(o.burst ? { burst: o.burst } : {}),
      });
    },
    async stop(graceMs) {
      await encoder?.close(Math.min(ctx.stopBound(15_000, 250), graceMs));
    },
  };
}

/** Logs what `start:encoder` runs, once its components started. */
export function logEncoderStarted(ctx: StackContext, health: HealthServer): void {
  const { env } = ctx;
  ctx.logger.info({ metrics: `${health.server?.url ?? ''}/metrics`, queue: env.QUEUE_NAME, shards: ctx.layouts.length, concurrency: env.ENCODER_CONCURRENCY, store: ctx.store.describe(), heapGrowingPercent: env.HEAP_GROWING_PERCENT }, 'encoder started');
}

/** The encoder's /metrics and /healthz (`ok` while its first worker takes jobs) on METRICS_PORT. */
export function encoderHealthServer(ctx: StackContext, encoder: EncoderComponent): HealthServer {
  const { METRICS_PORT, HOST } = processSlice(ctx.env);
  return healthServer({ registry: ctx.registry, port: METRICS_PORT, host: HOST, healthy: () => encoder.encoder?.worker.isRunning() ?? false });
}

export interface ApiComponent extends Component {
  /** Set once started. */
  readonly api: { server: RunningServer; app: ApiApp } | undefined;
}

/**
 * The HTTP API on PORT: its queues (one per shard) and its app. Stops by refusing new connections
 * and finishing the requests in flight (10 s), then closes its queues.
 */
export function apiServer(ctx: StackContext, o: { extraMetrics?: () => Promise<string>; encoderInProcess?: boolean } = {}): ApiComponent {
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
    shards = ShardSet.open(producer, ctx.layouts, { replicas: redis.REDIS_WAIT_REPLICAS, timeoutMs: redis.REDIS_WAIT_TIMEOUT_MS });
    const [first] = shards.shards;
    if (!first) throw new Error('no queue shard');
    const app = createApiApp({ env: apiSlice(ctx.env), config, store, redis: producer, queue: first.queue, ledger: first.ledger, shards, tokens, registry: ctx.registry, logger, extraMetrics: o.extraMetrics });
    const server = await listen(app.app as http.RequestListener, PORT, HOST, { checkContinue: (req) => app.checkContinue(req) });
    api = { server, app };
    logger.info(
      { url: server.url, redis: ctx.redisName, store: store.describe(), collections: config.collections.map((c) => c.name), queue: redis.QUEUE_NAME, shards: shards.count, waitReplicas: redis.REDIS_WAIT_REPLICAS, encoder: o.encoderInProcess ?? false, heapGrowingPercent: ctx.env.HEAP_GROWING_PERCENT },
      'api listening',
    );
    for (const c of config.collections) {
      if (!c.readRoles.includes('public') && tokens.size === 0) logger.warn({ collection: c.name }, 'no tokens configured (ADMIN_TOKEN/TOKENS_FILE): list and pull will answer 401');
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

export interface RollupComponent extends Component {
  /** Set once started; stays unset when rollups are off (ROLLUP=off, or a store DuckDB cannot read). */
  readonly service: RollupService | undefined;
}

/** The rollup planner and worker (unless rollups are off). `required`: a missing DuckDB fails the start. */
export function rollupService(ctx: StackContext, o: { required?: boolean } = {}): RollupComponent {
  let service: RollupService | undefined;
  let starting: Promise<void> | undefined;
  return {
    name: 'rollup',
    get service() {
      return service;
    },
    start() {
      starting ??= (async () => {
        service = (await startRollupService({ env: rollupSlice(ctx.env), config: ctx.config, store: ctx.store, redis: ctx.target, registry: ctx.registry, logger: ctx.logger, ...(o.required ? { required: true } : {}) })) ?? undefined;
      })();
      return starting;
    },
    async stop(graceMs) {
      const started = Date.now();
      await settled(starting);
      graceMs = Math.max(0, graceMs - (Date.now() - started));
      await service?.close(Math.min(ctx.stopBound(15_000, 250), graceMs));
    },
  };
}

/**
 * Which parts a stack runs (`startStack`: the library's and the tests' way to run the product in
 * one process). The entry points list their components themselves.
 */
export interface StackParts {
  api: boolean;
  encoder: boolean;
  /** Serve the encoder's own /metrics on METRICS_PORT when there is no API (default true). */
  encoderMetricsServer?: boolean;
  /** Node process metrics in this stack's registry (default true); see StackContext. */
  defaultMetrics?: boolean | { prefix: string };
  /** `service` label of every metric (default: api, encoder or ingest). */
  serviceLabel?: string;
  /** More metrics text appended to the API's /metrics (the encoder processes', in `npm start`). */
  extraMetrics?: () => Promise<string>;
  /** Make the encoder a burst encoder (see EncoderOptions.burst). */
  encoderBurst?: BurstOptions;
  /** Run the rollup planner and worker too (unless ROLLUP=off). */
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
  /** Graceful stop: stop accepting, finish in-flight requests and jobs, close connections (SHUTDOWN_GRACE_MS at most). Idempotent. */
  close(): Promise<void>;
}

/**
 * Starts the parts of the product `parts` names, in this process, from a parsed environment: the
 * components an entry point would list for them, started by one Lifecycle. Config is read and
 * validated before anything listens, so a bad config never leaves a half-started process.
 */
export async function startStack(env: Env, parts: StackParts, logger?: Logger): Promise<RunningStack> {
  const name = parts.api && parts.encoder ? 'ingest' : parts.api ? 'api' : 'encoder';
  const ctx = new StackContext(env, { name, ...(parts.serviceLabel ? { serviceLabel: parts.serviceLabel } : {}), ...(parts.defaultMetrics !== undefined ? { defaultMetrics: parts.defaultMetrics } : {}), ...(logger ? { logger } : {}) });
  // Stopped in the reverse order: the API first (no new pushes), then the encoder, then what they use.
  const rollup = parts.rollup ? rollupService(ctx) : undefined;
  const encoder = parts.encoder ? encoderWorkers(ctx, parts.encoderBurst ? { burst: parts.encoderBurst } : {}) : undefined;
  const health = encoder && !parts.api && (parts.encoderMetricsServer ?? true) ? encoderHealthServer(ctx, encoder) : undefined;
  const api = parts.api ? apiServer(ctx, { ...(parts.extraMetrics ? { extraMetrics: parts.extraMetrics } : {}), encoderInProcess: parts.encoder }) : undefined;
  const components = [redisConnections(ctx), health, rollup, encoder, api, api && apiUpkeep(api)].filter((c): c is Component => c !== undefined);
  const lifecycle = new Lifecycle(components, { logger: ctx.logger });
  await lifecycle.start();
  if (health) logEncoderStarted(ctx, health);
  return {
    logger: ctx.logger,
    store: ctx.store,
    redisName: ctx.redisName,
    registry: ctx.registry,
    ...(api?.api ? { api: api.api } : {}),
    ...(encoder?.encoder ? { encoder: encoder.encoder } : {}),
    ...(rollup?.service ? { rollup: rollup.service } : {}),
    ...(health?.server ? { metricsServer: health.server } : {}),
    close: async () => {
      await lifecycle.stop(SHUTDOWN_GRACE_MS);
    },
  };
}

/**
 * Checks QUEUE_SHARDS against the layout recorded in Redis (see ensureShardLayout). A refused
 * change stops the start. With the default layout (one shard, one Redis) an unreachable Redis
 * only skips the check, as a push then answers 503 anyway; a sharded layout waits for Redis.
 */
async function checkLayout(conn: RedisClient, env: Env, layouts: readonly ShardLayout[], logger: Logger): Promise<void> {
  const legacy = layouts.length === 1 && layouts[0]?.queuePrefix === LEGACY_QUEUE_PREFIX;
  try {
    await waitReady(conn, legacy ? 2000 : 30_000);
    const r = await withTimeout(ensureShardLayout(conn, env.QUEUE_NAME, layouts), 10_000, 'shard layout check');
    if (r.changedFrom !== undefined) logger.warn({ from: r.changedFrom, to: layouts.length }, 'QUEUE_SHARDS changed on a drained queue: new shard layout recorded');
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    if (legacy && (err instanceof RedisUnavailable || err instanceof TimeoutError)) {
      logger.warn({ err: (err as Error).message }, 'Redis not reachable at start: the QUEUE_SHARDS layout check is skipped');
      return;
    }
    throw new ConfigError(`could not check the queue shard layout in Redis: ${(err as Error).message}`);
  }
}
