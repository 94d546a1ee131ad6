import { StoreError } from '../../shared/errors.js';
import {
  PARQUET_MIME_TYPE,
  type ParquetWriteOptions,
  encodeBatch,
  encodeBatchToIpc,
  ipcToParquet,
} from '../../shared/parquet/encode.js';
import type { ParquetEncodeThread } from '../../shared/parquet/encode-thread-pool.js';
import {
  type BatchGroupJob,
  BatchGroupJobSchema,
  type BatchJob,
  BatchJobSchema,
  unpackBody,
} from '../../shared/redis/jobs/push.js';
import type { z } from 'zod';
import type { ObjectStore } from '../../shared/store/types.js';

/** A step's outcome: bad data is a value with a reason, not a thrown surprise. */
export type Step<T> = { ok: true; value: T } | { ok: false; reason: string };

/** `data` as `schema`, or the first place it does not match. */
function decodeAs<T>(schema: z.ZodType<T>, what: string, data: unknown): Step<T> {
  const r = schema.safeParse(data);
  return r.success
    ? { ok: true, value: r.data }
    : {
        ok: false,
        reason: `${what} does not match the contract: ${r.error.issues[0]?.path.join('.') ?? ''} ${r.error.issues[0]?.message ?? ''}`,
      };
}

/** Step 1: the job payload matches the shared contract. */
export function decodeJob(data: unknown): Step<BatchJob> {
  return decodeAs(BatchJobSchema, 'job payload', data);
}

/** Step 1 for a group job (several batches in one job; shared/redis/jobs/push.ts). */
export function decodeGroupJob(data: unknown): Step<BatchGroupJob> {
  return decodeAs(BatchGroupJobSchema, 'group job payload', data);
}

/** Step 2: the request body bytes back from the payload. */
export async function restoreBody(job: BatchJob): Promise<Step<Buffer>> {
  try {
    return { ok: true, value: await unpackBody(job) };
  } catch (err) {
    return { ok: false, reason: `job body cannot be unpacked: ${(err as Error).message}` };
  }
}

/**
 * Step 3: scan (the API's own validator, shared/envelope.ts) → column bytes as sent → Arrow →
 * Parquet. A `parquet` payload is the file the API encoded from the body it validated: it is
 * written as it is. `writer.compression`: the codec of the job's collection.
 */
export function encode(
  job: BatchJob,
  body: Buffer,
  writer: ParquetWriteOptions = {},
): Step<{ bytes: Uint8Array; rows: number }> {
  if (job.encoding === 'parquet') return { ok: true, value: { bytes: body, rows: job.events } };
  const r = encodeBatch(body, job.receivedAt, writer);
  return r.ok ? { ok: true, value: { bytes: r.bytes, rows: r.rows } } : { ok: false, reason: r.reason };
}

/**
 * Arrow IPC streams from this size are turned into Parquet on a worker thread
 * ({@link encodeOffThread}): parquet-wasm's memory grows to the largest batch it encoded and never
 * shrinks, and a thread's is given back when the thread is retired. Smaller batches (the API
 * encodes bodies up to API_ENCODE_MAX_BYTES itself, and SDK batches are tens of KB) grow it by a
 * few MiB at most, and stay on the event loop, where they cost no thread hop.
 */
export const THREAD_ENCODE_MIN_IPC_BYTES = 1024 * 1024;

/**
 * Step 3 as {@link encode} does it, except that a large batch's Parquet encode runs on `thread()`:
 * its IPC stream moves there without a copy. `body` is not used once the stream is built, so a
 * caller that drops its own reference frees it while the thread encodes.
 */
export function encodeOffThread(
  job: BatchJob,
  body: Buffer,
  thread: () => ParquetEncodeThread,
  writer: ParquetWriteOptions = {},
): Step<{ bytes: Uint8Array; rows: number } | Promise<{ bytes: Uint8Array; rows: number }>> {
  if (job.encoding === 'parquet') return encode(job, body);
  const r = encodeBatchToIpc(body, job.receivedAt);
  if (!r.ok) return { ok: false, reason: r.reason };
  const { ipc, rows } = r;
  if (ipc.byteLength < THREAD_ENCODE_MIN_IPC_BYTES)
    return { ok: true, value: { bytes: ipcToParquet(ipc, writer), rows } };
  return {
    ok: true,
    value: thread()
      .encode(ipc, { transfer: true, ...(writer.compression === undefined ? {} : { compression: writer.compression }) })
      .then((bytes) => ({ bytes, rows })),
  };
}

/** Step 4: the file under its final key (the key is a function of the batch id, so a retry overwrites). */
export async function write(store: ObjectStore, job: BatchJob, bytes: Uint8Array): Promise<void> {
  try {
    await store.putBytes(job.key, bytes, { contentType: PARQUET_MIME_TYPE });
  } catch (err) {
    if (err instanceof StoreError) throw err;
    throw new StoreError(`write of ${job.key} failed: ${(err as Error).message}`, { retriable: true, cause: err });
  }
}
