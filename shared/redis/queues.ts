/**
 * The queue factory: every BullMQ `Queue`, `Worker` and `QueueEvents` of the product (and of its
 * scripts and bench) is built here, from a {@link QueueAddress} that names the queue and its key
 * prefix. The addresses of the three job families come from {@link queueAddress}, which reads the
 * keyspace (./keyspace.ts), so no caller spells a queue name, a prefix or BullMQ's options.
 */
import {
  type ConnectionOptions,
  type Processor,
  Queue,
  QueueEvents,
  type QueueEventsOptions,
  type QueueOptions,
  Worker,
  type WorkerOptions,
} from 'bullmq';
import { LEGACY_QUEUE_PREFIX } from './bullmq-keys.js';
import type { RedisClient } from './connection.js';
import { eraseQueueName, rollupQueueName, rollupQueuePrefix } from './keyspace.js';

/** Where a queue's keys are: its BullMQ name and key prefix (`<prefix>:<name>:…`). */
export interface QueueAddress {
  name: string;
  prefix: string;
}

/** What a queue is opened on: one of our connections, or connection options (scripts, bench, tests). */
export type QueueConnection = RedisClient | ConnectionOptions;

/** The queues of a deployment named `queueName` (QUEUE_NAME). */
export const queueAddress = {
  /** One shard's batch queue (the push job): the shard's layout names it (./shards.ts). */
  push(shard: { queueName: string; queuePrefix?: string }): QueueAddress {
    return { name: shard.queueName, prefix: shard.queuePrefix ?? LEGACY_QUEUE_PREFIX };
  },
  /** The rollup queue `<QUEUE_NAME>-rollup`: `bull` on one Redis, `{<QUEUE_NAME>}` on a Cluster. */
  rollup(queueName: string, cluster: boolean): QueueAddress {
    return { name: rollupQueueName(queueName), prefix: rollupQueuePrefix(queueName, cluster) };
  },
  /** The erasure queue `<QUEUE_NAME>-erase`, beside the rollup queue (same prefix). */
  erase(queueName: string, cluster: boolean): QueueAddress {
    return { name: eraseQueueName(queueName), prefix: rollupQueuePrefix(queueName, cluster) };
  },
} as const;

/** BullMQ's connection option: our clients are ioredis instances, which BullMQ takes as they are. */
const asConnection = (c: QueueConnection): ConnectionOptions => c as ConnectionOptions;

/**
 * A queue at `at`. `producer`: skip BullMQ's Redis version check. BullMQ makes it once, when the
 * queue is built, and a failed check (an `INFO` that passes the producer's 2 s command timeout,
 * e.g. while the event loop is busy at start) leaves the queue failing every later call until the
 * process restarts: every push would answer 503. A producer uses no version-dependent command;
 * workers still make the check on their own connection.
 */
export function openQueue(
  at: QueueAddress,
  connection: QueueConnection,
  o: { producer?: boolean } & Omit<QueueOptions, 'connection' | 'prefix'> = {},
): Queue {
  const { producer, ...rest } = o;
  return new Queue(at.name, {
    ...rest,
    connection: asConnection(connection),
    prefix: at.prefix,
    ...(producer ? { skipVersionCheck: true } : {}),
  });
}

/** A worker taking the jobs of the queue at `at` with `processor`. */
export function openWorker<D = unknown, R = unknown>(
  at: QueueAddress,
  processor: Processor<D, R>,
  connection: QueueConnection,
  o: Omit<WorkerOptions, 'connection' | 'prefix'> = {},
): Worker<D, R> {
  return new Worker<D, R>(at.name, processor, { ...o, connection: asConnection(connection), prefix: at.prefix });
}

/** The event stream of the queue at `at` (completed, failed, …). */
export function openQueueEvents(
  at: QueueAddress,
  connection: QueueConnection,
  o: Omit<QueueEventsOptions, 'connection' | 'prefix'> = {},
): QueueEvents {
  return new QueueEvents(at.name, { ...o, connection: asConnection(connection), prefix: at.prefix });
}
