/**
 * Soak (short form of `npm run soak`): thousands of distinct batches to hundreds of app names,
 * with the encoder running, against a redis-server of its own. With short windows, Redis must
 * come back to (about) where it started once the queue drains and the windows pass: every key
 * family the product writes is bounded. With the default windows, it prints what one push holds
 * in Redis while its windows last (docs/reliability.md, "Sizing Redis").
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runSoak } from '../../scripts/soak-lib.js';
import { type RedisServer, startRedisServer } from '../helpers/redis-server.js';

const log = (line: string): void => void process.stdout.write(`[soak] ${line}\n`);

describe('soak: Redis state is bounded', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedisServer();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it(
    '5,000+ distinct batches to 300 apps with 5 s windows leave Redis where it started',
    { timeout: 300_000 },
    async () => {
      const r = await runSoak({
        redisUrl: redis.url,
        env: {
          QUEUE_NAME: 'soak-short',
          IDEMPOTENCY_WINDOW_SECONDS: '5',
          LIST_INDEX_SECONDS: '5',
          BODY_DEDUP_WINDOW_SECONDS: '5',
        },
        batches: 5250,
        apps: 300,
        settleMs: 60_000,
        // 5 s windows: an idempotency bucket lives at most 8 s (window + 2 buckets of 2 s), the index 5 s.
        minSettleMs: 8_000,
        log,
      });
      log(
        `short windows: used_memory before ${r.before.usedMemory} B, peak ${r.peak.usedMemory} B, after ${r.after.usedMemory} B; DBSIZE before ${r.before.dbsize}, peak ${r.peak.dbsize}, after ${r.after.dbsize}`,
      );
      expect(r.batches).toBeGreaterThanOrEqual(5000);
      expect(r.apps).toBe(300);
      expect(r.deduplicated).toBeGreaterThan(0);
      expect(r.files).toBe(r.batches);
      // The load did grow Redis (so coming back is not vacuous) ...
      expect(r.peak.dbsize).toBeGreaterThan(r.before.dbsize + 300);
      // ... and it came back: what stays is the id clock and BullMQ's own capped keys (events stream).
      expect(r.after.dbsize - r.before.dbsize).toBeLessThanOrEqual(4);
      expect(r.after.usedMemory - r.before.usedMemory).toBeLessThan(4 * 1024 * 1024);
      expect(r.eventsStream.entries).toBeLessThanOrEqual(10_100);
    },
  );

  it(
    'with the default windows: bytes one push holds in Redis while its windows last',
    { timeout: 200_000 },
    async () => {
      const r = await runSoak({
        redisUrl: redis.url,
        env: { QUEUE_NAME: 'soak-default' },
        batches: 1500,
        apps: 300,
        settleMs: 0,
        log,
      });
      const held = r.drained.usedMemory - r.before.usedMemory - r.eventsStream.bytes;
      const ledgerBytes = Object.values(r.families).reduce((a, f) => a + f.bytes, 0);
      log(
        `default windows: ${r.batches} batches held ${held} B of used_memory (${(held / r.batches).toFixed(0)} B per push), ledger keys ${ledgerBytes} B (${(ledgerBytes / r.batches).toFixed(0)} B per push), DBSIZE ${r.before.dbsize} -> ${r.drained.dbsize}`,
      );
      expect(r.files).toBe(r.batches);
      // Within the windows every push is remembered (its idempotency entry and its list-index entry).
      // Families named by shared/redis/keyspace.ts: `idem:k` (Idempotency-Key), `idem:b` (body dedup).
      expect(r.families['idem:k']?.entries).toBeGreaterThan(0);
      expect(r.families['idem:b']?.entries).toBeGreaterThan(0);
      expect((r.families['idem:k']?.entries ?? 0) + (r.families['idem:b']?.entries ?? 0)).toBe(r.batches);
      expect(r.families.unknown).toBeUndefined();
      expect(r.families.written?.entries).toBe(r.batches);
      expect(held).toBeGreaterThan(0);
    },
  );
});
