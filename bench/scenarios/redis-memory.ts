/**
 * Scenario 3 — Redis memory per buffered event with no encoder running: the API alone
 * (services/api/main.ts) against a fresh redis-server; N batches of 100 realistic events are
 * pushed and left in the queue; `used_memory` delta / events is compared with the raw JSON size.
 * Then the ledger's per-push state at the density of a sustained 500 pushes/s with the default
 * windows (docs/reliability.md, "Sizing Redis"): bytes per idempotency entry (keyed and body)
 * and per list-index entry, from MEMORY USAGE of every key of the family.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startRedisServer } from '../../test/helpers/redis-server.js';
import { bodyFactory, probeRedis, redisUsedMemory, row, sleep, spawnService, waitHttp } from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';
import { PRIVATE_REDIS_ARGS } from '../../shared/redis/private-server.js';
import { Redis } from 'ioredis';
import { BatchLedger, idempotencyBucketSeconds } from '../../shared/ledger/ledger.js';
import { ledgerKeys } from '../../shared/redis/keyspace.js';
import { DEFAULT_BODY_DEDUP_WINDOW_SECONDS, DEFAULT_IDEMPOTENCY_WINDOW_SECONDS } from '../../shared/config.js';

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
      const r = await fetch(`${url}/push/events/${app}/x`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: text,
      });
      await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`push answered ${r.status}`);
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
  return bytes;
}

/** Sum of MEMORY USAGE over the keys matching `pattern`, and their entry count. */
async function familyBytes(redis: Redis, pattern: string): Promise<{ bytes: number; entries: number; keys: number }> {
  let cursor = '0';
  const out = { bytes: 0, entries: 0, keys: 0 };
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    for (const k of keys) {
      const type = await redis.type(k);
      out.bytes += Number((await redis.memory('USAGE', k, 'SAMPLES', 0)) ?? 0);
      out.entries += type === 'hash' ? await redis.hlen(k) : type === 'zset' ? await redis.zcard(k) : 1;
      out.keys++;
    }
    cursor = next;
  } while (cursor !== '0');
  return out;
}

/**
 * Bytes per entry of the ledger's per-push families at the density a sustained 500 pushes/s
 * gives with the default windows: 500 × bucket length claims in one bucket. Minted straight
 * through the ledger (pipelined), so only Redis is measured.
 */
export async function ledgerDensity(
  redisUrl: string,
  smoke: boolean,
): Promise<{ keyed: number; body: number; written: number; writtenSmallPrefix: number; keyedClaims: number }> {
  const redis = new Redis(redisUrl);
  try {
    const ns = 'bench-density';
    const ledger = new BatchLedger(redis, ns);
    const hash = 'c'.repeat(64);
    const claimsOf = (window: number): number => (smoke ? 200 : 500 * idempotencyBucketSeconds(window));
    const mintMany = async (n: number, family: 'key' | 'body', window: number): Promise<void> => {
      for (let i = 0; i < n; i += 2000) {
        await Promise.all(
          Array.from({ length: Math.min(2000, n - i) }, (_, j) =>
            ledger.mint('p/', {
              idempotency: {
                family,
                scope: `${family}-${i + j}`,
                bodyHash: family === 'key' ? String(i + j).padStart(64, '0') : hash,
                windowSeconds: window,
              },
            }),
          ),
        );
      }
    };
    const keyedClaims = claimsOf(DEFAULT_IDEMPOTENCY_WINDOW_SECONDS);
    await mintMany(keyedClaims, 'key', DEFAULT_IDEMPOTENCY_WINDOW_SECONDS);
    await mintMany(claimsOf(DEFAULT_BODY_DEDUP_WINDOW_SECONDS), 'body', DEFAULT_BODY_DEDUP_WINDOW_SECONDS);
    const k = await familyBytes(redis, `${ledgerKeys.idemFamilyPrefix(ns, 'key')}*`);
    const b = await familyBytes(redis, `${ledgerKeys.idemFamilyPrefix(ns, 'body')}*`);
    // The list index of one busy prefix (a sorted set past 128 members: Redis' skiplist encoding).
    const ids = (await redis.zrange(ledger.pendingKey('p/'), '0', smoke ? '199' : '19999')) as string[];
    for (let i = 0; i < ids.length; i += 2000)
      await Promise.all(ids.slice(i, i + 2000).map((id) => ledger.markWritten('p/', id, 3600)));
    const w = await familyBytes(redis, ledger.writtenKey('p/'));
    // Many quiet prefixes, 100 ids each (listpack encoding).
    const small = smoke ? 3 : 300;
    for (let p = 0; p < small; p++) {
      const minted = await Promise.all(Array.from({ length: 100 }, () => ledger.mint(`q${p}/`)));
      await Promise.all(minted.map((m) => ledger.markWritten(`q${p}/`, m.batchId, 3600)));
    }
    const ws = await familyBytes(redis, `${ledgerKeys.written(ns, 'q')}*`);
    await redis.flushall();
    return {
      keyed: k.bytes / k.entries,
      body: b.bytes / b.entries,
      written: w.bytes / w.entries,
      writtenSmallPrefix: ws.bytes / ws.entries,
      keyedClaims,
    };
  } finally {
    redis.disconnect();
  }
}

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const batches = ctx.smoke ? 20 : 300;
  const tmp = mkdtempSync(join(tmpdir(), 'ingest-bench-mem-'));
  const redisServer = await startRedisServer({ args: PRIVATE_REDIS_ARGS });
  const redis = probeRedis(redisServer.url);
  const port = await freePort();
  const api = await spawnService('services/api/main', {
    PORT: String(port),
    HOST: '127.0.0.1',
    REDIS_URL: redisServer.url,
    DATA_DIR: tmp,
    QUEUE_NAME: 'bench-mem',
    LOG_LEVEL: 'warn',
  });
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
    ctx.progress('redis-memory: ledger bytes per entry at 500 pushes/s density');
    const d = await ledgerDensity(redisServer.url, ctx.smoke);
    return [
      row({
        scenario: 'redis-memory',
        metric: `used_memory per buffered event (${batches} batches, no encoder)`,
        unit: 'B',
        ours: perEvent,
        reference: rawPerEvent,
        ratioTarget: { op: '<=', value: 0.3 },
      }),
      row({
        scenario: 'redis-memory',
        metric: `Idempotency-Key entry, default window (${d.keyedClaims} claims in one bucket)`,
        unit: 'B',
        ours: d.keyed,
      }),
      row({ scenario: 'redis-memory', metric: 'body-dedup entry, default window', unit: 'B', ours: d.body }),
      row({ scenario: 'redis-memory', metric: 'list-index entry, busy prefix (skiplist)', unit: 'B', ours: d.written }),
      row({
        scenario: 'redis-memory',
        metric: 'list-index entry, 100 ids per prefix (listpack)',
        unit: 'B',
        ours: d.writtenSmallPrefix,
      }),
    ];
  } finally {
    await api.stop();
    redis.disconnect();
    await redisServer.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}
