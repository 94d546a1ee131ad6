import { DelayedError, Job, type Queue, UnrecoverableError, type Worker, type WorkerOptions } from 'bullmq';
import type { Cluster, Redis } from 'ioredis';
import type { Registry } from 'prom-client';
import type { BatchLedger } from '../../shared/ledger/ledger.js';
import { type Logger, type ThrottledWarn, throttledWarn } from '../../shared/logger.js';
import { openQueue, openWorker, queueAddress } from '../../shared/redis/queues.js';
import { jobLockKey } from '../../shared/redis/bullmq-keys.js';
import {
  BATCH_JOB_OPTIONS,
  type BatchGroupJob,
  type BatchJob,
  JOB_NAME,
  isGroupPayload,
} from '../../shared/redis/jobs/push.js';
import type { ObjectStore } from '../../shared/store/types.js';
import {
  ByteBudget,
  DRAIN_COLLECT_MIN_PEAK,
  DrainCollector,
  ENCODER_ROW_BYTES,
  batchCost,
} from '../../shared/byte-budget.js';
import { StoreError } from '../../shared/errors.js';
import { ENCODER_LOCK_SECONDS_DEFAULT, LIST_INDEX_SECONDS_DEFAULT } from '../../shared/config.js';
import { bestEffort } from '../../shared/best-effort.js';
import { createEncoderMetrics, type EncoderMetrics } from './metrics.js';
import {
  EncodeThreadHolder,
  type ParquetEncodeThread,
  RETIRE_ABOVE_WASM_BYTES,
} from '../../shared/parquet/encode-thread-pool.js';
import type { ParquetCompression } from '../../shared/parquet/compression.js';
import { type Step, decodeGroupJob, decodeJob, encodeOffThread, restoreBody, write } from './pipeline.js';
import { type ReplicaWait, confirmReplicated } from './replication.js';

export interface EncoderOptions {
  queueName: string;
  /** Connection for BullMQ (maxRetriesPerRequest null): one Redis or a Cluster; each worker duplicates it for blocking reads. */
  connection: Redis | Cluster;
  ledger: BatchLedger;
  /**
   * QUEUE_SHARDS: one BullMQ worker per shard (its queue prefix and ledger), so any number of
   * encoder processes covers every shard. Default: `queueName` and `ledger` as the one shard.
   * `concurrency` stays the limit of the whole process.
   */
  shards?: readonly EncoderShard[];
  store: ObjectStore;
  registry: Registry;
  logger: Logger;
  concurrency: number;
  /** How long written ids stay in Redis' list index (0: no limit). */
  listIndexSeconds?: number;
  /**
   * Lock held per active job; renewed at half this. Encoding an 8 MB batch blocks the event loop
   * for a few seconds at most, far less. A killed worker's job is retried after this plus the
   * stalled-check interval (half of it, at most 15 s).
   */
  lockDurationMs?: number;
  /**
   * Memory of the batches this process works on at once ({@link jobCost}: a JSON batch's decoded
   * bytes plus ENCODER_ROW_BYTES per event, or the bytes of a Parquet file the API encoded), on
   * top of the `concurrency` count: eight 8 MB batches hold far more memory than eight 60 KB
   * ones, and 2.66 M empty events far more than their 8 MB. A job waits in its slot for its cost
   * (its lock is renewed meanwhile); a job bigger than the whole budget runs alone. Default: no
   * byte bound.
   */
  maxInflightBytes?: number;
  /**
   * A burst encoder (`npm start`'s extra encoder processes, ENCODER_PROCESSES): it takes jobs only
   * while the queue has a backlog. It starts idle; once `backlog` jobs or more wait (over all its
   * shards, counted every `pollMs`) it takes jobs like any encoder, and once none wait it finishes
   * what it holds and goes idle again. At a steady rate the queue stays near empty and the extra
   * thread leaves the cores to the API; during and after a burst it encodes on the other core.
   */
  burst?: BurstOptions;
  /**
   * The batch-file codec of a job's collection (`BatchJob.collection`): the services pass their
   * SyncConfig's (`compressionOfCollections`). Default: every collection gets PARQUET_COMPRESSION_DEFAULT.
   * A file the API encoded is written as it came (the API used the same setting).
   */
  compressionOf?: (collection: string) => ParquetCompression;
  /**
   * REDIS_WAIT_REPLICAS > 0 (decision 0025): before a job (or group job) is encoded and written,
   * its lock is renewed and `WAIT`ed for on this connection (services/encoder/replication.ts);
   * a job not yet on that many replicas is not written but delayed and taken again later
   * (no attempt counted, never a dead letter). Default: no wait, no extra round trip.
   */
  replicaWait?: ReplicaWait;
}

