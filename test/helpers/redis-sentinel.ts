import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { pollUntil } from '../../shared/poll.js';
import { type RedisServerProcess, spawnRedisServer } from '../../shared/redis/private-server.js';
import { freePort } from './redis-server.js';

export interface SentinelNode {
  port: number;
  dir: string;
  server: RedisServerProcess;
}

export interface RedisSentinelGroup {
  /** The master group name (`sentinel monitor <name>`): REDIS_SENTINEL_NAME. */
  name: string;
  /** `127.0.0.1:port,…` of the sentinels: REDIS_SENTINELS. */
  sentinels: string;
  /** The data nodes: the first master, then the replicas. */
  data: SentinelNode[];
  sentinelNodes: SentinelNode[];
  /** The Redis password (`requirepass` of the data nodes), when one was asked for. */
  password?: string;
  /** The sentinels' own `requirepass`, when one was asked for. */
  sentinelPassword?: string;
  /** The master's port as the sentinels name it now (the first sentinel that answers). */
  masterPort(): Promise<number>;
  /** Replicas in sync (`state=online`) with the data node on `port`, as it says. */
  replicasOnline(port: number): Promise<number>;
  /** `kill -9` of one data node. */
  kill(port: number): Promise<void>;
  /** Stops every process and removes the folder. Idempotent. */
  stop(): Promise<void>;
}

/** A short-lived connection to 127.0.0.1:`port` (no retries), closed after `fn`. */
async function withConnection<T>(port: number, password: string | undefined, fn: (c: Redis) => Promise<T>): Promise<T> {
  const c = new Redis(port, '127.0.0.1', {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1000,
    commandTimeout: 2000,
    ...(password !== undefined ? { password } : {}),
  });
  c.on('error', () => undefined);
  try {
    await c.connect();
    return await fn(c);
  } finally {
    c.disconnect();
  }
}

/** `SENTINEL MASTER <name>` of one sentinel as a field → value record. */
async function sentinelMaster(
  port: number,
  password: string | undefined,
  name: string,
): Promise<Record<string, string>> {
  const flat = (await withConnection(port, password, (c) => c.call('SENTINEL', 'MASTER', name))) as string[];
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i] as string] = flat[i + 1] as string;
  return out;
}

/**
 * Starts a Redis Sentinel group on free loopback ports: a master, `replicas` replicas
 * (`--replicaof`), and `sentinels` sentinels (`redis-server <conf> --sentinel`, the conf written
 * to a temporary folder) monitoring it with a quorum of 2, `down-after-milliseconds`
 * `downAfterMs` and `failover-timeout` `failoverTimeoutMs`. Every data node has AOF on. With
 * `password` the data nodes have `requirepass`/`masterauth` and the sentinels `auth-pass`; with
 * `sentinelPassword` the sentinels have `requirepass` (and `sentinel sentinel-pass` to talk to
 * each other). Resolves once every replica is in sync and every sentinel knows the others and the
 * replicas (bounded); throws after stopping what it started.
 */
