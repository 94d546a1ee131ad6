import { promisify } from 'node:util';
import { deflateRaw, deflateRawSync, inflateRaw, inflateRawSync, constants as zc } from 'node:zlib';
import type { JobsOptions } from 'bullmq';
import { z } from 'zod';
import { isBatchId } from '../../ids.js';

/**
 * The one job contract between the API (producer) and the encoder (consumer).
 * Job id = batch id, so a re-added job is a no-op and a retried job rewrites the same key.
 */
export const JOB_NAME = 'encode-batch';

export const BatchJobSchema = z.object({
  v: z.literal(1),
  collection: z.string().min(1),
  /** Object key of the Parquet file (a function of the batch id). */
  key: z.string().min(1),
  /** List prefix whose in-flight set holds this batch. */
  prefix: z.string(),
  params: z.record(z.string(), z.string()),
  batchId: z.string(),
  /** Epoch ms = the id's instant; every row's received_at. */
  receivedAt: z.number().int(),
  events: z.number().int().nonnegative(),
  /**
   * `identity`: body is the UTF-8 JSON text; `deflate-raw`: body is base64 of the raw-deflated
   * text; `parquet`: body is base64 of the batch's Parquet file, which the API encoded
   * (API_ENCODE_MAX_BYTES), so the encoder only writes it.
   */
  encoding: z.enum(['identity', 'deflate-raw', 'parquet']),
  body: z.string(),
  /** Bytes of the unpacked payload: the JSON body as accepted, or the Parquet file. */
  bodyBytes: z.number().int().nonnegative(),
  /** With `parquet`: the JSON body's bytes as accepted (for the encoder's input-bytes metrics). */
  jsonBytes: z.number().int().nonnegative().optional(),
});
export type BatchJob = z.infer<typeof BatchJobSchema>;

/**
 * A group of batches in one queue job (the API's group commit under load, QUEUE_GROUP_MAX). Each
 * member is a whole batch job: its own id, key and file. The job's id is `g-` + the first member's
 * batch id (groupJobId), never a batch id, so a member that fails can be queued again as a job of
 * its own under its own id. The ledger records every member's group (`BatchLedger.noteGroup`)
 * in the same round trip as the job's add, so the reaper and a retried push find the job a
 * member rides in. Encoders of this version read both forms.
 */
export const BatchGroupJobSchema = z.object({
  v: z.literal(2),
  batches: z.array(BatchJobSchema).min(1),
});
export type BatchGroupJob = z.infer<typeof BatchGroupJobSchema>;

/**
 * Request-body bytes (`bodyBytes`) per group job at most: a body larger than this is always its
 * own job, and the encoder's byte budget takes a group's bytes at once.
 */
export const GROUP_MAX_BODY_BYTES = 1024 * 1024;

/** The queue job id of a group whose first member is `firstBatchId`. */
export function groupJobId(firstBatchId: string): string {
  return `g-${firstBatchId}`;
}

/** True for a group job's id (`g-<batch id>`); the batch id part names the shard, as a batch id does. */
export function isGroupJobId(id: string): boolean {
  return id.startsWith('g-') && isBatchId(id.slice(2));
}

/** True for a payload that says it is a group (its members are checked by BatchGroupJobSchema). */
export function isGroupPayload(data: unknown): boolean {
  return typeof data === 'object' && data !== null && (data as { v?: unknown }).v === 2;
}

/**
 * Below this size a batch is stored as text: deflate + base64 only pays once the
 * repeated keys of a few events give it something to squeeze. Why the payload is deflated at
 * all: docs/decisions/0007-deflated-job-payload.md.
 */
const COMPRESS_MIN_BYTES = 1024;
/**
 * Bodies up to this size are (de)compressed on the calling thread: for them zlib's hand-off to
 * the libuv pool costs more than the work (measured: a 60 KB body deflates in 0.09 ms of CPU
 * inline against 0.15-0.18 ms through the pool; inflates in 0.05 against 0.10-0.11), and the
 * event loop is held well under a millisecond. Larger bodies go to the pool
 * (docs/decisions/0008-inline-zlib.md).
 */
const INLINE_ZLIB_MAX_BYTES = 128 * 1024;
const deflateRawAsync = promisify(deflateRaw);
const inflateRawAsync = promisify(inflateRaw);
const DEFLATE_OPTIONS = { level: 1, strategy: zc.Z_DEFAULT_STRATEGY };

/*
 * zlib's output buffer size (`chunkSize`, 16 KiB by default). Each time the output fills one,
 * zlib stops, Node slices it off and (on the thread pool) comes back to the event loop before
 * it goes on, and the pieces are concatenated at the end. A 600 KB body inflated in 16 KiB
 * pieces on the pool took 2.8-3.0 ms of CPU against 0.7-1.0 ms in one piece, and its deflate
 * 2.3-2.7 against 2.0 ms (docs/decisions/0008-inline-zlib.md). So the output buffer is sized
 * to what the output will be: the advertised body size (plus a margin, so the last call of
 * inflate does not find a full buffer and start another) when inflating, and a quarter of the
 * body when deflating (bodies of events deflate 8-10x at level 1; one that does not still comes
 * out whole, in more pieces). Bounded, because `bodyBytes` comes from Redis, not from this
 * process: a corrupt payload cannot make it allocate more than this at once.
 */
