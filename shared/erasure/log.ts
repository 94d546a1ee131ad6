/**
 * The erasure log: one append-only record per erasure, `erasures/<collection>/<app>/<erasure-id>.json`,
 * written once when the erasure completes (a retry after a crash writes the same id again with
 * the same content, never another record). It holds who asked, when, a keyed hash of each erased
 * id (HMAC-SHA256, never the id itself), the files and rows changed and the Iceberg snapshot ids.
 *
 * The hash key: ERASURE_HASH_KEY (at least 32 characters) when set; otherwise a random 32-byte
 * key the product creates once in the store at `erasures/_hash-key` (hex) and reuses. Whoever can
 * read the store can then test a guessed id against the log, which is the purpose: answering
 * "was this person erased?" without keeping the id. Set ERASURE_HASH_KEY to keep the key apart
 * from the data.
 */
import { createHmac, randomBytes } from 'node:crypto';
import type { ObjectStore } from '../store/types.js';

export const ERASURE_ROOT = 'erasures/';
const STORED_KEY = `${ERASURE_ROOT}_hash-key`;
export const MIN_HASH_KEY_CHARS = 32;

/** The key of an erasure's record. */
export function erasureLogKey(collection: string, app: string, erasureId: string): string {
  return `${ERASURE_ROOT}${collection}/${app}/${erasureId}.json`;
}

/** HMAC-SHA256 of `id` under `key`, hex. */
export function hashId(key: Uint8Array, id: string): string {
  return createHmac('sha256', key).update(id, 'utf8').digest('hex');
}

/** The hash key (see the module comment): ERASURE_HASH_KEY's bytes, else the stored key, created if absent. */
export async function erasureHashKey(store: ObjectStore, fromEnv: string | undefined): Promise<Uint8Array> {
  if (fromEnv !== undefined && fromEnv !== '') {
    if (fromEnv.length < MIN_HASH_KEY_CHARS)
      throw new Error(`ERASURE_HASH_KEY must be at least ${MIN_HASH_KEY_CHARS} characters`);
    return Buffer.from(fromEnv, 'utf8');
  }
  const got = await store.getBytes(STORED_KEY);
  if (got) return Buffer.from(Buffer.from(got.body).toString('utf8').trim(), 'hex');
  const fresh = randomBytes(32).toString('hex');
  // Two first erasures at once may both write; the second read settles on what is stored.
  await store.putBytes(STORED_KEY, Buffer.from(`${fresh}\n`), { contentType: 'text/plain' });
  const again = await store.getBytes(STORED_KEY);
  return Buffer.from(
    Buffer.from(again?.body ?? Buffer.from(fresh))
      .toString('utf8')
      .trim(),
    'hex',
  );
}

export interface ErasureRecord {
  v: 1;
  id: string;
  collection: string;
  app: string;
  requestedBy: string;
  requestedAt: string;
  completedAt: string;
  /** `hmac-sha256`, hex, one per id asked for. */
  distinctIdHashes: string[];
  anonymousIdHashes: string[];
  filesScanned: number;
  filesRewritten: number;
  rowsErased: number;
  /** Keys of the batch and rollup files rewritten (no row content). */
  files: string[];
  /** Iceberg snapshots written by the erasure (overwrite) and the snapshots it expired. */
  snapshots: { overwrite: string[]; expired: string[] };
}

/** Writes the record unless one with this erasure id is there already (append-only). Returns true when written now. */
export async function writeErasureRecord(store: ObjectStore, record: ErasureRecord): Promise<boolean> {
  const key = erasureLogKey(record.collection, record.app, record.id);
  if (await store.getBytes(key)) return false;
  await store.putBytes(key, Buffer.from(`${JSON.stringify(record)}\n`), { contentType: 'application/json' });
  return true;
}
