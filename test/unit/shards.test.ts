import calculateSlot from 'cluster-key-slot';
import { describe, expect, it } from 'vitest';
import { parseEnv } from '../../shared/config.js';
import { BATCH_ID_RE } from '../../shared/ids.js';
import { shardOfBatchId, shardSuffix } from '../../shared/ledger/ledger.js';
import { isRedisUnavailable } from '../../shared/redis/connection.js';
import { CLUSTER_SLOTS, LEGACY_QUEUE_PREFIX, shardIndex, shardLayouts } from '../../shared/redis/shards.js';

describe('queue shards', () => {
  it('one shard on one Redis keeps the names of every earlier version', () => {
    expect(shardLayouts('events-ingest', 1, false)).toEqual([
      {
        index: 0,
        count: 1,
        queueName: 'events-ingest',
        queuePrefix: LEGACY_QUEUE_PREFIX,
        namespace: 'events-ingest',
        tag: 'events-ingest',
      },
    ]);
  });

  it('tags each shard, spreading the tags evenly over the slot space (so over equal master ranges)', () => {
    for (const count of [1, 3, 6, 16]) {
      const layouts = shardLayouts('events-ingest', count, true);
      expect(new Set(layouts.map((l) => l.tag)).size).toBe(count);
      layouts.forEach((l, k) => {
        expect(l.queuePrefix).toBe(`{${l.tag}}`);
        expect(l.namespace).toBe(l.tag);
        const slot = calculateSlot(l.tag);
        expect(slot).toBeGreaterThanOrEqual(Math.floor((k * CLUSTER_SLOTS) / count));
        expect(slot).toBeLessThan(Math.floor(((k + 1) * CLUSTER_SLOTS) / count));
      });
    }
  });

  it('maps a prefix to the same shard every time, and prefixes over all shards', () => {
    expect(shardIndex('events/app1/', 6)).toBe(shardIndex('events/app1/', 6));
    expect(shardIndex('events/app1/', 1)).toBe(0);
    const hit = new Set(Array.from({ length: 200 }, (_, i) => shardIndex(`events/app${i}/`, 6)));
    expect([...hit].sort()).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('keeps the shard in the id suffix without changing the id format', () => {
    for (const count of [1, 2, 6, 256]) {
      for (let index = 0; index < count; index += Math.max(1, Math.floor(count / 7))) {
        for (let i = 0; i < 50; i++) {
          const suffix = shardSuffix(index, count);
          const id = `1782933157690-0000-${suffix}`;
          expect(id).toMatch(BATCH_ID_RE);
          expect(shardOfBatchId(id, count)).toBe(index);
        }
      }
    }
  });

  it('validates the cluster variables at start, naming them', () => {
    expect(parseEnv({ REDIS_CLUSTER_NODES: '10.0.0.1:7000, 10.0.0.2:7001' }).REDIS_CLUSTER_NODES).toEqual([
      { host: '10.0.0.1', port: 7000 },
      { host: '10.0.0.2', port: 7001 },
    ]);
    expect(() => parseEnv({ REDIS_CLUSTER_NODES: 'redis://10.0.0.1:7000' })).toThrow(
      /REDIS_CLUSTER_NODES\.0: must be a comma list of host:port/,
    );
    expect(() => parseEnv({ REDIS_CLUSTER_NODES: '10.0.0.1:7000', REDIS_URL: 'redis://x:6379' })).toThrow(
      /REDIS_CLUSTER_NODES: set REDIS_URL .* or REDIS_CLUSTER_NODES .*, not both/,
    );
    expect(() => parseEnv({ QUEUE_SHARDS: '0' })).toThrow(/QUEUE_SHARDS/);
    expect(() => parseEnv({ QUEUE_SHARDS: '257' })).toThrow(/QUEUE_SHARDS/);
    expect(() => parseEnv({ REDIS_WAIT_REPLICAS: '-1' })).toThrow(/REDIS_WAIT_REPLICAS/);
    expect(parseEnv({}).QUEUE_SHARDS).toBe(1);
    expect(parseEnv({}).REDIS_WAIT_REPLICAS).toBe(0);
  });

  it('counts a Redis Cluster mid-failover as Redis unavailable (503), not as a bug (500)', () => {
    expect(isRedisUnavailable(new Error('CLUSTERDOWN The cluster is down'))).toBe(true);
    expect(isRedisUnavailable(new Error('Failed to refresh slots cache.'))).toBe(true);
    expect(isRedisUnavailable(new Error('ERR unknown command'))).toBe(false);
  });
});