/** See EncoderOptions.burst. */
export interface BurstOptions {
  /** Jobs waiting (over all shards) at which the encoder starts taking jobs. */
  backlog: number;
  /** How often the waiting jobs are counted. */
  pollMs: number;
}

/** One shard an encoder consumes. */
export interface EncoderShard {
  queueName: string;
  /** BullMQ key prefix of the shard (its hash tag). */
  prefix: string;
  ledger: BatchLedger;
}

export interface Encoder {
  /** The first shard's worker (the only one with QUEUE_SHARDS=1). */
  worker: Worker;
  /** One worker per shard. */
  workers: readonly Worker[];
  metrics: EncoderMetrics;
  /** A burst encoder's state (see EncoderOptions.burst): whether it takes jobs now, and how often it started. */
  burst?: { readonly taking: boolean; readonly starts: number };
  /** Waits for active jobs (up to `graceMs`), then closes; unfinished jobs go back to the queue. Idempotent. */
  close(graceMs?: number): Promise<void>;
}

/** A group's failed member, queued on its own, is first tried after this (the retry policy's first backoff). */
const SPLIT_RETRY_DELAY_MS = 1000;

/** A job not yet on REDIS_WAIT_REPLICAS replicas is taken again after this. */
export const REPLICA_RETRY_DELAY_MS = 1000;

/** An encoder's options as one shard's worker sees them: that shard's ledger, and the process' encode thread. */
type ShardOptions = EncoderOptions & { ledger: BatchLedger; encodeThread: () => ParquetEncodeThread };

/** What one job (or group job) came to: the key written (empty for a group), rows and Parquet bytes. */
interface JobResult {
  key: string;
  rows: number;
  bytes: number;
}

/**
 * Processes one job: decode → (wait for byte budget) → unpack → encode → write → release.
 * A job that has to wait for the byte budget lets go of its payload meanwhile (up to
 * `concurrency` jobs are fetched at once, and each fetched payload is the compressed body) and
 * reads it from Redis again once admitted, so jobs waiting in their slots hold no body bytes.
 */
async function processJob(
  job: Job,
  o: ShardOptions,
  m: EncoderMetrics,
  budget: ByteBudget | undefined,
  reload: (id: string) => Promise<unknown>,
): Promise<JobResult> {
  // No other reference to the payload may outlive the wait below (hence no `decoded` local here,
  // and the wait written out here rather than in a step that would hold the payload as an argument).
  let data = jobContract(job.data);
  if (job.processedOn && job.attemptsMade === 0)
    m.waitSeconds.observe(Math.max(0, job.processedOn - job.timestamp) / 1000);
  if (!budget) return encodeAndWrite(data, o, m);
  const tw = performance.now();
  // Known before the payload is unpacked: the job carries its event count (BatchJob.events).
  const cost = jobCost(data);
  const waited = !budget.tryTake(cost);
  if (waited) {
    // Both objects hold the payload string (zod's result is a copy of the object, not the string).
    (job.data as { body?: string }).body = '';
    data = { ...data, body: '' };
    await budget.take(cost);
  }
  m.budgetWaitSeconds.observe((performance.now() - tw) / 1000);
  try {
    if (waited) {
      data = await reloaded(job, data, reload);
      m.payloadReloads.inc();
    }
    return await encodeAndWrite(data, o, m);
  } finally {
    budget.give(cost);
  }
}

/**
 * A group job (several batches, each its own id and file): the byte budget is taken for all of
 * them at once, then every member is encoded, written and released. A member that fails (for any
 * reason) leaves the group as a job of its own under its own id, added before the group
 * completes, so retries, dead letters and replay deal with one batch as they always have; its
 * written siblings are not written again. If that add fails, the group fails and is retried whole
 * (a member written again overwrites its own file with the same bytes).
 */
