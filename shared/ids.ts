import { randomBytes } from 'node:crypto';

/** Server-minted batch id: epoch-ms, per-ms counter, random suffix. String order = mint order. */
export const BATCH_ID_RE = /^\d{13}-\d{4}-[0-9a-f]{6}$/;

/** True when `s` is a well-formed batch id. */
export function isBatchId(s: string): boolean {
  return BATCH_ID_RE.test(s);
}

/** The instant (epoch ms) a batch id was minted at; also every row's `received_at`. */
export function batchIdMs(id: string): number {
  return Number(id.slice(0, 13));
}

/** Six hex chars of randomness: makes ids unguessable enough that pulls cannot be enumerated by counter. */
export function randomSuffix(): string {
  return randomBytes(3).toString('hex');
}

/** Accepts `<id>` or `<id>.parquet`; returns the bare id or null. */
export function parseBatchRef(s: string): string | null {
  const bare = s.endsWith('.parquet') ? s.slice(0, -'.parquet'.length) : s;
  return isBatchId(bare) ? bare : null;
}
