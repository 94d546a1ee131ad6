import type { Readable } from 'node:stream';

/** Result of a read: the bytes and their content type. */
/** What a store answers for an object written without a content type (RFC 9110, 8.3). */
export const DEFAULT_CONTENT_TYPE = 'application/octet-stream';

export interface StoredObject {
  body: Uint8Array;
  /** As written, or `application/octet-stream` where the backend keeps none (a Starfish store's contract). */
  contentType: string;
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

/** Credentials a store was given to sign with (absent: it signs with whatever its SDK's default chain finds). */
export interface StoreCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

/**
 * Where a store keeps its objects, for engines that open them without the store: DuckDB's
 * `read_parquet` and the data file URIs of an Iceberg table. `rootUri` ends with `/`, and an
 * object's URI is `rootUri + key`. May hold credentials: never log it.
 */
export type StoreLocation =
  | {
      kind: 'file';
      /** `file:///abs/root/` */
      rootUri: string;
      /** The absolute folder holding the objects (a key is a path under it). */
      dir: string;
    }
  | {
      kind: 's3';
      /** `s3://bucket/prefix/` (`s3://bucket/` without a prefix) */
      rootUri: string;
      bucket: string;
      /** `''` or a folder ending in `/`. */
      prefix: string;
      region: string;
      /** An S3-compatible server's URL; absent on AWS. */
      endpoint?: string;
      forcePathStyle: boolean;
      /** The credentials the store signs with, when it was given them. */
      credentials?: StoreCredentials;
    }
  | {
      /** Objects in this process's memory: no engine outside the store can open them. */
      kind: 'memory';
      /** `memory://<instance>/`, distinct per store. */
      rootUri: string;
    };

/**
 * The object store interface every backend implements (shared/store/filesystem, s3, memory;
 * test/helpers/store-conformance-cases.ts checks each on every member). Keys are `/`-separated
 * relative paths (e.g. `events/myapp/1782933157690-0000-735223.parquet`).
 * Implementations throw only `StoreError` (with `retriable`).
 *
 * A custom store (the library's `store` option) needs `putBytes`, `getBytes`, `listKeys`,
 * `healthcheck` and `describe`: that is enough for push, list and pull. Each optional member
 * says what a feature does without it: some fall back (pull reads whole objects), some refuse
 * with an error naming the missing member (Iceberg commits without `createIfAbsent`, DuckDB and
 * Iceberg locations without `location`).
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
  /**
   * Where the objects live, for DuckDB and Iceberg (see StoreLocation). Optional: without it DuckDB
   * cannot read the store in place (`query --store` and `duckdbReadParquetSql` refuse, rollups
   * copy each period's files to a local stage first) and Iceberg tables have no data file URIs
   * (`storeRootUri` refuses).
   */
  location?(): StoreLocation;
  /**
   * Creates `key` with `body` only if no object is there: true when this call created it, false
   * when one existed. Of concurrent callers on one key exactly one gets true, and a reader never
   * sees a partial object; the write is as durable as `putBytes`. The commit point of an Iceberg
   * commit (`metadata/v<N+1>.metadata.json`). Optional: without it the Iceberg committer refuses
   * to start (`requireCreateIfAbsent`), and everything else works.
   */
  createIfAbsent?(key: string, body: Uint8Array, opts?: PutOptions): Promise<boolean>;
  /**
   * Releases what the store holds open (an S3 store's sockets). Idempotent; the store must not be
   * used afterwards. Optional: a store without it holds nothing (`closeStore` is a no-op for it).
   */
  close?(): Promise<void>;
}

/** A conditional create as a function (ObjectStore.createIfAbsent), as an Iceberg table takes it. */
export type CreateIfAbsent = (key: string, body: Uint8Array, opts?: PutOptions) => Promise<boolean>;