async function processGroup(
  job: Job,
  o: ShardOptions,
  m: EncoderMetrics,
  budget: ByteBudget | undefined,
  reload: (id: string) => Promise<unknown>,
  splitOff: (batch: BatchJob) => Promise<void>,
): Promise<JobResult> {
  let group = groupContract(job.data);
  const total = group.batches.reduce((n, b) => n + jobCost(b), 0);
  const ids = group.batches.map((b) => b.batchId).join(',');
  if (budget) {
    const tw = performance.now();
    if (!budget.tryTake(total)) {
      // As for one batch (processJob): hold no payload while waiting for the bytes.
      (job.data as { batches?: unknown[] }).batches = [];
      group = { v: 2, batches: [] };
      await budget.take(total);
      try {
        group = groupContract(await reload(job.id ?? ''));
      } catch (err) {
        budget.give(total);
        throw err;
      }
      if (group.batches.map((b) => b.batchId).join(',') !== ids) {
        budget.give(total);
        throw new Error(`job ${job.id ?? ''} changed while it waited for the byte budget`);
      }
      m.payloadReloads.inc();
    }
    m.budgetWaitSeconds.observe((performance.now() - tw) / 1000);
  }
  try {
    if (job.processedOn && job.attemptsMade === 0)
      m.waitSeconds.observe(Math.max(0, job.processedOn - job.timestamp) / 1000);
    const results = await Promise.allSettled(group.batches.map((b) => encodeAndWrite(b, o, m)));
    return await settleGroup(job, group, results, o, m, splitOff);
  } finally {
    if (budget) budget.give(total);
  }
}

/** Sums a group's written members and splits each failed one off as a job of its own. */
async function settleGroup(
  job: Job,
  group: BatchGroupJob,
  results: PromiseSettledResult<JobResult>[],
  o: ShardOptions,
  m: EncoderMetrics,
  splitOff: (batch: BatchJob) => Promise<void>,
): Promise<JobResult> {
  let rows = 0;
  let bytes = 0;
  for (const [i, r] of results.entries()) {
    const batch = group.batches[i] as BatchJob;
    if (r.status === 'fulfilled') {
      rows += r.value.rows;
      bytes += r.value.bytes;
      continue;
    }
    const reason = (r.reason as Error)?.message ?? String(r.reason);
    await splitOff(batch);
    m.batches.inc({ outcome: 'retried' });
    o.logger.warn(
      { batchId: batch.batchId, key: batch.key, group: job.id, reason },
      'batch failed in its group; queued on its own',
    );
  }
  return { key: '', rows, bytes };
}

/** A group payload as the shared contract, or an UnrecoverableError naming what does not match. */
function groupContract(payload: unknown): BatchGroupJob {
  const decoded = decodeGroupJob(payload);
  if (!decoded.ok) throw new UnrecoverableError(decoded.reason);
  return decoded.value;
}

/**
 * What a job costs the byte budget while it is worked on, from its fields alone (before its
 * payload is unpacked): a JSON batch its body's bytes plus ENCODER_ROW_BYTES per event (the rows
 * of its Arrow columns and of parquet-wasm's copy: shared/byte-budget.ts); a file the API
 * encoded only its bytes (it is written as it is). Every job payload has carried `events` since
 * its first version, so no job needs an estimate.
 */
export function jobCost(job: Pick<BatchJob, 'encoding' | 'events' | 'bodyBytes'>): number {
  return job.encoding === 'parquet' ? job.bodyBytes : batchCost(job.events, job.bodyBytes, ENCODER_ROW_BYTES);
}

/** The job payload as the shared contract, or an UnrecoverableError naming what does not match. */
function jobContract(payload: unknown): BatchJob {
  const decoded = decodeJob(payload);
  if (!decoded.ok) throw new UnrecoverableError(decoded.reason);
  return decoded.value;
}

/** The job's payload read again from Redis (after a wait for the byte budget); the rest of the contract must not have changed. */
async function reloaded(job: Job, before: BatchJob, reload: (id: string) => Promise<unknown>): Promise<BatchJob> {
  // Gone (removed by an operator while it waited): an error, so BullMQ retries or drops it as it does a lost lock.
  const again = jobContract(await reload(job.id ?? ''));
  if (again.batchId !== before.batchId || again.bodyBytes !== before.bodyBytes || again.events !== before.events)
    throw new Error(`job ${job.id ?? ''} changed while it waited for the byte budget`);
  return again;
}

