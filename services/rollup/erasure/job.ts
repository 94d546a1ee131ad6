/**
 * The erasure job (issue 36), run by the rollup service's erasure worker:
 *
 * 1. scan: every batch file and rollup file of the prefix, rewriting those that hold the ids
 *    (./erase.ts), under the prefix lock;
 * 2. wait: until the prefix's list watermark passes the request's instant (every batch acknowledged
 *    before the request is written: plan.ts `finalHorizon`, the bound the list route uses);
 * 3. rescan: batch files and rollup files the first scan did not see (written meanwhile);
 * 4. Iceberg (ICEBERG=on): an `overwrite` snapshot replacing the rewritten files, then every older
 *    snapshot expired and the files only they referenced deleted;
 * 5. the erasure record (shared/erasure/log.ts); the ids are scrubbed from the job's data.
 *
 * Counts are kept in the job's progress after every file, so a job retried after a crash or a
 * `kill -9` continues them; the rewrite itself is idempotent (a rewritten file holds none of the
 * rows), so a retry redoes only what is left. Logs carry counts, never ids.
 */
import { type Job, UnrecoverableError, type Worker } from 'bullmq';
import { openWorker } from '../../../shared/redis/queues.js';
import { erasureHashKey, hashId, writeErasureRecord } from '../../../shared/erasure/log.js';
import { recordRewritten } from '../../../shared/erasure/rewritten.js';
import { eraseRowsFromParquet, parquetToArrow } from '../../../shared/erasure/rows.js';
import { batchTableFile, rollupTableFile, type IcebergTable, type TableFile } from '../../../shared/iceberg/table.js';
import type { RedisClient } from '../../../shared/redis/connection.js';
import { batchIdOfKey, periodStart, rollupFileFirstId } from '../../../shared/rollup/layout.js';
import { batchIdMs } from '../../../shared/ids.js';
import { readManifest } from '../../../shared/rollup/manifest.js';
import { type RollupDeps, ledgerOf, takePrefixLock } from '../context.js';
import { finalHorizon } from '../plan.js';
import { type EraseContext, type EraseCounts, type RewrittenFile, erasePass } from './erase.js';
import type { EraseMetrics } from './metrics.js';
import { type EraseJob, EraseJobSchema, type EraseProgress } from '../../../shared/redis/jobs/erase.js';

/** An erasure job's BullMQ lock (renewed by the worker while it runs). */
export const ERASE_JOB_LOCK_MS = 10_000;
/** How long step 2 waits for the watermark before the attempt fails (and is retried). */
export const WATERMARK_WAIT_MS = 10 * 60_000;
/** How long a pass waits for the prefix lock (a roll job or Iceberg commit holds it) before the attempt fails. */
const LOCK_WAIT_MS = 120_000;

export interface EraseDeps extends RollupDeps {
  eraseMetrics: EraseMetrics;
  /** The Iceberg table of a prefix (ICEBERG=on), else null. */
  tableOf?: (prefix: string) => IcebergTable | null;
  /** ERASURE_HASH_KEY (see shared/erasure/log.ts). */
  hashKey?: string;
}

/** Waits for the prefix's lock, runs `fn` under it, releases it. */
async function withLock<T>(
  deps: EraseDeps,
  prefix: string,
  owner: string,
  fn: (assertLocked: () => Promise<void>) => Promise<T>,
): Promise<T> {
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    const lock = await takePrefixLock(deps, prefix, owner);
    if (lock) {
      try {
        return await fn(async () => {
          if (!(await lock.held())) throw new Error(`lost the rollup lock of ${prefix}`);
        });
      } finally {
        await lock.release();
      }
    }
    if (Date.now() > deadline) throw new Error(`prefix lock of ${prefix} not free within ${LOCK_WAIT_MS} ms`);
    await new Promise((r) => setTimeout(r, 250 + Math.floor(Math.random() * 250)));
  }
}

