/**
 * `deleteKeys` on every store: memory, filesystem, S3 (s3rver, DeleteObjects in calls of 1,000).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { type S3TestServer, s3StoreFor, startS3Server } from '../helpers/s3.js';

let s3: S3TestServer;
const dir = mkdtempSync(join(tmpdir(), 'store-delete-'));
beforeAll(async () => {
  s3 = await startS3Server();
});
afterAll(async () => {
  await s3.close();
  rmSync(dir, { recursive: true, force: true });
});

const stores: [string, () => ObjectStore][] = [
  ['memory', () => new MemoryObjectStore()],
  ['filesystem', () => new FilesystemObjectStore({ root: dir })],
  ['s3 (s3rver)', () => s3StoreFor(s3, 'pfx')],
];

describe.each(stores)('deleteKeys on %s', (_name, make) => {
  it('deletes the given keys, ignores missing ones, leaves the rest; more than 1,000 at once', async () => {
    const store = make();
    const keys = Array.from({ length: 1003 }, (_, i) => `del/a/${String(i).padStart(5, '0')}.parquet`);
    for (let i = 0; i < keys.length; i += 25)
      await Promise.all(keys.slice(i, i + 25).map((k) => store.putBytes(k, new Uint8Array([1, 2, 3]))));
    await store.putBytes('del/b/keep.parquet', new Uint8Array([4]));
    await store.deleteKeys!([...keys.slice(0, 1002), 'del/a/missing.parquet']);
    expect(await store.listKeys('del/')).toEqual(['del/a/01002.parquet', 'del/b/keep.parquet']);
    expect(await store.getBytes('del/a/00000.parquet')).toBeNull();
    await store.deleteKeys!(['del/a/01002.parquet', 'del/b/keep.parquet']);
    expect(await store.listKeys('del/')).toEqual([]);
    await expect(store.deleteKeys!(['../escape'])).rejects.toThrow(/invalid object key/);
  });
});
