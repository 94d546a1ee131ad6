/**
 * Scenario 4 — scaling: durable events/s with 1, 2 and 4 encoder processes
 * (services/encoder/main.ts) draining a pre-filled queue. The queue is paused while the API
 * (services/api/main.ts) fills it and while the encoders start, then resumed; the clock runs from
 * the resume until every batch is a file. CPU per batch of the API, the encoders and Redis is
 * measured from /proc and INFO cpu: the per-stage profile of the queue hop.
 *
 * Then the same drain with 2 encoders against a 3-master Redis Cluster (QUEUE_SHARDS=3, pushes
 * spread over 12 apps so every shard gets work): durable events/s and Redis CPU per batch per
 * master node (on 2 shared cores no speed-up is expected; the per-node CPU is what scales).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openQueue, queueAddress } from '../../shared/redis/queues.js';
import { Cluster, Redis } from 'ioredis';
import { PRIVATE_REDIS_ARGS } from '../../shared/redis/private-server.js';
import { shardLayouts } from '../../shared/redis/shards.js';
import { ShardSet } from '../../shared/ledger/shard-set.js';
import { startRedisCluster } from '../../test/helpers/redis-cluster.js';
import { freePort, startRedisServer } from '../../test/helpers/redis-server.js';
import {
  type Child,
  median,
  probeRedis,
  processCpuSeconds,
  redisCpuSeconds,
  row,
  spawnService,
  waitForFiles,
  waitHttp,
} from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';
import { pushBatches } from './redis-memory.js';

const EVENTS_PER_BATCH = 100;
const QUEUE = 'bench-scale';

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  // Enough batches that JIT warm-up of freshly started encoders does not dominate the drain time.
  const batches = ctx.smoke ? 20 : 2500;
  const tmp = mkdtempSync(join(tmpdir(), 'ingest-bench-scale-'));
  const redisServer = await startRedisServer({ args: PRIVATE_REDIS_ARGS });
  const redis = probeRedis(redisServer.url);
  const queueConn = new Redis(redisServer.url, { maxRetriesPerRequest: null });
  queueConn.on('error', () => undefined);
  const queue = openQueue(queueAddress.push({ queueName: QUEUE }), queueConn);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const api = await spawnService('services/api/main', {
    PORT: String(port),
    HOST: '127.0.0.1',
    REDIS_URL: redisServer.url,
    DATA_DIR: tmp,
    QUEUE_NAME: QUEUE,
  });
  const encoders: Child[] = [];
  const rows: BenchRow[] = [];
  const apiCpu: number[] = [];
  const encCpu: number[] = [];
  const redisCpu: number[] = [];
  try {
    await waitHttp(`${url}/healthz`, api);
    await pushBatches(url, 'warmup', 5, 2);
    for (const n of [1, 2, 4]) {
      const app = `scale-${n}`;
      await queue.pause();
      ctx.progress(`scaling: filling the queue with ${batches} batches`);
      const a0 = processCpuSeconds(api.pid);
      const r0 = await redisCpuSeconds(redis);
      await pushBatches(url, app, batches);
      apiCpu.push(((processCpuSeconds(api.pid) - a0) * 1000) / batches);
      const r1 = await redisCpuSeconds(redis);
      ctx.progress(`scaling: starting ${n} encoder process(es)`);
      const mine: Child[] = [];
      for (let i = 0; i < n; i++) {
        const metricsPort = await freePort();
        const enc = await spawnService('services/encoder/main', {
          REDIS_URL: redisServer.url,
          DATA_DIR: tmp,
          QUEUE_NAME: QUEUE,
          HOST: '127.0.0.1',
          METRICS_PORT: String(metricsPort),
        });
        mine.push(enc);
        encoders.push(enc);
        await waitHttp(`http://127.0.0.1:${metricsPort}/healthz`, enc);
      }
      const e0 = mine.map((e) => processCpuSeconds(e.pid));
      const r2 = await redisCpuSeconds(redis);
      const t0 = performance.now();
      await queue.resume();
      const t1 = await waitForFiles(join(tmp, 'events', app), batches, 300_000, (have) =>
        ctx.progress(`scaling: ${n} encoder(s): ${have}/${batches} files`),
      );
      const e1 = mine.map((e) => processCpuSeconds(e.pid));
      const r3 = await redisCpuSeconds(redis);
      encCpu.push((e1.reduce((s, v, i) => s + v - e0[i], 0) * 1000) / batches);
      redisCpu.push(((r1 - r0 + (r3 - r2)) * 1000) / batches);
      rows.push(
        row({
          scenario: 'scaling',
          metric: `durable events/s, ${n} encoder process(es), pre-filled queue`,
          unit: 'events/s',
          ours: (batches * EVENTS_PER_BATCH) / ((t1 - t0) / 1000),
        }),
      );
      await Promise.all(mine.map((e) => e.stop()));
    }
    rows.push(
      row({
        scenario: 'scaling',
        metric: 'CPU per batch: API process (push, validate, mint, enqueue)',
        unit: 'ms',
        ours: median(apiCpu),
      }),
      row({
        scenario: 'scaling',
        metric: 'CPU per batch: encoder process(es) (dequeue, encode, write, release)',
        unit: 'ms',
        ours: median(encCpu),
      }),
      row({
        scenario: 'scaling',
        metric: 'CPU per batch: Redis (enqueue + dequeue)',
        unit: 'ms',
        ours: median(redisCpu),
      }),
    );
    await Promise.all(encoders.splice(0).map((e) => e.stop()));
    rows.push(...(await runCluster(ctx, batches)));
    return rows;
  } finally {
    await Promise.all(encoders.map((e) => e.stop()));
    await api.stop();
    await queue.close().catch(() => undefined);
    queueConn.disconnect();
    redis.disconnect();
    await redisServer.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

const CLUSTER_SHARDS = 3;
const CLUSTER_APPS = 12;
const CLUSTER_ENCODERS = 2;

/** The drain of `batches` with 2 encoders on a 3-master Redis Cluster (no replicas: the masters' own CPU). */
async function runCluster(ctx: BenchContext, batches: number): Promise<BenchRow[]> {
  const perApp = Math.max(1, Math.ceil(batches / CLUSTER_APPS));
  const total = perApp * CLUSTER_APPS;
  const tmp = mkdtempSync(join(tmpdir(), 'ingest-bench-cluster-'));
  ctx.progress('scaling: starting a 3-master Redis Cluster');
  const cluster = await startRedisCluster({ masters: 3, replicas: 0, args: PRIVATE_REDIS_ARGS });
  const masters = (await cluster.masterPorts()).map((p) => probeRedis(`redis://127.0.0.1:${p}`));
  const conn = new Cluster(
    cluster.all.map((n) => ({ host: '127.0.0.1', port: n.port })),
    { redisOptions: { maxRetriesPerRequest: null } },
  );
  conn.on('error', () => undefined);
  const shards = ShardSet.open(conn, shardLayouts(QUEUE, CLUSTER_SHARDS, true));
  const env = {
    HOST: '127.0.0.1',
    REDIS_CLUSTER_NODES: cluster.nodes,
    QUEUE_SHARDS: String(CLUSTER_SHARDS),
    DATA_DIR: tmp,
    QUEUE_NAME: QUEUE,
  };
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const api = await spawnService('services/api/main', { ...env, PORT: String(port) });
  const encoders: Child[] = [];
  const cpu = async (): Promise<number[]> => Promise.all(masters.map((m) => redisCpuSeconds(m)));
  try {
    await waitHttp(`${url}/healthz`, api);
    await pushBatches(url, 'warmup', 5, 2);
    for (const s of shards.shards) await s.queue.pause();
    ctx.progress(
      `scaling: filling the cluster's ${CLUSTER_SHARDS} shards with ${total} batches over ${CLUSTER_APPS} apps`,
    );
    const r0 = await cpu();
    await Promise.all(Array.from({ length: CLUSTER_APPS }, (_, a) => pushBatches(url, `cl-${a}`, perApp, 1)));
    const r1 = await cpu();
    for (let i = 0; i < CLUSTER_ENCODERS; i++) {
      const metricsPort = await freePort();
      const enc = await spawnService('services/encoder/main', { ...env, METRICS_PORT: String(metricsPort) });
      encoders.push(enc);
      await waitHttp(`http://127.0.0.1:${metricsPort}/healthz`, enc);
    }
    const r2 = await cpu();
    const t0 = performance.now();
    for (const s of shards.shards) await s.queue.resume();
    let t1 = t0;
    for (let a = 0; a < CLUSTER_APPS; a++)
      t1 = Math.max(
        t1,
        await waitForFiles(join(tmp, 'events', `cl-${a}`), perApp, 300_000, (have) =>
          ctx.progress(`scaling: cluster: app ${a + 1}/${CLUSTER_APPS}: ${have}/${perApp} files`),
        ),
      );
    const r3 = await cpu();
    const perNode = masters.map(
      (_, i) => (((r1[i] ?? 0) - (r0[i] ?? 0) + ((r3[i] ?? 0) - (r2[i] ?? 0))) * 1000) / total,
    );
    return [
      row({
        scenario: 'scaling',
        metric: `durable events/s, ${CLUSTER_ENCODERS} encoder processes, 3-master Redis Cluster (QUEUE_SHARDS=${CLUSTER_SHARDS}), pre-filled queue`,
        unit: 'events/s',
        ours: (total * EVENTS_PER_BATCH) / ((t1 - t0) / 1000),
      }),
      row({
        scenario: 'scaling',
        metric: 'CPU per batch: Redis Cluster, busiest master node (enqueue + dequeue)',
        unit: 'ms',
        ours: Math.max(...perNode),
      }),
      row({
        scenario: 'scaling',
        metric: 'CPU per batch: Redis Cluster, sum over the 3 master nodes (enqueue + dequeue)',
        unit: 'ms',
        ours: perNode.reduce((x, y) => x + y, 0),
      }),
    ];
  } finally {
    await Promise.all(encoders.map((e) => e.stop()));
    await api.stop();
    await shards.close();
    conn.disconnect();
    for (const m of masters) m.disconnect();
    await cluster.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}