function progressOf(job: Job): EraseProgress | null {
  const p = job.progress as Partial<EraseProgress> | number | undefined;
  return typeof p === 'object' && p !== null && typeof p.files_scanned === 'number' ? (p as EraseProgress) : null;
}

/** The state of one attempt of an erasure job, reported as the job's progress after every change. */
class EraseRun {
  counts: EraseCounts;
  state: EraseProgress['state'] = 'running';
  step: EraseProgress['step'] = 'scan';
  /** The batch whose rewritten file is being put (recorded in the rewritten log on resume if a crash hits). */
  pending: string[];
  pendingRows: number;
  readonly files: RewrittenFile[] = [];
  readonly ids: { distinctIds: string[]; anonymousIds: string[] };
  readonly t0 = performance.now();

  constructor(
    readonly deps: EraseDeps,
    readonly job: Job,
    readonly data: EraseJob,
    prior: EraseProgress | null,
  ) {
    this.ids = { distinctIds: data.distinctIds, anonymousIds: data.anonymousIds };
    this.counts = prior
      ? { filesScanned: prior.files_scanned, filesRewritten: prior.files_rewritten, rowsErased: prior.rows_erased }
      : { filesScanned: 0, filesRewritten: 0, rowsErased: 0 };
    this.pending = prior?.pending ?? [];
    this.pendingRows = prior?.pending_rows ?? 0;
  }

  get jobId(): string {
    return String(this.job.id);
  }

  async report(extra: Partial<EraseProgress> = {}): Promise<void> {
    const c = this.counts;
    const pending = this.pending.length > 0 ? { pending: this.pending, pending_rows: this.pendingRows } : {};
    await this.job.updateProgress({
      state: this.state,
      step: this.step,
      files_scanned: c.filesScanned,
      files_rewritten: c.filesRewritten,
      rows_erased: c.rowsErased,
      dry_run: this.data.dryRun,
      ...pending,
      ...extra,
    } satisfies EraseProgress);
  }

  /**
   * A crash between a batch file's put and its rewritten-log record: record it now (a duplicate is
   * harmless). If the put landed (the file holds none of the rows now), its rows are counted here:
   * the scan will not find the file again.
   */
  async resumePending(): Promise<void> {
    if (this.pending.length === 0) return;
    const key = `${this.data.prefix}${this.pending[0] as string}.parquet`;
    const got = await this.deps.store.getBytes(key);
    if (got && eraseRowsFromParquet(got.body, this.ids).erased === 0) {
      this.counts = {
        ...this.counts,
        filesRewritten: this.counts.filesRewritten + 1,
        rowsErased: this.counts.rowsErased + this.pendingRows,
      };
    }
    await recordRewritten(this.deps.store, this.data.collection, this.data.app, this.pending);
    this.setPending([], 0);
  }

  private setPending(batchIds: string[], rows: number): void {
    this.pending = batchIds;
    this.pendingRows = rows;
  }

  context(): EraseContext {
    const { deps, data } = this;
    const mayDelete = deps.mayDelete;
    return {
      store: deps.store,
      duck: deps.duck,
      rootUrl: deps.rootUrl,
      withPrefixLock: (fn) => withLock(deps, data.prefix, this.jobId, fn),
      ...(mayDelete ? { mayDelete: (keys: readonly string[]) => mayDelete(data.prefix, keys) } : {}),
      // The batch id is in the job's progress while its file is being put, so a crash before the
      // rewritten log records it is recorded on resume (the retry finds the file already erased).
      onBatchRewriting: async (batchId, rows) => {
        this.setPending([batchId], rows);
        await this.report();
      },
      onBatchRewritten: async (batchIds) => {
        await recordRewritten(deps.store, data.collection, data.app, batchIds);
        this.setPending([], 0);
      },
      onProgress: async (c) => {
        this.counts = c;
        await this.report();
      },
    };
  }

  async at(step: EraseProgress['step']): Promise<void> {
    this.step = step;
    await this.report();
    // The iceberg step's hook runs inside it, after the overwrite (icebergStep).
    if (step !== 'iceberg') await testStepDelay(this.deps, this.jobId, step);
  }

