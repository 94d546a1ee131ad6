import type { Queue } from 'bullmq';
import { jobKeysOf } from '../redis/bullmq-keys.js';
import type { BatchLedger } from './ledger.js';

export { jobKeysOf };

export interface ReapResult {
  /** Minted but never enqueued (the API died in between): released. */
  orphans: number;
  /** Dead-lettered jobs whose release was lost (the encoder died after failing them): released. */
  dead: number;
}

/**
 * One pass over the oldest in-flight ids of every prefix of one ledger namespace (one shard), in
 * one Redis call (scan_pending-2.lua). An id older than `graceMs` with no job behind it, or whose
 * job failed for good, no longer holds the list back. Bounded: at most `perPrefix` ids for each
 * of at most MAX_SCAN_PREFIXES prefixes. An id a replay just put back in flight is left alone
 * (its replay marker; see BatchLedger.markReplaying). Why a reaper: docs/decisions/0002-list-watermark-and-reaper.md.
 */
export async function reapOnce(
  ledger: BatchLedger,
  queue: Queue,
  graceMs: number,
  nowMs = Date.now(),
  perPrefix = 50,
): Promise<ReapResult> {
  const scan = await ledger.scanPending({ jobs: jobKeysOf(queue), graceMs, nowMs, perPrefix });
  return { orphans: scan.orphans, dead: scan.dead };
}
