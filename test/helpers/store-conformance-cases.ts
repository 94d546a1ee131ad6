/**
 * The ObjectStore contract (shared/store/types.ts) as one set of cases that every backend runs:
 * put/get, head, getStream with ranges, listKeys with prefix/startAfter/limit, deleteKeys,
 * healthcheck, describe, location (the root URI), createIfAbsent and close. The memory and
 * filesystem backends run them in the integration tier (store-conformance-local.test.ts), S3 on
 * s3rver and on Ceph RGW in the system tier (store-conformance.test.ts).
 * `checkConditionalCreate` is exported so a test can show it fails on a store that lets a second
 * writer win.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { beforeEach, describe, expect, it } from 'vitest';
import { StoreError } from '../../shared/errors.js';
import { createStore } from '../../shared/store/create.js';
import type { ObjectStore, StoreLocation } from '../../shared/store/types.js';
import { StarfishDocuments } from '../../shared/store/documents.js';

export const INVALID_KEYS = ['../x', 'a/../../b', '/abs', '', 'a//b', 'a/./b', 'a/', '.', '..', 'a\\b', 'a\0b'];

export interface ConformanceTarget {
  /**
   * Whether listing is in true byte order when one key's last segment extends
   * another's (`a` < `a-b` < `a/x` < `a0`). Real S3 does this; s3rver does not
   * (it walks its on-disk folders comparing file names with a suffix
   * appended), so those assertions are skipped for it. Batch keys never hit
   * the case: ids are fixed-width under one folder.
   */
  ordersKeysThatExtendEachOther: boolean;
  /**
   * Whether the server keeps a second creator from winning. s3rver ignores `If-None-Match: *`
   * and overwrites, so there only "creates a missing key" is checked; RGW and AWS honour it.
   */
  exclusiveCreate: boolean;
  /** The kind of location the backend reports. */
  locationKind: StoreLocation['kind'];
  /** A new, empty store that no other test sees. */
  newStore(): Promise<ObjectStore>;
}

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export function bytesOf(...values: number[]): Uint8Array {
  return Uint8Array.from(values);
}

