import type { Queue } from 'bullmq';
import { Cluster } from 'ioredis';
import { ConfigError } from '../errors.js';
import { type RedisClient, redisCall } from '../redis/connection.js';
import { shardMarkerKey } from '../redis/keyspace.js';
import { openQueue, queueAddress } from '../redis/queues.js';
import { LEGACY_QUEUE_PREFIX, type ShardLayout, shardIndex, shardLayouts } from '../redis/shards.js';
import { BatchLedger, shardOfBatchId } from './ledger.js';

/*
 * The shards of a deployment at run time: each shard's BullMQ queue and ledger, routing, WAIT,
 * and the guard on a change of QUEUE_SHARDS. The layouts themselves (names, tags, slots) are
 * shared/redis/shards.ts; this file composes them with the ledger.
 */
/** One shard at run time: its layout, its BullMQ queue and its ledger. */
export interface Shard {
  layout: ShardLayout;
  queue: Queue;
  ledger: BatchLedger;
}

/** Raised when the enqueue did not reach REDIS_WAIT_REPLICAS replicas in time. */
export class ReplicationTimeout extends Error {
  override readonly name = 'ReplicationTimeout';
}

/**
 * Every shard of a deployment on one connection (one Redis or a Cluster), with routing by list
 * prefix or batch id and, with `waitReplicas`, Redis `WAIT` on the node that owns a shard.
 */
export class ShardSet {
  constructor(
    readonly shards: readonly Shard[],
    private readonly client: RedisClient,
    private readonly wait: { replicas: number; timeoutMs: number } = { replicas: 0, timeoutMs: 1000 },
  ) {
    if (shards.length === 0) throw new Error('a shard set needs at least one shard');
  }

  /** Producer side: one BullMQ queue and ledger per shard of `layouts`, all on `client`. */
  static open(
    client: RedisClient,
    layouts: readonly ShardLayout[],
    wait?: { replicas: number; timeoutMs: number },
  ): ShardSet {
    const shards = layouts.map((layout) => ({
      layout,
      // A producer skips BullMQ's version check (see openQueue).
      queue: openQueue(queueAddress.push(layout), client, { producer: true }),
      ledger: new BatchLedger(client, layout.namespace, { shard: { index: layout.index, count: layout.count } }),
    }));
    // BullMQ re-emits `client`'s errors on each queue; the client's own listener logs them (throttled, shared/redis/connection.ts).
    for (const s of shards) s.queue.on('error', () => undefined);
    return new ShardSet(shards, client, wait);
  }

  /** One shard made of an existing queue and ledger (the single-Redis default; tests and the library). */
  static single(queue: Queue, ledger: BatchLedger, client: RedisClient): ShardSet {
    const layout: ShardLayout = {
      index: 0,
      count: 1,
      queueName: queue.name,
      queuePrefix: queue.opts.prefix ?? LEGACY_QUEUE_PREFIX,
      namespace: ledger.namespace,
      tag: ledger.namespace,
    };
    return new ShardSet([{ layout, queue, ledger }], client);
  }

  get count(): number {
    return this.shards.length;
  }

  /** The shard a list prefix maps to. */
  forPrefix(prefix: string): Shard {
    return this.shards[shardIndex(prefix, this.shards.length)] as Shard;
  }

  /** The shard a batch id was minted on. */
  forBatchId(batchId: string): Shard {
    return this.shards[shardOfBatchId(batchId, this.shards.length)] as Shard;
  }

  /** Whether pushes wait for replicas (REDIS_WAIT_REPLICAS > 0). */
  get waitsForReplicas(): boolean {
    return this.wait.replicas > 0;
  }

