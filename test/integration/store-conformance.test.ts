import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rename, rm, utimes, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { HeadObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { StoreError } from '../../shared/errors.js';
import { FilesystemObjectStore, SIDECAR_MIN_BYTES } from '../../shared/store/filesystem/index.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import { S3ObjectStore } from '../../shared/store/s3/index.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { type RgwServer, rgwStoreFor, startRgw } from '../helpers/rgw.js';
import { S3RVER_CREDENTIALS, s3StoreFor, startS3Server } from '../helpers/s3.js';
import type { S3TestServer } from '../helpers/s3.js';

const INVALID_KEYS = ['../x', 'a/../../b', '/abs', '', 'a//b', 'a/./b', 'a/', '.', '..', 'a\\b', 'a\0b'];

interface ConformanceTarget {
  /** Whether `getBytes` returns the content type given to `putBytes`. */
  keepsContentType: boolean;
  /**
   * Whether listing is in true byte order when one key's last segment extends
   * another's (`a` < `a-b` < `a/x` < `a0`). Real S3 does this; s3rver does not
   * (it walks its on-disk folders comparing file names with a suffix
   * appended), so those assertions are skipped for it. Batch keys never hit
   * the case: ids are fixed-width under one folder.
   */
  ordersKeysThatExtendEachOther: boolean;
  /** A new, empty store that no other test sees. */
  newStore(): Promise<ObjectStore>;
}

function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

function bytesOf(...values: number[]): Uint8Array {
  return Uint8Array.from(values);
}

async function expectStoreError(promise: Promise<unknown>, retriable: boolean): Promise<StoreError> {
  let caught: unknown;
  try {
    await promise;
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(StoreError);
  const error = caught as StoreError;
  expect(error.retriable).toBe(retriable);
  return error;
}

/** Puts each key with a one-byte body, in the given order. */
async function putAll(store: ObjectStore, keys: readonly string[]): Promise<void> {
  for (const key of keys) await store.putBytes(key, bytesOf(1));
}

/** Every test here runs against every ObjectStore implementation. */
function describeObjectStoreConformance(name: string, target: ConformanceTarget): void {
  describe(`ObjectStore conformance: ${name}`, () => {
    let store: ObjectStore;
    beforeEach(async () => {
      store = await target.newStore();
    });

    it('round-trips binary bytes of every value, including an empty object', async () => {
      const all = Uint8Array.from({ length: 512 }, (_, i) => i % 256);
      await store.putBytes('bin/all-bytes', all);
      await store.putBytes('bin/empty', new Uint8Array(0));

      const got = await store.getBytes('bin/all-bytes');
      expect(got).not.toBeNull();
      expect(Array.from(got?.body ?? [])).toEqual(Array.from(all));
      const empty = await store.getBytes('bin/empty');
      expect(empty).not.toBeNull();
      expect(empty?.body.byteLength).toBe(0);
    });

    it('round-trips a ~5 MB object', async () => {
      const big = new Uint8Array(randomBytes(5 * 1024 * 1024 + 3));
      await store.putBytes('bin/big.parquet', big);
      const got = await store.getBytes('bin/big.parquet');
      expect(got?.body.byteLength).toBe(big.byteLength);
      expect(sha256(got?.body ?? new Uint8Array(0))).toBe(sha256(big));
    });

    it('stores a snapshot: changing buffers after put or get does not change the object', async () => {
      const body = bytesOf(1, 2, 3);
      await store.putBytes('snap/x', body);
      body[0] = 9;
      const first = await store.getBytes('snap/x');
      expect(Array.from(first?.body ?? [])).toEqual([1, 2, 3]);
      first?.body.fill(7);
      const second = await store.getBytes('snap/x');
      expect(Array.from(second?.body ?? [])).toEqual([1, 2, 3]);
    });

    it(
      target.keepsContentType ? 'keeps the content type' : 'does not report a content type it does not keep',
      async () => {
        await store.putBytes('typed/a.parquet', bytesOf(1), { contentType: 'application/vnd.apache.parquet' });
        const got = await store.getBytes('typed/a.parquet');
        expect(got?.contentType).toBe(target.keepsContentType ? 'application/vnd.apache.parquet' : undefined);
      },
    );

    it('overwrites in place: the new bytes replace the old and there is still one key', async () => {
      await store.putBytes('over/k', bytesOf(1, 1, 1, 1));
      await store.putBytes('over/k', bytesOf(2));
      const got = await store.getBytes('over/k');
      expect(Array.from(got?.body ?? [])).toEqual([2]);
      expect(await store.listKeys('')).toEqual(['over/k']);
    });

    it('returns null for a missing key, also under a missing folder', async () => {
      await store.putBytes('here/a', bytesOf(1));
      expect(await store.getBytes('here/b')).toBeNull();
      expect(await store.getBytes('nowhere/deeper/c')).toBeNull();
    });

    it('lists keys in ascending byte order whatever the write order', async () => {
      // As bytes: '0' < 'B' < 'a' < 'm' < 'z' < 'é' (C3 A9) < '！' (EF BC 81) < '😀' (F0 9F 98 80);
      // JS string comparison would put '😀' (a surrogate pair) before '！'.
      const keys = ['k/z', 'k/😀', 'k/a', 'k/m/x', 'k/！', 'k/0', 'k/é', 'k/B'];
      await putAll(store, keys);
      expect(await store.listKeys('k/')).toEqual(['k/0', 'k/B', 'k/a', 'k/m/x', 'k/z', 'k/é', 'k/！', 'k/😀']);
    });

    it.skipIf(!target.ordersKeysThatExtendEachOther)(
      'orders a name before its extensions and a folder by its "/" among sibling names',
      async () => {
        // '-' (2D) < '.' (2E) < '/' (2F) < '0' (30), and a proper prefix sorts first.
        await putAll(store, ['k/b0', 'k/b/c', 'k/a-b', 'k/b.c', 'k/a', 'k/b-c']);
        expect(await store.listKeys('k/')).toEqual(['k/a', 'k/a-b', 'k/b-c', 'k/b.c', 'k/b/c', 'k/b0']);
        await putAll(store, ['e/app10/1', 'e/app1/1', 'e/app1.parquet']);
        expect(await store.listKeys('e/app1')).toEqual(['e/app1.parquet', 'e/app1/1', 'e/app10/1']);
        expect(await store.listKeys('k/', { startAfter: 'k/b-c', limit: 2 })).toEqual(['k/b.c', 'k/b/c']);
      },
    );

    it('filters by prefix as a plain string; a folder prefix does not leak into its siblings', async () => {
      await putAll(store, ['events/app10/1', 'events/app1/2', 'events/app2/1', 'events/app1/1', 'other/app1/1']);
      expect(await store.listKeys('events/app1/')).toEqual(['events/app1/1', 'events/app1/2']);
      expect(await store.listKeys('events/app1')).toEqual(['events/app1/1', 'events/app1/2', 'events/app10/1']);
      expect(await store.listKeys('events/app1/2')).toEqual(['events/app1/2']);
      expect(await store.listKeys('events/app')).toEqual([
        'events/app1/1',
        'events/app1/2',
        'events/app10/1',
        'events/app2/1',
      ]);
      expect(await store.listKeys('')).toEqual([
        'events/app1/1',
        'events/app1/2',
        'events/app10/1',
        'events/app2/1',
        'other/app1/1',
      ]);
    });

    it('treats startAfter as exclusive, whether or not it names a stored key', async () => {
      await putAll(store, ['s/a', 's/b', 's/c', 's/d', 't/a']);
      expect(await store.listKeys('s/', { startAfter: 's/b' })).toEqual(['s/c', 's/d']);
      expect(await store.listKeys('s/', { startAfter: 's/bb' })).toEqual(['s/c', 's/d']);
      expect(await store.listKeys('s/', { startAfter: 'r' })).toEqual(['s/a', 's/b', 's/c', 's/d']);
      expect(await store.listKeys('s/', { startAfter: 's/d' })).toEqual([]);
      expect(await store.listKeys('s/', { startAfter: 'zzz' })).toEqual([]);
    });

    it('applies limit, and limit with startAfter pages through every key once', async () => {
      const keys = Array.from({ length: 7 }, (_, i) => `p/${String(i).padStart(2, '0')}`);
      await putAll(store, [...keys].reverse());
      expect(await store.listKeys('p/', { limit: 3 })).toEqual(keys.slice(0, 3));
      expect(await store.listKeys('p/', { limit: 0 })).toEqual([]);
      expect(await store.listKeys('p/', { limit: 100 })).toEqual(keys);

      const seen: string[] = [];
      let after: string | undefined;
      for (let page = 0; page < 10; page++) {
        const batch = await store.listKeys('p/', { startAfter: after, limit: 3 });
        if (batch.length === 0) break;
        seen.push(...batch);
        after = batch[batch.length - 1];
      }
      expect(seen).toEqual(keys);
    });

    it('lists nothing for an empty store, a missing prefix, or a prefix no valid key can have', async () => {
      expect(await store.listKeys('')).toEqual([]);
      await store.putBytes('present/a', bytesOf(1));
      expect(await store.listKeys('absent/')).toEqual([]);
      expect(await store.listKeys('absent')).toEqual([]);
      expect(await store.listKeys('present/a/')).toEqual([]);
      expect(await store.listKeys('../')).toEqual([]);
      expect(await store.listKeys('/present')).toEqual([]);
    });

    it('passes its healthcheck', async () => {
      await expect(store.healthcheck()).resolves.toBeUndefined();
      expect(store.describe().length).toBeGreaterThan(0);
    });

    it.each(INVALID_KEYS)('rejects the invalid key %j with a non-retriable StoreError', async (key) => {
      await expectStoreError(store.putBytes(key, bytesOf(1)), false);
      await expectStoreError(store.getBytes(key), false);
      expect(await store.listKeys('')).toEqual([]);
    });

    it('rejects a negative limit as a caller error', async () => {
      await expectStoreError(store.listKeys('', { limit: -1 }), false);
    });

    // Metadata and ranged reads: what pull needs to answer HEAD, 304 and Range without reading the object.
    it('head gives size, the sha256 recorded at write and the content type; null when there is no object', async () => {
      const body = new Uint8Array(randomBytes(70_000));
      await store.putBytes('meta/a.parquet', body, { contentType: 'application/vnd.apache.parquet' });
      await store.putBytes('meta/empty', new Uint8Array(0));
      const meta = await store.head!('meta/a.parquet');
      expect(meta).toMatchObject({ size: 70_000, sha256: sha256(body) });
      expect(meta?.contentType).toBe('application/vnd.apache.parquet');
      expect(await store.head!('meta/empty')).toMatchObject({ size: 0, sha256: sha256(new Uint8Array(0)) });
      expect(await store.head!('meta/missing')).toBeNull();
      expect(await store.head!('nowhere/x/y')).toBeNull();
      // An overwrite is seen at once, and the metadata never shows up as keys.
      await store.putBytes('meta/a.parquet', bytesOf(1, 2, 3));
      expect(await store.head!('meta/a.parquet')).toMatchObject({ size: 3, sha256: sha256(bytesOf(1, 2, 3)) });
      expect(await store.listKeys('meta/')).toEqual(['meta/a.parquet', 'meta/empty']);
      expect(await store.listKeys('')).toEqual(['meta/a.parquet', 'meta/empty']);
    });

    it('getStream streams the whole object or exactly the requested byte range; null when there is no object', async () => {
      const body = Uint8Array.from({ length: 300_000 }, (_, i) => (i * 7) % 251);
      await store.putBytes('range/obj', body);
      const read = async (range?: { start: number; end: number }): Promise<Uint8Array> => {
        const stream = await store.getStream!('range/obj', range);
        expect(stream).not.toBeNull();
        return new Uint8Array(Buffer.concat((await stream!.toArray()) as Buffer[]));
      };
      expect(sha256(await read())).toBe(sha256(body));
      for (const [start, end] of [[0, 0], [0, 7], [299_992, 299_999], [100_000, 200_000], [5, 5]] as const) {
        expect(Buffer.from(await read({ start, end })).equals(Buffer.from(body.subarray(start, end + 1)))).toBe(true);
      }
      expect(await store.getStream!('range/missing')).toBeNull();
      expect(await store.getStream!('range/missing', { start: 0, end: 7 })).toBeNull();
      expect(await store.getStream!('nowhere/x/y')).toBeNull();
    });

    it('head and getStream refuse invalid keys like every other call', async () => {
      for (const key of INVALID_KEYS) {
        await expectStoreError(store.head!(key), false);
        await expectStoreError(store.getStream!(key), false);
      }
    });
  });
}

describe('memory', () => {
  describeObjectStoreConformance('memory', {
    keepsContentType: true,
    ordersKeysThatExtendEachOther: true,
    newStore: async () => new MemoryObjectStore(),
  });
});

describe('filesystem', () => {
  let base: string;
  let counter = 0;
  beforeAll(async () => {
    base = await mkdtemp(path.join(os.tmpdir(), 'fs-store-'));
  });
  afterAll(async () => {
    await rm(base, { recursive: true, force: true });
  });
  /** A root that does not exist yet, so every test also covers "created on first write". */
  const freshRoot = (): string => path.join(base, `root-${++counter}`);

  describeObjectStoreConformance('filesystem', {
    keepsContentType: false,
    ordersKeysThatExtendEachOther: true,
    newStore: async () => new FilesystemObjectStore({ root: freshRoot() }),
  });

  describe('filesystem specifics', () => {
    let root: string;
    let store: FilesystemObjectStore;
    beforeEach(() => {
      root = freshRoot();
      store = new FilesystemObjectStore({ root });
    });

    /** Every file name under `dir`, recursively (test trees are small and shallow). */
    async function allFileNames(dir: string): Promise<string[]> {
      const entries = await readdir(dir, { recursive: true, withFileTypes: true });
      return entries.filter((e) => e.isFile()).map((e) => e.name);
    }

    it('resolves the root to an absolute path and maps keys to files under it', async () => {
      const relative = new FilesystemObjectStore({ root: path.relative(process.cwd(), root) });
      expect(relative.root).toBe(root);
      expect(store.describe()).toBe(`fs:${root}`);
      await store.putBytes('events/app/1.parquet', bytesOf(5));
      expect((await readdir(path.join(root, 'events', 'app'))).filter((n) => !n.startsWith('.meta-'))).toEqual(['1.parquet']);
    });

    it('leaves no temp files behind after writes and overwrites', async () => {
      await store.putBytes('a/b/c', bytesOf(1));
      await store.putBytes('a/b/c', bytesOf(2));
      await store.putBytes('a/d', new Uint8Array(randomBytes(100_000)));
      await Promise.all(Array.from({ length: 10 }, (_, i) => store.putBytes('a/same', bytesOf(i))));
      const names = await allFileNames(root);
      expect(names.filter((n) => !n.startsWith('.meta-')).sort()).toEqual(['c', 'd', 'same']);
      expect(names.some((n) => n.startsWith('.tmp-'))).toBe(false);
    });

    it('writes into a folder removed behind its back (it remembers folders it made) by making it again', async () => {
      await store.putBytes('gone/app/1.parquet', bytesOf(1));
      await rm(path.join(root, 'gone'), { recursive: true, force: true });
      await store.putBytes('gone/app/2.parquet', bytesOf(2));
      expect(await store.listKeys('gone/')).toEqual(['gone/app/2.parquet']);
      expect((await store.getBytes('gone/app/2.parquet'))?.body).toEqual(bytesOf(2));
    });

    it('many concurrent puts into one folder (sharing directory fsyncs) all land, each with its own sidecar', async () => {
      await Promise.all(Array.from({ length: 40 }, (_, i) => store.putBytes(`burst/${String(i).padStart(2, '0')}.parquet`, bytesOf(i))));
      const keys = await store.listKeys('burst/');
      expect(keys).toHaveLength(40);
      for (const [i, key] of keys.entries()) expect((await store.head(key))?.size).toBe(bytesOf(i).byteLength);
      expect((await allFileNames(root)).filter((n) => n.startsWith('.meta-'))).toHaveLength(40);
    });

    it('skips leftover temp files (from a crash mid-write) when listing', async () => {
      await store.putBytes('dir/real', bytesOf(1));
      await writeFile(path.join(root, 'dir', '.tmp-deadbeef'), 'partial');
      expect(await store.listKeys('dir/')).toEqual(['dir/real']);
      expect(await store.listKeys('')).toEqual(['dir/real']);
      await expectStoreError(store.putBytes('dir/.tmp-deadbeef', bytesOf(1)), false);
    });

    it('never lets a key reach outside the root', async () => {
      const outside = path.dirname(root);
      for (const key of ['../escaped', 'a/../../escaped', '../../../../../../../../tmp/escaped', '/tmp/escaped']) {
        await expectStoreError(store.putBytes(key, bytesOf(1)), false);
        await expectStoreError(store.getBytes(key), false);
      }
      expect(await readdir(outside)).not.toContain('escaped');
      expect(await store.listKeys('../')).toEqual([]);
    });

    it('reports a key that collides with a folder as a non-retriable error', async () => {
      await store.putBytes('x/y', bytesOf(1));
      await expectStoreError(store.putBytes('x', bytesOf(1)), false);
      await expectStoreError(store.putBytes('x/y/z', bytesOf(1)), false);
      expect(await store.getBytes('x')).toBeNull();
      expect(await store.getBytes('x/y/z')).toBeNull();
    });

    it('lists a folder of 3,000 files in order, and pages through it', async () => {
      const dir = path.join(root, 'events', 'big');
      await mkdir(dir, { recursive: true });
      const names = Array.from({ length: 3000 }, (_, i) => `${1782933157690 + i * 7}-0000-${i.toString(16).padStart(6, '0')}.parquet`);
      // Written directly (not via putBytes) so the test measures listing, not 3,000 fsyncs.
      const shuffled = [...names].sort(() => Math.random() - 0.5);
      for (let i = 0; i < shuffled.length; i += 200) {
        await Promise.all(shuffled.slice(i, i + 200).map((n) => writeFile(path.join(dir, n), 'x')));
      }
      const expected = names.map((n) => `events/big/${n}`);

      // Speed is measured in `npm run bench`; here only order and paging.
      expect(await store.listKeys('events/big/')).toEqual(expected);

      expect(await store.listKeys('events/big/', { startAfter: expected[999], limit: 1000 })).toEqual(
        expected.slice(1000, 2000),
      );
      expect(await store.listKeys('events/', { startAfter: expected[2997] })).toEqual(expected.slice(2998));
    });

    it('serves a large quiet folder from its listing cache, and never misses a file added or removed later', async () => {
      const dir = path.join(root, 'events', 'quiet');
      await mkdir(dir, { recursive: true });
      const names = Array.from({ length: 2500 }, (_, i) => `${1782933157690 + i * 7}-0000-${i.toString(16).padStart(6, '0')}.parquet`);
      for (let i = 0; i < names.length; i += 250) {
        await Promise.all(names.slice(i, i + 250).map((n) => writeFile(path.join(dir, n), 'x')));
      }
      const keys = names.map((n) => `events/quiet/${n}`);
      // Backdate the folder instead of waiting: it now looks unchanged for an hour.
      const old = new Date(Date.now() - 3_600_000);
      await utimes(dir, old, old);
      const cacheSize = (): number => (store as unknown as { dirCache: Map<string, unknown> }).dirCache.size;

      expect(await store.listKeys('events/quiet/', { startAfter: keys[1000], limit: 3 })).toEqual(keys.slice(1001, 1004));
      expect(cacheSize()).toBe(1);
      expect(await store.listKeys('events/quiet/', { startAfter: keys[2497] })).toEqual(keys.slice(2498));
      expect(await store.listKeys('events/quiet/1782933164', { limit: 2 })).toEqual(keys.filter((k) => k.startsWith('events/quiet/1782933164')).slice(0, 2));

      // A new key between cached ones, and one removed behind the store's back: both seen at once.
      const added = `events/quiet/${names[1001]!.replace('-0000-', '-0001-')}`;
      await store.putBytes(added, bytesOf(1));
      expect(await store.listKeys('events/quiet/', { startAfter: keys[1000], limit: 3 })).toEqual([keys[1001], added, keys[1002]]);
      await rm(path.join(dir, names[1002]!));
      expect(await store.listKeys('events/quiet/', { startAfter: keys[1000], limit: 3 })).toEqual([keys[1001], added, keys[1003]]);
    });

    it('records a large object\'s sha256 in a sidecar at write; a large file without one (written before sidecars) is hashed once, then read from its sidecar', async () => {
      const big = new Uint8Array(randomBytes(SIDECAR_MIN_BYTES + 1));
      await store.putBytes('events/app/new.parquet', big, { contentType: 'application/vnd.apache.parquet' });
      expect((await readdir(path.join(root, 'events', 'app'))).sort()).toEqual(['.meta-new.parquet.json', 'new.parquet']);
      expect(await store.head('events/app/new.parquet')).toEqual({ size: big.byteLength, sha256: sha256(big), contentType: 'application/vnd.apache.parquet' });
      await expectStoreError(store.putBytes('events/app/.meta-x', bytesOf(1)), false);

      const legacy = new Uint8Array(randomBytes(SIDECAR_MIN_BYTES + 100_000));
      await writeFile(path.join(root, 'events', 'app', 'old.parquet'), legacy);
      // No sidecar to say otherwise: a `.parquet` file is Parquet.
      expect(await store.head('events/app/old.parquet')).toEqual({ size: legacy.byteLength, sha256: sha256(legacy), contentType: 'application/vnd.apache.parquet' });
      const sidecar = path.join(root, 'events', 'app', '.meta-old.parquet.json');
      const recorded = JSON.parse(await readFile(sidecar, 'utf8')) as { sha256: string };
      expect(recorded.sha256).toBe(sha256(legacy));
      // Proof the second head reads the sidecar instead of hashing: a planted value comes back.
      const planted = 'ab'.repeat(32);
      await writeFile(sidecar, JSON.stringify({ ...recorded, sha256: planted }));
      expect((await store.head('events/app/old.parquet'))?.sha256).toBe(planted);
      // The file replaced behind the store's back (another inode/mtime): the sidecar no longer applies.
      const replaced = new Uint8Array(randomBytes(10));
      await writeFile(path.join(root, 'events', 'app', 'old.tmpcopy'), replaced);
      await rename(path.join(root, 'events', 'app', 'old.tmpcopy'), path.join(root, 'events', 'app', 'old.parquet'));
      expect(await store.head('events/app/old.parquet')).toEqual({ size: 10, sha256: sha256(replaced), contentType: 'application/vnd.apache.parquet' });
      // A torn sidecar (crash) is ignored too.
      await writeFile(sidecar, '{"v":1,"ino');
      expect((await store.head('events/app/old.parquet'))?.sha256).toBe(sha256(replaced));
      expect(await store.listKeys('events/app/')).toEqual(['events/app/new.parquet', 'events/app/old.parquet']);
      // Deleting an object deletes its sidecar: retention must not leave one behind per file.
      await store.deleteKeys(['events/app/new.parquet', 'events/app/old.parquet']);
      expect(await readdir(path.join(root, 'events', 'app'))).toEqual([]);
    });

    it('writes no sidecar for a small object of its name\'s content type (a batch file), and hashes it on each head', async () => {
      const small = new Uint8Array(randomBytes(SIDECAR_MIN_BYTES));
      await store.putBytes('events/app/1.parquet', small, { contentType: 'application/vnd.apache.parquet' });
      expect(await readdir(path.join(root, 'events', 'app'))).toEqual(['1.parquet']);
      expect(await store.head('events/app/1.parquet')).toEqual({ size: small.byteLength, sha256: sha256(small), contentType: 'application/vnd.apache.parquet' });
      // Still none after a head (nothing to record), and a head after an overwrite sees the new bytes.
      expect(await readdir(path.join(root, 'events', 'app'))).toEqual(['1.parquet']);
      await store.putBytes('events/app/1.parquet', bytesOf(9), { contentType: 'application/vnd.apache.parquet' });
      expect(await store.head('events/app/1.parquet')).toEqual({ size: 1, sha256: sha256(bytesOf(9)), contentType: 'application/vnd.apache.parquet' });
      // Any other content type, or none, is recorded as given: a sidecar keeps it.
      await store.putBytes('events/app/2.parquet', bytesOf(1), { contentType: 'application/octet-stream' });
      await store.putBytes('events/app/3.parquet', bytesOf(1));
      await store.putBytes('events/app/4.json', bytesOf(1), { contentType: 'application/vnd.apache.parquet' });
      expect((await readdir(path.join(root, 'events', 'app'))).sort()).toEqual(['.meta-2.parquet.json', '.meta-3.parquet.json', '.meta-4.json.json', '1.parquet', '2.parquet', '3.parquet', '4.json']);
      expect((await store.head('events/app/2.parquet'))?.contentType).toBe('application/octet-stream');
      expect(await store.head('events/app/3.parquet')).toEqual({ size: 1, sha256: sha256(bytesOf(1)) });
      expect((await store.head('events/app/4.json'))?.contentType).toBe('application/vnd.apache.parquet');
    });

    it('healthcheck fails without retry when the root is a file', async () => {
      await writeFile(root, 'not a folder');
      await expectStoreError(store.healthcheck(), false);
      await expectStoreError(store.putBytes('a', bytesOf(1)), false);
    });
  });
});

describe('s3 (s3rver)', () => {
  let server: S3TestServer;
  const stores: S3ObjectStore[] = [];
  let counter = 0;

  beforeAll(async () => {
    server = await startS3Server();
  });
  afterEach(() => {
    for (const s of stores.splice(0)) s.destroy();
  });
  afterAll(async () => {
    await server?.close();
  });

  /** Every store gets its own key prefix inside the shared bucket, so tests never see each other's keys. */
  function isolatedStore(): S3ObjectStore {
    const store = s3StoreFor(server, `t${++counter}-${randomBytes(4).toString('hex')}`);
    stores.push(store);
    return store;
  }

  describeObjectStoreConformance('s3', {
    keepsContentType: true,
    ordersKeysThatExtendEachOther: false,
    newStore: async () => isolatedStore(),
  });

  describe('s3 specifics', () => {
    it('adds its prefix on write and strips it on list', async () => {
      const store = isolatedStore();
      const raw = s3StoreFor(server);
      stores.push(raw);
      await store.putBytes('events/a/1', bytesOf(1));
      expect(store.prefix.endsWith('/')).toBe(true);
      expect(await store.listKeys('events/')).toEqual(['events/a/1']);
      expect(await raw.listKeys(store.prefix)).toEqual([`${store.prefix}events/a/1`]);
      expect(await isolatedStore().listKeys('')).toEqual([]);
      expect(store.describe()).toBe(`s3://${server.bucket}/${store.prefix} (${server.endpoint})`);
    });

    it('stores the sha256 as object metadata at put; an object written without it (before, or by another writer) is hashed once per process', async () => {
      const store = isolatedStore();
      await store.putBytes('meta/new', bytesOf(1, 2));
      const client = new S3Client({ region: 'us-east-1', endpoint: server.endpoint, forcePathStyle: true, credentials: { ...S3RVER_CREDENTIALS } });
      try {
        const head = await client.send(new HeadObjectCommand({ Bucket: server.bucket, Key: `${store.prefix}meta/new` }));
        expect(head.Metadata?.sha256).toBe(sha256(bytesOf(1, 2)));
        const legacy = new Uint8Array(randomBytes(20_000));
        await client.send(new PutObjectCommand({ Bucket: server.bucket, Key: `${store.prefix}meta/legacy`, Body: legacy }));
        expect(await store.head('meta/legacy')).toMatchObject({ size: 20_000, sha256: sha256(legacy) });
        // Hashed once: the second head is answered from the store's memory, without a GetObject.
        let gets = 0;
        const counting = store as unknown as { getBytes(key: string): Promise<unknown> };
        const original = counting.getBytes.bind(store);
        counting.getBytes = (key: string) => ((gets += 1), original(key));
        expect((await store.head('meta/legacy'))?.sha256).toBe(sha256(legacy));
        expect(gets).toBe(0);
        // Replaced (new S3 ETag): hashed again.
        const replaced = new Uint8Array(randomBytes(100));
        await client.send(new PutObjectCommand({ Bucket: server.bucket, Key: `${store.prefix}meta/legacy`, Body: replaced }));
        expect((await store.head('meta/legacy'))?.sha256).toBe(sha256(replaced));
        expect(gets).toBe(1);
      } finally {
        client.destroy();
      }
    });

    it('pages through more than 1,000 keys with continuation tokens', async () => {
      const store = isolatedStore();
      const keys = Array.from({ length: 1005 }, (_, i) => `many/${String(i).padStart(4, '0')}`);
      for (let i = 0; i < keys.length; i += 50) {
        await Promise.all(keys.slice(i, i + 50).map((k) => store.putBytes(k, bytesOf(1))));
      }
      expect(await store.listKeys('many/')).toEqual(keys);
      expect(await store.listKeys('many/', { startAfter: keys[2], limit: 1002 })).toEqual(keys.slice(3));
    }, 60_000);

    it('reports a missing bucket as a non-retriable error, not as a missing object', async () => {
      const store = s3StoreFor({ endpoint: server.endpoint, bucket: 'no-such-bucket' });
      stores.push(store);
      await expectStoreError(store.getBytes('a'), false);
      await expectStoreError(store.healthcheck(), false);
    });

    it('fails fast and retriably when the endpoint is unreachable', async () => {
      const port = await closedPort();
      const store = new S3ObjectStore({
        bucket: 'b',
        endpoint: `http://127.0.0.1:${port}`,
        region: 'us-east-1',
        forcePathStyle: true,
        credentials: { ...S3RVER_CREDENTIALS },
      });
      stores.push(store);
      const started = performance.now();
      const error = await expectStoreError(store.healthcheck(), true);
      expect(performance.now() - started).toBeLessThan(5000);
      expect(error.cause).toBeDefined();
      await expectStoreError(store.putBytes('a', bytesOf(1)), true);
    }, 15_000);
  });
});

describe('s3 (Ceph RGW)', () => {
  let server: RgwServer;
  const stores: S3ObjectStore[] = [];
  let counter = 0;

  beforeAll(async () => {
    server = await startRgw();
  }, 120_000);
  afterEach(() => {
    for (const s of stores.splice(0)) s.destroy();
  });
  afterAll(async () => {
    await server?.close();
  });

  // A real S3 implementation: nothing is skipped for it.
  describeObjectStoreConformance('s3 on Ceph RGW', {
    keepsContentType: true,
    ordersKeysThatExtendEachOther: true,
    newStore: async () => {
      const store = rgwStoreFor(server, `t${++counter}-${randomBytes(4).toString('hex')}`);
      stores.push(store);
      return store;
    },
  });
});

/** A port on 127.0.0.1 with nothing listening: bind port 0, note it, close. */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}
