/**
 * The erasure routes (issue 36), admin role:
 * - `POST /admin/erase/<collection>/<app>` with `{ "distinct_ids": [...], "anonymous_ids": [...],
 *   "dry_run"?: true }` queues an erasure job (services/rollup/erasure/) and answers
 *   202 `{ id }`; a body that does not fit answers 400 JSON naming the problem;
 * - `GET /admin/erase/<id>` answers its state (queued | running | waiting | completed | failed) and
 *   counts (`files_scanned`, `files_rewritten`, `rows_erased`), read from the job in Redis.
 * The ids travel in the job's data only (never in logs); the job scrubs them once it completes.
 */
import express, { type NextFunction, type Request, type Response, type Router } from 'express';
import type { Job, Queue } from 'bullmq';
import { openQueue, queueAddress } from '../../shared/redis/queues.js';
import type { CollectionConfig } from '../../shared/config.js';
import { ApiError } from './error-map.js';
import { queueCallError } from './admin.js';
import { checkParamValue, listPrefix, parseStoragePath } from '../../shared/paths.js';
import type { RedisClient } from '../../shared/redis/connection.js';
import { withTimeout } from '../../shared/timeout.js';
import {
  ERASE_JOB_NAME,
  ERASE_JOB_OPTIONS,
  type EraseJob,
  type EraseProgress,
  EraseRequestSchema,
  type EraseState,
  newErasureId,
} from '../../shared/redis/jobs/erase.js';
import { type RoleResolver, TokenRoles, authOf, requireRoles } from './auth.js';
import { methodNotAllowed } from './edge/methods.js';
import { ErasureId, fits } from './contract/schemas.js';

/** A body over this is refused (413). */
const MAX_BODY_BYTES = 256 * 1024;
const CALL_TIMEOUT_MS = 10_000;

export interface EraseRouterOptions {
  /** QUEUE_NAME: the erasure queue is `<QUEUE_NAME>-erase`. */
  queueName: string;
  /** The API's producer connection (one Redis or a Cluster). */
  redis: RedisClient;
  collections: readonly Pick<CollectionConfig, 'name' | 'storagePath'>[];
  tokens: TokenRoles | ReadonlyMap<string, readonly string[]>;
  roleResolver?: RoleResolver;
}

/** The state `GET /admin/erase/<id>` reports for a job in BullMQ state `bull`. */
export function eraseStateOf(bull: string, progress: Partial<EraseProgress> | null, attemptsMade: number): EraseState {
  if (bull === 'completed') return 'completed';
  if (bull === 'failed') return 'failed';
  if (bull === 'active') return progress?.state === 'waiting' ? 'waiting' : 'running';
  // waiting, delayed (a retry's backoff), prioritized: queued until an attempt ran.
  return attemptsMade > 0 || (progress?.files_scanned ?? 0) > 0 ? 'running' : 'queued';
}

function describe(job: Job, bull: string): Record<string, unknown> {
  const p = typeof job.progress === 'object' && job.progress !== null ? (job.progress as Partial<EraseProgress>) : null;
  const data = job.data as Partial<EraseJob>;
  return {
    id: job.id,
    collection: data.collection,
    app: data.app,
    dry_run: data.dryRun === true,
    state: eraseStateOf(bull, p, job.attemptsMade),
    files_scanned: p?.files_scanned ?? 0,
    files_rewritten: p?.files_rewritten ?? 0,
    rows_erased: p?.rows_erased ?? 0,
    ...(p?.step ? { step: p.step } : {}),
    ...(p?.files ? { files: p.files } : {}),
    ...(p?.snapshots ? { snapshots: p.snapshots } : {}),
    requested_at: typeof data.requestedAt === 'number' ? new Date(data.requestedAt).toISOString() : undefined,
    attempts: job.attemptsMade,
    ...(bull === 'failed' || (job.failedReason && bull !== 'completed') ? { error: job.failedReason } : {}),
  };
}