/** One batch after its payload is decoded and its bytes admitted: encode → write → release. */
async function encodeAndWrite(data: BatchJob, o: ShardOptions, m: EncoderMetrics): Promise<JobResult> {
  const { bytes, rows, startedAt } = await encodeBatch(data, o, m);
  await writeFile(data, bytes, o, m);
  // Released only after the file is durable, so the list never shows a later id before this one.
  await o.ledger.markWritten(data.prefix, data.batchId, o.listIndexSeconds ?? LIST_INDEX_SECONDS_DEFAULT);
  countWritten(data, rows, bytes.byteLength, m);
  o.logger.info(
    {
      batchId: data.batchId,
      key: data.key,
      events: rows,
      bytes: bytes.byteLength,
      ms: Math.round(performance.now() - startedAt),
    },
    'batch written',
  );
  return { key: data.key, rows, bytes: bytes.byteLength };
}

/** Step: the batch's Parquet file (a file the API encoded is passed through), and when its encode started. */
async function encodeBatch(
  data: BatchJob,
  o: ShardOptions,
  m: EncoderMetrics,
): Promise<{ bytes: Uint8Array; rows: number; startedAt: number }> {
  let body: Step<Buffer> | undefined = await restoreBody(data);
  if (!body.ok) throw new UnrecoverableError(body.reason);

  const startedAt = performance.now();
  const compression = o.compressionOf?.(data.collection);
  const staged = encodeOffThread(data, body.value, o.encodeThread, compression === undefined ? {} : { compression });
  // The body is in the IPC stream now: not held while a thread encodes it.
  body = undefined;
  if (!staged.ok) throw new UnrecoverableError(`bad batch data: ${staged.reason}`);
  const { bytes, rows } = await staged.value;
  // A file the API encoded is not timed here (ingest_push_encode_duration_seconds times it there).
  if (data.encoding !== 'parquet') m.encodeSeconds.observe((performance.now() - startedAt) / 1000);
  return { bytes, rows, startedAt };
}

/** Step: the file in the store, timed; a store error that a retry cannot fix fails the job for good. */
async function writeFile(data: BatchJob, bytes: Uint8Array, o: ShardOptions, m: EncoderMetrics): Promise<void> {
  const t1 = performance.now();
  try {
    await write(o.store, data, bytes);
  } catch (err) {
    const retriable = !(err instanceof StoreError) || err.retriable;
    m.storeErrors.inc({ retriable: String(retriable) });
    // Retrying a permission or path problem only delays the dead letter by minutes of backoff;
    // fail it now, keep it in the failed set, and let an operator replay it once fixed.
    if (!retriable) throw new UnrecoverableError((err as Error).message);
    throw err;
  } finally {
    m.writeSeconds.observe((performance.now() - t1) / 1000);
  }
}

/** A written and released batch in the encoder's counters. */
function countWritten(data: BatchJob, rows: number, parquetBytes: number, m: EncoderMetrics): void {
  m.batches.inc({ outcome: 'written' });
  m.eventsWritten.inc(rows);
  const jsonBytes = data.jsonBytes ?? data.bodyBytes;
  m.inputBytes.inc(jsonBytes);
  m.parquetBytes.inc(parquetBytes);
  m.compressionRatio.observe(jsonBytes / Math.max(1, parquetBytes));
  m.endToEndSeconds.observe(Math.max(0, Date.now() - data.receivedAt) / 1000);
}

/** Starts a BullMQ worker that turns batch jobs into Parquet files. */
export function createEncoder(o: EncoderOptions): Encoder {
  const metrics = createEncoderMetrics(o.registry);
  metrics.concurrency.set(o.concurrency);
  const { budget, drained } = encoderBudget(o.maxInflightBytes, metrics);
  const shards: readonly EncoderShard[] = o.shards ?? [{ queueName: o.queueName, prefix: '', ledger: o.ledger }];
  // Large batches are encoded on a thread, retired once idle with its wasm memory grown
  // (services/encoder/pipeline.ts, encodeOffThread), so an idle encoder gives that memory back.
  const thread = new EncodeThreadHolder({ retireAboveWasmBytes: RETIRE_ABOVE_WASM_BYTES });
  const run: EncoderRun = {
    o,
    metrics,
    budget,
    ...shardSlots(o.concurrency, shards.length),
    encodeThread: thread.get,
    splitQueues: [],
    // Redis down: BullMQ reports every reconnect attempt of each of its connections; log a few.
    workerError: throttledWarn(o.logger, 'worker error'),
  };
  const workers = shards.map((shard) => startWorker(shard, run));
  metrics.workers.set(o.burst ? 0 : 1);
  const burst = o.burst ? burstControl(o.burst, run, shards, workers) : undefined;
  let closing: Promise<void> | undefined;
  return {
    worker: workers[0] as Worker,
    workers,
    metrics,
    ...(burst ? { burst: burst.state } : {}),
    close(graceMs = 15_000) {
      closing ??= closeEncoder({ run, workers, burst, thread, drained }, graceMs);
      return closing;
    },
  };
}

