/**
 * The reference's events-plugin scenarios (Starfish, packages/ts/events/tests/integration.test.ts,
 * as of 02e5318), written here against our library: our `createSyncRouter` with a queued
 * `createEventsServerPlugin` (real Redis, BullMQ, our encoder, a folder store) over a real port.
 * Every pulled or stored file is read with plain hyparquet, no hyparquet-compressors, as the
 * reference reads its files (and as a browser dashboard reading `pullParquet` bytes would).
 *
 * Where we differ on purpose, the scenario says so and why (docs/starfish.md, "Conformance with
 * the reference's events plugin", lists the same). One difference runs through all of them: a
 * push is answered once its batch is queued, and the batch is listed once an encoder has written
 * its file (milliseconds later), so a scenario waits for the listing where the reference's list
 * is immediate.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StarfishClient } from '@drakkar.software/starfish-client';
import { createSyncRouter as createReferenceRouter } from '@drakkar.software/starfish-server';
import { getRequestListener } from '@hono/node-server';
import { Queue } from 'bullmq';
import express from 'express';
import { parquetReadObjects } from 'hyparquet';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  BatchLedger,
  FilesystemObjectStore,
  type SyncConfigInput,
  createEventsServerPlugin,
  createSyncRouter,
} from 'events-ingest';
import { createEncoder, type Encoder } from '../../services/encoder/worker.js';
import { createLogger } from '../../shared/logger.js';
import { createRegistry } from '../../shared/metrics.js';
import { uniqueName } from '../helpers/names.js';
import { waitFor } from '../helpers/proc.js';

const EVENTS = {
  name: 'events',
  storagePath: 'events/{app}/{batchId}',
  readRoles: ['public'],
  writeRoles: ['public'],
  encryption: 'none',
  maxBodyBytes: 8_000_000,
  allowedMimeTypes: ['application/json'],
  listable: true,
};
/** The reference's second collection: plain JSON documents, served by its own router. */
const OTHER = {
  name: 'other',
  storagePath: 'other/{id}',
  readRoles: ['public'],
  writeRoles: ['public'],
  encryption: 'none',
  maxBodyBytes: 1_000_000,
  allowedMimeTypes: ['application/json'],
};

const sampleEvent = {
  event_type: 'capture',
  event: 'button_clicked',
  distinct_id: 'user-abc',
  anonymous_id: 'anon-xyz',
  ts: '2024-06-01T10:00:00.000Z',
  message_id: 'msg-001',
  properties: '{"label":"Submit"}',
  context: '{"platform":"web"}',
  dt: '2024-06-01',
};

/**
 * Our router for the events collection, in front of the reference's router for every other one (as a
 * Starfish host would mount them), both on one store: ours, which is also a Starfish `ObjectStore`.
 */
interface Host {
  url: string;
  /** Batch files (our router) and documents (the reference's). */
  store: FilesystemObjectStore;
}

const cleanups: (() => Promise<unknown> | void)[] = [];
let host: Host;

