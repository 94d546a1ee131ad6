import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express from 'express';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import request from 'supertest';
import { afterAll, describe, expect, inject, it } from 'vitest';
// The seed's setup snippet, with our package's import names.
import { S3ObjectStore } from 'events-ingest/s3';
import { BatchLedger, FilesystemObjectStore, createEventsServerPlugin, createSyncRouter } from 'events-ingest';
import { startS3Server, type S3TestServer } from '../helpers/s3.js';
import { duckQuery } from '../helpers/duckdb.js';
import { batchBody } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { waitFor } from '../helpers/proc.js';
import { createEncoder } from '../../services/encoder/worker.js';
import { createRegistry } from '../../shared/metrics.js';
import { createLogger } from '../../shared/logger.js';

const collections = [
  {
    name: 'events',
    storagePath: 'events/{app}/{batchId}',
    readRoles: ['admin'],
    writeRoles: ['public'],
    encryption: 'none',
    allowedMimeTypes: ['application/json'],
    maxBodyBytes: 8_000_000,
  },
];

describe('library API: the seed setup snippet', () => {
  const cleanups: (() => Promise<unknown> | void)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('builds an express app exactly as the snippet does, on S3, and serves push and pull (inline mode)', async () => {
    const s3: S3TestServer = await startS3Server();
    cleanups.push(() => s3.close());
    const store = new S3ObjectStore({
      bucket: s3.bucket,
      endpoint: s3.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    });

    const eventsPlugin = createEventsServerPlugin({
      store,
      collection: 'events',
      storagePath: 'events/{app}/{batchId}',
    });

    const syncRouter = createSyncRouter({
      store,
      config: { version: 1, collections },
      plugins: [eventsPlugin],
      auth: new Map([['snippet-admin-token-0000', ['admin']]]),
    });
    const app = express();
    app.use(syncRouter);

    const r = await request(app)
      .post('/push/events/myapp/anything')
      .set('Content-Type', 'application/json')
      .send(batchBody(10));
    expect(r.status).toBe(200);
    const keys = await store.listKeys('events/myapp/');
    expect(keys).toEqual([`events/myapp/${r.body.batchId}.parquet`]);
    const pull = await request(app)
      .get(`/pull/events/myapp/${r.body.batchId}`)
      .set('Authorization', 'Bearer snippet-admin-token-0000');
    expect(pull.status).toBe(200);
    expect(pull.headers['content-type']).toBe('application/vnd.apache.parquet');
    // Not listable unless the collection says so (as in Starfish).
    expect(
      (await request(app).get('/list/events/myapp').set('Authorization', 'Bearer snippet-admin-token-0000')).status,
    ).toBe(404);
  });

  it('refuses at construction: no putBytes, storagePath without a final {param}, non-JSON collection', () => {
    const store = new FilesystemObjectStore({ root: join(tmpdir(), 'never-written') });
    expect(() =>
      createEventsServerPlugin({ store: {} as never, collection: 'events', storagePath: 'events/{app}/{batchId}' }),
    ).toThrow(/putBytes/);
    expect(() => createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/latest' })).toThrow(
      /must end with a \{param\}/,
    );
    const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
    expect(() =>
      createSyncRouter({
        store,
        config: {
          version: 1,
          collections: [{ ...collections[0]!, allowedMimeTypes: ['application/vnd.apache.parquet'] }],
        },
        plugins: [plugin],
      }),
    ).toThrow(/allowedMimeTypes.*JSON-typed/);
    expect(() =>
      createSyncRouter({
        store,
        config: { version: 1, collections: [{ ...collections[0]!, encryption: 'aes-gcm' }] },
        plugins: [plugin],
      }),
    ).toThrow(/encryption/);
  });

  it('with a queue binding, pushes go through BullMQ and an encoder writes the file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ingest-lib-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const store = new FilesystemObjectStore({ root: dir });
    const name = uniqueName('lib');
    const producer = new Redis(inject('redisUrl'), { enableOfflineQueue: false });
    const workerConn = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
    await new Promise((r) => producer.once('ready', r));
    const queue = new Queue(name, { connection: producer });
    const ledger = new BatchLedger(producer, name);
    const encoder = createEncoder({
      queueName: name,
      connection: workerConn,
      ledger: new BatchLedger(workerConn, name),
      store,
      registry: createRegistry('lib', false),
      logger: createLogger({ level: 'silent', name: 'lib' }),
      concurrency: 1,
    });
    cleanups.push(async () => {
      await encoder.close();
      await queue.obliterate({ force: true });
      await queue.close();
      producer.disconnect();
      workerConn.disconnect();
    });
    const plugin = createEventsServerPlugin({
      store,
      collection: 'events',
      storagePath: 'events/{app}/{batchId}',
      queue: { queue, ledger },
    });
    const app = express().use(
      createSyncRouter({
        store,
        config: { version: 1, collections: [{ ...collections[0]!, readRoles: ['public'], listable: true }] },
        plugins: [plugin],
      }),
    );
    const r = await request(app).post('/push/events/lib/x').set('Content-Type', 'application/json').send(batchBody(25));
    expect(r.status).toBe(200);
    const listed = await waitFor(
      async () => {
        const l = await request(app).get('/list/events/lib');
        return l.body.items?.length === 1 ? (l.body.items as string[]) : null;
      },
      20_000,
      'the batch to be listed',
    );
    expect(listed).toEqual([`${r.body.batchId}.parquet`]);
    const [row] = await duckQuery(`SELECT count(*)::INTEGER AS n FROM read_parquet('${dir}/events/lib/*.parquet')`);
    expect(row?.n).toBe(25);
  });
});
