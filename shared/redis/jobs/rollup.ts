/**
 * The rollup job contract: its own BullMQ queue beside the batch queue, one job per
 * (list prefix, period). The planner adds jobs; any rollup process runs them.
 */
import type { JobsOptions } from 'bullmq';
import { z } from 'zod';
import { rollupQueueName, rollupQueuePrefix } from '../keyspace.js';

/**
 * The rollup queue's name (`<QUEUE_NAME>-rollup`) and BullMQ key prefix (`bull` on one Redis,
 * `{<QUEUE_NAME>}` on a Cluster) are named in shared/redis/keyspace.ts and shared/redis/bullmq-keys.ts.
 */
export { rollupQueueName, rollupQueuePrefix };

export const ROLLUP_JOB_NAME = 'roll-period';

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
