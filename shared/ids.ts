import { randomFillSync } from 'node:crypto';

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

/**
 * Cryptographic random bytes drawn from a pool refilled 4 KiB at a time: each `randomBytes` call
 * costs ~5 µs of system entropy on this machine, and every push (its id) and every file (its temp
 * name) needs a few bytes. Each byte is handed out once.
 */
const POOL_BYTES = 4096;
const pool = Buffer.alloc(POOL_BYTES);
let poolAt = POOL_BYTES;

/** `bytes` (at most 64) random bytes as lowercase hex. */
export function randomHex(bytes: number): string {
  if (!Number.isInteger(bytes) || bytes < 1 || bytes > 64)
    throw new RangeError(`randomHex takes 1-64 bytes, not ${bytes}`);
  if (poolAt + bytes > POOL_BYTES) {
    randomFillSync(pool);
    poolAt = 0;
  }
  const hex = pool.toString('hex', poolAt, poolAt + bytes);
  poolAt += bytes;
  return hex;
}

/** Six hex chars of randomness: makes ids unguessable enough that pulls cannot be enumerated by counter. */
export function randomSuffix(): string {
  return randomHex(3);
}

/**
 * Batch references, parsed here and nowhere else. A batch's file name is `<id>.parquet`
 * (`batchKey` in `paths.ts` builds it); a client may name a batch either way.
 */
const BATCH_FILE_SUFFIX = '.parquet';

/** A batch reference as a client writes it, `<id>` or `<id>.parquet`: the bare id, or null. */
export function parseBatchRef(s: string): string | null {
  return s.endsWith(BATCH_FILE_SUFFIX) ? parseBatchFileName(s) : isBatchId(s) ? s : null;
}

/** A batch file's name, exactly `<id>.parquet` (no folder): the id, or null for any other name. */
export function parseBatchFileName(name: string): string | null {
  if (!name.endsWith(BATCH_FILE_SUFFIX)) return null;
  const id = name.slice(0, -BATCH_FILE_SUFFIX.length);
  return isBatchId(id) ? id : null;
}
