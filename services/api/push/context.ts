import type { BestEffortSink } from '../../../shared/best-effort.js';
import type { IdempotencyClaim } from '../../../shared/ledger/ledger.js';
import type { ParquetEncodeThread } from '../../../shared/parquet/encode-thread-pool.js';
import type { ParquetCompression } from '../../../shared/parquet/compression.js';
import type { StoragePathTemplate } from '../../../shared/paths.js';
import type { BatchJob } from '../../../shared/redis/jobs/push.js';
import type { PushRequest } from './outcome.js';
import type { BatchFiles, Clock, JobSink, Ledger } from './ports.js';

/** Observers for metrics; all optional. */
export interface PushObserver {
  mintSeconds?(s: number): void;
  enqueueSeconds?(s: number): void;
  /** Roughly the bytes a job just added to Redis (packed body and job fields). */
  enqueuedBytes?(bytes: number): void;
  /** A push answered unavailable whose add went out but did not answer in time (it may still land; its id stays in flight). */
  enqueueUnknown?(): void;
  /** Time to turn a prepared body into its Parquet file (encodeMaxBytes). */
  encodeSeconds?(s: number): void;
  /** A prepared body whose encode failed here: its batch goes as JSON, for an encoder to encode. */
  encodeFailed?(err: Error): void;
  /** Each step's time (./steps/1-claim-id.ts … 4-durability-wait.ts, by the step's name). */
  stepSeconds?(step: string, seconds: number): void;
}

/** What every step of the queued push path is built over. */
export interface PushDeps {
  readonly collection: string;
  readonly template: StoragePathTemplate;
  readonly ledger: Ledger;
  readonly jobs: JobSink;
  readonly files: BatchFiles;
  readonly clock: Clock;
  /** Idempotency-Key window (s); 0: keys are not remembered. */
  readonly keyWindowSeconds: number;
  /** Body-dedup window (s) of keyless pushes whose every event has a message_id; 0 disables. */
  readonly bodyWindowSeconds: number;
  /** A mint, an add or an encode that has not finished by then ends the push unavailable. */
  readonly enqueueTimeoutMs: number;
  /** The worker thread prepared bodies are encoded on; without it, the event loop. */
  readonly encodeThread?: () => ParquetEncodeThread;
  /** The codec of the batch files encoded here (the collection's `parquetCompression`); default: the writer's default. */
  readonly compression?: ParquetCompression;
  readonly observe: PushObserver;
  /** Where a failed give-back of an id (`push_release`) is logged and counted; the reaper repairs it. */
  readonly bestEffort: BestEffortSink;
}

/** The push and where it goes: its list prefix and its idempotency claim, if any. */
export interface PushContext {
  readonly req: PushRequest;
  readonly prefix: string;
  readonly claim?: IdempotencyClaim;
}

/** After step 1: the push's batch id. */
export interface Claimed extends PushContext {
  readonly batchId: string;
  /** The id is an earlier push's (same claim): the answer is a duplicate. */
  readonly deduplicated: boolean;
  /** That earlier push's job is already in the queue: nothing to build or enqueue. */
  readonly queued: boolean;
}

/** After step 2: the job to enqueue (null when `queued`). */
export interface Built extends Claimed {
  readonly job: BatchJob | null;
}
