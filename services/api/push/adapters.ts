import type { Queue } from 'bullmq';
import { GroupCommitter } from '../../../shared/group-commit.js';
import type { BatchLedger } from '../../../shared/ledger/ledger.js';
import {
  BATCH_JOB_OPTIONS,
  type BatchGroupJob,
  type BatchJob,
  GROUP_MAX_BODY_BYTES,
  JOB_NAME,
  groupJobId,
} from '../../../shared/redis/jobs/push.js';
import { asRedisUnavailable, commandNeverRan, redisCall } from '../../../shared/redis/connection.js';
import type { Shard, ShardSet } from '../../../shared/ledger/shard-set.js';
import type { ObjectStore } from '../../../shared/store/types.js';
import { type BatchFiles, EnqueueRefused, type EnqueueTicket, type JobSink, type Ledger } from './ports.js';

/** A deployment's queue and ledger, or (QUEUE_SHARDS) one per shard, routed by list prefix. */
export interface RedisBinding {
  queue: Queue;
  ledger: BatchLedger;
  shards?: ShardSet;
}

type Target = Pick<Shard, 'queue' | 'ledger'>;

/** The queue and ledger of a list prefix: its shard's, or the binding's own. */
export function routeOf(b: RedisBinding): (prefix: string) => Target {
  const { shards } = b;
  return shards ? (prefix) => shards.forPrefix(prefix) : () => b;
}

/** The push path's {@link Ledger} over the BatchLedger of each prefix's shard. */
export function redisLedger(b: RedisBinding): Ledger {
  const route = routeOf(b);
  return {
    mint: (prefix, claim) => route(prefix).ledger.mint(prefix, { idempotency: claim }),
    lookup: (prefix, claim) => route(prefix).ledger.lookup(claim),
    release: (prefix, batchId, forget) => route(prefix).ledger.release(prefix, batchId, forget),
    isPending: (prefix, batchId) => route(prefix).ledger.isPending(prefix, batchId),
    groupOf: (prefix, batchId) => route(prefix).ledger.groupOf(batchId),
  };
}

/**
 * The push path's {@link JobSink} over BullMQ: each job goes to its prefix's shard queue, alone or
 * (`groupMax` > 1, while an add to the same queue runs) in a group job with other pushes' batches.
 * A group's members are noted in the ledger with its add, so a member is never in the queue long
 * without the ledger knowing which job holds it.
 */
export class BullJobSink implements JobSink {
  /** One group committer per queue (shard), created on its first push. */
  private readonly committers = new Map<Queue, GroupCommitter<BatchJob>>();
  private readonly route: (prefix: string) => Target;

  constructor(
    private readonly binding: RedisBinding,
    private readonly opts: { groupMax: number; groupSize?(batches: number): void },
  ) {
    this.route = routeOf(binding);
  }

  submit(job: BatchJob): EnqueueTicket {
    const t = this.add(this.route(job.prefix), job);
    // The push may undo its mint only when the add surely never ran. Driver errors are classified
    // here, at the adapter: any other outage leaves as a RedisUnavailable.
    const done = t.done.catch((err: unknown) => {
      throw commandNeverRan(err) ? new EnqueueRefused(err) : asRedisUnavailable(err);
    });
    return { done, group: t.group, withdraw: t.withdraw };
  }

  async hasJob(prefix: string, jobId: string): Promise<boolean> {
    return (await redisCall(this.route(prefix).queue.getJobState(jobId))) !== 'unknown';
  }

  async awaitReplicas(prefix: string): Promise<void> {
    const { shards } = this.binding;
    if (!shards?.waitsForReplicas) return;
    await shards.replicate(shards.forPrefix(prefix));
  }

  private add(q: Target, job: BatchJob): EnqueueTicket {
    if (this.opts.groupMax <= 1) {
      const done = q.queue.add(JOB_NAME, job, { ...BATCH_JOB_OPTIONS, jobId: job.batchId }).then(() => undefined);
      return { done, group: () => [job], withdraw: () => false };
    }
    let c = this.committers.get(q.queue);
    if (!c) {
      const { queue: bq, ledger } = q;
      c = new GroupCommitter<BatchJob>({
        maxItems: this.opts.groupMax,
        maxBytes: GROUP_MAX_BODY_BYTES,
        sizeOf: (j) => j.bodyBytes,
        send: async (jobs) => {
          const [first, ...rest] = jobs as [BatchJob, ...BatchJob[]];
          if (rest.length === 0) {
            await bq.add(JOB_NAME, first, { ...BATCH_JOB_OPTIONS, jobId: first.batchId });
            return;
          }
          const id = groupJobId(first.batchId);
          const members = jobs.map((j) => j.batchId);
          const group: BatchGroupJob = { v: 2, batches: [...jobs] };
          // One round trip for both: the note and the add go out together on the producer's
          // connection. Only the reaper (after ORPHAN_GRACE_SECONDS) and a retried push (which
          // polls) read the note, so it need not land before the add, only with it.
          const [noted, added] = await Promise.allSettled([
            ledger.noteGroup(id, members),
            bq.add(JOB_NAME, group, { ...BATCH_JOB_OPTIONS, jobId: id }),
          ]);
          if (added.status === 'rejected') throw added.reason;
          // The job is in the queue: its members must be findable before the reaper's grace ends.
          if (noted.status === 'rejected') await ledger.noteGroup(id, members);
          this.opts.groupSize?.(jobs.length);
        },
      });
      this.committers.set(q.queue, c);
    }
    return c.submit(job);
  }
}

/** The push path's {@link BatchFiles} over an object store. */
export function storeFiles(store: ObjectStore): BatchFiles {
  return {
    // A one-key listing is cheaper than fetching an 8 MB object just to see that it exists.
    exists: async (key) => (await store.listKeys(key, { limit: 1 }))[0] === key,
  };
}