  /** One scan pass; its files and counts join the run's. */
  async pass(ctx: EraseContext, opts: { dryRun?: boolean; skip?: Set<string> }): Promise<string[]> {
    const r = await erasePass(ctx, this.data.prefix, this.ids, { ...opts, counts: this.counts });
    this.files.push(...r.files);
    this.counts = r.counts;
    this.deps.eraseMetrics.count(r.files, opts.dryRun ?? false);
    return r.scanned;
  }

  async finishDryRun(): Promise<EraseProgress> {
    const c = this.counts;
    const out: EraseProgress = {
      state: 'completed',
      step: 'done',
      files_scanned: c.filesScanned,
      files_rewritten: c.filesRewritten,
      rows_erased: c.rowsErased,
      dry_run: true,
      files: this.files.slice(0, 1000).map((f) => ({ key: f.key, rows: f.rowsErased })),
    };
    await this.job.updateProgress(out);
    this.deps.logger.info(
      {
        erasure: this.data.id,
        dryRun: true,
        filesScanned: c.filesScanned,
        files: c.filesRewritten,
        rows: c.rowsErased,
      },
      'erasure dry run done',
    );
    return out;
  }

  async writeRecord(snapshots: { overwrite: string[]; expired: string[] }): Promise<void> {
    const { deps, data, counts } = this;
    const key = await erasureHashKey(deps.store, deps.hashKey);
    await writeErasureRecord(deps.store, {
      v: 1,
      id: data.id,
      collection: data.collection,
      app: data.app,
      requestedBy: data.requestedBy,
      requestedAt: new Date(data.requestedAt).toISOString(),
      completedAt: new Date().toISOString(),
      distinctIdHashes: data.distinctIds.map((i) => hashId(key, i)),
      anonymousIdHashes: data.anonymousIds.map((i) => hashId(key, i)),
      filesScanned: counts.filesScanned,
      filesRewritten: counts.filesRewritten,
      rowsErased: counts.rowsErased,
      files: this.files.map((f) => f.key),
      snapshots,
    });
  }

  async complete(snapshots: { overwrite: string[]; expired: string[] }): Promise<EraseProgress> {
    const c = this.counts;
    const out: EraseProgress = {
      state: 'completed',
      step: 'done',
      files_scanned: c.filesScanned,
      files_rewritten: c.filesRewritten,
      rows_erased: c.rowsErased,
      dry_run: false,
      snapshots,
    };
    await this.job.updateProgress(out);
    // The ids leave Redis with the job's completion: only the record's hashes remain.
    await this.job.updateData({ ...this.data, distinctIds: [], anonymousIds: [] });
    const seconds = (performance.now() - this.t0) / 1000;
    this.deps.eraseMetrics.duration.observe(seconds);
    this.deps.logger.info(
      {
        erasure: this.data.id,
        filesScanned: c.filesScanned,
        files: c.filesRewritten,
        rows: c.rowsErased,
        snapshotsExpired: snapshots.expired.length,
        seconds: Math.round(seconds * 10) / 10,
      },
      'erasure completed',
    );
    return out;
  }
}

