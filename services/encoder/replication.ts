import { Cluster } from 'ioredis';
import type { RedisClient } from '../../shared/redis/connection.js';

/**
 * REDIS_WAIT_REPLICAS on the encoder's side (decision 0025): a job's file is written only once the
 * job is known to be on that many replicas, so a failover cannot leave a file for a job the
 * promoted replica never had (its push was answered 503, and the client's retry would become a
 * second batch with the same events).
 *
 * `WAIT n` counts the writes of the connection it is sent on, and the replication stream is one
 * ordered stream: a write made after the job was taken is replicated after the job's add (and
 * after the mint and the Idempotency-Key claim before it). So the step renews the job's lock
 * (`PEXPIRE`: a write only where the lock exists), then sends `WAIT`, then reads the lock, in one
 * pipeline on one connection; the job counts as replicated only when the renewal wrote, the
 * replicas acknowledged, and the lock read after the WAIT holds this worker's token (a token is
 * unique to one take of one job). That read also catches a connection that moved to another node
 * in between (a reconnect resends unanswered commands there): a WAIT on a fresh connection counts
 * nothing. No Lua here: a script loaded on the old master is unknown to the promoted replica, and
 * a pipelined EVALSHA on a Cluster is not reloaded there (NOSCRIPT on every call).
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
  /** the node did not hold the job's lock under this worker's token (another master, or the lock expired or was taken over) */
  | 'lost'
  /** the pipeline failed (connection lost, node down) */
  | 'error';

export const REPLICA_OUTCOMES: readonly ReplicaOutcome[] = ['replicated', 'timeout', 'lost', 'error'];

/** Renews `lockKey` (if it exists), WAITs for the replicas, reads the lock again: see {@link ReplicaWait}. */
export async function confirmReplicated(
  w: ReplicaWait,
  lockKey: string,
  token: string,
  lockMs: number,
): Promise<{ outcome: ReplicaOutcome; acked: number; error?: string }> {
  let res: [Error | null, unknown][] | null;
  try {
    res = await w.connection
      .pipeline()
      .pexpire(lockKey, lockMs)
      .call('WAIT', String(w.replicas), String(w.timeoutMs))
      .get(lockKey)
      .exec();
  } catch (err) {
    return { outcome: 'error', acked: 0, error: (err as Error).message };
  }
  const [renewed, waited, after] = res ?? [];
  if (!renewed || !waited || !after || renewed[0] || waited[0] || after[0]) {
    const failed = [renewed, waited, after].find((r) => r?.[0])?.[0];
    // A Cluster pipeline with a keyless command (WAIT) is not redirected as a whole after a
    // failover: the keyed commands answer MOVED. Refresh the slot map, so the next try (the job
    // is delayed) goes to the slot's new master.
    if (w.connection instanceof Cluster && failed && /^(MOVED|ASK) /.test(failed.message))
      w.connection.refreshSlotsCache();
    return { outcome: 'error', acked: 0, error: failed?.message ?? 'no reply' };
  }
  const acked = Number(waited[1]);
  if (Number(renewed[1]) !== 1 || after[1] !== token) return { outcome: 'lost', acked };
  return { outcome: acked >= w.replicas ? 'replicated' : 'timeout', acked };
}
