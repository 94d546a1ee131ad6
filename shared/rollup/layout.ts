/**
 * Rollup period math and key layout. Pure functions: no store, no Redis.
 *
 * A period of a list prefix is `[start, start + P)` of `received_at` (= the batch id's instant),
 * with `start` a multiple of P since the epoch (P divides a day, so periods never straddle days).
 *
 * Layout, in the same store as the batch files (`prefix` is the list prefix, e.g. `events/myapp/`):
 * - `rollups/<prefix>date=YYYY-MM-DD/hour=HH/<firstId>_<lastId>.parquet`: rows of one period (the
 *   date/hour of the period's start, UTC), sorted by `event`, `received_at`, `batch_id`;
 * - `rollups/<prefix>_manifest.json`: which periods are rolled, which files and batch ids each
 *   holds, and the rolled watermark (see ./manifest.ts);
 * - `rollups/<prefix>_retention.json`: the largest batch id whose file retention deleted (see
 *   ./retention.ts), read by the list route on every call, so it stays a few bytes.
 */
import { batchIdMs, parseBatchFileName } from '../ids.js';

/** Top folder of every rollup object. */
export const ROLLUP_ROOT = 'rollups/';
const MANIFEST_NAME = '_manifest.json';
const RETENTION_NAME = '_retention.json';

/** A batch id's instant as the 13-digit string ids start with: `id >= msKey(t)` ⇔ `batchIdMs(id) >= t`. */
export function msKey(ms: number): string {
  if (!Number.isSafeInteger(ms) || ms < 0 || ms > 9_999_999_999_999)
    throw new RangeError(`not an epoch-ms in id range: ${ms}`);
  return String(ms).padStart(13, '0');
}

/** Start (epoch ms) of the period holding `ms`. */
export function periodStart(ms: number, periodMs: number): number {
  return Math.floor(ms / periodMs) * periodMs;
}

/** The rollup folder of a list prefix: `rollups/events/myapp/`. */
export function rollupPrefix(listPrefix: string): string {
  return `${ROLLUP_ROOT}${listPrefix}`;
}

/** The manifest key of a list prefix. */
export function manifestKey(listPrefix: string): string {
  return `${rollupPrefix(listPrefix)}${MANIFEST_NAME}`;
}

/** The retention mark key of a list prefix. */
export function retentionKey(listPrefix: string): string {
  return `${rollupPrefix(listPrefix)}${RETENTION_NAME}`;
}

/** The partition folder of the period starting at `startMs`: `rollups/<prefix>date=2026-12-01/hour=08/`. */
export function partitionPrefix(listPrefix: string, startMs: number): string {
  const iso = new Date(startMs).toISOString();
  return `${rollupPrefix(listPrefix)}date=${iso.slice(0, 10)}/hour=${iso.slice(11, 13)}/`;
}

/** The key of a rollup file covering batch ids `firstId`..`lastId` of the period starting at `startMs`. */
export function rollupFileKey(listPrefix: string, startMs: number, firstId: string, lastId: string): string {
  return `${partitionPrefix(listPrefix, startMs)}${firstId}_${lastId}.parquet`;
}

/** The first batch id of a rollup file key, or null when the key is not a rollup file name. An erasure's rewrite adds `~<hex>` before `.parquet`. */
export function rollupFileFirstId(key: string): string | null {
  const m = /\/(\d{13}-\d{4}-[0-9a-f]{6})_(\d{13}-\d{4}-[0-9a-f]{6})(?:~[0-9a-f]{8})?\.parquet$/.exec(key);
  return m ? (m[1] as string) : null;
}

/** The batch id of a batch-file key under `listPrefix`, or null for any other key. */
export function batchIdOfKey(listPrefix: string, key: string): string | null {
  return key.startsWith(listPrefix) ? parseBatchFileName(key.slice(listPrefix.length)) : null;
}

/** True when the batch id falls in `[startMs, endMs)`. */
export function idInRange(id: string, startMs: number, endMs: number): boolean {
  const ms = batchIdMs(id);
  return ms >= startMs && ms < endMs;
}
