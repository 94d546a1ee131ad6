import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import { ConfigError, RedisUnavailable, TimeoutError } from '../errors.js';
import { type Logger, type ThrottledWarn, throttledWarn } from '../logger.js';
import { ioredisAddress, unixSocketOf } from './url.js';

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

/**
 * Redis connections by use:
 * - `producer`: API pushes. No offline queue and short timeouts, so a push fails fast with
 *   503 while Redis is down instead of hanging.
 * - `worker`: BullMQ workers (blocking commands; BullMQ requires maxRetriesPerRequest null).
 * Both reconnect on their own with a capped backoff. With a `logger`, connection errors are
 * logged (`redis connection error`, host:port, error code, `count`) at most every
 * CONNECTION_ERROR_LOG_MS per Redis, and `redis reachable again` when it is back.
 */
export function createRedis(
  url: string,
  role: 'producer' | 'worker',
  extra: RedisOptions = {},
  logger?: Logger,
): Redis {
  const client = new Redis(ioredisAddress(url), { ...baseOptions, ...roleOptions(role), ...extra });
  return watchConnection(client, redisAddress(client), role, logger);
}

/**
 * Without a listener ioredis would print each retry to stderr. With a logger, connection errors
 * are logged at most every few seconds per Redis (all connections to it together).
 */
function watchConnection(client: Redis, where: string, role: string, logger: Logger | undefined): Redis {
  if (!logger) {
    client.on('error', () => undefined);
    return client;
  }
  const warn = connectionWarning(logger, where);
  client.on('error', (err: NodeJS.ErrnoException) => warn({ redis: where, role, code: err.code ?? err.name }));
  client.on('ready', () => warn.flush('redis reachable again', { redis: where }));
  return client;
}

const baseOptions: RedisOptions = {
  lazyConnect: false,
  connectTimeout: 2000,
  retryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
};

function roleOptions(role: 'producer' | 'worker'): RedisOptions {
  return role === 'producer'
    ? { enableOfflineQueue: false, maxRetriesPerRequest: 1, commandTimeout: 2000, autoResendUnfulfilledCommands: false }
    : { enableOfflineQueue: true, maxRetriesPerRequest: null };
}

/** One Redis or a Redis Cluster: what every module that talks to Redis is handed. */
export type RedisClient = Redis | Cluster;

export interface HostPort {
  host: string;
  port: number;
}

/**
 * Where Redis is: one server (`url`), the master of a Redis Sentinel group (`sentinels`, `name`),
 * or a Redis Cluster reached through seed nodes. `password` (REDIS_PASSWORD) and `tls`
 * (REDIS_TLS) apply to every mode; a password in REDIS_URL wins over `password`.
 */
export type RedisTarget = (
  | { kind: 'single'; url: string }
  | { kind: 'sentinel'; sentinels: HostPort[]; name: string; sentinelPassword?: string }
  | { kind: 'cluster'; nodes: HostPort[] }
) & { password?: string; tls?: boolean };

/**
 * The target an environment names: REDIS_CLUSTER_NODES, else REDIS_SENTINELS (with
 * REDIS_SENTINEL_NAME), else REDIS_URL (config validation allows only one of them).
 */
export function redisTarget(env: {
  REDIS_URL?: string;
  REDIS_CLUSTER_NODES?: HostPort[];
  REDIS_SENTINELS?: HostPort[];
  REDIS_SENTINEL_NAME?: string;
  REDIS_SENTINEL_PASSWORD?: string;
  REDIS_PASSWORD?: string;
  REDIS_TLS?: boolean;
}): RedisTarget {
  const common = {
    ...(env.REDIS_PASSWORD ? { password: env.REDIS_PASSWORD } : {}),
    ...(env.REDIS_TLS ? { tls: true } : {}),
  };
  if (env.REDIS_CLUSTER_NODES && env.REDIS_CLUSTER_NODES.length > 0)
    return { kind: 'cluster', nodes: env.REDIS_CLUSTER_NODES, ...common };
  if (env.REDIS_SENTINELS && env.REDIS_SENTINELS.length > 0) {
    if (!env.REDIS_SENTINEL_NAME)
      throw new ConfigError('environment variable REDIS_SENTINEL_NAME: is required with REDIS_SENTINELS');
    return {
      kind: 'sentinel',
      sentinels: env.REDIS_SENTINELS,
      name: env.REDIS_SENTINEL_NAME,
      ...(env.REDIS_SENTINEL_PASSWORD ? { sentinelPassword: env.REDIS_SENTINEL_PASSWORD } : {}),
      ...common,
    };
  }
  return { kind: 'single', url: env.REDIS_URL ?? DEFAULT_REDIS_URL, ...common };
}

