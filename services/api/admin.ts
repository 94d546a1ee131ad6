import express, { type NextFunction, type Request, type Response, type Router } from 'express';
import type { Job, Queue } from 'bullmq';
import { type RedisClient, asRedisUnavailable } from '../../shared/redis/connection.js';
import type { ShardSet } from '../../shared/ledger/shard-set.js';
import { RedisUnavailable, TimeoutError } from '../../shared/errors.js';
import { ApiError } from './error-map.js';
import { type BestEffortSink, bestEffort } from '../../shared/best-effort.js';
import { queryInteger } from './params.js';
import { FailedLimit, ReplayId, fits } from './contract/schemas.js';
import { withTimeout } from '../../shared/timeout.js';
import { batchIdMs } from '../../shared/ids.js';
import type { BatchLedger } from '../../shared/ledger/ledger.js';
import {
  BATCH_JOB_OPTIONS,
  type BatchJob,
  BatchGroupJobSchema,
  BatchJobSchema,
  JOB_NAME,
  isGroupJobId,
  isGroupPayload,
  packParquet,
  unpackBody,
} from '../../shared/redis/jobs/push.js';
import { restampParquet } from '../../shared/parquet/encode.js';
import { noteReplayedBatch } from '../../shared/redis/rollup-keys.js';
import { type RoleResolver, TokenRoles, requireRoles } from './auth.js';
import { noImplicitConditional } from './edge/conditional.js';
import { methodNotAllowed } from './edge/methods.js';

/** One dead-lettered batch, as the failed listing shows it (never its events). */
export interface FailedBatch {
  batchId: string;
  key: string | null;
  events: number | null;
  attemptsMade: number;
  failedReason: string;
  failedAt: number | null;
  /** A group job (QUEUE_GROUP_MAX; `batchId` is then its job id, `g-<first member>`): the batch ids riding in it. */
  members?: string[];
}

/** What happened to one batch asked to be replayed. */
export interface ReplayOutcome {
  batchId: string;
  /** `replayed`: back to waiting under its own id. `reissued`: queued under `newBatchId`, the failed job removed. */
  outcome: 'replayed' | 'reissued' | 'not-failed' | 'bad-job';
  newBatchId?: string;
  detail?: string;
}

/** An admin call that has not finished by then (Redis hung or unreachable) answers 503. */
const ADMIN_TIMEOUT_MS = 10_000;

/**
 * An admin or erase call's error, by type: a call that did not finish in time, or a driver error
 * that says Redis is unreachable (made a `RedisUnavailable` here, at the call), is the queue being
 * unavailable; anything else is left as it is.
 */
export function queueCallError(err: unknown): unknown {
  const typed = asRedisUnavailable(err);
  return typed instanceof TimeoutError || typed instanceof RedisUnavailable
    ? new ApiError('unavailable', 'queue unavailable (Redis); retry later', { 'Retry-After': '1' })
    : typed;
}

/** `reissue`: under new ids. `bestEffort`: where a failed clean-up (a release, the old job's removal) is logged and counted. */
export interface ReplayOptions {
  reissue?: boolean;
  bestEffort?: BestEffortSink;
}

/** At most this many dead letters are listed or replayed per call, so one call stays bounded. */
export const MAX_REPLAY_BATCH = 1000;

function describeFailed(job: Job): FailedBatch {
  const data = job.data as Partial<BatchJob>;
  if (isGroupPayload(job.data)) {
    const batches = Array.isArray((job.data as { batches?: unknown }).batches)
      ? (job.data as { batches: Partial<BatchJob>[] }).batches
      : [];
    return {
      batchId: String(job.id),
      key: null,
      events: batches.reduce((n, b) => n + (typeof b.events === 'number' ? b.events : 0), 0),
      attemptsMade: job.attemptsMade,
      failedReason: job.failedReason ?? '',
      failedAt: job.finishedOn ?? null,
      members: batches.map((b) => String(b.batchId)),
    };
  }
  return {
    batchId: String(job.id),
    key: typeof data.key === 'string' ? data.key : null,
    events: typeof data.events === 'number' ? data.events : null,
    attemptsMade: job.attemptsMade,
    failedReason: job.failedReason ?? '',
    failedAt: job.finishedOn ?? null,
  };
}

/** Dead-lettered batches, oldest first (at most `limit`). */
export async function listFailed(queue: Queue, limit = 100): Promise<{ total: number; items: FailedBatch[] }> {
  const n = Math.max(1, Math.min(limit, MAX_REPLAY_BATCH));
  const [total, jobs] = await Promise.all([queue.getFailedCount(), queue.getJobs(['failed'], 0, n - 1, true)]);
  return { total, items: jobs.filter((j): j is Job => Boolean(j)).map(describeFailed) };
}