/** What every shard's worker of one encoder shares. */
interface EncoderRun {
  o: EncoderOptions;
  metrics: EncoderMetrics;
  /** MAX_INFLIGHT_BYTES of the whole process, if set. */
  budget: ByteBudget | undefined;
  /** With several shards: keeps the jobs being encoded over all workers at `concurrency`. */
  gate: ByteBudget | undefined;
  /** Each worker's BullMQ concurrency. */
  perWorker: number;
  encodeThread: () => ParquetEncodeThread;
  /** Queues opened to split a group's failed members off; closed with the encoder. */
  splitQueues: Queue[];
  workerError: ThrottledWarn;
}

/** MAX_INFLIGHT_BYTES as a byte budget (none without it), with its gauges. */
function encoderBudget(
  maxInflightBytes: number | undefined,
  metrics: EncoderMetrics,
): { budget: ByteBudget | undefined; drained: DrainCollector } {
  // Once large batches have drained, their dead buffers are collected (shared/byte-budget.ts).
  const drained = new DrainCollector({ minPeak: DRAIN_COLLECT_MIN_PEAK });
  const budget = maxInflightBytes
    ? new ByteBudget(maxInflightBytes, (used) => {
        metrics.inflightBytes.set(used);
        drained.note(used);
      })
    : undefined;
  metrics.inflightBytesLimit.set(maxInflightBytes ?? 0);
  return { budget, drained };
}

/**
 * With several shards each worker takes a share of the slots and a process-wide gate keeps the
 * jobs being encoded at `concurrency`: a job waiting at the gate keeps its lock renewed.
 */
function shardSlots(concurrency: number, shardCount: number): { gate: ByteBudget | undefined; perWorker: number } {
  if (shardCount <= 1) return { gate: undefined, perWorker: concurrency };
  return { gate: new ByteBudget(concurrency), perWorker: Math.max(1, Math.ceil(concurrency / shardCount)) };
}

/** One shard's BullMQ worker: each job (or group job) passes the gate, then is processed in its slot. */
function startWorker(shard: EncoderShard, run: EncoderRun): Worker {
  const { o, metrics, budget, gate } = run;
  const so: ShardOptions = { ...o, ledger: shard.ledger, encodeThread: run.encodeThread };
  const reload = async (id: string): Promise<unknown> => {
    const again = await Job.fromId(w, id);
    if (!again) throw new Error(`job ${id} is no longer in the queue`);
    return again.data;
  };
  const splitOff = splitter(shard, o.connection, run.splitQueues);
  const w = openWorker(
    addressOf(shard),
    async (job, token) => {
      if (gate) await gate.take(1);
      metrics.active.inc();
      try {
        if (o.replicaWait) await ensureReplicated(job, token, w, run);
        return isGroupPayload(job.data)
          ? await processGroup(job, so, metrics, budget, reload, splitOff)
          : await processJob(job, so, metrics, budget, reload);
      } finally {
        metrics.active.dec();
        gate?.give(1);
      }
    },
    o.connection,
    workerOptions(o, run.perWorker),
  );
  w.on('failed', (job, err) => onFailed(run, shard, job, err));
  w.on('error', (err) => run.workerError({ err: err.message }));
  return w;
}

/**
 * Step (REDIS_WAIT_REPLICAS > 0): returns once the job is known to be on that many replicas;
 * otherwise the job goes back to the queue as delayed (no attempt counted) and the processor ends
 * with BullMQ's DelayedError, so nothing of it is written now.
 */
