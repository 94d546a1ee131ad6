/**
 * The rollup service: a planner loop that adds one BullMQ job per due (prefix, period), and a
 * worker that rolls them (shared/rollup/roll.ts). Run by `npm run start:rollup` and by `npm start`.
 */
import { randomBytes } from 'node:crypto';
import type { DuckDBConnection } from '@duckdb/node-api';
import { withTimeout } from '../../shared/timeout.js';
import { DelayedError, type Job, Queue, UnrecoverableError, Worker } from 'bullmq';
import type { Registry } from 'prom-client';
import type { Env, SyncConfig } from '../../shared/config.js';
import { batchIdMs } from '../../shared/ids.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import type { Logger } from '../../shared/logger.js';
import { type StoragePathTemplate, parseStoragePath } from '../../shared/paths.js';
import { type RedisClient, type RedisTarget, createRedisClient } from '../../shared/redis.js';
import { msKey, periodStart } from '../../shared/rollup/layout.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { finalHorizon, planPrefix } from '../../shared/rollup/plan.js';
import { discoverPrefixes, prefixOfKey } from '../../shared/rollup/prefixes.js';
import { ROLLUP_JOB_NAME, ROLLUP_JOB_OPTIONS, type RollupJob, RollupJobSchema, rollupJobId, rollupQueueName, rollupQueuePrefix } from '../../shared/rollup/queue.js';
import { acquirePrefixLock, forgetReplayedBatch, replayedBatches } from '../../shared/rollup/redis-keys.js';
import { RollupNotReadyError, dropOldPeriods, periodsPastRetention, pruneRawBatches, rawPeriodsDue, removeStaleTempFiles, rollPeriod, storeRootUrl } from '../../shared/rollup/roll.js';
import { recordedShardCount, shardIndex, shardLayouts } from '../../shared/shards.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem.js';
import { MemoryObjectStore } from '../../shared/store/memory.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { type RollupMetrics, createRollupMetrics } from './metrics.js';

export interface RollupServiceOptions {
  env: Env;
  config: SyncConfig;
  store: ObjectStore;
  /** One Redis or a Cluster (REDIS_URL / REDIS_CLUSTER_NODES); QUEUE_SHARDS comes from `env`. */
  redis: RedisTarget;
  registry: Registry;
  logger: Logger;
  /** `start:rollup`: a missing DuckDB is a start-up error rather than "rollups off". */
  required?: boolean;
}

export interface RollupService {
  queue: Queue;
  worker: Worker;
  metrics: RollupMetrics;
  /** Runs one planning pass now (tests; the loop runs on its own). */
  planOnce(): Promise<void>;
  close(graceMs?: number): Promise<void>;
}

/**
 * How often the store is skip-scanned for prefixes (one listing call per prefix): once a period,
 * between 5 s and 5 min. The ledger's in-flight prefixes are read every pass besides.
 */
export function discoveryIntervalMs(periodSeconds: number): number {
  return Math.min(300_000, Math.max(5000, periodSeconds * 1000));
}
/** Replay notes handled per planning pass. */
const REPLAY_NOTES_PER_PASS = 100;
/** A rollup job's BullMQ lock; a killed rollup process's job is retried after about this plus the stalled check. */
const JOB_LOCK_MS = 10_000;
/** How long a job that cannot run yet waits before it is tried again: 1.5 to 2.5 s. */
function notReadyDelayMs(): number {
  return 1500 + Math.floor(Math.random() * 1000);
}

/** Planning interval: a tenth of the period, between 1 s and 30 s. */
export function planIntervalMs(periodSeconds: number): number {
  return Math.min(30_000, Math.max(1000, periodSeconds * 100));
}

/** Why rollups cannot run on an install without DuckDB, and how to fix it. */
export const ROLLUP_NEEDS_DUCKDB = 'rollups need the @duckdb/node-api package (npm install @duckdb/node-api)';

