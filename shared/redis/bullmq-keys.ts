/**
 * The one place that knows how BullMQ lays out its Redis keys. Everything else asks here (or asks
 * a `Queue`): the product never spells a BullMQ key by hand.
 *
 * What we rely on, as of the BullMQ version below (checked by test/unit/bullmq-keys.test.ts,
 * which fails when the installed version changes, and by test/integration/keyspace.test.ts
 * against a real Redis):
 * - every key of a queue starts with `<prefix>:<queue name>:` (`QueueKeys.toKey`), where the
 *   prefix is the queue's `prefix` option, `bull` by default;
 * - a job's hash is `<prefix>:<queue name>:<job id>` (`queue.toKey('') + id`): it exists exactly
 *   while the job does, whatever its state;
 * - the failed set `queue.keys.failed` is a sorted set whose members are the failed jobs' ids;
 * - an active job's lock is `<job hash>:lock`, holding the token of the worker that took it
 *   ({@link jobLockKey}; the encoder renews it before a write with REDIS_WAIT_REPLICAS > 0).
 *
 * shared/redis/scripts/scan_pending-2.lua (the reaper's one-call pass) reads the last two directly: it
 * checks `EXISTS <job hash>` and `ZSCORE <failed set> <id>` for each old in-flight id, with the
 * names it is given by {@link jobKeysOf}. That script is the only code that reads BullMQ's keys
 * without going through BullMQ; if a BullMQ upgrade changes any of the above, it must change too.
 */
import type { Queue } from 'bullmq';

/**
 * The BullMQ version this layout was checked against: the one package-lock.json installs.
 * test/unit/bullmq-keys.test.ts fails when the installed version differs, so whoever upgrades
 * BullMQ re-checks this module (and scan_pending-2.lua) and then moves this constant.
 */
export const BULLMQ_CHECKED_VERSION = '6.7.0';

/** BullMQ's default key prefix: the single-shard, single-Redis layout keeps it. */
export const LEGACY_QUEUE_PREFIX = 'bull';

/** What every key BullMQ writes for queue `queueName` under `prefix` starts with: `<prefix>:<queue>:`. */
export function queueKeyPrefix(prefix: string, queueName: string): string {
  return `${prefix}:${queueName}:`;
}

/** One of a queue's own keys, e.g. `events` (its event stream) or `failed`; as `Queue.toKey(part)` builds it. */
export function queueKey(prefix: string, queueName: string, part: string): string {
  return `${queueKeyPrefix(prefix, queueName)}${part}`;
}

/** The BullMQ key names the reaper's scan checks a job by (see scan_pending-2.lua). */
export interface JobKeys {
  /** The queue's failed set. */
  failed: string;
  /** Prefix of a job's hash: `jobKeyPrefix + id`. */
  jobKeyPrefix: string;
}

/** The key names of `queue` the reaper checks jobs by, asked from BullMQ itself (never built here). */
export function jobKeysOf(queue: Queue): JobKeys {
  return { failed: queue.keys.failed ?? queue.toKey('failed'), jobKeyPrefix: queue.toKey('') };
}

/** BullMQ forbids `:` in a queue name, and QUEUE_NAME is `[A-Za-z0-9_-]{1,64}` (shared/config.ts). */
const QUEUE_NAME_RE = /^[A-Za-z0-9_-]+$/;

/**
 * The queue a BullMQ key of prefix `prefix` belongs to, or undefined when `key` is not under that
 * prefix. `rest` is the part after `<prefix>:<queue>:` (a job id, `wait`, `events`, …).
 */
export function parseQueueKey(key: string, prefix: string): { queue: string; rest: string } | undefined {
  if (!key.startsWith(`${prefix}:`)) return undefined;
  const tail = key.slice(prefix.length + 1);
  const cut = tail.indexOf(':');
  if (cut <= 0) return undefined;
  const queue = tail.slice(0, cut);
  return QUEUE_NAME_RE.test(queue) ? { queue, rest: tail.slice(cut + 1) } : undefined;
}

/**
 * The lock of an active job: `<job hash>:lock` (`queue.toKey(id) + ':lock'`), a string holding
 * the token of the worker that took it (BullMQ's moveToActive sets it, the worker renews it),
 * there only while that worker holds the job. The encoder renews it itself once (`PEXPIRE`)
 * before it writes a file with REDIS_WAIT_REPLICAS > 0 (services/encoder/replication.ts): that
 * write, on a node that holds the job, is what its `WAIT` then covers.
 */
export function jobLockKey(queue: { toKey(part: string): string }, jobId: string): string {
  return `${queue.toKey(jobId)}:lock`;
}
