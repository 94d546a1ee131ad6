import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { Redis } from 'ioredis';
import { ConfigError } from '../errors.js';
import type { Logger } from '../logger.js';
import { pollUntil } from '../poll.js';
import { ioredisAddress, unixSocketUrl } from './url.js';

export interface RedisHandle {
  url: string;
  /** True when this process started the server (and stops it on exit). */
  owned: boolean;
  stop(): Promise<void>;
}

/**
 * How `npm start`'s private Redis keeps its data: AOF on and fsynced every second, no RDB
 * snapshots, no eviction. Redis rewrites the AOF (a fork that writes the whole dataset out) once
 * it has grown to `auto-aof-rewrite-min-size` and doubled since the last rewrite. Redis' default
 * minimum, 64 MB, meant one or two rewrites every 12 s at 1,000-event saturation, each costing the
 * backlog's size in CPU on the same cores; at 256 MB that came to about one a minute
 * (docs/decisions/0018-private-redis-settings.md), for up to 256 MB more AOF on disk.
 */
export const PRIVATE_REDIS_ARGS: readonly string[] = [
  '--appendonly',
  'yes',
  '--appendfsync',
  'everysec',
  '--auto-aof-rewrite-min-size',
  '256mb',
  '--save',
  '',
  '--maxmemory-policy',
  'noeviction',
];

/** Resolves when a Redis answers PING at `url` within `ms`. */
export async function redisAnswers(url: string, ms: number): Promise<boolean> {
  const probe = new Redis(ioredisAddress(url), {
    lazyConnect: true,
    connectTimeout: ms,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableOfflineQueue: false,
  });
  probe.on('error', () => undefined);
  try {
    await probe.connect();
    return (await probe.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

/**
 * Longest socket path this module gives `redis-server` (Linux allows 107 bytes, macOS 103): a
 * deeper DATA_DIR keeps the private server on TCP only.
 */
const MAX_SOCKET_PATH = 100;

/**
 * The embedded default: with no REDIS_URL, use a Redis on 127.0.0.1:6379, or start a private
 * `redis-server` there (AOF on, data under DATA_DIR/redis, noeviction) so a 200 survives restarts.
 * This process talks to the server it started through a unix socket in that folder (mode 0700):
 * about 2% less CPU per push than loopback TCP at a steady load
 * (docs/decisions/0018-private-redis-settings.md). The TCP port stays open for redis-cli and for
 * a second process on the same default.
 */
export async function ensureRedis(opts: {
  redisUrl?: string;
  dataDir: string;
  logger: Logger;
  port?: number;
}): Promise<RedisHandle> {
  if (opts.redisUrl) return { url: opts.redisUrl, owned: false, stop: async () => undefined };
  const port = opts.port ?? 6379;
  const url = `redis://127.0.0.1:${port}`;
  if (await redisAnswers(url, 1000)) {
    opts.logger.info({ redis: url }, 'using the Redis already running on the default port');
    return { url, owned: false, stop: async () => undefined };
  }
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    throw new ConfigError(
      `REDIS_URL is not set, nothing answers on ${url}, and no redis-server is installed. ` +
        'Install one (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis) or set REDIS_URL=redis://host:port.',
    );
  }
  const dir = resolve(opts.dataDir, 'redis');
  mkdirSync(dir, { recursive: true });
  const socket = resolve(dir, 'redis.sock');
  const socketArgs =
    Buffer.byteLength(socket) <= MAX_SOCKET_PATH ? ['--unixsocket', socket, '--unixsocketperm', '700'] : [];
  let server: RedisServerProcess;
  try {
    server = await spawnRedisServer({
      port,
      dir,
      args: [...PRIVATE_REDIS_ARGS, '--logfile', 'redis.log', ...socketArgs],
    });
  } catch {
    throw new ConfigError(`started redis-server on ${url} but it did not answer; see ${dir}/redis.log`);
  }
  const socketUrl = unixSocketUrl(socket);
  const via = socketArgs.length > 0 && (await redisAnswers(socketUrl, 1000)) ? socketUrl : url;
  opts.logger.info(
    { redis: via === url ? url : `unix:${socket}`, port, dir, pid: server.child.pid },
    'started a private redis-server (AOF on)',
  );
  return { url: via, owned: true, stop: () => server.stop() };
}

/** A `redis-server` child of this process. */
export interface RedisServerProcess {
  url: string;
  port: number;
  child: ChildProcess;
  /** Sends `signal` (default SIGTERM), SIGKILL after 5 s, resolves on exit. Idempotent. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * The one way this project starts a `redis-server` (the embedded default above, the tests, the
 * bench and the chaos run): on 127.0.0.1:`port` with its files in `dir` plus `args`, resolving
 * once it answers PING (at most `ms`); throws (after killing it) when it exits or stays silent.
 * `configFile` is read first (a sentinel needs one it can rewrite: pass `--sentinel` in `args`);
 * `password`: the PING authenticates (a server with `requirepass`).
 */
export async function spawnRedisServer(opts: {
  port: number;
  dir: string;
  args?: readonly string[];
  ms?: number;
  configFile?: string;
  password?: string;
}): Promise<RedisServerProcess> {
  const url = `redis://127.0.0.1:${opts.port}`;
  const child: ChildProcess = spawn(
    'redis-server',
    [
      ...(opts.configFile !== undefined ? [opts.configFile] : []),
      '--port',
      String(opts.port),
      '--bind',
      '127.0.0.1',
      '--dir',
      opts.dir,
      '--daemonize',
      'no',
      ...(opts.args ?? []),
    ],
    { stdio: 'ignore' },
  );
  let exited = false;
  child.once('exit', () => (exited = true));
  child.once('error', () => (exited = true));
  const probeUrl =
    opts.password === undefined ? url : `redis://:${encodeURIComponent(opts.password)}@127.0.0.1:${opts.port}`;
  try {
    await pollUntil(() => redisAnswers(probeUrl, 500), {
      ms: opts.ms ?? 10_000,
      intervalMs: 50,
      what: `redis-server on ${url}`,
      giveUp: () => (exited ? 'it exited at start (is it installed? apt-get install redis-server)' : undefined),
    });
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  let stopping: Promise<void> | undefined;
  return {
    url,
    port: opts.port,
    child,
    stop(signal = 'SIGTERM') {
      stopping ??= new Promise<void>((done) => {
        if (exited) return done();
        const t = setTimeout(() => child.kill('SIGKILL'), 5000);
        child.once('exit', () => {
          clearTimeout(t);
          done();
        });
        child.kill(signal);
      });
      return stopping;
    },
  };
}