async function listen(app: express.Express): Promise<string> {
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  cleanups.push(() => new Promise((r) => server.close(r)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function startHost(): Promise<Host> {
  const dir = mkdtempSync(join(tmpdir(), 'sf-conformance-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const store = new FilesystemObjectStore({ root: dir });
  const name = uniqueName('sfconf');
  const producer = new Redis(inject('redisUrl'), { enableOfflineQueue: false });
  const workerConn = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
  await new Promise((r) => producer.once('ready', r));
  const queue = new Queue(name, { connection: producer });
  const encoder: Encoder = createEncoder({
    queueName: name,
    connection: workerConn,
    ledger: new BatchLedger(workerConn, name),
    store,
    registry: createRegistry('sfconf', false),
    logger: createLogger({ level: 'silent', name: 'sfconf' }),
    concurrency: 4,
  });
  cleanups.push(async () => {
    await encoder.close();
    await queue.obliterate({ force: true });
    await queue.close();
    producer.disconnect();
    workerConn.disconnect();
  });
  const config: SyncConfigInput = { version: 1, collections: [EVENTS, OTHER] };
  const plugin = createEventsServerPlugin({
    store,
    collection: 'events',
    storagePath: EVENTS.storagePath,
    queue: { queue, ledger: new BatchLedger(producer, name) },
  });
  // Our store as the reference's store, unconverted: the type check is part of the test.
  const reference = createReferenceRouter({
    store,
    config: config as Parameters<typeof createReferenceRouter>[0]['config'],
    roleResolver: async () => ({ identity: 'u', roles: ['public'] }),
  });
  const app = express();
  app.use(createSyncRouter({ store, config, plugins: [plugin] }));
  app.use(getRequestListener(reference.fetch));
  return { url: await listen(app), store };
}

function pushSample(app: string, clientBatchId: string, events: unknown[] = [sampleEvent]): Promise<Response> {
  return fetch(`${host.url}/push/events/${app}/${clientBatchId}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ data: { events }, baseHash: null }),
  });
}

async function listFiles(app: string, after?: string): Promise<{ items: string[]; hasMore: boolean }> {
  const qs = after ? `?limit=10&after=${encodeURIComponent(after)}` : '?limit=10';
  const res = await fetch(`${host.url}/list/events/${app}${qs}`);
  expect(res.status).toBe(200);
  return (await res.json()) as { items: string[]; hasMore: boolean };
}

/** The listing once it holds `n` files (our difference: listed once written, not at once). */
function listedFiles(app: string, n: number, after?: string): Promise<{ items: string[]; hasMore: boolean }> {
  return waitFor(
    async () => {
      const page = await listFiles(app, after);
      return page.items.length >= n ? page : null;
    },
    20_000,
    `${n} batch file(s) listed for ${app}`,
  );
}

/** Every row of a Parquet file, read with plain hyparquet (no compressors). */
function readRows(bytes: Uint8Array): Promise<Record<string, unknown>[]> {
  return parquetReadObjects({
    file: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer,
  });
}

describe('the reference events plugin scenarios, against our library (real Redis, queue, encoder, port)', () => {
  beforeAll(async () => {
    host = await startHost();
  });
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it("stores a Parquet file at a server-assigned sortable id, ignoring the client's batchId", async () => {
    const app = uniqueName('a');
    const res = await pushSample(app, 'client-supplied-id');
    expect(res.status).toBe(200);
    const body = (await res.json()) as { hash: string; batchId: string };
    expect(body.hash).toMatch(/^[0-9a-f]{64}$/);
    const { items } = await listedFiles(app, 1);
    expect(items).toEqual([`${body.batchId}.parquet`]);
    expect(items[0]).toMatch(/^\d{13}-\d{4}-[0-9a-f]{6}\.parquet$/);
    expect(await host.store.getBytes(`events/${app}/client-supplied-id.parquet`)).toBeNull();
    // (The reference also checks the stored content type: a folder store keeps none; pull answers
    // application/vnd.apache.parquet, checked in the next scenario.)
    const stored = await host.store.getBytes(`events/${app}/${items[0]}`);
    const rows = await readRows(stored!.body);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      event: 'button_clicked',
      event_type: 'capture',
      anonymous_id: 'anon-xyz',
      distinct_id: 'user-abc',
    });
    // Differs on purpose: received_at is a UTC timestamp column (the batch id's instant), not ISO
    // text, so DuckDB and Iceberg compare instants; hyparquet gives it as a Date.
    expect(rows[0]?.received_at).toBeInstanceOf(Date);
    expect((rows[0]?.received_at as Date).getTime()).toBe(Number(body.batchId.slice(0, 13)));
  });

  it('serves the Parquet bytes on GET pull, addressed by the id learned from /list', async () => {
    const app = uniqueName('a');
    expect((await pushSample(app, 'client-id-ignored')).status).toBe(200);
    const { items } = await listedFiles(app, 1);
    const pull = await fetch(`${host.url}/pull/events/${app}/${items[0]!.replace(/\.parquet$/, '')}`);
    expect(pull.status).toBe(200);
    expect(pull.headers.get('content-type')).toBe('application/vnd.apache.parquet');
    const bytes = new Uint8Array(await pull.arrayBuffer());
    expect(Buffer.from(bytes.subarray(0, 4)).toString()).toBe('PAR1');
    expect(await readRows(bytes)).toHaveLength(1);
  });

  it('answers a pull with a matching ETag 304 (conditional GET)', async () => {
    const app = uniqueName('a');
    await pushSample(app, 'client-id-ignored');
    const { items } = await listedFiles(app, 1);
    const url = `${host.url}/pull/events/${app}/${items[0]!.replace(/\.parquet$/, '')}`;
    const first = await fetch(url);
    expect(first.status).toBe(200);
    const etag = first.headers.get('etag');
    expect(etag).toBeTruthy();
    await first.arrayBuffer();
    expect((await fetch(url, { headers: { 'if-none-match': etag! } })).status).toBe(304);
  });

  it('answers a pull of a batch never pushed with the JSON sync answer (no hash)', async () => {
    const res = await fetch(`${host.url}/pull/events/${uniqueName('a')}/nonexistent-batch`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { hash?: string };
    expect(typeof body).toBe('object');
    expect(body.hash).toBeFalsy();
  });

  it("differs on purpose: an empty events array stores and lists nothing (batchId null), and the Starfish client's push of it succeeds", async () => {
    // The reference writes and lists a zero-row file. We store nothing: a zero-row file is an
    // empty object in the store, a listing entry, and a queue job for no data, and SDKs flush
    // empty batches on timers (docs/starfish.md).
    const app = uniqueName('a');
    const res = await pushSample(app, 'client-id-ignored', []);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ batchId: null, hash: expect.stringMatching(/^[0-9a-f]{64}$/) });
    const client = new StarfishClient({ baseUrl: host.url });
    const pushed = (await client.push(`/push/events/${app}/empty`, { events: [] }, null)) as unknown as {
      hash: string;
      batchId: string | null;
    };
    expect(pushed.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(pushed.batchId).toBeNull();
    // A later batch is listed alone: the empty ones left nothing behind.
    await pushSample(app, 'after-empty', [{ ...sampleEvent, message_id: 'msg-after-empty' }]);
    expect((await listedFiles(app, 1)).items).toHaveLength(1);
    expect(await host.store.listKeys(`events/${app}/`)).toHaveLength(1);
  });

  it('stores several events of one batch in one file, in the order sent', async () => {
    const app = uniqueName('a');
    const events = ['page_viewed', 'button_clicked', 'form_submitted'].map((event, i) => ({
      ...sampleEvent,
      message_id: `msg-00${i + 1}`,
      event,
    }));
    expect((await pushSample(app, 'client-id-ignored', events)).status).toBe(200);
    const { items } = await listedFiles(app, 1);
    expect(items).toHaveLength(1);
    const rows = await readRows((await host.store.getBytes(`events/${app}/${items[0]}`))!.body);
    expect(rows.map((r) => r.event)).toEqual(['page_viewed', 'button_clicked', 'form_submitted']);
  });

  it('answers a malformed JSON body 400', async () => {
    const res = await fetch(`${host.url}/push/events/${uniqueName('a')}/batch-bad`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: 'not json at all',
    });
    expect(res.status).toBe(400);
  });

  it('leaves other collections to the next router: events through our queue, documents through the reference, in one Express app', async () => {
    // Events: our pipeline (queued, encoded, in our store, listed, pulled).
    const app = uniqueName('a');
    const pushed = (await (await pushSample(app, 'ignored')).json()) as { batchId: string };
    const { items } = await listedFiles(app, 1);
    expect(items).toEqual([`${pushed.batchId}.parquet`]);
    expect(await host.store.listKeys(`events/${app}/`)).toEqual([`events/${app}/${pushed.batchId}.parquet`]);
    const pull = await fetch(`${host.url}/pull/events/${app}/${pushed.batchId}`);
    expect(pull.headers.get('content-type')).toBe('application/vnd.apache.parquet');
    expect(await readRows(new Uint8Array(await pull.arrayBuffer()))).toHaveLength(1);
    // Documents: the reference's own push and pull of a JSON document, in the same store, no Parquet.
    const doc = await fetch(`${host.url}/push/other/123`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ data: { foo: 'bar' }, baseHash: null }),
    });
    expect(doc.status).toBe(200);
    const { hash } = (await doc.json()) as { hash: string };
    expect(hash).toBeTruthy();
    expect(await host.store.getString('other/123')).not.toBeNull();
    expect(await host.store.getBytes('other/123.parquet')).toBeNull();
    const back = await fetch(`${host.url}/pull/other/123`);
    expect(back.status).toBe(200);
    expect(await back.json()).toMatchObject({ data: { foo: 'bar' }, hash });
  });

  it('throws at construction when the store lacks putBytes, or the storagePath does not end with a {param}', () => {
    const storeLite = {
      getString: async () => null,
      put: async () => undefined,
      listKeys: async () => [],
      delete: async () => undefined,
    };
    expect(() =>
      createEventsServerPlugin({ store: storeLite as never, collection: 'events', storagePath: 'events/{x}/{y}' }),
    ).toThrow('putBytes');
    expect(() =>
      createEventsServerPlugin({ store: host.store, collection: 'events', storagePath: 'events/{app}/fixed' }),
    ).toThrow('{param}');
  });

  it('assigns strictly ascending sortable ids across successive pushes, listed in that order', async () => {
    const app = uniqueName('a');
    // Differs on purpose: the reference pushes the same body five times and gets five files. A
    // byte-identical body whose every event has a message_id, within BODY_DEDUP_WINDOW_SECONDS
    // (300 s), is a retry of the first (a client that lost the answer) and gets its answer, so
    // five distinct batches need five distinct bodies here; the same body again is one batch.
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await pushSample(app, 'ignored', [{ ...sampleEvent, message_id: `msg-${i}` }]);
      expect(res.status).toBe(200);
      ids.push(((await res.json()) as { batchId: string }).batchId);
    }
    const again = (await (await pushSample(app, 'ignored', [{ ...sampleEvent, message_id: 'msg-4' }])).json()) as {
      batchId: string;
    };
    expect(again.batchId).toBe(ids[4]);
    const { items, hasMore } = await listedFiles(app, 5);
    expect(hasMore).toBe(false);
    expect(items).toEqual(ids.map((id) => `${id}.parquet`));
    expect(items).toEqual([...items].sort());
    expect(new Set(items).size).toBe(5);
  });

  it('resumes /list with `after`: only batches pushed since the cursor', async () => {
    const app = uniqueName('a');
    await pushSample(app, 'ignored-1');
    const cursor = (await listedFiles(app, 1)).items[0]!;
    const idle = await listFiles(app, cursor);
    expect(idle).toEqual({ items: [], hasMore: false });
    // A new body (see the previous scenario: the same body again would be a retry of the first).
    await pushSample(app, 'ignored-2', [{ ...sampleEvent, message_id: 'msg-002' }]);
    const resumed = await listedFiles(app, 1, cursor);
    expect(resumed.items).toHaveLength(1);
    expect(resumed.items[0]).not.toBe(cursor);
  });

  it("still refuses a plugin whose storagePath differs from its collection's", () => {
    const plugin = createEventsServerPlugin({
      store: host.store,
      collection: 'events',
      storagePath: 'events/{tenant}/{batchId}',
    });
    expect(() =>
      createSyncRouter({ store: host.store, config: { version: 1, collections: [EVENTS, OTHER] }, plugins: [plugin] }),
    ).toThrow(/differs from the config/);
  });
});