/** Starts the planner and worker, or returns null when rollups are off or the store has no files DuckDB can read. */
export async function startRollupService(o: RollupServiceOptions): Promise<RollupService | null> {
  const { env, logger, store } = o;
  if (env.ROLLUP === 'off') return null;
  if (store instanceof MemoryObjectStore) {
    logger.warn({ store: store.describe() }, 'rollups need a filesystem or S3 store (DuckDB cannot read a memory store); rollups are off');
    return null;
  }
  // DuckDB opens filesystem keys in place; any other store's objects are copied to a local stage first.
  const root = { rootUrl: store instanceof FilesystemObjectStore ? storeRootUrl(store).rootUrl : null };
  const metrics = createRollupMetrics(o.registry);
  const templates = o.config.collections.map((c) => ({ name: c.name, template: parseStoragePath(c.storagePath) }));
  const periodMs = env.ROLLUP_PERIOD_SECONDS * 1000;
  const ns = env.QUEUE_NAME;

  // DuckDB is an optional peer (a lean `npm ci --omit=dev` install has none): without it the
  // product runs, batch files stay where they are, and rollups are off until it is installed.
  let duckdb: typeof import('@duckdb/node-api');
  try {
    duckdb = await import('@duckdb/node-api');
  } catch {
    if (o.required) throw new Error(ROLLUP_NEEDS_DUCKDB);
    logger.warn({}, `${ROLLUP_NEEDS_DUCKDB}; rollups are off`);
    return null;
  }
  const stale = await removeStaleTempFiles();
  if (stale > 0) logger.info({ files: stale }, 'removed temporary rollup files of stopped processes');
  const duckInstance = await duckdb.DuckDBInstance.create(':memory:', { threads: '1', memory_limit: '1GB', preserve_insertion_order: 'false' });
  const duck: DuckDBConnection = await duckInstance.connect();

  const cluster = o.redis.kind === 'cluster';
  const queueConn = createRedisClient(o.redis, 'worker');
  const workerConn = createRedisClient(o.redis, 'worker');
  const cmd: RedisClient = createRedisClient(o.redis, 'worker');
  // Each list prefix's in-flight ids, written index and clock live in the ledger of its shard
  // (read only here; the same layout the API and encoders use).
  const ledgers = shardLayouts(ns, env.QUEUE_SHARDS, cluster).map((l) => new BatchLedger(cmd, l.namespace, { shard: { index: l.index, count: l.count } }));
  const ledgerOf = (prefix: string): BatchLedger => ledgers[shardIndex(prefix, ledgers.length)] as BatchLedger;
  const queuePrefix = rollupQueuePrefix(ns, cluster);
  const queue = new Queue(rollupQueueName(ns), { connection: queueConn, prefix: queuePrefix });
  queue.on('error', () => undefined);

  /**
   * A job moves a watermark only while Redis is laid out for this process's QUEUE_SHARDS: with
   * another count, a prefix's in-flight ids sit in another shard's ledger than the one read here,
   * and a period could look final while a batch of it is still coming.
   */
  async function assertLayout(): Promise<void> {
    const recorded = await recordedShardCount(cmd, ns);
    if (recorded !== null && recorded !== env.QUEUE_SHARDS) throw new RollupNotReadyError(`Redis is laid out for QUEUE_SHARDS=${recorded}, this rollup process runs with QUEUE_SHARDS=${env.QUEUE_SHARDS}`);
  }

  const collectionOf = (prefix: string): { name: string; template: StoragePathTemplate } | undefined => templates.find((t) => prefixOfKey(t.template, `${prefix}x`)?.prefix === prefix);

  async function addJob(job: RollupJob, replayedId?: string): Promise<void> {
    await queue.add(ROLLUP_JOB_NAME, job, { ...ROLLUP_JOB_OPTIONS, jobId: rollupJobId(job, replayedId) });
  }

  /** Not ready (batches in flight, another job on the prefix): wait and retry without using up an attempt. */
  async function processJob(job: Job, token?: string): Promise<unknown> {
    try {
      return await rollJob(job);
    } catch (err) {
      if (err instanceof RollupNotReadyError && token !== undefined) {
        metrics.jobs.inc({ outcome: 'delayed' });
        logger.debug({ jobId: job.id, reason: err.message }, 'rollup job not ready; delayed');
        // Jittered, so a retry does not land in step with a planner pass (every whole interval) round after round.
        await job.moveToDelayed(Date.now() + notReadyDelayMs(), token);
        throw new DelayedError();
      }
      throw err;
    }
  }

  async function rollJob(job: Job): Promise<unknown> {
    const parsed = RollupJobSchema.safeParse(job.data);
    if (!parsed.success) throw new UnrecoverableError(`bad rollup job: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
    const data = parsed.data;
    const lock = await acquirePrefixLock(cmd, ns, data.prefix, `${job.id ?? ''}:${randomBytes(6).toString('hex')}`);
    if (!lock) throw new RollupNotReadyError(`prefix ${data.prefix} is being rolled by another job`);
    const t0 = performance.now();
    try {
      await assertLayout();
      const { horizonMs } = await finalHorizon(ledgerOf(data.prefix), data.prefix);
      if (horizonMs < data.startMs + periodMs) throw new RollupNotReadyError(`period ${data.startMs} of ${data.prefix} still has batches in flight`);
      const r = await rollPeriod(
        {
          store,
          duck,
          periodSeconds: env.ROLLUP_PERIOD_SECONDS,
          rootUrl: root.rootUrl,
          assertLocked: async () => {
            if (!(await lock.held())) throw new Error(`lost the rollup lock of ${data.prefix}`);
          },
        },
        data.prefix,
        data.startMs,
        data.kind,
      );
      metrics.jobs.inc({ outcome: r.outcome });
      if (r.outcome === 'rolled') {
        metrics.files.inc(r.files.length);
        metrics.rows.inc(r.rows);
        metrics.bytes.inc(r.bytes);
        metrics.duration.observe((performance.now() - t0) / 1000);
      }
      logger.info({ prefix: data.prefix, startMs: data.startMs, kind: data.kind, outcome: r.outcome, files: r.files.length, rows: r.rows, bytes: r.bytes, deleted: r.deleted, watermarkMs: r.watermarkMs, ms: Math.round(performance.now() - t0) }, 'rollup job done');
      return { outcome: r.outcome, rows: r.rows, watermarkMs: r.watermarkMs };
    } finally {
      await lock.release();
    }
  }

  const worker = new Worker(rollupQueueName(ns), processJob, {
    connection: workerConn,
    prefix: queuePrefix,
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
  // After a period is rolled, the prefix's next one may be due already (catching up a backlog).
  worker.on('completed', (job) => {
    const data = job.data as Partial<RollupJob>;
    if (data.kind === 'roll' && typeof data.prefix === 'string') void planOne(data.prefix).catch(() => undefined);
  });
  worker.on('error', (err) => logger.warn({ err: err.message }, 'rollup worker error'));

  const known = new Map<string, number>();
  let lastDiscovery = 0;

  async function planOne(prefix: string): Promise<number> {
    const c = collectionOf(prefix);
    if (!c) return 0;
    const manifest = await readManifest(store, prefix);
    const plan = await planPrefix({ store, ledger: ledgerOf(prefix), periodSeconds: env.ROLLUP_PERIOD_SECONDS, delaySeconds: env.ROLLUP_DELAY_SECONDS }, prefix, manifest);
    if (plan.due && plan.nextStartMs !== undefined) await addJob({ v: 1, collection: c.name, prefix, startMs: plan.nextStartMs, kind: 'roll' });
    return plan.lagSeconds;
  }

  /** Replay notes are written beside the replayed batch's shard (see noteReplayedBatch): one set per shard. */
  async function handleReplays(): Promise<void> {
    for (const shardLedger of ledgers) {
      for (const note of await replayedBatches(cmd, shardLedger.namespace, REPLAY_NOTES_PER_PASS)) {
        const c = collectionOf(note.prefix);
        const manifest = c ? await readManifest(store, note.prefix) : null;
        const ms = batchIdMs(note.batchId);
        if (!c || !manifest || ms >= manifest.watermarkMs) {
          // Not in a rolled period: the forward roll takes it.
          await forgetReplayedBatch(cmd, shardLedger.namespace, note.member);
          continue;
        }
        const startMs = periodStart(ms, periodMs);
        const { horizonMs } = await finalHorizon(ledgerOf(note.prefix), note.prefix);
        if (horizonMs < startMs + periodMs) continue; // the replayed batch is still in flight
        await addJob({ v: 1, collection: c.name, prefix: note.prefix, startMs, kind: 'reroll' }, note.batchId);
        await forgetReplayedBatch(cmd, shardLedger.namespace, note.member);
      }
    }
  }

  /** Where retention cuts at `nowMs`: raw batch files (RAW_RETENTION_SECONDS) and whole periods (RETENTION_DAYS), each when on. */
  function retentionCutoffs(nowMs: number): { raw?: number; graceMs: number; periods?: number } {
    return {
      ...(env.RAW_RETENTION_SECONDS > 0 ? { raw: nowMs - env.RAW_RETENTION_SECONDS * 1000 } : {}),
      graceMs: Math.min(60_000, env.RAW_RETENTION_SECONDS * 1000),
      ...(env.RETENTION_DAYS !== undefined ? { periods: nowMs - env.RETENTION_DAYS * 86_400_000 } : {}),
    };
  }

  /**
   * Retention of one prefix (raw batch files after RAW_RETENTION_SECONDS, whole periods after
   * RETENTION_DAYS), under the prefix lock; skipped this pass when a rollup job holds it.
   */
  async function retainOne(prefix: string, nowMs: number): Promise<void> {
    if (env.RAW_RETENTION_SECONDS === 0 && env.RETENTION_DAYS === undefined) return;
    if (!store.deleteKeys) return;
    // Read without the lock first: a pass with nothing due must not hold it, or the prefix's
    // rollup job (queued by this same pass a moment earlier) finds it taken and waits a round.
    const cutoffs = retentionCutoffs(nowMs);
    const manifest = await readManifest(store, prefix);
    if (!manifest) return;
    const rawDue = cutoffs.raw !== undefined && rawPeriodsDue(manifest, cutoffs.raw, cutoffs.graceMs, nowMs).length > 0;
    const oldDue = cutoffs.periods !== undefined && periodsPastRetention(manifest, cutoffs.periods).length > 0;
    if (!rawDue && !oldDue) return;
    const lock = await acquirePrefixLock(cmd, ns, prefix, `retention:${randomBytes(6).toString('hex')}`);
    if (!lock) return;
    try {
      const ctx = {
        store,
        duck,
        periodSeconds: env.ROLLUP_PERIOD_SECONDS,
        rootUrl: root.rootUrl,
        assertLocked: async () => {
          if (!(await lock.held())) throw new Error(`lost the rollup lock of ${prefix}`);
        },
      };
      if (cutoffs.periods !== undefined) {
        const dropped = await dropOldPeriods(ctx, prefix, cutoffs.periods);
        if (dropped > 0) logger.info({ prefix, periods: dropped }, 'retention: old periods deleted');
      }
      if (cutoffs.raw !== undefined) {
        const r = await pruneRawBatches(ctx, prefix, {
          cutoffMs: cutoffs.raw,
          graceMs: cutoffs.graceMs,
          maxPeriods: 24,
          // The list route answers recent cursors from Redis' index of written ids: wait until it no longer holds the period's ids.
          stillIndexed: async (startMs, endMs) => {
            const { ids } = await ledgerOf(prefix).listWritten(prefix, msKey(startMs), 1);
            return ids !== null && ids[0] !== undefined && ids[0] < msKey(endMs);
          },
        });
        metrics.rawDeleted.inc(r.deleted);
        if (r.deleted > 0) logger.info({ prefix, files: r.deleted, periods: r.periods, waiting: r.waiting }, 'raw retention: batch files deleted');
      }
    } finally {
      await lock.release();
    }
  }

  let planning: Promise<void> | undefined;
  async function planPass(): Promise<void> {
    await assertLayout();
    const now = Date.now();
    if (now - lastDiscovery >= discoveryIntervalMs(env.ROLLUP_PERIOD_SECONDS)) {
      lastDiscovery = now;
      for (const t of templates) {
        for (const root of ['batches', 'rollups'] as const) {
          for (const p of await discoverPrefixes(store, t.template, { root })) known.set(p, now);
        }
      }
    }
    for (const shardLedger of ledgers) for (const p of await shardLedger.prefixes()) if (collectionOf(p)) known.set(p, now);
    let lag = 0;
    for (const prefix of known.keys()) {
      try {
        lag = Math.max(lag, await planOne(prefix));
      } catch (err) {
        metrics.failures.inc({ stage: 'plan' });
        logger.warn({ prefix, err: (err as Error).message }, 'rollup planning failed for a prefix');
      }
      try {
        await retainOne(prefix, now);
      } catch (err) {
        metrics.failures.inc({ stage: 'retention' });
        logger.warn({ prefix, err: (err as Error).message }, 'rollup retention failed for a prefix');
      }
    }
    metrics.lagSeconds.set(lag);
    metrics.prefixes.set(known.size);
    await handleReplays();
  }
  const planOnce = (): Promise<void> => {
    planning ??= planPass()
      .catch((err: unknown) => logger.warn({ err: (err as Error).message }, 'rollup planning pass failed'))
      .finally(() => {
        planning = undefined;
      });
    return planning;
  };
  const timer = setInterval(() => void planOnce(), planIntervalMs(env.ROLLUP_PERIOD_SECONDS));
  timer.unref();
  void planOnce();
  logger.info({ queue: rollupQueueName(ns), queuePrefix, shards: ledgers.length, periodSeconds: env.ROLLUP_PERIOD_SECONDS, delaySeconds: env.ROLLUP_DELAY_SECONDS, store: store.describe() }, 'rollup service started');

  let closing: Promise<void> | undefined;
  return {
    queue,
    worker,
    metrics,
    planOnce,
    close(graceMs = 15_000) {
      closing ??= (async () => {
        clearInterval(timer);
        // Every wait is bounded: with Redis unreachable a pass, a QUIT or a close never finishes
        // (the connections queue commands while offline), and shutdown must not wait on them.
        const bounded = (p: Promise<unknown> | undefined, ms: number, what: string): Promise<unknown> => withTimeout(p ?? Promise.resolve(), ms, what).catch(() => undefined);
        await bounded(planning, graceMs, 'rollup planning');
        const closed = await withTimeout(worker.close(), graceMs, 'rollup worker close').then(
          () => true,
          () => false,
        );
        if (!closed) await bounded(worker.close(true), Math.min(1000, graceMs), 'rollup worker force close');
        await bounded(queue.close(), Math.min(5000, graceMs), 'rollup queue close');
        for (const c of [queueConn, workerConn, cmd]) {
          if (c.status !== 'ready') c.disconnect();
          else await withTimeout(c.quit(), 1000, 'redis quit').catch(() => c.disconnect());
        }
        duck.closeSync();
        duckInstance.closeSync();
      })();
      return closing;
    },
  };
}
