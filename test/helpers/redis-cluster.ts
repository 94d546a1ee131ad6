import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { pollUntil } from '../../shared/poll.js';
import { type RedisServerProcess, spawnRedisServer } from '../../shared/redis/private-server.js';
import { freePort } from './redis-server.js';

export interface ClusterNode {
  port: number;
  dir: string;
  server: RedisServerProcess;
}

export interface RedisCluster {
  /** `127.0.0.1:port,…` of every node: the value of REDIS_CLUSTER_NODES. */
  nodes: string;
  all: ClusterNode[];
  /** Ports of the nodes that are masters now (asked from the cluster, so it follows failovers). */
  masterPorts(): Promise<number[]>;
  /** `kill -9` of one node. */
  kill(port: number): Promise<void>;
  /** Starts a killed node again on its port and folder (it rejoins, as a replica after a failover). */
  restart(port: number): Promise<void>;
  /** Stops every node and removes their folders. Idempotent. */
  stop(): Promise<void>;
}

/** `CLUSTER NODES` of one node, parsed into its view of masters: port → slot ranges and flags. */
export async function clusterView(
  port: number,
): Promise<{ port: number; id: string; master: boolean; failed: boolean; slots: string[] }[]> {
  const c = new Redis(port, '127.0.0.1', {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1000,
  });
  c.on('error', () => undefined);
  try {
    await c.connect();
    const text = (await c.call('CLUSTER', 'NODES')) as string;
    return text
      .trim()
      .split('\n')
      .map((line) => {
        const f = line.split(' ');
        const addr = f[1] ?? '';
        return {
          id: f[0] ?? '',
          port: Number(addr.split('@')[0]?.split(':')[1]),
          master: (f[2] ?? '').includes('master'),
          failed: /fail/.test(f[2] ?? ''),
          slots: f.slice(8),
        };
      });
  } finally {
    c.disconnect();
  }
}

/**
 * Starts a real Redis Cluster on free loopback ports: `masters` masters with `replicas` replicas
 * each (Debian's redis-server with `--cluster-enabled yes`, joined by `redis-cli --cluster
 * create`), and waits until every slot is served. A short `cluster-node-timeout` keeps failover
 * tests short. Throws (after stopping what it started) when the cluster does not form.
 */
export async function startRedisCluster(
  opts: { masters?: number; replicas?: number; nodeTimeoutMs?: number; args?: readonly string[] } = {},
): Promise<RedisCluster> {
  const masters = opts.masters ?? 3;
  const replicas = opts.replicas ?? 1;
  const root = mkdtempSync(join(tmpdir(), 'ingest-cluster-'));
  const all: ClusterNode[] = [];
  const nodeArgs = [
    '--cluster-enabled',
    'yes',
    '--cluster-config-file',
    'nodes.conf',
    '--cluster-node-timeout',
    String(opts.nodeTimeoutMs ?? 2000),
    '--appendonly',
    'no',
    '--save',
    '',
    ...(opts.args ?? []),
  ];
  const stop = async (): Promise<void> => {
    await Promise.all(all.map((n) => n.server.stop('SIGKILL').catch(() => undefined)));
    rmSync(root, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < masters * (1 + replicas); i++) all.push(await startNode(root, nodeArgs));
    const created = spawnSync(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...all.map((n) => `127.0.0.1:${n.port}`),
        '--cluster-replicas',
        String(replicas),
        '--cluster-yes',
      ],
      { encoding: 'utf8', timeout: 30_000 },
    );
    if (created.status !== 0)
      throw new Error(`redis-cli --cluster create failed: ${created.stdout.slice(-500)} ${created.stderr.slice(-500)}`);
    // Every node agrees that all 16384 slots are served and every replica is attached.
    await pollUntil(
      async () => {
        for (const n of all) {
          const c = new Redis(n.port, '127.0.0.1', {
            lazyConnect: true,
            maxRetriesPerRequest: 0,
            retryStrategy: () => null,
          });
          c.on('error', () => undefined);
          try {
            await c.connect();
            const info = (await c.call('CLUSTER', 'INFO')) as string;
            if (!/cluster_state:ok/.test(info) || !/cluster_slots_ok:16384/.test(info)) return false;
          } finally {
            c.disconnect();
          }
        }
        const view = await clusterView(all[0]?.port ?? 0);
        if (view.filter((v) => !v.master).length !== masters * replicas) return false;
        // Replicas have finished their first sync (else WAIT would count 0 of them).
        for (const m of view.filter((v) => v.master)) {
          const c = new Redis(m.port, '127.0.0.1', {
            lazyConnect: true,
            maxRetriesPerRequest: 0,
            retryStrategy: () => null,
          });
          c.on('error', () => undefined);
          try {
            await c.connect();
            const info = await c.info('replication');
            if ((info.match(/state=online/g) ?? []).length < replicas) return false;
          } finally {
            c.disconnect();
          }
        }
        return true;
      },
      { ms: 30_000, intervalMs: 200, what: 'the Redis Cluster to form' },
    );
  } catch (err) {
    await stop();
    throw err;
  }
  let stopping: Promise<void> | undefined;
  return {
    nodes: all.map((n) => `127.0.0.1:${n.port}`).join(','),
    all,
    async masterPorts() {
      for (const n of all) {
        try {
          const view = await clusterView(n.port);
          return view.filter((v) => v.master && !v.failed && v.slots.length > 0).map((v) => v.port);
        } catch {
          /* that node is down: ask the next one */
        }
      }
      return [];
    },
    async kill(port) {
      const node = all.find((n) => n.port === port);
      if (node) await node.server.stop('SIGKILL');
    },
    async restart(port) {
      const node = all.find((n) => n.port === port);
      if (node) node.server = await spawnRedisServer({ port, dir: node.dir, args: nodeArgs });
    },
    stop() {
      return (stopping ??= stop());
    },
  };
}

/** A node's cluster bus listens on its port + 10,000 (Redis' default `cluster-port`). */
const CLUSTER_BUS_OFFSET = 10_000;

/**
 * One cluster node on a port whose bus port is free too. A port can still be taken between the
 * check and redis-server's bind (by another test's freePort): then the node is started again on
 * another port, at most three times.
 */
async function startNode(root: string, args: string[]): Promise<ClusterNode> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort({ alsoFree: CLUSTER_BUS_OFFSET });
    const dir = join(root, String(port));
    mkdirSync(dir);
    try {
      return { port, dir, server: await spawnRedisServer({ port, dir, args }) };
    } catch (err) {
      rmSync(dir, { recursive: true, force: true });
      if (attempt >= 3) throw err;
    }
  }
}
