/** Result of a read: the bytes and the content type they were written with (if the store keeps it). */
export interface StoredObject {
  body: Uint8Array;
  contentType?: string;
}

export interface PutOptions {
  contentType?: string;
}

export interface ListOptions {
  /** Only keys strictly greater than this full key (lexicographic, byte order). */
  startAfter?: string;
  /** At most this many keys (default: all). */
  limit?: number;
}

/**
 * The object store interface every backend implements. Keys are `/`-separated
 * relative paths (e.g. `events/myapp/1782933157690-0000-735223.parquet`).
 * Implementations throw only `StoreError` (with `retriable`).
 */
export interface ObjectStore {
  /** Write the whole object; readers never see a partial object under `key`. Overwrites. */
  putBytes(key: string, body: Uint8Array, opts?: PutOptions): Promise<void>;
  /** The object, or null when there is none. */
  getBytes(key: string): Promise<StoredObject | null>;
  /** Keys under `prefix` (a plain string prefix), ascending, after `startAfter`, at most `limit`. */
  listKeys(prefix: string, opts?: ListOptions): Promise<string[]>;
  /** Resolves when the store is reachable and writable-looking; throws StoreError otherwise. */
  healthcheck(): Promise<void>;
  /** A short human description for logs ("fs:/abs/root", "s3://bucket"). */
  describe(): string;
  /**
   * Deletes `keys` (batched where the backend allows: S3 DeleteObjects, 1,000 a call). A missing
   * key is not an error; resolves once every deletion is durable. Optional: a store without it
   * keeps everything (rollup retention is then off).
   */
  deleteKeys?(keys: readonly string[]): Promise<void>;
}