/**
 * Replays one dead-lettered batch. Default: the job goes back to waiting under its own id with
 * fresh attempts (its file gets the id's original instant). With `reissue`, its body is queued
 * again under a NEW id (so clients polling `?after=` past the old id still see it) and the
 * failed job is removed.
 */
export async function replayOne(
  queue: Queue,
  ledger: BatchLedger,
  batchId: string,
  opts: ReplayOptions = {},
): Promise<ReplayOutcome> {
  const job = await queue.getJob(batchId);
  if (!job || (await job.getState()) !== 'failed') return { batchId, outcome: 'not-failed' };
  if (isGroupPayload(job.data)) return replayGroup(queue, ledger, job, opts);
  const parsed = BatchJobSchema.safeParse(job.data);
  if (!parsed.success)
    return { batchId, outcome: 'bad-job', detail: 'job payload does not match the contract; left in the failed set' };
  const data = parsed.data;
  if (!opts.reissue) {
    // Back in flight before the retry so the list route waits for it again; the ledger's replay
    // mark keeps the reaper (which may have read the job as failed a moment ago) from undoing it.
    await ledger.markReplaying(data.prefix, batchId);
    // If its period is already rolled, the rollup planner re-rolls it once the batch is written.
    // The queue's own connection (an ioredis client or Cluster: the queue is built on one) reaches
    // the shard's Redis; the note goes under the shard's tag, where the rollup planner reads it.
    await noteReplayedBatch(
      (await queue.backend.client) as unknown as RedisClient,
      ledger.namespace,
      data.prefix,
      batchId,
    );
    await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    return { batchId, outcome: 'replayed' };
  }
  const { batchId: newId } = await ledger.mint(data.prefix);
  const oldSuffix = `${batchId}.parquet`;
  const key = data.key.endsWith(oldSuffix) ? `${data.key.slice(0, -oldSuffix.length)}${newId}.parquet` : null;
  if (!key) {
    await ledger.release(data.prefix, newId);
    return { batchId, outcome: 'bad-job', detail: 'job key does not end with its batch id; left in the failed set' };
  }
  const next: BatchJob = { ...data, batchId: newId, key, receivedAt: batchIdMs(newId) };
  if (data.encoding === 'parquet') {
    // A file the API encoded carries the old id's instant in every row; the new id's goes in
    // instead (rollups and the analyst view place rows by received_at = the id's instant).
    try {
      const file = restampParquet(await unpackBody(data), next.receivedAt);
      Object.assign(next, packParquet(file, data.jsonBytes));
    } catch (err) {
      await ledger.release(data.prefix, newId);
      return {
        batchId,
        outcome: 'bad-job',
        detail: `job payload cannot be unpacked (${(err as Error).message}); left in the failed set`,
      };
    }
  }
  try {
    await queue.add(JOB_NAME, next, { ...BATCH_JOB_OPTIONS, jobId: newId });
  } catch (err) {
    // The add's error is the answer; a new id left in flight is freed by the reaper (ORPHAN_GRACE_SECONDS).
    await bestEffort('replay_release', ledger.release(data.prefix, newId), opts.bestEffort ?? {});
    throw err;
  }
  // The new job holds the data now; removing the old one keeps `--all` from reissuing it twice.
  await bestEffort('replay_remove_old_job', job.remove(), opts.bestEffort ?? {});
  return { batchId, outcome: 'reissued', newBatchId: newId };
}

/**
 * A dead-lettered group job goes back to waiting whole, each member back in flight first (as
 * `replayOne` does for one batch). Reissuing under new ids is for single batches only.
 */
async function replayGroup(queue: Queue, ledger: BatchLedger, job: Job, opts: ReplayOptions): Promise<ReplayOutcome> {
  const batchId = String(job.id);
  const parsed = BatchGroupJobSchema.safeParse(job.data);
  if (!parsed.success)
    return {
      batchId,
      outcome: 'bad-job',
      detail: 'group job payload does not match the contract; left in the failed set',
    };
  if (opts.reissue)
    return {
      batchId,
      outcome: 'bad-job',
      detail: 'a group job is replayed under its own ids (without reissue); left in the failed set',
    };
  await ledger.noteGroup(
    batchId,
    parsed.data.batches.map((b) => b.batchId),
  );
  for (const b of parsed.data.batches) {
    await ledger.markReplaying(b.prefix, b.batchId);
    await noteReplayedBatch(
      (await queue.backend.client) as unknown as RedisClient,
      ledger.namespace,
      b.prefix,
      b.batchId,
    );
  }
  await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
  return { batchId, outcome: 'replayed' };
}

