/**
 * The erasure job contract (issue 36): its own BullMQ queue `<QUEUE_NAME>-erase` beside the rollup
 * queue (same key prefix), one job per erasure request; the API adds jobs
 * (services/api/erase.ts), the rollup service runs them (./job.ts).
 */
import type { JobsOptions } from 'bullmq';
import { z } from 'zod';
import { eraseQueueName, rollupQueuePrefix } from '../keyspace.js';
import { randomHex } from '../../ids.js';

export { eraseQueueName, rollupQueuePrefix as eraseQueuePrefix };

export const ERASE_JOB_NAME = 'erase';
/** Ids per list at most in one request. */
export const MAX_ERASE_IDS = 100;
/** Characters per id at most. */
export const MAX_ERASE_ID_CHARS = 1024;

const Id = z.string().min(1).max(MAX_ERASE_ID_CHARS);

/** The body of `POST /admin/erase/<collection>/<app>`. */
export const EraseRequestSchema = z
  .object({
    distinct_ids: z.array(Id).max(MAX_ERASE_IDS).default([]),
    anonymous_ids: z.array(Id).max(MAX_ERASE_IDS).default([]),
    dry_run: z.boolean().default(false),
  })
  .strict()
  .refine((b) => b.distinct_ids.length + b.anonymous_ids.length > 0, {
    message: 'name at least one id in distinct_ids or anonymous_ids',
  });
export type EraseRequest = z.infer<typeof EraseRequestSchema>;

export const EraseJobSchema = z.object({
  v: z.literal(1),
  id: z.string().min(1),
  collection: z.string().min(1),
  app: z.string().min(1),
  /** List prefix (`events/myapp/`). */
  prefix: z.string().min(1),
  /** Emptied once the erasure completed (the ids leave Redis). */
  distinctIds: z.array(z.string()),
  anonymousIds: z.array(z.string()),
  dryRun: z.boolean(),
  /** The request's instant (epoch ms): batches acknowledged before it are covered. */
  requestedAt: z.number().int().nonnegative(),
  /** Identity of the caller (auth), never a token. */
  requestedBy: z.string(),
});
export type EraseJob = z.infer<typeof EraseJobSchema>;

/** Erasure states as `GET /admin/erase/<id>` reports them. */
export type EraseState = 'queued' | 'running' | 'waiting' | 'completed' | 'failed';

/** What a running job keeps in its BullMQ progress (and returns when done). */
export interface EraseProgress {
  state: 'running' | 'waiting' | 'completed';
  step: 'scan' | 'wait' | 'rescan' | 'iceberg' | 'log' | 'done';
  files_scanned: number;
  files_rewritten: number;
  rows_erased: number;
  /** Dry run: files that would change (keys, at most 1,000). */
  files?: { key: string; rows: number }[];
  dry_run?: boolean;
  /** Batch ids whose file is being put and not yet in the rewritten log (recorded again on resume), and the rows that put erases. */
  pending?: string[];
  pending_rows?: number;
  snapshots?: { overwrite: string[]; expired: string[] };
}

/** A fresh erasure id: `er-<epoch ms>-<16 hex>`. */
export function newErasureId(nowMs = Date.now()): string {
  return `er-${nowMs}-${randomHex(8)}`;
}

/** An erasure id: `er-<ms>-<16 hex>`. */
export const ERASURE_ID_RE = /^er-\d{13}-[0-9a-f]{16}$/;

export function isErasureId(s: string): boolean {
  return ERASURE_ID_RE.test(s);
}

/**
 * Retries with exponential backoff (2 s … ~17 min over 10 attempts); an exhausted job stays in the
 * failed set (dead letter, its ids still in its data so a retry of the job can run it; BullMQ's
 * `job.retry()`). Completed jobs are kept 30 days (1,000 at
 * most) for `GET /admin/erase/<id>`; their ids are scrubbed on completion.
 */
export const ERASE_JOB_OPTIONS: JobsOptions = {
  attempts: 10,
  backoff: { type: 'exponential', delay: 2000 },
  removeOnComplete: { count: 1000, age: 30 * 86_400 },
  removeOnFail: false,
};
