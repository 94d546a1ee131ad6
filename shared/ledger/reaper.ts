import type { Queue } from 'bullmq';
import { batchIdMs } from '../ids.js';
import type { BatchLedger } from './ledger.js';

export interface ReapResult {
  /** Minted but never enqueued (the API died in between): released. */
  orphans: number;
  /** Dead-lettered jobs whose release was lost (the encoder died after failing them): released. */
  dead: number;
}

/**
 * One pass over the oldest in-flight ids of every prefix. An id older than `graceMs` with no
 * job behind it, or whose job failed for good, no longer holds the list back. Bounded: at most
 * `perPrefix` ids for each of at most 1,000 prefixes. A release decided on a state read just
 * before a replay moved the job back to waiting is refused by the ledger (see BatchLedger.reap).
 */
export async function reapOnce(ledger: BatchLedger, queue: Queue, graceMs: number, nowMs = Date.now(), perPrefix = 50): Promise<ReapResult> {
  const result: ReapResult = { orphans: 0, dead: 0 };
  const prefixes = (await ledger.prefixes()).slice(0, 1000);
  for (const prefix of prefixes) {
    const ids = await ledger.oldestPending(prefix, perPrefix);
    for (const id of ids) {
      if (nowMs - batchIdMs(id) < graceMs) break;
      const state = await queue.getJobState(id);
      if (state === 'unknown') {
        if (await ledger.reap(prefix, id)) result.orphans++;
      } else if (state === 'failed') {
        if (await ledger.reap(prefix, id)) result.dead++;
      }
    }
  }
  return result;
}
