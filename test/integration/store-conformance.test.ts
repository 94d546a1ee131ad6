/**
 * The store conformance suite (test/helpers/store-conformance-cases.ts) on S3: s3rver and Ceph
 * RGW (system tier: RGW needs the Ceph packages), plus what only the S3 store does. The memory
 * and filesystem backends run the same cases in store-conformance-local.test.ts (integration).
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HeadObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { S3ObjectStore } from '../../shared/store/s3/index.js';
import { type RgwServer, rgwStoreFor, startRgw } from '../helpers/rgw.js';
import { S3RVER_CREDENTIALS, s3StoreFor, startS3Server } from '../helpers/s3.js';
import type { S3TestServer } from '../helpers/s3.js';
import {
  bytesOf,
  describeObjectStoreConformance,
  expectStoreError,
  sha256,
} from '../helpers/store-conformance-cases.js';

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
    ordersKeysThatExtendEachOther: false,
    // s3rver ignores If-None-Match and overwrites: only "creates a missing key" is checked here.
    exclusiveCreate: false,
    locationKind: 's3',
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
      const client = new S3Client({
        region: 'us-east-1',
        endpoint: server.endpoint,
        forcePathStyle: true,
        credentials: { ...S3RVER_CREDENTIALS },
      });
      try {
        const head = await client.send(
          new HeadObjectCommand({ Bucket: server.bucket, Key: `${store.prefix}meta/new` }),
        );
        expect(head.Metadata?.sha256).toBe(sha256(bytesOf(1, 2)));
        const legacy = new Uint8Array(randomBytes(20_000));
        await client.send(
          new PutObjectCommand({ Bucket: server.bucket, Key: `${store.prefix}meta/legacy`, Body: legacy }),
        );
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
        await client.send(
          new PutObjectCommand({ Bucket: server.bucket, Key: `${store.prefix}meta/legacy`, Body: replaced }),
        );
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
    ordersKeysThatExtendEachOther: true,
    exclusiveCreate: true,
    locationKind: 's3',
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
