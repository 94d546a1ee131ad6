/**
 * The BullMQ adapter (shared/redis/bullmq-keys.ts) pinned to the BullMQ version package-lock.json
 * installs: a version change fails here first, so whoever upgrades BullMQ re-checks the key
 * layout the adapter (and scan_pending-2.lua) relies on. The layout is read from BullMQ's own
 * `Queue` (built on a lazy client that never connects), not from a copy of it.
 */
import { readFileSync } from 'node:fs';
import { Queue, QueueKeys } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BULLMQ_CHECKED_VERSION,
  LEGACY_QUEUE_PREFIX,
  jobKeysOf,
  parseQueueKey,
  queueKey,
  queueKeyPrefix,
} from '../../shared/redis/bullmq-keys.js';
import { rollupQueuePrefix, taggedQueuePrefix } from '../../shared/redis/keyspace.js';
import { shardLayouts } from '../../shared/redis/shards.js';

const readJson = (rel: string): Record<string, unknown> =>
  JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8')) as Record<string, unknown>;

const clients: Redis[] = [];
/** A BullMQ queue that never touches the network: a lazy client, no readiness wait, no meta write. */
function offlineQueue(name: string, prefix?: string): Queue {
  const connection = new Redis({ lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => null });
  connection.on('error', () => undefined);
  clients.push(connection);
  const queue = new Queue(name, {
    connection,
    ...(prefix === undefined ? {} : { prefix }),
    skipVersionCheck: true,
    skipMetasUpdate: true,
    skipWaitingForReady: true,
  });
  queue.on('error', () => undefined);
  return queue;
}

afterAll(() => {
  for (const c of clients) c.disconnect();
});

describe('BullMQ adapter', () => {
  it(`is checked against the BullMQ version that package-lock.json installs (${BULLMQ_CHECKED_VERSION})`, () => {
    const installed = String(readJson('../../node_modules/bullmq/package.json').version);
    const locked = String(
      (readJson('../../package-lock.json').packages as Record<string, { version?: string }>)['node_modules/bullmq']
        ?.version,
    );
    const hint =
      `BullMQ is now ${installed} (package-lock.json: ${locked}); shared/redis/bullmq-keys.ts was checked against ${BULLMQ_CHECKED_VERSION}. ` +
      'Re-check its key layout (job hash = toKey("") + id, the failed set, the prefix) and shared/redis/scripts/scan_pending-2.lua against the new version, ' +
      'run test/integration/keyspace.test.ts, then set BULLMQ_CHECKED_VERSION.';
    expect(installed, hint).toBe(locked);
    expect(installed, hint).toBe(BULLMQ_CHECKED_VERSION);
  });

  it('names the keys BullMQ builds: prefix layout, job hash prefix, failed set (default prefix and tagged)', () => {
    const byDefault = offlineQueue('events-ingest');
    expect(new QueueKeys().toKey('x', 'wait')).toBe(queueKey(LEGACY_QUEUE_PREFIX, 'x', 'wait'));
    for (const layout of [
      ...shardLayouts('events-ingest', 1, false),
      ...shardLayouts('events-ingest', 3, false),
      ...shardLayouts('q', 2, true),
    ]) {
      // The single-shard layout builds its queue without a prefix (openQueue with `producer`, shared/redis/queues.ts): BullMQ's default must be it.
      const queue =
        layout.queuePrefix === LEGACY_QUEUE_PREFIX ? byDefault : offlineQueue(layout.queueName, layout.queuePrefix);
      const head = queueKeyPrefix(layout.queuePrefix, layout.queueName);
      // Every key of the queue starts with `<prefix>:<queue>:`, and the adapter spells each as BullMQ does.
      expect(queue.toKey('')).toBe(head);
      for (const [part, key] of Object.entries(queue.keys)) {
        expect(key).toBe(queueKey(layout.queuePrefix, layout.queueName, part));
        expect(parseQueueKey(key, layout.queuePrefix)).toEqual({ queue: layout.queueName, rest: part });
      }
      expect(jobKeysOf(queue)).toEqual({ failed: `${head}failed`, jobKeyPrefix: head });
      expect(queueKey(layout.queuePrefix, layout.queueName, 'events')).toBe(queue.keys.events);
    }
    // The parts BullMQ 6.7 names for a queue (a new one is a layout change worth a look).
    expect(Object.keys(byDefault.keys).sort()).toEqual(
      [
        '',
        'active',
        'completed',
        'de',
        'delayed',
        'events',
        'failed',
        'id',
        'limiter',
        'marker',
        'meta',
        'paused',
        'pc',
        'prioritized',
        'repeat',
        'stalled',
        'stalled-check',
        'wait',
        'waiting-children',
      ].sort(),
    );
  });

  it('keeps the prefixes of today: `bull` for one shard on one Redis, `{<tag>}` otherwise; the rollup queue `bull` or `{<QUEUE_NAME>}`', () => {
    expect(LEGACY_QUEUE_PREFIX).toBe('bull');
    expect(taggedQueuePrefix('q:1')).toBe('{q:1}');
    expect(shardLayouts('q', 2, false).map((l) => l.queuePrefix)).toEqual(
      shardLayouts('q', 2, false).map((l) => `{${l.tag}}`),
    );
    expect(rollupQueuePrefix('q', false)).toBe('bull');
    expect(rollupQueuePrefix('q', true)).toBe('{q}');
    expect(parseQueueKey('bull:q-rollup:completed', 'bull')).toEqual({ queue: 'q-rollup', rest: 'completed' });
    expect(parseQueueKey('bull:q', 'bull')).toBeUndefined();
    expect(parseQueueKey('{q}:clock', '{q}')).toBeUndefined();
  });
});