/** Runs one erasure job (see the module comment); returns its final progress. */
export async function runEraseJob(deps: EraseDeps, job: Job): Promise<EraseProgress> {
  const parsed = EraseJobSchema.safeParse(job.data);
  if (!parsed.success) throw new UnrecoverableError(`bad erase job: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
  const data: EraseJob = parsed.data;
  const prior = progressOf(job);
  if (prior?.state === 'completed') return prior;
  const run = new EraseRun(deps, job, data, prior);
  await run.resumePending();
  const ctx = run.context();

  await run.at('scan');
  const firstScanned = await run.pass(ctx, { dryRun: data.dryRun });
  if (data.dryRun) return run.finishDryRun();

  run.state = 'waiting';
  await run.at('wait');
  await waitForWatermark(deps, data.prefix, data.requestedAt);
  run.state = 'running';

  await run.at('rescan');
  await run.pass(ctx, { skip: new Set(firstScanned) });

  await run.at('iceberg');
  const rewrittenBatches = new Set(run.files.filter((f) => f.kind === 'batch').map((f) => f.key));
  const snapshots = await icebergStep(deps, data.prefix, run.jobId, rewrittenBatches, () =>
    testStepDelay(deps, run.jobId, 'iceberg'),
  );

  await run.at('log');
  await run.writeRecord(snapshots);
  return run.complete(snapshots);
}

/**
 * Test-only (ERASURE_TEST_STEP_DELAY_MS, 0 by default: nothing): logs that a step is under way and
 * waits, so the acceptance harness (scripts/erasure-acceptance.ts) can `kill -9` this process at
 * that step. The log line names the job and the step, never an id.
 */
async function testStepDelay(deps: EraseDeps, jobId: string, step: EraseProgress['step']): Promise<void> {
  const ms = deps.env.ERASURE_TEST_STEP_DELAY_MS ?? 0;
  if (ms <= 0) return;
  deps.logger.info({ jobId, step, ms }, 'erasure: test step delay');
  await new Promise((r) => setTimeout(r, ms));
}

/** Waits until every batch id of `prefix` below `requestedAt` is final (written or given up), polling every 500 ms. */
async function waitForWatermark(deps: EraseDeps, prefix: string, requestedAt: number): Promise<void> {
  const deadline = Date.now() + WATERMARK_WAIT_MS;
  for (;;) {
    const { horizonMs } = await finalHorizon(ledgerOf(deps, prefix), prefix);
    if (horizonMs > requestedAt) return;
    if (Date.now() > deadline)
      throw new Error(`list watermark of ${prefix} did not pass the erasure's instant within ${WATERMARK_WAIT_MS} ms`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/**
 * ICEBERG=on: under the prefix lock, one `overwrite` snapshot removes every table file that no
 * longer matches the store (batch files rewritten in place: same key, other size and count;
 * rollup files the manifest no longer lists, replaced by their rewrites), then every snapshot but
 * the new one is expired and the data files only they referenced are deleted. Idempotent: a
 * retry finds the table matching the store and commits nothing, and expiry of a table with one
 * snapshot does nothing.
 */
async function icebergStep(
  deps: EraseDeps,
  prefix: string,
  owner: string,
  rewritten: ReadonlySet<string>,
  afterOverwrite: () => Promise<void>,
): Promise<{ overwrite: string[]; expired: string[] }> {
  const table = deps.env.ICEBERG === 'on' ? (deps.tableOf?.(prefix) ?? null) : null;
  const out = { overwrite: [] as string[], expired: [] as string[] };
  if (!table) return out;
  return withLock(deps, prefix, owner, async (assertLocked) => {
    const loaded = await table.load();
    if (!loaded) return out;
    const snap = loaded.metadata.snapshots.find((s) => s['snapshot-id'] === loaded.metadata['current-snapshot-id']);
    const live = await table.liveFiles(snap);
    const manifest = await readManifest(deps.store, prefix);
    const listed = new Map((manifest?.periods.flatMap((p) => p.files) ?? []).map((f) => [f.key, f]));
    const removed: string[] = [];
    const added: TableFile[] = [];
    const liveKeys = new Set([...live.keys()].map((u) => table.keyOf(u)));
    for (const [uri, lf] of live) {
      const key = table.keyOf(uri);
      const batchId = batchIdOfKey(prefix, key);
      if (batchId !== null) {
        const got = await deps.store.getBytes(key);
        if (!got) continue; // retention took it: the committer's delete handles it
        // Rewritten by this attempt, or (after a crash lost that list) of another size than the table records.
        if (!rewritten.has(key) && got.body.byteLength === lf.entry.dataFile.fileSizeInBytes) continue;
        removed.push(key);
        added.push(batchTableFile(key, batchId, parquetToArrow(got.body).numRows, got.body.byteLength));
      } else if (!listed.has(key)) {
        removed.push(key);
      }
    }
    // A removed rollup file's period gets the files the manifest lists for it now (its rewrite), when the table does not hold them yet.
    const periodMs = (manifest?.periodSeconds ?? deps.env.ROLLUP_PERIOD_SECONDS) * 1000;
    const periodOf = (key: string): number | null => {
      const first = rollupFileFirstId(key);
      return first === null ? null : periodStart(batchIdMs(first), periodMs);
    };
    const touched = new Set(removed.map(periodOf).filter((p): p is number => p !== null));
    for (const f of listed.values()) {
      const p = periodOf(f.key);
      if (p !== null && touched.has(p) && !liveKeys.has(f.key)) added.push(rollupTableFile(f));
    }
    if (removed.length > 0) {
      await assertLocked();
      const r = await table.overwrite(removed, added);
      out.overwrite.push(String(r.snapshotId));
      deps.logger.info(
        { prefix, removed: removed.length, added: added.length },
        'erasure: iceberg overwrite committed',
      );
    }
    await afterOverwrite();
    await assertLocked();
    const exp = await table.expireSnapshots(Date.now() + 1, { retainLast: 1 });
    out.expired.push(...exp.expiredSnapshotIds.map(String));
    if (exp.unreferencedDataKeys.length > 0 && deps.store.deleteKeys) {
      // Only keys no store listing still needs: rewritten batch files keep their key (still live), so these are replaced rollup files.
      const gone = exp.unreferencedDataKeys.filter((k) => batchIdOfKey(prefix, k) === null && !listed.has(k));
      if (gone.length > 0) await deps.store.deleteKeys(gone);
    }
    return out;
  });
}

/**
 * The error with every erased id replaced by `<id>` in its message (a DuckDB error may quote its
 * query, which names the ids): a failed job's reason is kept in Redis and logged.
 */
export function redacted(err: unknown, job: Job): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  const data = job.data as Partial<EraseJob>;
  const ids = [
    ...(Array.isArray(data.distinctIds) ? data.distinctIds : []),
    ...(Array.isArray(data.anonymousIds) ? data.anonymousIds : []),
  ].filter((i) => typeof i === 'string' && i !== '');
  let msg = e.message;
  for (const id of ids.sort((a, b) => b.length - a.length)) msg = msg.split(id).join('<id>');
  if (msg === e.message) return e;
  const out = e instanceof UnrecoverableError ? new UnrecoverableError(msg) : new Error(msg);
  return out;
}

export interface EraseWorkerOptions {
  queueName: string;
  prefix: string;
  connection: RedisClient;
}

/** Starts the worker that runs erasure jobs one at a time, with retries and dead-letter accounting. */
export function startEraseWorker(deps: EraseDeps, o: EraseWorkerOptions): Worker {
  const { eraseMetrics: metrics, logger } = deps;
  const worker = openWorker(
    { name: o.queueName, prefix: o.prefix },
    (job) => runEraseJob(deps, job).catch((err: unknown) => Promise.reject(redacted(err, job))),
    o.connection,
    {
      concurrency: 1,
      lockDuration: ERASE_JOB_LOCK_MS,
      stalledInterval: 5000,
      maxStalledCount: 20,
    },
  );
  worker.on('active', () => metrics.jobs.inc({ state: 'running' }));
  worker.on('completed', () => metrics.jobs.inc({ state: 'completed' }));
  worker.on('failed', (job, err) => {
    if (!job) return;
    const final = err instanceof UnrecoverableError || job.attemptsMade >= (job.opts.attempts ?? 1);
    metrics.jobs.inc({ state: final ? 'failed' : 'retried' });
    const log = { jobId: job.id, attempt: job.attemptsMade, reason: err.message };
    if (final) logger.error(log, 'erasure job dead-lettered');
    else logger.warn(log, 'erasure job will be retried');
  });
  worker.on('error', (err) => logger.warn({ err: err.message }, 'erasure worker error'));
  return worker;
}
