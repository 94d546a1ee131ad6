/**
 * Retention, run by the planner's pass on each prefix: raw batch files after
 * RAW_RETENTION_SECONDS (once their rollup is durable), whole periods after RETENTION_DAYS.
 */
import { msKey } from '../../shared/rollup/layout.js';
import { type Manifest, readManifest } from '../../shared/rollup/manifest.js';
import { type RollContext, dropOldPeriods, periodsPastRetention, pruneRawBatches, rawPeriodsDue } from './roll.js';
import { type RollupDeps, type RollupEnv, ledgerOf, lockedRollContext, takePrefixLock } from './context.js';

/** Raw retention's periods per prefix and pass. */
const RAW_PERIODS_PER_PASS = 24;

/** Where retention cuts at a moment: raw batch files and whole periods (each when on). */
export interface RetentionCutoffs {
  /** Batch files of periods that ended before this go (RAW_RETENTION_SECONDS). */
  raw?: number;
  /** How long a rollup is durable before its batch files go (a query that read the previous manifest finishes). */
  graceMs: number;
  /** Periods that ended before this go (RETENTION_DAYS). */
  periods?: number;
}

type RetentionEnv = Pick<RollupEnv, 'RAW_RETENTION_SECONDS' | 'RETENTION_DAYS'>;

/** True when either kind of retention is on. */
export function retentionOn(env: RetentionEnv): boolean {
  return env.RAW_RETENTION_SECONDS > 0 || env.RETENTION_DAYS !== undefined;
}

/** Where retention cuts at `nowMs`: raw batch files (RAW_RETENTION_SECONDS) and whole periods (RETENTION_DAYS), each when on. */
export function retentionCutoffs(env: RetentionEnv, nowMs: number): RetentionCutoffs {
  return {
    ...(env.RAW_RETENTION_SECONDS > 0 ? { raw: nowMs - env.RAW_RETENTION_SECONDS * 1000 } : {}),
    graceMs: Math.min(60_000, env.RAW_RETENTION_SECONDS * 1000),
    ...(env.RETENTION_DAYS !== undefined ? { periods: nowMs - env.RETENTION_DAYS * 86_400_000 } : {}),
  };
}

/** True when the manifest has a period either kind of retention would act on at `nowMs`. */
export function retentionDue(manifest: Manifest, cutoffs: RetentionCutoffs, nowMs: number): boolean {
  const rawDue = cutoffs.raw !== undefined && rawPeriodsDue(manifest, cutoffs.raw, cutoffs.graceMs, nowMs).length > 0;
  const oldDue = cutoffs.periods !== undefined && periodsPastRetention(manifest, cutoffs.periods).length > 0;
  return rawDue || oldDue;
}

/**
 * Retention of one prefix (raw batch files after RAW_RETENTION_SECONDS, whole periods after
 * RETENTION_DAYS), under the prefix lock; skipped this pass when a rollup job holds it.
 */
export async function retainPrefix(deps: RollupDeps, prefix: string, nowMs: number): Promise<void> {
  const { env, store, logger } = deps;
  if (!retentionOn(env)) return;
  if (!store.deleteKeys) return;
  // Read without the lock first: a pass with nothing due must not hold it, or the prefix's
  // rollup job (queued by this same pass a moment earlier) finds it taken and waits a round.
  const cutoffs = retentionCutoffs(env, nowMs);
  const manifest = await readManifest(store, prefix);
  if (!manifest || !retentionDue(manifest, cutoffs, nowMs)) return;
  const lock = await takePrefixLock(deps, prefix, 'retention');
  if (!lock) return;
  try {
    const ctx = lockedRollContext(deps, prefix, lock);
    if (cutoffs.periods !== undefined) {
      const dropped = await dropOldPeriods(ctx, prefix, cutoffs.periods);
      if (dropped > 0) logger.info({ prefix, periods: dropped }, 'retention: old periods deleted');
    }
    if (cutoffs.raw !== undefined)
      await pruneRaw(deps, ctx, prefix, { cutoffMs: cutoffs.raw, graceMs: cutoffs.graceMs });
  } finally {
    await lock.release();
  }
}

/** Raw retention of one prefix; the caller holds the prefix lock. */
async function pruneRaw(
  deps: RollupDeps,
  ctx: RollContext,
  prefix: string,
  cut: { cutoffMs: number; graceMs: number },
): Promise<void> {
  const r = await pruneRawBatches(ctx, prefix, {
    ...cut,
    maxPeriods: RAW_PERIODS_PER_PASS,
    // The list route answers recent cursors from Redis' index of written ids: wait until it no longer holds the period's ids.
    stillIndexed: async (startMs, endMs) => {
      const { ids } = await ledgerOf(deps, prefix).listWritten(prefix, msKey(startMs), 1);
      return ids !== null && ids[0] !== undefined && ids[0] < msKey(endMs);
    },
  });
  deps.metrics.rawDeleted.inc(r.deleted);
  if (r.deleted > 0)
    deps.logger.info(
      { prefix, files: r.deleted, periods: r.periods, waiting: r.waiting },
      'raw retention: batch files deleted',
    );
}
