/**
 * The rollup job contract: its own BullMQ queue beside the batch queue, one job per
 * (list prefix, period). The planner adds jobs; any rollup process runs them.
 */
import type { JobsOptions } from 'bullmq';
import { z } from 'zod';

export const ROLLUP_JOB_NAME = 'roll-period';

/** The rollup queue of a deployment: `<QUEUE_NAME>-rollup`. */
export function rollupQueueName(queueName: string): string {
  return `${queueName}-rollup`;
}

/**
 * The rollup queue's BullMQ key prefix. On one Redis: BullMQ's default `bull` (keys
 * `bull:<QUEUE_NAME>-rollup:…`, as before Cluster support, whatever QUEUE_SHARDS is). On a
 * Cluster: the hash tag `{<QUEUE_NAME>}` (keys `{<QUEUE_NAME>}:<QUEUE_NAME>-rollup:…`), the tag
 * of the rollup service's other keys (shared/rollup/redis-keys.ts), so BullMQ's multi-key
 * scripts stay in one slot.
 */
export function rollupQueuePrefix(queueName: string, cluster: boolean): string {
  return cluster ? `{${queueName}}` : 'bull';
}

export const RollupJobSchema = z.object({
  v: z.literal(1),
  collection: z.string().min(1),
  /** List prefix (`events/myapp/`). */
  prefix: z.string().min(1),
  startMs: z.number().int().nonnegative(),
  /**
   * `roll`: the prefix's next unrolled period (moves the watermark); `reroll`: a period already
   * rolled that a replayed batch landed in (rewrites its file; the watermark stays).
   */
  kind: z.enum(['roll', 'reroll']),
});
export type RollupJob = z.infer<typeof RollupJobSchema>;

/**
 * Job id = prefix + period, so planners on several processes add each period once; a re-roll
 * adds the replayed batch id, so it is not swallowed by the completed first roll.
 */
export function rollupJobId(job: RollupJob, replayedId?: string): string {
  const base = `${job.kind}|${job.prefix}|${job.startMs}`;
  return replayedId === undefined ? base : `${base}|${replayedId}`;
}

/**
 * Retries with exponential backoff (2 s … ~8.5 min over 9 attempts); an exhausted job stays in
 * the failed set (dead letter), replayed with `npm run start:rollup -- --replay-failed`.
 * Completed jobs are kept (at most 1,000, one day) so a planner re-adding a done period is a no-op.
 */
export const ROLLUP_JOB_OPTIONS: JobsOptions = {
  attempts: 9,
  backoff: { type: 'exponential', delay: 2000 },
  removeOnComplete: { count: 1000, age: 86_400 },
  removeOnFail: false,
};
