/**
 * What every entry point of the product shares to run its components: the process's context
 * (environment, config, store, metrics, logger, Redis connections) and the `redis` component that
 * opens the connections first and closes them last. The services' component factories
 * (services/<service>/components.ts) take a StackContext; the entry points compose them.
 */
import type { Registry } from 'prom-client';
import { ConfigError, type Env, type SyncConfig, loadSyncConfig, loadTokens } from './config.js';
import { RedisUnavailable, TimeoutError } from './errors.js';
import { type Logger, createLogger } from './logger.js';
import { createRegistry } from './metrics.js';
import type { Component } from './lifecycle.js';
import {
  type RedisClient,
  type RedisTarget,
  closeRedis,
  createRedisClient,
  describeTarget,
  redisTarget,
  waitReady,
} from './redis/connection.js';
import { LEGACY_QUEUE_PREFIX, type ShardLayout, shardLayouts } from './redis/shards.js';
import { ensureShardLayout } from './ledger/shard-set.js';
import { withTimeout } from './timeout.js';
import { applyHeapGrowth } from './runtime.js';
import { storeFromEnv } from './store/from-env.js';
import { redisSlice, storeSlice } from './config-slices.js';
import type { ObjectStore } from './store/types.js';

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
  constructor(
    env: Env,
    o: { name: string; serviceLabel?: string; defaultMetrics?: boolean | { prefix: string }; logger?: Logger },
  ) {
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

  /** Where Redis is, as logs name it: host:port, `unix:<socket>`, `sentinel <master name>` or `cluster <seed nodes>` (never a password). */
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
    for (const name of this.wanted)
      if (!this.conns.has(name))
        this.conns.set(name, createRedisClient(this.target, name === 'producer' ? 'producer' : 'worker', this.logger));
  }

  /** The connection `name` if it is open. */
  opened(name: ConnectionName): RedisClient | undefined {
    return this.conns.get(name);
  }

  connection(name: ConnectionName): RedisClient {
    const c = this.conns.get(name);
    if (!c)
      throw new Error(
        `Redis connection "${name}" is not open: list the redis component before the components that use it`,
      );
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
        await waitReady(producer, 5000).catch(() =>
          ctx.logger.warn({ redis: ctx.redisName }, 'Redis not reachable yet: pushes answer 503 until it is'),
        );
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
    if (aof !== 'yes')
      logger.warn(
        { redis: redisName },
        'Redis runs without AOF (appendonly no): acknowledged batches still queued are lost if Redis restarts',
      );
  } catch {
    /* CONFIG may be disabled (managed Redis); nothing to warn about then */
  }
}

/**
 * Checks QUEUE_SHARDS against the layout recorded in Redis (see ensureShardLayout). A refused
 * change stops the start. With the default layout (one shard, one Redis) an unreachable Redis
 * only skips the check, as a push then answers 503 anyway; a sharded layout waits for Redis.
 */
async function checkLayout(
  conn: RedisClient,
  env: Env,
  layouts: readonly ShardLayout[],
  logger: Logger,
): Promise<void> {
  const legacy = layouts.length === 1 && layouts[0]?.queuePrefix === LEGACY_QUEUE_PREFIX;
  try {
    await waitReady(conn, legacy ? 2000 : 30_000);
    const r = await withTimeout(ensureShardLayout(conn, env.QUEUE_NAME, layouts), 10_000, 'shard layout check');
    if (r.changedFrom !== undefined)
      logger.warn(
        { from: r.changedFrom, to: layouts.length },
        'QUEUE_SHARDS changed on a drained queue: new shard layout recorded',
      );
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    if (legacy && (err instanceof RedisUnavailable || err instanceof TimeoutError)) {
      logger.warn(
        { err: (err as Error).message },
        'Redis not reachable at start: the QUEUE_SHARDS layout check is skipped',
      );
      return;
    }
    throw new ConfigError(`could not check the queue shard layout in Redis: ${(err as Error).message}`);
  }
}