async function ensureReplicated(job: Job, token: string | undefined, w: Worker, run: EncoderRun): Promise<void> {
  const { o, metrics } = run;
  const wait = o.replicaWait as ReplicaWait;
  const t0 = performance.now();
  const lockMs = o.lockDurationMs ?? ENCODER_LOCK_SECONDS_DEFAULT * 1000;
  const { outcome, acked, error } = await confirmReplicated(wait, jobLockKey(w, job.id ?? ''), token ?? '', lockMs);
  metrics.replicaWaitSeconds.observe((performance.now() - t0) / 1000);
  metrics.replicaWaits.inc({ outcome });
  if (outcome === 'replicated') return;
  o.logger.warn(
    // The Redis error's text (never event data) when the check itself failed.
    { jobId: job.id, outcome, acked, replicas: wait.replicas, ...(error === undefined ? {} : { error }) },
    'job not yet on REDIS_WAIT_REPLICAS replicas: not written, taken again later',
  );
  // Where the lock is not this worker's (another master), this fails like any lost lock: the job
  // is the stalled check's (or gone with the old master).
  await job.moveToDelayed(Date.now() + REPLICA_RETRY_DELAY_MS, token);
  throw new DelayedError();
}

/** A shard's batch queue (BullMQ's default prefix `bull` when the shard names none). */
const addressOf = (shard: EncoderShard) =>
  queueAddress.push({ queueName: shard.queueName, ...(shard.prefix ? { queuePrefix: shard.prefix } : {}) });

/** A shard worker's BullMQ settings (its queue, prefix and connection are the factory's). */
function workerOptions(o: EncoderOptions, concurrency: number): Omit<WorkerOptions, 'connection' | 'prefix'> {
  return {
    concurrency,
    lockDuration: o.lockDurationMs ?? ENCODER_LOCK_SECONDS_DEFAULT * 1000,
    // A killed worker's job comes back as stalled; it must be retried, not failed.
    maxStalledCount: 20,
    stalledInterval: Math.min(
      15_000,
      Math.max(1000, Math.floor((o.lockDurationMs ?? ENCODER_LOCK_SECONDS_DEFAULT * 1000) / 2)),
    ),
    // A burst encoder starts idle (see `burstControl`).
    autorun: !o.burst,
  };
}

/** A group's failed member becomes a job of its own (its id as job id: adding it twice is a no-op). */
function splitter(
  shard: EncoderShard,
  connection: Redis | Cluster,
  opened: Queue[],
): (batch: BatchJob) => Promise<void> {
  let splitQueue: Queue | undefined;
  return async function splitOff(batch: BatchJob): Promise<void> {
    if (!splitQueue) {
      splitQueue = openQueue(addressOf(shard), connection, { producer: true });
      opened.push(splitQueue);
    }
    await splitQueue.add(JOB_NAME, batch, { ...BATCH_JOB_OPTIONS, jobId: batch.batchId, delay: SPLIT_RETRY_DELAY_MS });
  };
}

/** A failed attempt, counted and logged; a final one is dead-lettered and its id released (best effort). */
function onFailed(run: EncoderRun, shard: EncoderShard, job: Job | undefined, err: Error): void {
  if (!job) return;
  const { o, metrics } = run;
  const attempts = job.opts.attempts ?? 1;
  const final = err instanceof UnrecoverableError || err.name === 'UnrecoverableError' || job.attemptsMade >= attempts;
  const data = job.data as Partial<BatchJob>;
  // A group job (every member's own failures were queued on their own): count its batches.
  const members = isGroupPayload(job.data) ? ((job.data as { batches?: unknown[] }).batches?.length ?? 0) : undefined;
  const fields = members === undefined ? { batchId: job.id, key: data.key } : { group: job.id, batches: members };
  if (final) {
    metrics.batches.inc({ outcome: 'failed' }, members ?? 1);
    o.logger.error(
      { ...fields, attempts: job.attemptsMade, reason: err.message },
      members === undefined ? 'batch dead-lettered' : 'group job dead-lettered',
    );
    // A dead batch must not hold newer ones back from the list forever (a group's members are
    // released by the reaper, which finds them through the group). Failing here, it is left to
    // the API's reaper too, which frees dead-lettered ids on its next pass.
    if (typeof data.prefix === 'string' && job.id)
      void bestEffort('dead_letter_release', shard.ledger.release(data.prefix, job.id), {
        logger: o.logger,
        counter: metrics.bestEffortFailures,
      });
  } else {
    metrics.batches.inc({ outcome: 'retried' }, members ?? 1);
    o.logger.warn(
      { ...fields, attempt: job.attemptsMade, reason: err.message },
      members === undefined ? 'batch will be retried' : 'group job will be retried',
    );
  }
}

