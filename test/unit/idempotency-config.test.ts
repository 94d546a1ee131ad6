import { describe, expect, it } from 'vitest';
import {
  ConfigError,
  DEFAULT_BODY_DEDUP_WINDOW_SECONDS,
  DEFAULT_IDEMPOTENCY_WINDOW_SECONDS,
  parseEnv,
} from '../../shared/config.js';
import { idempotencyBucketSeconds, idempotencyShards } from '../../shared/ledger/ledger.js';
import { BATCH_JOB_OPTIONS, DEAD_LETTER_KEEP } from '../../shared/redis/jobs/push.js';

describe('idempotency windows and Redis bounds (config)', () => {
  it('defaults to a 1 h key window and a 5 min body window', () => {
    const env = parseEnv({});
    expect(env.IDEMPOTENCY_WINDOW_SECONDS).toBe(3600);
    expect(env.BODY_DEDUP_WINDOW_SECONDS).toBe(300);
    expect([DEFAULT_IDEMPOTENCY_WINDOW_SECONDS, DEFAULT_BODY_DEDUP_WINDOW_SECONDS]).toEqual([3600, 300]);
  });

  it('refuses a bad BODY_DEDUP_WINDOW_SECONDS with a message naming it', () => {
    for (const bad of ['-1', '1.5', 'soon', '86401']) {
      expect(() => parseEnv({ BODY_DEDUP_WINDOW_SECONDS: bad })).toThrow(ConfigError);
      expect(() => parseEnv({ BODY_DEDUP_WINDOW_SECONDS: bad })).toThrow(/BODY_DEDUP_WINDOW_SECONDS/);
    }
    expect(parseEnv({ BODY_DEDUP_WINDOW_SECONDS: '0' }).BODY_DEDUP_WINDOW_SECONDS).toBe(0);
  });

  it('cuts a window into 4 buckets and sizes shards for ~100 entries per hash at 500 pushes/s', () => {
    expect(idempotencyBucketSeconds(3600)).toBe(900);
    expect(idempotencyBucketSeconds(300)).toBe(75);
    expect(idempotencyBucketSeconds(2)).toBe(1);
    expect(idempotencyShards(3600)).toBe(8192);
    expect(idempotencyShards(300)).toBe(512);
    expect(idempotencyShards(5)).toBe(16);
    // Below Redis' listpack limit of 128 entries per hash at the design rate, up to ~14 h windows;
    // past that the 65,536-shard cap lets hashes grow into Redis' larger encoding (documented).
    for (const w of [60, 300, 3600, 43_200])
      expect((500 * idempotencyBucketSeconds(w)) / idempotencyShards(w)).toBeLessThan(128);
    expect(idempotencyShards(86_400)).toBe(65_536);
    expect((500 * idempotencyBucketSeconds(86_400)) / 65_536).toBeGreaterThan(128);
  });

  it('keeps dead letters for 14 days, at most 10,000 (docs/reliability.md)', () => {
    expect(DEAD_LETTER_KEEP).toEqual({ age: 14 * 86_400, count: 10_000 });
    expect(BATCH_JOB_OPTIONS.removeOnFail).toEqual({ age: 1_209_600, count: 10_000 });
    expect(BATCH_JOB_OPTIONS.removeOnComplete).toBe(true);
  });
});
