import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from '../../shared/redis/connection.js';
import { withScripts } from '../../shared/redis/scripts.js';

/**
 * REDIS_WAIT_REPLICAS on the encoder's side (decision 0027): a job's file is written only once the
 * job is known to be on that many replicas, so a failover cannot leave a file for a job the
 * promoted replica never had (its push was answered 503, and the client's retry would become a
 * second batch with the same events).
 *
 * `WAIT n` counts the writes of the connection it is sent on, and the replication stream is one
 * ordered stream: a write made after the job was taken is replicated after the job's add (and
 * after the mint and the Idempotency-Key claim before it). So the step renews the job's lock
 * (shared/redis/scripts/lock_renew-1.lua: a write only where the lock holds this worker's token,
 * i.e. on a node that has the job), then sends `WAIT`, then reads the lock again, in one pipeline
 * on one connection. The last read catches a connection that moved to another node in between
 * (a reconnect resends unanswered commands there): a WAIT on a fresh connection counts nothing.
 * On a Cluster the pipeline goes to the master of the lock's slot, the shard that holds the queue.
 */
export interface ReplicaWait {
  /** REDIS_WAIT_REPLICAS (> 0). */
  replicas: number;
  /** REDIS_WAIT_TIMEOUT_MS. */
  timeoutMs: number;
  /** The encoder's ledger connection (not BullMQ's: a WAIT blocks its connection meanwhile). */
  connection: RedisClient;
}

/** What the check found: `replicated`, or why the job must not be written now. */
export type ReplicaOutcome =
  /** the lock was renewed on a master and `replicas` replicas acknowledged it */
  | 'replicated'
  /** fewer replicas acknowledged within the timeout */
  | 'timeout'
  /** the node did not hold the job's lock under this worker's token (another master, or the lock expired) */
  | 'lost'
  /** the pipeline failed (connection lost, node down) */
  | 'error';

export const REPLICA_OUTCOMES: readonly ReplicaOutcome[] = ['replicated', 'timeout', 'lost', 'error'];

type LockPipeline = ChainableCommander & {
  ingestLockRenew(lock: string, token: string, ttlMs: string): LockPipeline;
};

/** Renews `lockKey` (if it holds `token`), WAITs for the replicas, reads the lock again: see {@link ReplicaWait}. */
export async function confirmReplicated(
  w: ReplicaWait,
  lockKey: string,
  token: string,
  lockMs: number,
): Promise<{ outcome: ReplicaOutcome; acked: number }> {
  let res: [Error | null, unknown][] | null;
  try {
    res = await (withScripts(w.connection).pipeline() as LockPipeline)
      .ingestLockRenew(lockKey, token, String(lockMs))
      .call('WAIT', String(w.replicas), String(w.timeoutMs))
      .get(lockKey)
      .exec();
  } catch {
    return { outcome: 'error', acked: 0 };
  }
  const [renewed, waited, after] = res ?? [];
  if (!renewed || !waited || !after || renewed[0] || waited[0] || after[0]) return { outcome: 'error', acked: 0 };
  const acked = Number(waited[1]);
  if (Number(renewed[1]) !== 1 || after[1] !== token) return { outcome: 'lost', acked };
  return { outcome: acked >= w.replicas ? 'replicated' : 'timeout', acked };
}
