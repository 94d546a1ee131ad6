import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import express from 'express';
import request from 'supertest';
import { afterAll, describe, expect, it } from 'vitest';
import { createEventsServerPlugin } from '../../services/api/plugin.js';
import { createSyncRouter } from '../../services/api/router.js';
import { DEFAULT_SYNC_CONFIG } from '../../shared/config.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import { S3ObjectStore } from '../../shared/store/s3/index.js';
import type {
  ByteRange,
  ListOptions,
  ObjectMeta,
  ObjectStore,
  PutOptions,
  StoredObject,
} from '../../shared/store/types.js';
import { S3RVER_CREDENTIALS, type S3TestServer, startS3Server } from '../helpers/s3.js';

/**
 * Pull answers HEAD, a 304 and a footer Range from metadata and the requested bytes only: the
 * object bytes the store hands over are counted (and for S3 the bytes on the wire from the S3
 * server) for one 8 MB batch.
 */
const SIZE = 8 * 1024 * 1024;
const BATCH_ID = '1782933157690-0000-735223';
const KEY = `events/app/${BATCH_ID}.parquet`;
const TOKEN = 'pull-reads-admin-token-0123';
const body = new Uint8Array(randomBytes(SIZE));
const etag = `"${createHash('sha256').update(body).digest('hex')}"`;

/** Passes every call through and counts the object bytes that leave the store. */
class CountingStore implements ObjectStore {
  bytes = 0;
  constructor(private readonly inner: ObjectStore) {}
  putBytes(key: string, b: Uint8Array, opts?: PutOptions): Promise<void> {
    return this.inner.putBytes(key, b, opts);
  }
  async getBytes(key: string): Promise<StoredObject | null> {
    const obj = await this.inner.getBytes(key);
    this.bytes += obj?.body.byteLength ?? 0;
    return obj;
  }
  head(key: string): Promise<ObjectMeta | null> {
    return this.inner.head!(key);
  }
  async getStream(key: string, range?: ByteRange): Promise<Readable | null> {
    const s = await this.inner.getStream!(key, range);
    s?.on('data', (chunk: Buffer) => (this.bytes += chunk.length));
    return s;
  }
  listKeys(prefix: string, opts?: ListOptions): Promise<string[]> {
    return this.inner.listKeys(prefix, opts);
  }
  healthcheck(): Promise<void> {
    return this.inner.healthcheck();
  }
  describe(): string {
    return this.inner.describe();
  }
}

/** A loopback TCP proxy that counts the bytes the upstream (the S3 server) sends back. */
async function countingProxy(
  targetPort: number,
): Promise<{ port: number; received(): number; close(): Promise<void> }> {
  let received = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => s.destroy());
    }
    upstream.on('data', (d: Buffer) => (received += d.length));
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    received: () => received,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

function appFor(store: ObjectStore): express.Express {
  const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
  const app = express();
  app.use(
    createSyncRouter({ store, config: DEFAULT_SYNC_CONFIG, plugins: [plugin], auth: new Map([[TOKEN, ['admin']]]) }),
  );
  return app;
}

const pull = (app: express.Express) =>
  request(app).get(`/pull/events/app/${BATCH_ID}`).set('Authorization', `Bearer ${TOKEN}`);

/** The three cheap requests, each with the object bytes read for it; then a full GET to prove the counter counts. */
async function measure(
  app: express.Express,
  read: () => number,
): Promise<Record<'head' | 'notModified' | 'footer' | 'full', number>> {
  const out = { head: 0, notModified: 0, footer: 0, full: 0 };
  let before = read();
  const head = await request(app).head(`/pull/events/app/${BATCH_ID}`).set('Authorization', `Bearer ${TOKEN}`);
  expect(head.status).toBe(200);
  expect(head.headers['content-length']).toBe(String(SIZE));
  expect(head.headers.etag).toBe(etag);
  out.head = read() - before;

  before = read();
  const nm = await pull(app).set('If-None-Match', etag);
  expect(nm.status).toBe(304);
  out.notModified = read() - before;

  before = read();
  const footer = await pull(app)
    .set('Range', 'bytes=-8')
    .buffer(true)
    .parse((res, cb) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => cb(null, Buffer.concat(chunks)));
    });
  expect(footer.status).toBe(206);
  expect(footer.headers['content-range']).toBe(`bytes ${SIZE - 8}-${SIZE - 1}/${SIZE}`);
  expect(Buffer.compare(footer.body as Buffer, Buffer.from(body.subarray(SIZE - 8)))).toBe(0);
  out.footer = read() - before;

  before = read();
  const full = await pull(app)
    .buffer(true)
    .parse((res, cb) => {
      const hash = createHash('sha256');
      res.on('data', (c: Buffer) => hash.update(c));
      res.on('end', () => cb(null, `"${hash.digest('hex')}"`));
    });
  expect(full.status).toBe(200);
  expect(full.body).toBe(etag);
  out.full = read() - before;
  return out;
}

describe('pull reads only metadata or the requested bytes (8 MB batch)', () => {
  const cleanups: (() => unknown)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('filesystem and memory stores: HEAD and 304 read 0 object bytes, Range: bytes=-8 reads 8; GET streams all of it', async () => {
    const root = mkdtempSync(join(tmpdir(), 'pull-reads-'));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    for (const inner of [new FilesystemObjectStore({ root }), new MemoryObjectStore()]) {
      const store = new CountingStore(inner);
      await store.putBytes(KEY, body);
      const got = await measure(appFor(store), () => store.bytes);
      expect(got, inner.describe()).toEqual({ head: 0, notModified: 0, footer: 8, full: SIZE });
    }
  });

  it('S3 (s3rver): HEAD, 304 and Range: bytes=-8 take a few hundred bytes from the S3 server, not 8 MB', async () => {
    const s3: S3TestServer = await startS3Server();
    cleanups.push(() => s3.close());
    const proxy = await countingProxy(Number(new URL(s3.endpoint).port));
    cleanups.push(() => proxy.close());
    const store = new S3ObjectStore({
      bucket: s3.bucket,
      endpoint: `http://127.0.0.1:${proxy.port}`,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: S3RVER_CREDENTIALS,
    });
    cleanups.push(() => store.destroy());
    const counting = new CountingStore(store);
    await store.putBytes(KEY, body);
    const wire = await measure(appFor(counting), () => proxy.received());
    // HTTP headers only (HeadObject's answer), plus 8 body bytes for the footer.
    expect(wire.head).toBeLessThan(2048);
    expect(wire.notModified).toBeLessThan(2048);
    expect(wire.footer).toBeLessThan(2048 + 8);
    expect(wire.full).toBeGreaterThanOrEqual(SIZE);
    expect(counting.bytes).toBe(8 + SIZE);
  });
});
