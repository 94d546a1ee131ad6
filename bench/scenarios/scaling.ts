/**
 * Scenario 4 — scaling: durable events/s with 1, 2 and 4 encoder processes
 * (services/encoder/main.ts) draining a pre-filled queue. The queue is paused while the API
 * (services/api/main.ts) fills it and while the encoders start, then resumed; the clock runs from
 * the resume until every batch is a file. CPU per batch of the API, the encoders and Redis is
 * measured from /proc and INFO cpu: the per-stage profile of the queue hop.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { freePort, startRedisServer } from '../../test/helpers/redis-server.js';
import { type Child, median, probeRedis, processCpuSeconds, redisCpuSeconds, row, spawnTs, waitForFiles, waitHttp } from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';
import { EMBEDDED_REDIS_ARGS } from './e2e.js';
import { pushBatches } from './redis-memory.js';

const EVENTS_PER_BATCH = 100;
const QUEUE = 'bench-scale';

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  // Enough batches that JIT warm-up of freshly started encoders does not dominate the drain time.
  const batches = ctx.smoke ? 20 : 2500;
  const tmp = mkdtempSync(join(tmpdir(), 'ingest-bench-scale-'));
  const redisServer = await startRedisServer({ args: EMBEDDED_REDIS_ARGS });
  const redis = probeRedis(redisServer.url);
  const queueConn = new Redis(redisServer.url, { maxRetriesPerRequest: null });
  queueConn.on('error', () => undefined);
  const queue = new Queue(QUEUE, { connection: queueConn });
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const api = spawnTs('services/api/main.ts', { PORT: String(port), HOST: '127.0.0.1', REDIS_URL: redisServer.url, DATA_DIR: tmp, QUEUE_NAME: QUEUE });
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
        const enc = spawnTs('services/encoder/main.ts', { REDIS_URL: redisServer.url, DATA_DIR: tmp, QUEUE_NAME: QUEUE, HOST: '127.0.0.1', METRICS_PORT: String(metricsPort) });
        mine.push(enc);
        encoders.push(enc);
        await waitHttp(`http://127.0.0.1:${metricsPort}/healthz`, enc);
      }
      const e0 = mine.map((e) => processCpuSeconds(e.pid));
      const r2 = await redisCpuSeconds(redis);
      const t0 = performance.now();
      await queue.resume();
      const t1 = await waitForFiles(join(tmp, 'events', app), batches, 300_000, (have) => ctx.progress(`scaling: ${n} encoder(s): ${have}/${batches} files`));
      const e1 = mine.map((e) => processCpuSeconds(e.pid));
      const r3 = await redisCpuSeconds(redis);
      encCpu.push((e1.reduce((s, v, i) => s + v - e0[i], 0) * 1000) / batches);
      redisCpu.push(((r1 - r0 + (r3 - r2)) * 1000) / batches);
      rows.push(row({ scenario: 'scaling', metric: `durable events/s, ${n} encoder process(es), pre-filled queue`, unit: 'events/s', ours: (batches * EVENTS_PER_BATCH) / ((t1 - t0) / 1000) }));
      await Promise.all(mine.map((e) => e.stop()));
    }
    rows.push(
      row({ scenario: 'scaling', metric: 'CPU per batch: API process (push, validate, mint, enqueue)', unit: 'ms', ours: median(apiCpu) }),
      row({ scenario: 'scaling', metric: 'CPU per batch: encoder process(es) (dequeue, encode, write, release)', unit: 'ms', ours: median(encCpu) }),
      row({ scenario: 'scaling', metric: 'CPU per batch: Redis (enqueue + dequeue)', unit: 'ms', ours: median(redisCpu) }),
    );
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
