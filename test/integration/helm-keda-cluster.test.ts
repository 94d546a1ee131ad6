import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEnv } from '../../shared/config.js';
import { createLogger } from '../../shared/logger.js';
import { shardLayouts } from '../../shared/redis/shards.js';
import { type RunningStack, type StackParts, startStack } from '../../services/stack.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { kedaBacklog, render, scaledObjectKeys, scaledObjectOf } from '../helpers/helm.js';
import { uniqueName } from '../helpers/names.js';
import { type RedisCluster, startRedisCluster } from '../helpers/redis-cluster.js';
import { waitFor } from '../helpers/wait.js';

/**
 * Issue 45, acceptance 2 on a Redis Cluster of 3 masters: the keys the rendered ScaledObject
 * names (QUEUE_SHARDS=6, each shard under its own hash tag) hold the product's backlog. Read
 * through a Cluster client, as KEDA's `redis-cluster` scaler reads them.
 */
const SHARDS = 6;
const PUSHES = 18;

describe('acceptance 2 on a Redis Cluster (3 masters, QUEUE_SHARDS=6): the rendered ScaledObject reads the backlog', () => {
  let cluster: RedisCluster | undefined;
  let client: Cluster | undefined;
  let api: RunningStack | undefined;
  let dataDir = '';
  const queueName = uniqueName('kc');

  const start = (parts: StackParts): Promise<RunningStack> => {
    const env = parseEnv({
      PORT: '0',
      HOST: '127.0.0.1',
      METRICS_PORT: '0',
      REDIS_CLUSTER_NODES: cluster?.nodes,
      QUEUE_SHARDS: String(SHARDS),
      QUEUE_NAME: queueName,
      DATA_DIR: dataDir,
      ROLLUP: 'off',
      ICEBERG: 'off',
      API_ENCODE_MAX_BYTES: '0',
      LOG_LEVEL: 'silent',
    });
    return startStack(env, parts, createLogger({ level: 'silent', name: 'test' }));
  };

  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3, replicas: 0 });
    dataDir = mkdtempSync(join(tmpdir(), 'ingest-keda-cluster-'));
    api = await start({ api: true, encoder: false });
    const first = cluster.nodes.split(',')[0] ?? '';
    client = new Cluster([{ host: '127.0.0.1', port: Number(first.split(':')[1]) }], {
      redisOptions: { maxRetriesPerRequest: null },
    });
  }, 120_000);

  afterAll(async () => {
    await api?.close();
    client?.disconnect();
    await cluster?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it(
    'with encoders stopped the sum equals the jobs waiting; with an encoder running it returns to 0',
    { timeout: 120_000 },
    async () => {
      const c = client as Cluster;
      const nodes = (cluster as RedisCluster).nodes;
      const objs = await render(undefined, [
        'encoder.keda.enabled=true',
        'redis.mode=cluster',
        `redis.cluster.nodes={${nodes}}`,
        `queue.shards=${SHARDS}`,
        `queue.name=${queueName}`,
      ]);
      const keys = scaledObjectKeys(objs);
      expect(keys.length).toBe(2 * SHARDS);
      const url = api?.api?.server.url ?? '';
      for (let i = 0; i < PUSHES; i++) {
        const res = await fetch(`${url}/push/events/app${i}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: batchBody(2, sampleEvent),
        });
        expect(res.status).toBe(200);
      }
      // The product never prioritises a batch: one prioritized probe job per shard (BullMQ's own
      // add on the shard's queue) makes every named key exist, so a misnamed one fails the read.
      const probes = shardLayouts(queueName, SHARDS, true).map(
        (l) => new Queue(queueName, { connection: c, prefix: l.queuePrefix }),
      );
      try {
        const probeJobs = await Promise.all(probes.map((q) => q.add('keda-probe', {}, { priority: 1 })));
        const so = scaledObjectOf(objs);
        const read = (allowMissing: boolean): Promise<number> => kedaBacklog(c, so, allowMissing);
        expect(await read(false)).toBe(PUSHES + SHARDS);
        for (const j of probeJobs) await j.remove();
        expect(await read(true)).toBe(PUSHES);
        const encoder = await start({ api: false, encoder: true, encoderMetricsServer: false });
        try {
          await waitFor(async () => (await read(true)) === 0, 60_000, 'the backlog the ScaledObject reads to drain');
        } finally {
          await encoder.close();
        }
      } finally {
        for (const q of probes) await q.close();
      }
    },
  );
});
