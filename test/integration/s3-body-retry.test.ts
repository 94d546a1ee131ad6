import { once } from 'node:events';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createServer, type Server } from 'node:http';
import { Readable } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreError } from '../../shared/errors.js';
import { FETCH_ATTEMPTS, fetchObject } from '../../shared/rollup/view-copy.js';
import { S3ObjectStore } from '../../shared/store/s3/index.js';
import type { ObjectStore } from '../../shared/store/types.js';

/**
 * A GET whose body breaks off after its headers fails after the SDK's own retries have ended
 * (they cover a request that gets no response). CI saw it once from s3rver (ECONNRESET,
 * "aborted" while reading a manifest). This endpoint answers the next `breaks` GETs with their
 * headers and part of the body, then drops the connection.
 */
describe('S3 reads when the connection drops mid-body', () => {
  const body = Buffer.from(Array.from({ length: 4096 }, (_, i) => i % 251));
  let server: Server;
  let breaks = 0;
  let gets = 0;
  let store: S3ObjectStore;

  beforeAll(async () => {
    server = createServer((req, res) => {
      if (req.method !== 'GET') {
        res.writeHead(405).end();
        return;
      }
      gets++;
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': String(body.length) });
      if (breaks > 0) {
        breaks--;
        res.write(body.subarray(0, 100), () => res.socket?.destroy());
        return;
      }
      res.end(body);
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    store = new S3ObjectStore({
      bucket: 'b',
      endpoint: `http://127.0.0.1:${port}`,
      forcePathStyle: true,
      credentials: { accessKeyId: 'k', secretAccessKey: 's' },
    });
  });

  afterAll(async () => {
    store.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  it('sends the GET again and returns the whole object', async () => {
    breaks = 1;
    gets = 0;
    const got = await store.getBytes('events/a/x.parquet');
    expect(gets).toBe(2);
    expect(Buffer.from(got?.body ?? new Uint8Array(0)).equals(body)).toBe(true);
  });

  it('gives up after three reads with a retriable StoreError naming the key', async () => {
    breaks = 10;
    gets = 0;
    const err = await store.getBytes('events/a/y.parquet').then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreError);
    expect((err as StoreError).retriable).toBe(true);
    expect((err as StoreError).message).toMatch(/S3 get of "events\/a\/y\.parquet" failed/);
    expect(gets).toBe(3);
    breaks = 0;
  });

  it("the query's local copy reads a streamed object again from the start, and keeps no part file", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'copy-retry-'));
    try {
      breaks = 1;
      gets = 0;
      const file = path.join(dir, 'objects', 'x.parquet');
      expect(await fetchObject(store, 'events/a/x.parquet', file)).toBe(body.length);
      expect(gets).toBe(2);
      expect((await readFile(file)).equals(body)).toBe(true);

      breaks = 10;
      gets = 0;
      const lost = path.join(dir, 'objects', 'y.parquet');
      await expect(fetchObject(store, 'events/a/y.parquet', lost)).rejects.toThrow();
      expect(gets).toBe(FETCH_ATTEMPTS);
      expect(await readdir(path.join(dir, 'objects'))).toEqual(['x.parquet']);
    } finally {
      breaks = 0;
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a body that fails before its part file has opened leaves no part file behind', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'copy-early-'));
    let reads = 0;
    // Fails at its first read, while the copy's write stream may still be opening. Under load
    // (this file next to query-s3-copy) removing the part file then raced its open and lost about
    // one run in four; here the race is rare, so this checks the retries and the cleanup.
    const failing = (): Readable =>
      new Readable({
        read() {
          this.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
        },
      });
    const early: Pick<ObjectStore, 'getBytes' | 'getStream' | 'describe'> = {
      getBytes: () => Promise.reject(new Error('not used')),
      getStream: () => {
        reads++;
        return Promise.resolve(failing());
      },
      describe: () => 'early-failing',
    };
    try {
      await expect(
        fetchObject(early as ObjectStore, 'events/a/z.parquet', path.join(dir, 'z.parquet')),
      ).rejects.toThrow('aborted');
      expect(reads).toBe(FETCH_ATTEMPTS);
      expect(await readdir(dir)).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