export async function startRedisSentinel(
  opts: {
    name?: string;
    replicas?: number;
    sentinels?: number;
    downAfterMs?: number;
    failoverTimeoutMs?: number;
    password?: string;
    sentinelPassword?: string;
  } = {},
): Promise<RedisSentinelGroup> {
  const name = opts.name ?? 'mymaster';
  const replicas = opts.replicas ?? 2;
  const sentinelCount = opts.sentinels ?? 3;
  const { password, sentinelPassword } = opts;
  const root = mkdtempSync(join(tmpdir(), 'ingest-sentinel-'));
  const data: SentinelNode[] = [];
  const sentinelNodes: SentinelNode[] = [];
  const auth = password !== undefined ? ['--requirepass', password, '--masterauth', password] : [];
  const dataArgs = ['--appendonly', 'yes', '--appendfsync', 'everysec', '--save', '', ...auth];
  const stop = async (): Promise<void> => {
    await Promise.all([...sentinelNodes, ...data].map((n) => n.server.stop('SIGKILL').catch(() => undefined)));
    rmSync(root, { recursive: true, force: true });
  };
  const nodeDir = (port: number): string => {
    const dir = join(root, String(port));
    mkdirSync(dir);
    return dir;
  };
  try {
    const masterPort = await freePort();
    const masterDir = nodeDir(masterPort);
    data.push({
      port: masterPort,
      dir: masterDir,
      server: await spawnRedisServer({ port: masterPort, dir: masterDir, args: dataArgs, password }),
    });
    for (let i = 0; i < replicas; i++) {
      const port = await freePort();
      const dir = nodeDir(port);
      const args = [...dataArgs, '--replicaof', '127.0.0.1', String(masterPort)];
      data.push({ port, dir, server: await spawnRedisServer({ port, dir, args, password }) });
    }
    // Every replica has finished its first sync (else WAIT would count fewer of them).
    await pollUntil(
      async () => {
        const info = await withConnection(masterPort, password, (c) => c.info('replication'));
        return (info.match(/state=online/g) ?? []).length >= replicas;
      },
      { ms: 30_000, intervalMs: 100, what: `${replicas} replicas in sync with the master` },
    );
    for (let i = 0; i < sentinelCount; i++) {
      const port = await freePort();
      const dir = nodeDir(port);
      const conf = join(dir, 'sentinel.conf');
      writeFileSync(
        conf,
        [
          'sentinel resolve-hostnames no',
          'sentinel announce-ip 127.0.0.1',
          `sentinel announce-port ${port}`,
          `sentinel monitor ${name} 127.0.0.1 ${masterPort} 2`,
          `sentinel down-after-milliseconds ${name} ${opts.downAfterMs ?? 1000}`,
          `sentinel failover-timeout ${name} ${opts.failoverTimeoutMs ?? 5000}`,
          `sentinel parallel-syncs ${name} 1`,
          ...(password !== undefined ? [`sentinel auth-pass ${name} ${password}`] : []),
          ...(sentinelPassword !== undefined
            ? [`requirepass ${sentinelPassword}`, `sentinel sentinel-pass ${sentinelPassword}`]
            : []),
          '',
        ].join('\n'),
      );
      sentinelNodes.push({
        port,
        dir,
        server: await spawnRedisServer({
          port,
          dir,
          configFile: conf,
          args: ['--sentinel'],
          password: sentinelPassword,
        }),
      });
    }
    // Each sentinel has found the others (hello messages) and the replicas.
    await pollUntil(
      async () => {
        for (const s of sentinelNodes) {
          const m = await sentinelMaster(s.port, sentinelPassword, name);
          if (Number(m['num-other-sentinels']) < sentinelCount - 1 || Number(m['num-slaves']) < replicas) return false;
        }
        return true;
      },
      { ms: 30_000, intervalMs: 200, what: 'the sentinels to find each other and the replicas' },
    );
  } catch (err) {
    await stop();
    throw err;
  }
  let stopping: Promise<void> | undefined;
  return {
    name,
    sentinels: sentinelNodes.map((s) => `127.0.0.1:${s.port}`).join(','),
    data,
    sentinelNodes,
    ...(password !== undefined ? { password } : {}),
    ...(sentinelPassword !== undefined ? { sentinelPassword } : {}),
    async masterPort() {
      for (const s of sentinelNodes) {
        try {
          const addr = (await withConnection(s.port, sentinelPassword, (c) =>
            c.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name),
          )) as [string, string] | null;
          if (addr) return Number(addr[1]);
        } catch {
          /* that sentinel is away: ask the next one */
        }
      }
      throw new Error(`no sentinel names a master for ${name}`);
    },
    async replicasOnline(port) {
      const info = await withConnection(port, password, (c) => c.info('replication'));
      return (info.match(/state=online/g) ?? []).length;
    },
    async kill(port) {
      const node = data.find((n) => n.port === port);
      if (node) await node.server.stop('SIGKILL');
    },
    stop() {
      return (stopping ??= stop());
    },
  };
}
