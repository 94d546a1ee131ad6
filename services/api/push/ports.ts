import type { GroupTicket } from '../../../shared/group-commit.js';
import type { IdempotencyClaim, MintResult } from '../../../shared/ledger/ledger.js';
import type { BatchJob } from '../../../shared/redis/jobs/push.js';
import { withTimeout } from '../../../shared/timeout.js';

/**
 * The ports the push path runs over. Every method takes the batch's list prefix, so an adapter
 * can route it to the prefix's shard (QUEUE_SHARDS); the steps never know about shards, Redis,
 * BullMQ or HTTP. The Redis/BullMQ adapters are in ./adapters.ts; the unit tests use in-memory ones.
 */

/** The BatchLedger operations the push path needs (shared/ledger/ledger.ts). */
export interface Ledger {
  /** Mints an id and puts it in flight, or answers the id an earlier push with the same claim got. */
  mint(prefix: string, claim?: IdempotencyClaim): Promise<MintResult>;
  /** The claim's first push, if it is claimed within its window. Read-only. */
  lookup(prefix: string, claim: IdempotencyClaim): Promise<MintResult | null>;
  /** Takes the id out of flight and, with `forget`, gives the claim back. */
  release(prefix: string, batchId: string, forget?: IdempotencyClaim): Promise<unknown>;
  isPending(prefix: string, batchId: string): Promise<boolean>;
  /** The group job the batch rides in, or null. */
  groupOf(prefix: string, batchId: string): Promise<string | null>;
}

/** A job's add, as the sink (maybe a group commit) carries it. */
export type EnqueueTicket = GroupTicket<BatchJob>;

/**
 * `done` rejects with this when the add surely never ran (connection refused, a Redis refusal such
 * as OOM or READONLY): only then may the push undo its mint. Any other rejection (a timeout, a
 * reset connection) leaves the outcome unknown.
 */
export class EnqueueRefused extends Error {
  override readonly name = 'EnqueueRefused';
  constructor(cause: unknown) {
    super('the queue refused the job; it was not added', { cause });
  }
}

/** Where accepted batches go (the BullMQ queue of the prefix's shard). */
export interface JobSink {
  /** Adds the job, alone or with other pushes' jobs; see {@link EnqueueRefused} for `done`'s errors. */
  submit(job: BatchJob): EnqueueTicket;
  /** Whether the queue holds a job with this id (a batch's, or a group's), in any state. */
  hasJob(prefix: string, jobId: string): Promise<boolean>;
  /**
   * Resolves once what this process wrote for the prefix (mint and job) is on the replicas the
   * deployment asks for (REDIS_WAIT_REPLICAS); at once when it asks for none. Rejects otherwise.
   */
  awaitReplicas(prefix: string): Promise<void>;
}

/** The object store, as far as the push path reads it. */
export interface BatchFiles {
  /** Whether the batch file at `key` exists. */
  exists(key: string): Promise<boolean>;
}

/** Time, for the waits and deadlines of the push path. */
export interface Clock {
  /** Epoch ms (the batch ids' clock). */
  now(): number;
  sleep(ms: number): Promise<void>;
  /** Settles like `p`, or rejects once `ms` have passed. */
  within<T>(p: Promise<T>, ms: number, what: string): Promise<T>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  within: withTimeout,
};