/** The erasure routes (see the module comment). */
export function createEraseRouter(o: EraseRouterOptions): Router {
  const tokens = o.tokens instanceof TokenRoles ? o.tokens : new TokenRoles(o.tokens);
  const cluster = (o.redis as { isCluster?: boolean }).isCluster === true;
  let queue: Queue | undefined;
  const queueOf = (): Queue => {
    if (!queue) {
      queue = openQueue(queueAddress.erase(o.queueName, cluster), o.redis);
      // BullMQ re-emits the connection's errors here; the API's Redis client logs them (throttled).
      queue.on('error', () => undefined);
    }
    return queue;
  };
  const templates = new Map(o.collections.map((c) => [c.name, parseStoragePath(c.storagePath)]));
  const router = express.Router({ caseSensitive: true });
  const admin = requireRoles(['admin'], o.roleResolver ?? tokens);
  const wrap =
    (fn: (req: Request, res: Response) => Promise<void>) =>
    (req: Request, res: Response, next: NextFunction): void => {
      withTimeout(fn(req, res), CALL_TIMEOUT_MS, 'erase call').catch((err: unknown) => next(queueCallError(err)));
    };

  router.post(
    '/admin/erase/:collection/:app',
    admin,
    express.raw({ type: () => true, limit: MAX_BODY_BYTES }),
    wrap(async (req, res) => {
      const collection = String(req.params.collection);
      const app = String(req.params.app);
      const template = templates.get(collection);
      if (!template) throw new ApiError('not_found', `no collection named ${JSON.stringify(collection)}`);
      if (template.prefixParams.length !== 1)
        throw new ApiError(
          'bad_request',
          `collection ${collection} has ${template.prefixParams.length} list-prefix params; erase needs exactly one (the app)`,
        );
      const bad = checkParamValue(app);
      if (bad) throw new ApiError('bad_param', `app ${bad}`);
      let json: unknown;
      try {
        json = JSON.parse(Buffer.isBuffer(req.body) ? req.body.toString('utf8') : '');
      } catch {
        throw new ApiError('bad_json', 'body must be JSON: {"distinct_ids": [...], "anonymous_ids": [...]}');
      }
      const parsed = EraseRequestSchema.safeParse(json);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        throw new ApiError(
          'bad_request',
          `${issue?.path.length ? `${issue.path.join('.')}: ` : ''}${issue?.message ?? 'invalid body'}`,
        );
      }
      const requestedAt = Date.now();
      const id = newErasureId(requestedAt);
      const job: EraseJob = {
        v: 1,
        id,
        collection,
        app,
        prefix: listPrefix(template, { [template.prefixParams[0] as string]: app }),
        distinctIds: [...new Set(parsed.data.distinct_ids)],
        anonymousIds: [...new Set(parsed.data.anonymous_ids)],
        dryRun: parsed.data.dry_run,
        requestedAt,
        requestedBy: authOf(res)?.identity ?? 'unknown',
      };
      await queueOf().add(ERASE_JOB_NAME, job, { ...ERASE_JOB_OPTIONS, jobId: id });
      res.status(202).json({ id, state: 'queued' satisfies EraseState });
    }),
  );
  router.get(
    '/admin/erase/:id',
    admin,
    wrap(async (req, res) => {
      const id = String(req.params.id);
      if (!fits(ErasureId, id))
        throw new ApiError('bad_param', 'id must be an erasure id like er-1782933157690-0123456789abcdef');
      const job = await queueOf().getJob(id);
      if (!job) throw new ApiError('not_found', `no erasure ${id} (unknown, or completed more than 30 days ago)`);
      res.json(describe(job, await job.getState()));
    }),
  );
  router.all('/admin/erase/:collection/:app', methodNotAllowed(['POST']));
  router.all('/admin/erase/:id', methodNotAllowed(['GET', 'HEAD']));
  return router;
}