const hostPorts = (nodes: readonly HostPort[]): string => nodes.map((n) => `${n.host}:${n.port}`).join(',');

/**
 * What logs and /readyz name a target by: the URL's host:port, a unix socket's path, `sentinel
 * <master name>`, or `cluster` and the seed nodes (never a password).
 */
export function describeTarget(t: RedisTarget): string {
  if (t.kind === 'cluster') return `cluster ${hostPorts(t.nodes)}`;
  if (t.kind === 'sentinel') return `sentinel ${t.name}`;
  const socket = unixSocketOf(t.url);
  if (socket !== undefined) return `unix:${socket.split('?')[0]}`;
  try {
    const u = new URL(t.url);
    return `${u.hostname}:${u.port || 6379}`;
  } catch {
    return 'redis';
  }
}

/** Longest wait between two reconnects of a Sentinel-mode connection. */
export const SENTINEL_RECONNECT_MAX_MS = 500;

/**
 * The ioredis options of a Sentinel target (see createRedisClient): the master of group `name`,
 * asked from the sentinels in turn; `role: 'master'` makes ioredis check the server's role after
 * each connect (a demoted master is left for the next one the sentinels name), and a READONLY
 * reply (a master demoted while this connection stayed up) makes it reconnect, to the master the
 * sentinels name then; the command itself fails (Redis refused it, so it did not run).
 * ioredis' `failoverDetector` is left off: when its `+switch-master` message arrives while the
 * connection is asking a sentinel for the master (a reconnect after the master died), ioredis 6
 * ends the connection for good (SentinelConnector: "Connection is closed", status `end`); the
 * failover test hit that, and the API answered 503 until it was restarted.
 */
