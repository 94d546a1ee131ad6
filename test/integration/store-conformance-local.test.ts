/**
 * The store conformance suite (test/helpers/store-conformance-cases.ts) on the backends that need
 * no server: memory and filesystem, plus what only the filesystem store does. And the proof that
 * the conditional-create case can fail: run against stores that let a second writer win, it does.
 * S3 (s3rver and Ceph RGW) runs the same cases in store-conformance.test.ts (system tier).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rename, rm, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FilesystemObjectStore, SIDECAR_MIN_BYTES } from '../../shared/store/filesystem/index.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import type { PutOptions } from '../../shared/store/types.js';
import {
  bytesOf,
  checkConditionalCreate,
  describeObjectStoreConformance,
  expectStoreError,
  sha256,
} from '../helpers/store-conformance-cases.js';

describe('memory', () => {
  describeObjectStoreConformance('memory', {
    ordersKeysThatExtendEachOther: true,
    exclusiveCreate: true,
    locationKind: 'memory',
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
    ordersKeysThatExtendEachOther: true,
    exclusiveCreate: true,
    locationKind: 'file',
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
      expect((await readdir(path.join(root, 'events', 'app'))).filter((n) => !n.startsWith('.meta-'))).toEqual([
        '1.parquet',
      ]);
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
      await Promise.all(
        Array.from({ length: 40 }, (_, i) => store.putBytes(`burst/${String(i).padStart(2, '0')}.parquet`, bytesOf(i))),
      );
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
      const names = Array.from(
        { length: 3000 },
        (_, i) => `${1782933157690 + i * 7}-0000-${i.toString(16).padStart(6, '0')}.parquet`,
      );
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
      const names = Array.from(
        { length: 2500 },
        (_, i) => `${1782933157690 + i * 7}-0000-${i.toString(16).padStart(6, '0')}.parquet`,
      );
      for (let i = 0; i < names.length; i += 250) {
        await Promise.all(names.slice(i, i + 250).map((n) => writeFile(path.join(dir, n), 'x')));
      }
      const keys = names.map((n) => `events/quiet/${n}`);
      // Backdate the folder instead of waiting: it now looks unchanged for an hour.
      const old = new Date(Date.now() - 3_600_000);
      await utimes(dir, old, old);
      const cacheSize = (): number => (store as unknown as { dirCache: Map<string, unknown> }).dirCache.size;

      expect(await store.listKeys('events/quiet/', { startAfter: keys[1000], limit: 3 })).toEqual(
        keys.slice(1001, 1004),
      );
      expect(cacheSize()).toBe(1);
      expect(await store.listKeys('events/quiet/', { startAfter: keys[2497] })).toEqual(keys.slice(2498));
      expect(await store.listKeys('events/quiet/1782933164', { limit: 2 })).toEqual(
        keys.filter((k) => k.startsWith('events/quiet/1782933164')).slice(0, 2),
      );

      // A new key between cached ones, and one removed behind the store's back: both seen at once.
      const added = `events/quiet/${names[1001]!.replace('-0000-', '-0001-')}`;
      await store.putBytes(added, bytesOf(1));
      expect(await store.listKeys('events/quiet/', { startAfter: keys[1000], limit: 3 })).toEqual([
        keys[1001],
        added,
        keys[1002],
      ]);
      await rm(path.join(dir, names[1002]!));
      expect(await store.listKeys('events/quiet/', { startAfter: keys[1000], limit: 3 })).toEqual([
        keys[1001],
        added,
        keys[1003],
      ]);
    });

    it("records a large object's sha256 in a sidecar at write; a large file without one (written before sidecars) is hashed once, then read from its sidecar", async () => {
      const big = new Uint8Array(randomBytes(SIDECAR_MIN_BYTES + 1));
      await store.putBytes('events/app/new.parquet', big, { contentType: 'application/vnd.apache.parquet' });
      expect((await readdir(path.join(root, 'events', 'app'))).sort()).toEqual([
        '.meta-new.parquet.json',
        'new.parquet',
      ]);
      expect(await store.head('events/app/new.parquet')).toEqual({
        size: big.byteLength,
        sha256: sha256(big),
        contentType: 'application/vnd.apache.parquet',
      });
      await expectStoreError(store.putBytes('events/app/.meta-x', bytesOf(1)), false);

      const legacy = new Uint8Array(randomBytes(SIDECAR_MIN_BYTES + 100_000));
      await writeFile(path.join(root, 'events', 'app', 'old.parquet'), legacy);
      // No sidecar to say otherwise: a `.parquet` file is Parquet.
      expect(await store.head('events/app/old.parquet')).toEqual({
        size: legacy.byteLength,
        sha256: sha256(legacy),
        contentType: 'application/vnd.apache.parquet',
      });
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
      expect(await store.head('events/app/old.parquet')).toEqual({
        size: 10,
        sha256: sha256(replaced),
        contentType: 'application/vnd.apache.parquet',
      });
      // A torn sidecar (crash) is ignored too.
      await writeFile(sidecar, '{"v":1,"ino');
      expect((await store.head('events/app/old.parquet'))?.sha256).toBe(sha256(replaced));
      expect(await store.listKeys('events/app/')).toEqual(['events/app/new.parquet', 'events/app/old.parquet']);
      // Deleting an object deletes its sidecar: retention must not leave one behind per file.
      await store.deleteKeys(['events/app/new.parquet', 'events/app/old.parquet']);
      expect(await readdir(path.join(root, 'events', 'app'))).toEqual([]);
    });

    it("writes no sidecar for a small object of its name's content type (a batch file), and hashes it on each head", async () => {
      const small = new Uint8Array(randomBytes(SIDECAR_MIN_BYTES));
      await store.putBytes('events/app/1.parquet', small, { contentType: 'application/vnd.apache.parquet' });
      expect(await readdir(path.join(root, 'events', 'app'))).toEqual(['1.parquet']);
      expect(await store.head('events/app/1.parquet')).toEqual({
        size: small.byteLength,
        sha256: sha256(small),
        contentType: 'application/vnd.apache.parquet',
      });
      // Still none after a head (nothing to record), and a head after an overwrite sees the new bytes.
      expect(await readdir(path.join(root, 'events', 'app'))).toEqual(['1.parquet']);
      await store.putBytes('events/app/1.parquet', bytesOf(9), { contentType: 'application/vnd.apache.parquet' });
      expect(await store.head('events/app/1.parquet')).toEqual({
        size: 1,
        sha256: sha256(bytesOf(9)),
        contentType: 'application/vnd.apache.parquet',
      });
      // Any other content type, or none, is recorded as given: a sidecar keeps it.
      await store.putBytes('events/app/2.parquet', bytesOf(1), { contentType: 'application/octet-stream' });
      await store.putBytes('events/app/3.parquet', bytesOf(1));
      await store.putBytes('events/app/4.json', bytesOf(1), { contentType: 'application/vnd.apache.parquet' });
      expect((await readdir(path.join(root, 'events', 'app'))).sort()).toEqual([
        '.meta-2.parquet.json',
        '.meta-3.parquet.json',
        '.meta-4.json.json',
        '1.parquet',
        '2.parquet',
        '3.parquet',
        '4.json',
      ]);
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

/** A memory store whose createIfAbsent always succeeds: it overwrites like putBytes. */
class OverwritingStore extends MemoryObjectStore {
  override async createIfAbsent(key: string, body: Uint8Array, opts?: PutOptions): Promise<boolean> {
    await this.putBytes(key, body, opts);
    return true;
  }
}

/** A memory store that checks, then sets after an await: right one at a time, wrong when writers race. */
class CheckThenSetStore extends MemoryObjectStore {
  override async createIfAbsent(key: string, body: Uint8Array, opts?: PutOptions): Promise<boolean> {
    if ((await this.getBytes(key)) !== null) return false;
    await new Promise((r) => setImmediate(r));
    await this.putBytes(key, body, opts);
    return true;
  }
}

describe('the conditional-create case fails on a store that lets a second writer win', () => {
  it('a createIfAbsent that always succeeds (overwrites) fails the case', async () => {
    await expect(checkConditionalCreate(new OverwritingStore())).rejects.toThrow(
      /a second create of a key that exists/,
    );
  });

  it('a createIfAbsent that checks and then sets after an await fails the case when writers race', async () => {
    await expect(checkConditionalCreate(new CheckThenSetStore())).rejects.toThrow(
      /concurrent creators: exactly one wins/,
    );
  });

  it("the case passes on the memory store it was derived from (the failures above are the stores' own)", async () => {
    await expect(checkConditionalCreate(new MemoryObjectStore())).resolves.toBeUndefined();
  });
});