  /**
   * Resolves once every write this process sent to `shard`'s node so far (the mint and the
   * enqueue included) reached REDIS_WAIT_REPLICAS replicas; throws ReplicationTimeout when fewer
   * acknowledged within the timeout. `WAIT` counts the writes of the connection it is sent on, so
   * on a Cluster it is pipelined behind a read of one of the shard's keys: ioredis sends the
   * pipeline on its connection to the master owning that slot, the one the writes went through.
   */
  async replicate(shard: Shard): Promise<void> {
    if (this.wait.replicas <= 0) return;
    const res = await this.client
      .pipeline()
      .exists(shard.ledger.prefixesKey())
      .call('WAIT', String(this.wait.replicas), String(this.wait.timeoutMs))
      .exec();
    const [, waited] = res ?? [];
    if (!waited || waited[0])
      throw new ReplicationTimeout(
        `WAIT failed on shard ${shard.layout.index}: ${waited?.[0] instanceof Error ? waited[0].message : 'no reply'}`,
      );
    const acked = Number(waited[1]);
    if (acked < this.wait.replicas)
      throw new ReplicationTimeout(
        `shard ${shard.layout.index}: ${acked} of ${this.wait.replicas} replicas acknowledged within ${this.wait.timeoutMs} ms`,
      );
  }

  /** Closes every shard's queue (not the connection). Idempotent per queue. */
  async close(): Promise<void> {
    for (const s of this.shards) {
      try {
        await s.queue.close();
      } catch {
        /* closing a queue whose Redis is away: nothing left to release */
      }
    }
  }
}

/** Job states that mean "this layout still holds work". */
const UNFINISHED_STATES = ['waiting', 'active', 'delayed', 'prioritized', 'waiting-children', 'failed'] as const;

/**
 * Records the shard layout in Redis, and guards a change of QUEUE_SHARDS: ids are only ordered
 * per prefix while a prefix keeps its shard, so a process refuses to start with another shard
 * count while the layout in Redis still holds work (ids in flight, jobs waiting, active,
 * delayed or dead-lettered). Once that layout is drained, the first process of the new one takes
 * over: it seeds every new shard's clock past the old clocks (a prefix's next id stays above its
 * last one) and records the new count. Marker: `{QUEUE_NAME}:shards` (no TTL: one small string
 * per deployment). An unreachable Redis fails it with a `RedisUnavailable`.
 */
export async function ensureShardLayout(
  client: RedisClient,
  queueName: string,
  layouts: readonly ShardLayout[],
): Promise<{ changedFrom?: number }> {
  const cluster = client instanceof Cluster;
  const want = layouts.length;
  const markerKey = shardMarkerKey(queueName);
  const stored = await redisCall(client.get(markerKey));
  // No marker: a deployment from before shards, which could only run one untagged shard on one
  // Redis (a Cluster refuses BullMQ's untagged keys), or nothing at all yet.
  const had = stored === null ? (cluster ? null : 1) : Number(stored);
  if (had === want || had === null) {
    if (stored === null) await redisCall(client.set(markerKey, String(want), 'NX'));
    return {};
  }
  const old = shardLayouts(queueName, had, cluster);
  const oldSet = ShardSet.open(client, old);
  try {
    let busy = 0;
    let lastMs = 0;
    for (const s of oldSet.shards) {
      const [counts, scan, clockMs] = await Promise.all([
        redisCall(s.queue.getJobCounts(...UNFINISHED_STATES)),
        s.ledger.scanPending(),
        s.ledger.lastMintedMs(),
      ]);
      busy += Object.values(counts).reduce((a, b) => a + b, 0) + (scan.oldest ? 1 : 0);
      lastMs = Math.max(lastMs, clockMs);
    }
    if (busy > 0) {
      throw new ConfigError(
        `QUEUE_SHARDS=${want}, but Redis holds queues laid out for QUEUE_SHARDS=${had} with work in them (batches in flight, queued or dead-lettered). ` +
          `Changing the shard count would break the per-app order of batch ids. Run with QUEUE_SHARDS=${had} until the queue is drained ` +
          `(stop the APIs, let the encoders finish, replay or remove dead letters), then start with the new count.`,
      );
    }
    for (const l of layouts) await new BatchLedger(client, l.namespace).seedClockAfter(lastMs);
    await redisCall(client.set(markerKey, String(want)));
    return { changedFrom: had };
  } finally {
    await oldSet.close();
  }
}
