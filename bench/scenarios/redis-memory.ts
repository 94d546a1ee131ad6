/**
 * Scenario 3 — Redis memory per buffered event with no encoder running: the API alone
 * (services/api/main.ts) against a fresh redis-server; N batches of 100 realistic events are
 * pushed and left in the queue; `used_memory` delta / events is compared with the raw JSON size.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startRedisServer } from '../../test/helpers/redis-server.js';
import { bodyFactory, probeRedis, redisUsedMemory, row, sleep, spawnTs, waitHttp } from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';
import { EMBEDDED_REDIS_ARGS } from './e2e.js';

const EVENTS_PER_BATCH = 100;

/** Pushes `count` distinct batches with `parallel` requests in flight; returns total body bytes. */
export async function pushBatches(url: string, app: string, count: number, parallel = 8): Promise<number> {
  const body = bodyFactory(EVENTS_PER_BATCH);
  let next = 0;
  let bytes = 0;
  const worker = async (): Promise<void> => {
    while (next < count) {
      next++;
      const text = body();
      bytes += Buffer.byteLength(text);
      const r = await fetch(`${url}/push/events/${app}/x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text });
      await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`push answered ${r.status}`);
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
  return bytes;
}

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const batches = ctx.smoke ? 20 : 300;
  const tmp = mkdtempSync(join(tmpdir(), 'ingest-bench-mem-'));
  const redisServer = await startRedisServer({ args: EMBEDDED_REDIS_ARGS });
  const redis = probeRedis(redisServer.url);
  const port = await freePort();
  const api = spawnTs('services/api/main.ts', { PORT: String(port), HOST: '127.0.0.1', REDIS_URL: redisServer.url, DATA_DIR: tmp, QUEUE_NAME: 'bench-mem', LOG_LEVEL: 'warn' });
  try {
    const url = `http://127.0.0.1:${port}`;
    await waitHttp(`${url}/healthz`, api);
    // One push first so the queue's fixed keys (meta, id counters, scripts) are not counted per event.
    await pushBatches(url, 'mem', 1, 1);
    await sleep(200);
    const before = await redisUsedMemory(redis);
    ctx.progress(`redis-memory: pushing ${batches} batches with no encoder`);
    const rawBytes = await pushBatches(url, 'mem', batches);
    await sleep(200);
    const after = await redisUsedMemory(redis);
    const events = batches * EVENTS_PER_BATCH;
    const perEvent = (after - before) / events;
    const rawPerEvent = rawBytes / events;
    return [
      row({ scenario: 'redis-memory', metric: `used_memory per buffered event (${batches} batches, no encoder)`, unit: 'B', ours: perEvent, reference: rawPerEvent, ratioTarget: { op: '<=', value: 0.3 } }),
    ];
  } finally {
    await api.stop();
    redis.disconnect();
    await redisServer.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}
