/**
 * Rollup planning: which period of a prefix is due, from the prefix's list watermark.
 *
 * A period `[t, t+P)` is due when every batch id below `t+P` is final (no id of the period is
 * still in flight or can still be minted) and the clock has passed `t+P+ROLLUP_DELAY_SECONDS`.
 * "Final" is read from the ledger of the prefix's shard (read-only, through
 * `BatchLedger.listBoundAt`) and the TIME of the Redis that shard mints on:
 * - the bound is "below X": every id below X is final (X is the oldest in-flight id);
 * - the bound is "up to L" (nothing in flight): every id minted later gets an instant of at least
 *   that Redis' TIME at that moment, so every id whose instant is
 *   below the TIME read in the same script as the bound is final. Two masters' clocks may
 *   differ; each prefix is only ever compared with the clock of its own shard.
 */
import { batchIdMs } from '../../shared/ids.js';
import type { BatchLedger } from '../../shared/ledger/ledger.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { batchIdOfKey, periodStart } from '../../shared/rollup/layout.js';
import type { Manifest } from '../../shared/rollup/manifest.js';
import { firstUnrolledKey } from './roll.js';

/**
 * Every batch id of `prefix` with an instant below the returned ms is final; also returns the
 * clock's "now". `ledger` must be the ledger of the prefix's shard (QUEUE_SHARDS): the bound and
 * TIME are read in one script on the Redis that mints the prefix's ids, so on a Cluster "now" is
 * that master's clock, the one the prefix's next id is minted on.
 */
export async function finalHorizon(ledger: BatchLedger, prefix: string): Promise<{ horizonMs: number; nowMs: number }> {
  const { bound, nowMs } = await ledger.listBoundAt(prefix);
  if (bound.kind === 'upTo') return { horizonMs: nowMs, nowMs };
  return { horizonMs: batchIdMs(bound.id), nowMs };
}

export interface PlanResult {
  /** Start of the next period to roll (the first unrolled one holding a batch file), if any. */
  nextStartMs?: number;
  /** True when that period is due now. */
  due: boolean;
  /** Seconds since the oldest unrolled period closed (0 when none is closed). */
  lagSeconds: number;
}

/** Plans one prefix: the next period after the manifest's watermark, and whether it is due. */
export async function planPrefix(
  o: { store: ObjectStore; ledger: BatchLedger; periodSeconds: number; delaySeconds: number },
  prefix: string,
  manifest: Manifest | null,
): Promise<PlanResult> {
  const periodMs = o.periodSeconds * 1000;
  const first = await firstUnrolledKey(o.store, prefix, manifest?.watermarkMs ?? 0);
  const id = first === undefined ? null : batchIdOfKey(prefix, first);
  if (id === null) return { due: false, lagSeconds: 0 };
  return planPeriod(batchIdMs(id), await finalHorizon(o.ledger, prefix), periodMs, o.delaySeconds * 1000);
}

/**
 * planPrefix's decision from what it read: the period holding the first unrolled batch (its id's
 * instant `firstMs`) is due once every id below its end is final (`horizonMs`) and the shard's
 * clock (`nowMs`) has passed its end plus the delay.
 */
export function planPeriod(
  firstMs: number,
  clock: { horizonMs: number; nowMs: number },
  periodMs: number,
  delayMs: number,
): PlanResult & { nextStartMs: number } {
  const startMs = periodStart(firstMs, periodMs);
  const endMs = startMs + periodMs;
  const due = clock.horizonMs >= endMs && clock.nowMs >= endMs + delayMs;
  return { nextStartMs: startMs, due, lagSeconds: Math.max(0, (clock.nowMs - endMs) / 1000) };
}