export function sentinelOptions(t: Extract<RedisTarget, { kind: 'sentinel' }>): RedisOptions {
  return {
    sentinels: t.sentinels.map((s) => ({ host: s.host, port: s.port })),
    name: t.name,
    role: 'master',
    reconnectOnError: (err) => err.message.startsWith('READONLY'),
    // All sentinels unreachable: the same capped backoff as a connection to Redis.
    sentinelRetryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
    sentinelCommandTimeout: 2000,
    // A lost master is what a failover looks like: ask the sentinels again soon (each try is one
    // command to a sentinel), instead of backing off to 2 s like a connection to one Redis.
    retryStrategy: (times) => Math.min(100 * times, SENTINEL_RECONNECT_MAX_MS),
    ...(t.password !== undefined ? { password: t.password } : {}),
    ...(t.sentinelPassword !== undefined ? { sentinelPassword: t.sentinelPassword } : {}),
    ...(t.tls ? { tls: {}, enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
  };
}

/** Options every mode adds from REDIS_PASSWORD and REDIS_TLS (a password in REDIS_URL wins: ioredis keeps the URL's). */
function authOptions(t: RedisTarget): RedisOptions {
  return { ...(t.password !== undefined ? { password: t.password } : {}), ...(t.tls ? { tls: {} } : {}) };
}

/**
 * A connection to `target` for `role` (see createRedis). Every connection of the product and of
 * its BullMQ queues and workers is made here (BullMQ's blocking connections are duplicates of
 * these, with the same options). On a Cluster the per-node connections get the same role
 * options; commands follow MOVED/ASK redirections and, after a failover, the slot map is
 * refreshed and the command retried on the promoted replica. With Sentinel the connection goes
 * to the master the sentinels name, and after a failover reconnects to the promoted replica.
 */
export function createRedisClient(target: RedisTarget, role: 'producer' | 'worker', logger?: Logger): RedisClient {
  if (target.kind === 'single') return createRedis(target.url, role, authOptions(target), logger);
  if (target.kind === 'sentinel') {
    const client = new Redis({ ...baseOptions, ...roleOptions(role), ...sentinelOptions(target) });
    return watchConnection(client, describeTarget(target), role, logger);
  }
  const byRole = roleOptions(role);
  const options: ClusterOptions = {
    // Every read goes to the master: the ledger's reads decide what the list may show.
    scaleReads: 'master',
    enableOfflineQueue: byRole.enableOfflineQueue ?? true,
    // Reconnecting to the whole cluster: same capped backoff as one Redis.
    clusterRetryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
    retryDelayOnFailover: 200,
    retryDelayOnClusterDown: 200,
    retryDelayOnTryAgain: 100,
    slotsRefreshTimeout: 2000,
    redisOptions: { ...baseOptions, ...byRole, ...authOptions(target) },
  };
  const client = new Cluster(target.nodes, options);
  const where = describeTarget(target);
  clusterNames.set(client, where);
  if (!logger) {
    client.on('error', () => undefined);
    client.on('node error', () => undefined);
    return client;
  }
  const warn = connectionWarning(logger, where);
  const onError = (err: NodeJS.ErrnoException): void => warn({ redis: where, role, code: err.code ?? err.name });
  client.on('error', onError);
  client.on('node error', onError);
  client.on('ready', () => warn.flush('redis reachable again', { redis: where }));
  return client;
}

const clusterNames = new WeakMap<Cluster, string>();

/** One throttle per logger and Redis address, shared by every connection to it. */
const warnings = new WeakMap<Logger, Map<string, ThrottledWarn>>();
/** Connection errors to one Redis are logged at most this often (with a count). */
export const CONNECTION_ERROR_LOG_MS = 5000;

function connectionWarning(logger: Logger, where: string): ThrottledWarn {
  let byAddress = warnings.get(logger);
  if (!byAddress) warnings.set(logger, (byAddress = new Map()));
  let warn = byAddress.get(where);
  if (!warn) byAddress.set(where, (warn = throttledWarn(logger, 'redis connection error', CONNECTION_ERROR_LOG_MS)));
  return warn;
}

/** `host:port` of a connection (a unix socket: its path; Sentinel: `sentinel <master name>`); what /readyz and logs name, never a password. */
export function redisAddress(client: RedisClient): string {
  if (client instanceof Cluster) return clusterNames.get(client) ?? 'cluster';
  const o = client.options;
  if (o.sentinels && o.sentinels.length > 0) return `sentinel ${o.name ?? 'mymaster'}`;
  return o.path ? o.path : `${o.host ?? '127.0.0.1'}:${o.port ?? 6379}`;
}

/**
 * What a failed Redis call's error says, read once from the driver's error shapes (ioredis 6,
 * redis-errors, and BullMQ, which rethrows them): `unavailable` when Redis could not be reached
 * or could not serve the command right now, `neverRan` when the command certainly did not run.
 * This is the only place that reads a driver error's text: ioredis makes most of these as plain
 * `Error`s (see its Redis.js, cluster/index.js, Command.js), so for them the text is all there is.
 */
function classify(err: unknown): { unavailable: boolean; neverRan: boolean } {
  if (err instanceof RedisUnavailable) return { unavailable: true, neverRan: err.neverRan };
  // Our own timeout says nothing about Redis (a caller decides what it means), whatever it names.
  if (!(err instanceof Error) || err instanceof TimeoutError) return { unavailable: false, neverRan: false };
  const code = (err as NodeJS.ErrnoException).code;
  if (typeof code === 'string' && NOT_SENT_CODES.has(code)) return { unavailable: true, neverRan: true };
  // A Redis refusal names its reason first; the same words elsewhere in a message prove nothing.
  const refused = err.name === 'ReplyError' && REFUSED_REPLY.test(err.message);
  const unavailable =
    err.name === 'MaxRetriesPerRequestError' ||
    (typeof code === 'string' && UNREACHABLE_CODES.has(code)) ||
    UNAVAILABLE_TEXT.test(err.message);
  return { unavailable, neverRan: refused || NOT_SENT_TEXT.test(err.message) };
}

/** Socket errors: the connection was never made, so nothing was sent. */
const NOT_SENT_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
/** Socket errors after a command may have been written (reset, timeout, broken pipe). */
const UNREACHABLE_CODES = new Set(['ECONNRESET', 'ETIMEDOUT', 'EPIPE']);
/**
 * ioredis' own outage errors (a pipeline or transaction cut by a closing connection included),
 * Redis Cluster's mid-failover replies and ioredis' cluster errors.
 */
const UNAVAILABLE_TEXT =
  /Stream isn't writeable|Connection is closed|Command aborted due to connection close|Command timed out|connect ETIMEDOUT|Reached the max retries|CLUSTERDOWN|TRYAGAIN|Cluster isn't ready|Failed to refresh slots cache|None of startup nodes is available|All sentinels are unreachable/i;
/** ioredis refusing to send: offline queue off and no connection, or no cluster slot map. */
const NOT_SENT_TEXT =
  /^(Stream isn't writeable|Cluster isn't ready|None of startup nodes is available|Failed to refresh slots cache)/;
/** Replies with which Redis refuses a command before running it. */
const REFUSED_REPLY =
  /^(OOM|READONLY|BUSY|LOADING|CLUSTERDOWN|TRYAGAIN|MASTERDOWN|NOREPLICAS|MISCONF|NOPERM|NOAUTH|WRONGPASS)\b/;

/**
 * `err` as a `RedisUnavailable` (the driver's error as `cause`, its message kept) when it says
 * Redis could not be reached: ioredis' connection and timeout errors, BullMQ's rethrowing of
 * them, a Redis Cluster mid-failover. Any other error (a script error, a refusal such as OOM, a
 * `TimeoutError` of our own) comes back unchanged, as does a `RedisUnavailable`. Adapters call it
 * where a driver error leaves them; callers then test `instanceof RedisUnavailable`.
 */
export function asRedisUnavailable(err: unknown): unknown {
  if (err instanceof RedisUnavailable) return err;
  const c = classify(err);
  return c.unavailable ? new RedisUnavailable((err as Error).message, { cause: err, neverRan: c.neverRan }) : err;
}

/** Settles like `p`, a driver error that says Redis is unreachable rethrown as a `RedisUnavailable`. */
export async function redisCall<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (err) {
    throw asRedisUnavailable(err);
  }
}

/**
 * Whether `err` says Redis could not be reached (as opposed to a command Redis refused): a
 * `RedisUnavailable`, or a driver error `asRedisUnavailable` would make one of.
 */
export function isRedisUnavailable(err: unknown): boolean {
  return classify(err).unavailable;
}

/**
 * Whether a command that failed with `err` certainly did not run: it never left this process (no
 * connection, and ioredis' offline queue is off) or Redis refused it before running it (out of
 * memory, read-only replica, a cluster slot not served, busy, loading, refused auth). A timeout or
 * a connection lost after the command was written says nothing: Redis may run it, or have run
 * it, without the answer arriving. For a write whose effect must be undone on failure, only a
 * `true` here makes the undo safe. A `RedisUnavailable` answers with its `neverRan`.
 */
export function commandNeverRan(err: unknown): boolean {
  return classify(err).neverRan;
}

/** Resolves when `client` is ready, rejects with a `RedisUnavailable` after `ms`. */
export async function waitReady(client: RedisClient, ms: number): Promise<void> {
  if (client.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new RedisUnavailable(`Redis not ready after ${ms} ms`, { neverRan: true }));
    }, ms);
    const onReady = (): void => {
      cleanup();
      resolve();
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      client.off('ready', onReady);
    };
    client.on('ready', onReady);
  });
}

/**
 * Closes `client` for a stop: QUIT when it is connected, waiting at most `ms` for the answer,
 * else (not connected, or no answer in time) drops the connection. A connection that is not
 * ready would never answer a QUIT: commands queue while it is offline.
 */
export async function closeRedis(client: RedisClient, ms: number): Promise<void> {
  if (client.status !== 'ready') return client.disconnect();
  let timer: NodeJS.Timeout | undefined;
  const quit = client.quit().then(
    () => true,
    () => false,
  );
  const answered = await Promise.race([
    quit,
    new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
  ]);
  clearTimeout(timer);
  if (!answered) client.disconnect();
}
