/**
 * The rollup service's own Redis keys (the ledger's keys are only read, through BatchLedger),
 * named in shared/redis/keyspace.ts (`rollupLockKey`, `rollupDirtyKey`). Each family lives under one hash tag, so every command and script on it is single-slot on a
 * Redis Cluster. Every family is bounded; sizes in docs/reliability.md:
 * - `{<QUEUE_NAME>}:rollup:lock:<prefix>` string, one per prefix being rolled (or retained, or
 *   committed to its Iceberg table: services/rollup/iceberg-committer.ts) now, expires
 *   after LOCK_TTL_MS unless renewed by the live holder (one key per command);
 * - `{<ns>}:rollup:dirty` sorted set of batches replayed into rolled periods, capped at
 *   MAX_DIRTY members, each removed once its re-roll job is queued. `ns` is the ledger namespace
 *   of the replayed batch's shard (`<QUEUE_NAME>` with one shard on one Redis), so the replay
 *   writes it beside the shard's other keys and the planner reads one set per shard.
 */
import { type BestEffortSink, bestEffort } from '../best-effort.js';
import { rollupDirtyKey, rollupLockKey } from './keyspace.js';
import type { RedisClient } from './connection.js';
import { withScripts } from './scripts.js';

export const LOCK_TTL_MS = 10_000;
export const MAX_DIRTY = 10_000;

const lockKey = rollupLockKey;
export const dirtyKey = rollupDirtyKey;

/** A per-prefix lock held while a rollup job reads and rewrites the prefix's manifest. */
export interface PrefixLock {
  /** True while this holder still owns the lock (checked before every manifest write). */
  held(): Promise<boolean>;
  release(): Promise<void>;
}

/**
 * Takes the prefix's lock, or returns null when another job holds it. Renewed every third of its
 * TTL until released. A renewal or a release that fails goes to `sink` (`rollup_lock_renew`,
 * `rollup_lock_release`): a missed renewal shows in `held()` once the key expires, a failed
 * release leaves the lock to expire (LOCK_TTL_MS), so the next job of the prefix waits that long at most.
 */
export async function acquirePrefixLock(
  redis: RedisClient,
  ns: string,
  prefix: string,
  token: string,
  sink: BestEffortSink,
): Promise<PrefixLock | null> {
  const key = lockKey(ns, prefix);
  const ok = await redis.set(key, token, 'PX', LOCK_TTL_MS, 'NX');
  if (ok !== 'OK') return null;
  let lost = false;
  const timer = setInterval(
    () => {
      void bestEffort(
        'rollup_lock_renew',
        withScripts(redis)
          .ingestLockRenew(key, token, String(LOCK_TTL_MS))
          .then((r) => {
            if (r !== 1) lost = true;
          }),
        sink,
      );
    },
    Math.floor(LOCK_TTL_MS / 3),
  );
  timer.unref();
  return {
    async held() {
      if (lost) return false;
      return (await redis.get(key)) === token;
    },
    async release() {
      clearInterval(timer);
      await bestEffort('rollup_lock_release', withScripts(redis).ingestLockRelease(key, token), sink);
    },
  };
}

/**
 * Records that `batchId` of `prefix` was put back in the queue (a dead-letter replay), so the
 * rollup planner re-rolls its period once the batch is written, if that period is already rolled.
 */
export async function noteReplayedBatch(
  redis: RedisClient,
  ns: string,
  prefix: string,
  batchId: string,
): Promise<void> {
  await redis
    .multi()
    .zadd(dirtyKey(ns), 'NX', String(Date.now()), `${prefix}\n${batchId}`)
    .zremrangebyrank(dirtyKey(ns), 0, -(MAX_DIRTY + 1))
    .exec();
}

/** The oldest replay notes, at most `count`. */
export async function replayedBatches(
  redis: RedisClient,
  ns: string,
  count: number,
): Promise<{ member: string; prefix: string; batchId: string }[]> {
  const members = await redis.zrange(dirtyKey(ns), '0', String(count - 1));
  return members.flatMap((member) => {
    const cut = member.lastIndexOf('\n');
    return cut < 0 ? [] : [{ member, prefix: member.slice(0, cut), batchId: member.slice(cut + 1) }];
  });
}

/** Forgets a replay note (its re-roll is queued, or it needs none). */
export async function forgetReplayedBatch(redis: RedisClient, ns: string, member: string): Promise<void> {
  await redis.zrem(dirtyKey(ns), member);
}
