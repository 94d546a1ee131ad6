/**
 * Exclusive create ("put if absent") for the one write an Iceberg commit needs to be atomic:
 * `metadata/v<N+1>.metadata.json`. The ObjectStore interface (shared/store/types.ts) has no such
 * method (putBytes overwrites), so until it grows an optional
 * `putBytesIfAbsent(key, body, opts): Promise<boolean>` this module provides one per backend
 * from the outside:
 *
 * - filesystem: the body is written to a temp file next to the target and fsynced, then
 *   `link(2)`ed to the final name, which fails with EEXIST when the name exists. Unlike opening
 *   the final name with `wx` and writing into it, a reader never sees a partly written version.
 * - S3: PutObject with `If-None-Match: *` (412 when the key exists). Ceph RGW honours it (16.2
 *   pacific, test/integration/iceberg-acceptance.test.ts); AWS S3 documents it since 2024-08 and
 *   MinIO in current releases (untested); s3rver (tests) ignores the header and overwrites (same
 *   test), so on a server that does not honour it the committer must hold a lock instead.
 *   The store keeps its S3Client private, so the caller passes one with the same settings.
 * - memory: a check-then-set with no await in between (one process holds the whole store).
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { StoreError } from '../errors.js';
import { randomHex } from '../ids.js';
import { errnoCode, fsyncDir, unlinkQuietly, writeFileDurably } from '../store/durable.js';
import { FilesystemObjectStore } from '../store/filesystem/index.js';
import { validateKey } from '../store/keys.js';
import { MemoryObjectStore } from '../store/memory/index.js';
import { S3ObjectStore } from '../store/s3/index.js';
import type { ObjectStore } from '../store/types.js';

/** Creates `key` with `body` unless an object is already there: true when this call created it. */
export type CreateIfAbsent = (key: string, body: Uint8Array, contentType?: string) => Promise<boolean>;

/** The filesystem store's root-relative path of a key, refusing keys that would leave the root. */
function fsPath(root: string, key: string): string {
  validateKey(key);
  const file = path.resolve(root, ...key.split('/'));
  if (!file.startsWith(root.endsWith(path.sep) ? root : root + path.sep)) throw new StoreError(`key ${JSON.stringify(key)} resolves outside the root`, { retriable: false });
  return file;
}

/** Exclusive create in a filesystem store's folder (see the module comment). */
export function fsCreateIfAbsent(root: string): CreateIfAbsent {
  return async (key, body) => {
    const file = fsPath(root, key);
    const dir = path.dirname(file);
    // The store's temp-file prefix: its listings skip these names.
    const tmp = path.join(dir, `.tmp-${randomHex(8)}`);
    try {
      await fs.mkdir(dir, { recursive: true });
      await writeFileDurably(tmp, body);
      try {
        await fs.link(tmp, file);
      } catch (err) {
        if (errnoCode(err) === 'EEXIST') return false;
        throw err;
      } finally {
        await unlinkQuietly(tmp);
      }
      await fsyncDir(dir);
      return true;
    } catch (err) {
      if (err instanceof StoreError) throw err;
      throw new StoreError(`filesystem create of ${JSON.stringify(key)} failed: ${errnoCode(err) ?? String(err)}`, { retriable: true, cause: err });
    }
  };
}

/** Exclusive create on S3 with a conditional PutObject (see the module comment for which servers honour it). */
export function s3CreateIfAbsent(o: { client: S3Client; bucket: string; prefix: string }): CreateIfAbsent {
  return async (key, body, contentType) => {
    validateKey(key);
    try {
      await o.client.send(new PutObjectCommand({ Bucket: o.bucket, Key: o.prefix + key, Body: body, ContentType: contentType, IfNoneMatch: '*' }));
      return true;
    } catch (err) {
      const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
      const name = (err as { name?: string }).name;
      // 412: the key exists. 409 ConditionalRequestConflict: a concurrent conditional put is in flight (AWS), i.e. someone else is creating it.
      if (status === 412 || name === 'PreconditionFailed' || status === 409) return false;
      throw new StoreError(`S3 conditional create of ${JSON.stringify(key)} failed: ${name ?? String(err)}`, { retriable: true, cause: err });
    }
  };
}

/** Exclusive create in a memory store (one process owns it: check and set without an await between). */
export function memoryCreateIfAbsent(store: MemoryObjectStore): CreateIfAbsent {
  // The store's map is private; its sync part is enough: validate, look, set, all in one turn.
  const objects = (store as unknown as { objects: Map<string, unknown> }).objects;
  return async (key, body, contentType) => {
    validateKey(key);
    if (objects.has(key)) return false;
    const put = store.putBytes(key, body, contentType === undefined ? {} : { contentType });
    // putBytes sets the entry synchronously before its first await, so a concurrent caller now sees it.
    await put;
    return true;
  };
}

/**
 * The exclusive create for a store this package made. An S3 store needs `s3Client` (its own is
 * private); any other store has none, and the committer must not run on it.
 */
export function createIfAbsentFor(store: ObjectStore, o: { s3Client?: S3Client } = {}): CreateIfAbsent {
  if (store instanceof FilesystemObjectStore) return fsCreateIfAbsent(store.root);
  if (store instanceof S3ObjectStore) {
    if (!o.s3Client) throw new StoreError('an Iceberg commit on S3 needs an S3Client for its conditional put (the store keeps its own private)', { retriable: false });
    return s3CreateIfAbsent({ client: o.s3Client, bucket: store.bucket, prefix: store.prefix });
  }
  if (store instanceof MemoryObjectStore) return memoryCreateIfAbsent(store);
  throw new StoreError(`${store.describe()} has no exclusive create: Iceberg commits need the filesystem, S3 or memory store`, { retriable: false });
}