/** Replays `ids`, or every dead letter (up to MAX_REPLAY_BATCH, oldest first) when `ids` is 'all'. */
export async function replayFailed(
  queue: Queue,
  ledger: BatchLedger,
  ids: readonly string[] | 'all',
  opts: ReplayOptions = {},
): Promise<ReplayOutcome[]> {
  const targets =
    ids === 'all'
      ? (await queue.getJobs(['failed'], 0, MAX_REPLAY_BATCH - 1, true))
          .filter((j): j is Job => Boolean(j))
          .map((j) => String(j.id))
      : ids;
  const out: ReplayOutcome[] = [];
  for (const id of targets.slice(0, MAX_REPLAY_BATCH)) out.push(await replayOne(queue, ledger, id, opts));
  return out;
}

export interface AdminRouterOptions {
  queue: Queue;
  ledger: BatchLedger;
  /** The connection the queue uses (kept for callers; an outage is told from a call's error type, never from the connection's state). */
  redis: RedisClient;
  /** QUEUE_SHARDS: dead letters are listed and replayed on every shard (a batch id names its shard). */
  shards?: ShardSet;
  tokens: TokenRoles | ReadonlyMap<string, readonly string[]>;
  /** The router's auth hook (JWT and tokens); when given, `tokens` is not used. */
  roleResolver?: RoleResolver;
  /** Where a replay's failed clean-up is logged and counted. */
  bestEffort?: BestEffortSink;
}

/**
 * Admin-only routes (role `admin`): `GET /admin/failed?limit=` lists dead letters;
 * `POST /admin/replay/<batchId>` and `POST /admin/replay` (all) replay them, `?reissue=1` under new ids.
 */
export function createAdminRouter(o: AdminRouterOptions): Router {
  const tokens = o.tokens instanceof TokenRoles ? o.tokens : new TokenRoles(o.tokens);
  const router = express.Router({ caseSensitive: true });
  // Only pull answers conditional requests; an admin listing is never an empty 304.
  router.use('/admin', noImplicitConditional);
  const admin = requireRoles(['admin'], o.roleResolver ?? tokens);
  // Every admin call is Redis work: bounded in time, and a Redis that is down or hung answers
  // 503 + Retry-After like a push does, never 500.
  const wrap =
    (fn: (req: Request, res: Response) => Promise<void>) =>
    (req: Request, res: Response, next: NextFunction): void => {
      withTimeout(fn(req, res), ADMIN_TIMEOUT_MS, 'admin call').catch((err: unknown) => next(queueCallError(err)));
    };
  const reissueOf = (req: Request): boolean => req.query.reissue === '1' || req.query.reissue === 'true';

  router.get(
    '/admin/failed',
    admin,
    wrap(async (req, res) => {
      const limit = queryInteger(FailedLimit, 'limit', req.query.limit);
      if (!o.shards || o.shards.count === 1) return void res.json(await listFailed(o.queue, limit));
      const parts = await Promise.all(o.shards.shards.map((s) => listFailed(s.queue, limit)));
      const items = parts
        .flatMap((p) => p.items)
        .sort((a, b) => (a.failedAt ?? 0) - (b.failedAt ?? 0) || (a.batchId < b.batchId ? -1 : 1));
      res.json({ total: parts.reduce((n, p) => n + p.total, 0), items: items.slice(0, limit) });
    }),
  );
  router.post(
    '/admin/replay/:batchId',
    admin,
    wrap(async (req, res) => {
      const id = String(req.params.batchId);
      if (!fits(ReplayId, id))
        throw new ApiError(
          'bad_param',
          'batchId must be a batch id like 1782933157690-0000-735223 (or a group job id, g-<batch id>)',
        );
      const shard = o.shards?.forBatchId(isGroupJobId(id) ? id.slice(2) : id) ?? o;
      const [r] = await replayFailed(shard.queue, shard.ledger, [id], {
        reissue: reissueOf(req),
        bestEffort: o.bestEffort,
      });
      if (r?.outcome === 'not-failed') throw new ApiError('not_found', `batch ${id} is not in the failed set`);
      res.json(r);
    }),
  );
  router.post(
    '/admin/replay',
    admin,
    wrap(async (req, res) => {
      const results: ReplayOutcome[] = [];
      for (const shard of o.shards?.shards ?? [o])
        results.push(
          ...(await replayFailed(shard.queue, shard.ledger, 'all', {
            reissue: reissueOf(req),
            bestEffort: o.bestEffort,
          })),
        );
      res.json({
        replayed: results.filter((r) => r.outcome === 'replayed' || r.outcome === 'reissued').length,
        results,
      });
    }),
  );
  router.all('/admin/failed', methodNotAllowed(['GET', 'HEAD']));
  router.all(['/admin/replay', '/admin/replay/:batchId'], methodNotAllowed(['POST']));
  return router;
}