/** A running burst control (see {@link burstControl}). */
interface BurstControl {
  state: { taking: boolean; starts: number };
  stop(): Promise<void>;
}

/**
 * Starts the workers while `backlog` jobs or more wait, and pauses them (letting their held jobs
 * finish) once none wait. Gauges: `workers` is 1 and `concurrency` counts this encoder's slots
 * only while it takes jobs, so `sum` over a process stays what is working now.
 */
function burstControl(
  b: BurstOptions,
  run: EncoderRun,
  shards: readonly EncoderShard[],
  workers: readonly Worker[],
): BurstControl {
  const { o, metrics } = run;
  const state = { taking: false, starts: 0 };
  metrics.concurrency.set(0);
  const counters = shards.map((shard) => openQueue(addressOf(shard), o.connection, { producer: true }));
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let pass: Promise<void> = Promise.resolve();
  const once = async (): Promise<void> => {
    const waiting = (await Promise.all(counters.map((q) => q.getJobCounts('waiting', 'prioritized')))).reduce(
      (n, c) => n + (c.waiting ?? 0) + (c.prioritized ?? 0),
      0,
    );
    if (stopped) return;
    if (!state.taking && waiting >= b.backlog) {
      state.taking = true;
      state.starts++;
      metrics.workers.set(1);
      metrics.concurrency.set(o.concurrency);
      o.logger.info({ waiting }, 'burst encoder taking jobs');
      await Promise.all(workers.map((w) => w.resume()));
    } else if (state.taking && waiting === 0) {
      await Promise.all(workers.map((w) => w.pause()));
      state.taking = false;
      metrics.workers.set(0);
      metrics.concurrency.set(0);
      o.logger.info('burst encoder idle (queue drained)');
    }
  };
  const tick = (): void => {
    pass = once()
      .catch((err: unknown) => run.workerError({ err: (err as Error).message }))
      .finally(() => {
        if (!stopped) timer = setTimeout(tick, b.pollMs);
      });
  };
  timer = setTimeout(tick, b.pollMs);
  return {
    state,
    async stop() {
      stopped = true;
      clearTimeout(timer);
      // Bounded: with Redis away a count or a pause can wait for the connection indefinitely.
      await Promise.race([pass, new Promise((r) => setTimeout(r, 2000).unref())]);
      // Stopping: a queue whose Redis is away cannot close cleanly, and nothing is left to do about it.
      await Promise.all(counters.map((q) => q.close().catch(() => undefined)));
    },
  };
}

/** Waits for active jobs (up to `graceMs`), then closes what the encoder opened; unfinished jobs go back to the queue. */
async function closeEncoder(
  parts: {
    run: EncoderRun;
    workers: readonly Worker[];
    burst: BurstControl | undefined;
    thread: EncodeThreadHolder;
    drained: DrainCollector;
  },
  graceMs: number,
): Promise<void> {
  const { run, workers } = parts;
  await parts.burst?.stop();
  run.metrics.workers.set(0);
  const force = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), graceMs).unref());
  const r = await Promise.race([Promise.all(workers.map((w) => w.close())).then(() => 'closed' as const), force]);
  // Closing at shutdown: a queue or thread that cannot close cleanly has nothing left to lose.
  await Promise.all(run.splitQueues.map((q) => q.close().catch(() => undefined)));
  await parts.thread.close().catch(() => undefined);
  parts.drained.stop();
  if (r === 'timeout') {
    run.o.logger.warn('active jobs did not finish in time; closing anyway (they will be retried as stalled)');
    // Bounded too: with Redis unreachable a forced close still waits for its connections (and
    // may fail: its jobs come back as stalled either way).
    await Promise.race([
      Promise.all(workers.map((w) => w.close(true).catch(() => undefined))),
      new Promise((r) => setTimeout(r, Math.min(1000, graceMs)).unref()),
    ]);
  }
}