export async function expectStoreError(promise: Promise<unknown>, retriable: boolean): Promise<StoreError> {
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

/** The bytes under `key`, as an array (empty when there is no object). */
async function bytesAt(store: ObjectStore, key: string): Promise<number[]> {
  return Array.from((await store.getBytes(key))?.body ?? []);
}

/** Writers racing for one key in the concurrent part of {@link checkConditionalCreate}. */
const RACERS = 8;

/**
 * The conditional-create case: a missing key is created once; a second create of it (also of a
 * key written by putBytes) answers false and leaves the object alone; of RACERS concurrent
 * creators exactly one wins and the object holds its bytes. Throws (an assertion error) when a
 * store lets a second writer win.
 */
export async function checkConditionalCreate(store: ObjectStore): Promise<void> {
  expect(typeof store.createIfAbsent, 'createIfAbsent is a function').toBe('function');
  const create = (key: string, body: Uint8Array): Promise<boolean> =>
    (store.createIfAbsent as NonNullable<ObjectStore['createIfAbsent']>).call(store, key, body, {
      contentType: 'application/json',
    });
  expect(await create('cc/one.json', bytesOf(1))).toBe(true);
  expect(await create('cc/one.json', bytesOf(2)), 'a second create of a key that exists').toBe(false);
  expect(await bytesAt(store, 'cc/one.json')).toEqual([1]);
  await store.putBytes('cc/put', bytesOf(3));
  expect(await create('cc/put', bytesOf(4)), 'a create of a key putBytes wrote').toBe(false);
  expect(await bytesAt(store, 'cc/put')).toEqual([3]);
  const won = await Promise.all(Array.from({ length: RACERS }, (_, i) => create('cc/race.json', bytesOf(10 + i))));
  expect(won.filter(Boolean), `${RACERS} concurrent creators: exactly one wins`).toHaveLength(1);
  expect(await bytesAt(store, 'cc/race.json')).toEqual([10 + won.indexOf(true)]);
  expect(await store.listKeys('cc/')).toEqual(['cc/one.json', 'cc/put', 'cc/race.json']);
}

/** Every test here runs against every ObjectStore implementation. */
export function describeObjectStoreConformance(name: string, target: ConformanceTarget): void {
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

    it('reports the content type written (or the one its name implies), and a default for one written without', async () => {
      await store.putBytes('typed/a.parquet', bytesOf(1), { contentType: 'application/vnd.apache.parquet' });
      await store.putBytes('typed/b.json', bytesOf(1), { contentType: 'text/plain' });
      await store.putBytes('typed/c', bytesOf(1));
      expect((await store.getBytes('typed/a.parquet'))?.contentType).toBe('application/vnd.apache.parquet');
      expect((await store.getBytes('typed/b.json'))?.contentType).toBe('text/plain');
      // Starfish's ObjectStore contract: always a string (S3 servers answer their own default).
      expect((await store.getBytes('typed/c'))?.contentType).toMatch(/^[a-z]+\/[a-z0-9.+-]+$/);
    });

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
      for (const [start, end] of [
        [0, 0],
        [0, 7],
        [299_992, 299_999],
        [100_000, 200_000],
        [5, 5],
      ] as const) {
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

    it('deleteKeys removes the keys given, ignores missing ones, and refuses invalid keys', async () => {
      await putAll(store, ['del/a', 'del/b', 'del/c', 'keep/a']);
      await store.deleteKeys!(['del/a', 'del/missing', 'del/c', 'nowhere/x']);
      expect(await store.listKeys('')).toEqual(['del/b', 'keep/a']);
      expect(await store.getBytes('del/a')).toBeNull();
      expect(await store.head!('del/c')).toBeNull();
      await store.deleteKeys!([]);
      await store.deleteKeys!(['del/a']);
      for (const key of INVALID_KEYS) await expectStoreError(store.deleteKeys!(['del/b', key]), false);
      expect(await store.listKeys('')).toEqual(['del/b', 'keep/a']);
    });

    it('location: a root URI ending in "/" of its kind, the same on every call, under which a put object is found', async () => {
      const loc = store.location!();
      expect(loc.kind).toBe(target.locationKind);
      expect(loc.rootUri.endsWith('/')).toBe(true);
      expect(store.location!()).toEqual(loc);
      await store.putBytes('loc/a.bin', bytesOf(4, 5));
      if (loc.kind === 'file') {
        expect(loc.rootUri).toBe(`${pathToFileURL(loc.dir).href}/`);
        expect(path.resolve(fileURLToPath(loc.rootUri))).toBe(loc.dir);
        expect(Array.from(await readFile(path.join(loc.dir, 'loc', 'a.bin')))).toEqual([4, 5]);
      } else if (loc.kind === 's3') {
        expect(loc.rootUri).toBe(`s3://${loc.bucket}/${loc.prefix}`);
        // What DuckDB gets is enough to reach the objects: a store built from it alone reads the key.
        const { kind: _kind, rootUri: _uri, prefix, ...settings } = loc;
        const raw = createStore({ kind: 's3', ...settings });
        try {
          expect(await bytesAt(raw, `${prefix}loc/a.bin`)).toEqual([4, 5]);
        } finally {
          await raw.close?.();
        }
      } else {
        expect(loc.rootUri).toMatch(/^memory:\/\/[0-9a-f]+\/$/);
        expect((await target.newStore()).location!().rootUri, 'another store has another root').not.toBe(loc.rootUri);
      }
    });

    it.skipIf(!target.exclusiveCreate)(
      'createIfAbsent: creates a missing key once; a second writer never wins, also when they race',
      async () => {
        await checkConditionalCreate(store);
        expect(await store.head!('cc/one.json')).toMatchObject({ size: 1, sha256: sha256(bytesOf(1)) });
      },
    );

    it.skipIf(target.exclusiveCreate)(
      'createIfAbsent creates a missing key (this server ignores If-None-Match: the exclusive part runs on RGW)',
      async () => {
        expect(await store.createIfAbsent!('cc/one.json', bytesOf(1))).toBe(true);
        expect(await bytesAt(store, 'cc/one.json')).toEqual([1]);
      },
    );

    it('createIfAbsent refuses invalid keys like every other call', async () => {
      for (const key of INVALID_KEYS) await expectStoreError(store.createIfAbsent!(key, bytesOf(1)), false);
      expect(await store.listKeys('')).toEqual([]);
    });

    it('serves Starfish documents over its bytes: put and getString (UTF-8), delete and deleteMany', async () => {
      // One store can back our router and a Starfish router mounted after it (docs/starfish.md).
      expect(store).toBeInstanceOf(StarfishDocuments);
      const docs = store as unknown as StarfishDocuments;
      await docs.put('docs/a', '{"name":"Zoë","n":1}');
      await docs.put('docs/b', '{}', { contentType: 'application/json; charset=utf-8' });
      expect(await docs.getString('docs/a')).toBe('{"name":"Zoë","n":1}');
      expect(await docs.getString('docs/none')).toBeNull();
      await docs.delete('docs/a');
      expect(await docs.getString('docs/a')).toBeNull();
      await docs.put('docs/c', '[]');
      await docs.deleteMany(['docs/b', 'docs/c', 'docs/missing']);
      expect(await store.listKeys('docs/')).toEqual([]);
    });

    it('close resolves, and again when called twice', async () => {
      await store.putBytes('close/a', bytesOf(1));
      await expect(store.close!()).resolves.toBeUndefined();
      await expect(store.close!()).resolves.toBeUndefined();
    });
  });
}
