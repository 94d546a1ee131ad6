import type { Readable } from 'node:stream';

/** Result of a read: the bytes and the content type they were written with (if the store keeps it). */
export interface StoredObject {
  body: Uint8Array;
  contentType?: string;
}

export interface PutOptions {
  contentType?: string;
}

/** What a store knows about an object without reading it. */
export interface ObjectMeta {
  /** Bytes. */
  size: number;
  /** Lower-case hex sha256 of the bytes, recorded when the object was written. */
  sha256: string;
  contentType?: string;
}

/** Bytes `start..end` of an object, both inclusive (HTTP's `Range` arithmetic). */
export interface ByteRange {
  start: number;
  end: number;
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
  /**
   * Size, sha256 and content type without reading the object (null when there is none). An
   * object written before the store recorded checksums is hashed once. Optional for custom
   * stores: without it, pull reads the whole object.
   */
  head?(key: string): Promise<ObjectMeta | null>;
  /**
   * The object's bytes as a stream, only `range` of them when given (which must lie inside the
   * object: callers clamp it with `head`'s size). Null when there is no object. Optional for
   * custom stores: without it, pull reads the whole object with `getBytes`.
   */
  getStream?(key: string, range?: ByteRange): Promise<Readable | null>;
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
