/**
 * The roll job: one BullMQ job rolls one period of one list prefix (services/rollup/roll.ts's
 * rollPeriod) under the prefix lock; its worker delays a job that cannot run yet, retries a
 * failed one and takes over the job of a rollup process that died (BullMQ's stalled check).
 */
import { DelayedError, type Job, UnrecoverableError, type Worker } from 'bullmq';
import { openWorker } from '../../shared/redis/queues.js';
import type { RedisClient } from '../../shared/redis/connection.js';
import { type RollupJob, RollupJobSchema } from '../../shared/redis/jobs/rollup.js';
import { type RollOutcome, RollupNotReadyError, rollPeriod } from './roll.js';
import { finalHorizon } from './plan.js';
import { type RollupDeps, assertLayout, ledgerOf, lockedRollContext, takePrefixLock } from './context.js';
import { periodFinal } from './planner.js';

/** A rollup job's BullMQ lock; a killed rollup process's job is retried after about this plus the stalled check. */
export const JOB_LOCK_MS = 10_000;

/** How long a job that cannot run yet waits before it is tried again: 1.5 to 2.5 s. */
function notReadyDelayMs(): number {
  return 1500 + Math.floor(Math.random() * 1000);
}

/** What a roll job returns (kept with the completed job). */
export interface RollJobResult {
  outcome: RollOutcome['outcome'];
  rows: number;
  watermarkMs: number;
}

/**
 * Rolls the job's period under the prefix lock. Throws RollupNotReadyError while another job
 * holds the lock, Redis is laid out for another QUEUE_SHARDS, or the period has batches in flight.
 */
export async function rollJob(deps: RollupDeps, job: Job): Promise<RollJobResult> {
  const parsed = RollupJobSchema.safeParse(job.data);
  if (!parsed.success) throw new UnrecoverableError(`bad rollup job: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
  const data = parsed.data;
  const lock = await takePrefixLock(deps, data.prefix, job.id ?? '');
  if (!lock) throw new RollupNotReadyError(`prefix ${data.prefix} is being rolled by another job`);
  const t0 = performance.now();
  try {
    await assertLayout(deps);
    const { horizonMs } = await finalHorizon(ledgerOf(deps, data.prefix), data.prefix);
    if (!periodFinal(horizonMs, data.startMs, deps.env.ROLLUP_PERIOD_SECONDS * 1000))
      throw new RollupNotReadyError(`period ${data.startMs} of ${data.prefix} still has batches in flight`);
    const r = await rollPeriod(lockedRollContext(deps, data.prefix, lock), data.prefix, data.startMs, data.kind);
    recordRoll(deps, data, r, t0);
    return { outcome: r.outcome, rows: r.rows, watermarkMs: r.watermarkMs };
  } finally {
    await lock.release();
  }
}

/** Counts and logs a finished roll (keys and counts only). */
function recordRoll(deps: RollupDeps, data: RollupJob, r: RollOutcome, t0: number): void {
  const { metrics } = deps;
  metrics.jobs.inc({ outcome: r.outcome });
  if (r.outcome === 'rolled') {
    metrics.files.inc(r.files.length);
    metrics.rows.inc(r.rows);
    metrics.bytes.inc(r.bytes);
    metrics.duration.observe((performance.now() - t0) / 1000);
  }
  deps.logger.info(
    {
      prefix: data.prefix,
      startMs: data.startMs,
      kind: data.kind,
      outcome: r.outcome,
      files: r.files.length,
      rows: r.rows,
      bytes: r.bytes,
      deleted: r.deleted,
      watermarkMs: r.watermarkMs,
      ms: Math.round(performance.now() - t0),
    },
    'rollup job done',
  );
}

/** The worker's processor. Not ready (batches in flight, another job on the prefix): wait and retry without using up an attempt. */
function rollProcessor(deps: RollupDeps): (job: Job, token?: string) => Promise<unknown> {
  return async function processRollJob(job, token) {
    try {
      return await rollJob(deps, job);
    } catch (err) {
      if (err instanceof RollupNotReadyError && token !== undefined) {
        deps.metrics.jobs.inc({ outcome: 'delayed' });
        deps.logger.debug({ jobId: job.id, reason: err.message }, 'rollup job not ready; delayed');
        // Jittered, so a retry does not land in step with a planner pass (every whole interval) round after round.
        await job.moveToDelayed(Date.now() + notReadyDelayMs(), token);
        throw new DelayedError();
      }
      throw err;
    }
  };
}

export interface RollWorkerOptions {
  queueName: string;
  /** BullMQ key prefix of the rollup queue. */
  prefix: string;
  connection: RedisClient;
  /** Called after a forward roll (`roll`, not `reroll`) completed: the prefix's next period may be due already. */
  onRolled: (prefix: string) => void;
}

/** Starts the worker that runs roll jobs one at a time, with its retry and dead-letter accounting. */
export function startRollWorker(deps: RollupDeps, o: RollWorkerOptions): Worker {
  const { metrics, logger } = deps;
  const worker = openWorker({ name: o.queueName, prefix: o.prefix }, rollProcessor(deps), o.connection, {
    concurrency: 1,
    lockDuration: JOB_LOCK_MS,
    stalledInterval: 5000,
    maxStalledCount: 20,
  });
  worker.on('failed', (job, err) => {
    if (!job) return;
    const final = err instanceof UnrecoverableError || job.attemptsMade >= (job.opts.attempts ?? 1);
    metrics.jobs.inc({ outcome: final ? 'failed' : 'retried' });
    const log = { jobId: job.id, attempt: job.attemptsMade, reason: err.message };
    if (final) logger.error(log, 'rollup job dead-lettered');
    else logger.warn(log, 'rollup job will be retried');
  });
  worker.on('completed', (job) => {
    const data = job.data as Partial<RollupJob>;
    if (data.kind === 'roll' && typeof data.prefix === 'string') o.onRolled(data.prefix);
  });
  worker.on('error', (err) => logger.warn({ err: err.message }, 'rollup worker error'));
  return worker;
}
