import { createHash } from 'node:crypto';
import { Cluster } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import { LEGACY_QUEUE_PREFIX } from './bullmq-keys.js';
import { shardMarkerKey, taggedQueuePrefix } from './keyspace.js';
import { type RedisClient, redisCall } from './connection.js';

/**
 * Where one shard's keys live. With one shard on one Redis (the default), the names are the
 * ones every earlier version used: BullMQ's default prefix `bull` and the ledger's `{QUEUE_NAME}`
 * tag, so existing data keeps working. Otherwise shard k of a queue named Q puts every key under
 * the hash tag `{Q:k}`: BullMQ's prefix `{Q:k}` (keys `{Q:k}:Q:wait`, …) and the ledger's
 * namespace `Q:k` (keys `{Q:k}:pending:<prefix>`, `{Q:k}:clock`, …), so each shard sits in one
 * Cluster slot, its Lua scripts stay single-slot, and shards spread over the masters.
 */
export interface ShardLayout {
  index: number;
  count: number;
  /** BullMQ queue name (QUEUE_NAME for every shard; the prefix tells them apart). */
  queueName: string;
  /** BullMQ key prefix. */
  queuePrefix: string;
  /** Ledger namespace (its keys are `{namespace}:…`). */
  namespace: string;
  /** The hash tag every key of the shard carries (without braces). */
  tag: string;
}

export { LEGACY_QUEUE_PREFIX, shardMarkerKey };

/** Redis Cluster's hash slots. */
export const CLUSTER_SLOTS = 16_384;

/**
 * The hash tag of shard `index` of `count`: `<queueName>:<index>`, or `<queueName>:<index>:<j>`
 * with the smallest j that puts its slot in the index-th of `count` equal parts of the slot
 * space. `redis-cli --cluster create` gives each master an equal contiguous slot range, so the
 * shards spread evenly over the masters (each gets count / masters of them when count is a
 * multiple of the master count) instead of where the hash happens to put them.
 */
export function shardTag(queueName: string, index: number, count: number): string {
  const lo = Math.floor((index * CLUSTER_SLOTS) / count);
  const hi = Math.floor(((index + 1) * CLUSTER_SLOTS) / count);
  // About `count` tries on average; bounded all the same.
  for (let j = 0; j < 1_000_000; j++) {
    const tag = j === 0 ? `${queueName}:${index}` : `${queueName}:${index}:${j}`;
    const slot = calculateSlot(tag);
    if (slot >= lo && slot < hi) return tag;
  }
  return `${queueName}:${index}`;
}

/** The layout of `count` shards of queue `queueName`; tagged on a Cluster or with more than one shard. */
export function shardLayouts(queueName: string, count: number, cluster: boolean): ShardLayout[] {
  if (count === 1 && !cluster)
    return [{ index: 0, count: 1, queueName, queuePrefix: LEGACY_QUEUE_PREFIX, namespace: queueName, tag: queueName }];
  return Array.from({ length: count }, (_, index) => {
    const tag = shardTag(queueName, index, count);
    return { index, count, queueName, queuePrefix: taggedQueuePrefix(tag), namespace: tag, tag };
  });
}

/**
 * The shard of a list prefix: the first 4 bytes of sha256(prefix) modulo the shard count. Stable
 * across processes, versions and restarts (it depends on nothing else), so a prefix's ids are
 * always minted on one shard's clock and its in-flight set and index live in one place.
 */
export function shardIndex(prefix: string, count: number): number {
  if (count <= 1) return 0;
  return createHash('sha256').update(prefix).digest().readUInt32BE(0) % count;
}

/**
 * The shard count recorded in Redis: null when none is recorded on a Cluster (nothing has run
 * there yet); 1 when none is recorded on one Redis (a deployment from before shards).
 */
export async function recordedShardCount(client: RedisClient, queueName: string): Promise<number | null> {
  const stored = await redisCall(client.get(shardMarkerKey(queueName)));
  if (stored === null) return client instanceof Cluster ? null : 1;
  return Number(stored);
}