const OUTPUT_CHUNK_MIN = zc.Z_DEFAULT_CHUNK;
const OUTPUT_CHUNK_MAX = 16 * 1024 * 1024;
const INFLATE_CHUNK_MARGIN = 64;
/** zlib's output buffer size for an output of about `bytes` (at least zlib's default, at most 16 MiB). */
export const outputChunk = (bytes: number): number => Math.min(OUTPUT_CHUNK_MAX, Math.max(OUTPUT_CHUNK_MIN, bytes));

/** Packs a request body for the job payload (zlib off the event loop for large bodies). */
export async function packBody(body: Buffer): Promise<Pick<BatchJob, 'encoding' | 'body' | 'bodyBytes'>> {
  if (body.length < COMPRESS_MIN_BYTES)
    return { encoding: 'identity', body: body.toString('utf8'), bodyBytes: body.length };
  const options = { ...DEFLATE_OPTIONS, chunkSize: outputChunk(body.length >> 2) };
  const packed =
    body.length <= INLINE_ZLIB_MAX_BYTES ? deflateRawSync(body, options) : await deflateRawAsync(body, options);
  return { encoding: 'deflate-raw', body: packed.toString('base64'), bodyBytes: body.length };
}

/**
 * The API encodes a body to Parquet itself only from this size (up to API_ENCODE_MAX_BYTES): the
 * size from which the JSON payload's deflate and inflate run on libuv's pool (INLINE_ZLIB_MAX_BYTES
 * below), where they cost the most. Measured in `npm start`
 * (docs/decisions/0012-api-encodes-large-bodies.md): 1,000-event bodies (600 KB) took 30–37% less
 * CPU per batch encoded by the API; 100-event bodies (60 KB) took the same CPU, and the encode in
 * the push's path raised their p50 and p99 at a steady rate. Small bodies would also cost Redis
 * more: a file's fixed part (about 3 KB of footer and page headers) is 0.6× of a 10-event body's
 * JSON, where Redis' budget is 0.3×.
 */
export const API_ENCODE_MIN_BYTES = 128 * 1024;

/** The payload of a batch whose Parquet file the API encoded: the file's bytes, and the JSON body's size. */
export function packParquet(
  file: Uint8Array,
  jsonBytes: number | undefined,
): Pick<BatchJob, 'encoding' | 'body' | 'bodyBytes' | 'jsonBytes'> {
  return {
    encoding: 'parquet',
    body: Buffer.from(file.buffer, file.byteOffset, file.byteLength).toString('base64'),
    bodyBytes: file.byteLength,
    ...(jsonBytes === undefined ? {} : { jsonBytes }),
  };
}

/** Parquet's magic number, at both ends of every file. */
const PARQUET_MAGIC = Buffer.from('PAR1');

/**
 * Restores the request body bytes from a job payload (for `parquet`, the file to write). The bytes
 * must come to the size the API recorded (`bodyBytes`), and a file must be framed by Parquet's
 * magic number; anything else is a damaged payload and throws, so it is never encoded or written
 * as if it were the batch.
 */
export async function unpackBody(job: Pick<BatchJob, 'encoding' | 'body' | 'bodyBytes'>): Promise<Buffer> {
  let body: Buffer;
  if (job.encoding === 'identity') body = Buffer.from(job.body, 'utf8');
  else if (job.encoding === 'parquet') {
    body = Buffer.from(job.body, 'base64');
  } else {
    // The advertised size bounds inflation, so a corrupt payload cannot balloon memory.
    const options = {
      maxOutputLength: Math.max(job.bodyBytes, 1),
      chunkSize: outputChunk(job.bodyBytes + INFLATE_CHUNK_MARGIN),
    };
    const packed = Buffer.from(job.body, 'base64');
    body =
      job.bodyBytes <= INLINE_ZLIB_MAX_BYTES ? inflateRawSync(packed, options) : await inflateRawAsync(packed, options);
  }
  if (body.length !== job.bodyBytes)
    throw new Error(`the payload holds ${body.length} bytes, the job says ${job.bodyBytes}`);
  if (
    job.encoding === 'parquet' &&
    !(body.length >= 12 && body.subarray(0, 4).equals(PARQUET_MAGIC) && body.subarray(-4).equals(PARQUET_MAGIC))
  ) {
    throw new Error(`the payload of ${body.length} bytes is not a Parquet file (no PAR1 at both ends)`);
  }
  return body;
}

/**
 * Dead letters are acknowledged batches, so they are kept long enough to be replayed, but not
 * forever: BullMQ deletes a failed job older than this, or beyond this many newest ones, when
 * another job fails. Sized in docs/reliability.md ("Sizing Redis").
 */
export const DEAD_LETTER_KEEP = { age: 14 * 86_400, count: 10_000 } as const;

/** Retry policy: exponential backoff; an exhausted job stays in the failed set (dead letter) for replay, within DEAD_LETTER_KEEP. */
export const BATCH_JOB_OPTIONS: JobsOptions = {
  attempts: 10,
  backoff: { type: 'exponential', delay: 1000 },
  removeOnComplete: true,
  removeOnFail: { ...DEAD_LETTER_KEEP },
};
