/**
 * Erasing a person (issue 36) through the product: the stack (API + encoder + rollup service with
 * its erasure worker) on the test Redis and a filesystem store, DuckDB reading the result.
 * Events of several users are pushed into one app (a few hundred batches over several 2 s
 * periods, most of them rolled), then one distinct id and one anonymous id are erased through
 * `POST /admin/erase/…`, and checked through the exact view, the batch files, every pulled batch,
 * the rollup manifest, the erasure log and the rewritten log; then erased again (nothing more
 * changes). Every other row must be exact: compared column by column, including the
 * `properties` and `extra` JSON text.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { icebergRead } from 'icebird';
import { type IcebergTable, storeRootUri } from '../../shared/iceberg/table.js';
import { serveFolder } from '../helpers/serve-folder.js';
import { FAST_ICEBERG_ENV, readOnlyTable, tableThroughRolled } from '../helpers/icebird-store.js';
import {
  ERASE_ANON,
  ERASE_DISTINCT,
  ROW,
  body,
  erasureFinished,
  erasureState,
  event,
  requestErasure,
} from '../helpers/erasure.js';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eraseQueueName } from '../../shared/redis/keyspace.js';
import { ROOT } from '../helpers/dist.js';
import { hashId } from '../../shared/erasure/log.js';
import { batchIdMs } from '../../shared/ids.js';
import { listRewritten } from '../../shared/erasure/rewritten.js';
import { storeRootUrl } from '../../shared/duckdb.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { uniqueName } from '../helpers/names.js';
import { waitFor } from '../helpers/proc.js';
import { batchQuery, expectManifestMatchesStore, viewQuery } from '../helpers/rollup.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

const auth = { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' };
const BATCHES = 240;
const realFetch = globalThis.fetch;

describe('erasure (in process, 2 s periods)', () => {
  let stack: TestStack;
  let store: FilesystemObjectStore;
  let rootUrl: string;
  const app = uniqueName('er').replace(/[^A-Za-z0-9._~-]/g, '');
  const prefix = `events/${app}/`;

  beforeAll(async () => {
    stack = await startTestStack(
      { ROLLUP_PERIOD_SECONDS: '2', ROLLUP_DELAY_SECONDS: '0', RAW_RETENTION_SECONDS: '0' },
      { api: true, encoder: true, rollup: true },
    );
    store = new FilesystemObjectStore({ root: stack.dataDir });
    rootUrl = storeRootUrl(store).rootUrl;
  });
  afterAll(async () => {
    await stack?.shutdown();
  });

  const post = async (payload: unknown): Promise<{ status: number; body: Record<string, unknown> }> => {
    const r = await fetch(`${stack.url}/admin/erase/events/${app}`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify(payload),
    });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };
  const finished = (id: string): Promise<Record<string, unknown>> =>
    erasureFinished(stack.url, id, auth, 90_000, `erasure ${id}`);
  /** sha256 of every object under the app's batch and rollup folders. */
  const fingerprint = async (): Promise<Map<string, string>> => {
    const out = new Map<string, string>();
    for (const k of [...(await store.listKeys(prefix)), ...(await store.listKeys(`rollups/${prefix}`))]) {
      const got = await store.getBytes(k);
      out.set(
        k,
        createHash('sha256')
          .update(got?.body ?? new Uint8Array())
          .digest('hex'),
      );
    }
    return out;
  };

  it('validates requests: admin role, JSON body naming the problem, bounded counts', async () => {
    const anon = await fetch(`${stack.url}/admin/erase/events/${app}`, { method: 'POST', body: '{}' });
    expect(anon.status).toBe(401);
    for (const [payload, msg] of [
      [{}, /at least one id/],
      [{ distinct_ids: 'x' }, /distinct_ids/],
      [{ distinct_ids: Array.from({ length: 101 }, (_, i) => `u${i}`) }, /distinct_ids/],
      [{ distinct_ids: ['a'], surprise: 1 }, /surprise|unrecognized/i],
    ] as const) {
      const r = await post(payload);
      expect(r.status, JSON.stringify(payload).slice(0, 60)).toBe(400);
      expect(String(r.body.error)).toMatch(msg);
    }
    const big = await fetch(`${stack.url}/admin/erase/events/${app}`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ distinct_ids: ['x'.repeat(300 * 1024)] }),
    });
    expect(big.status).toBe(413);
    const nojson = await fetch(`${stack.url}/admin/erase/events/${app}`, {
      method: 'POST',
      headers: auth,
      body: 'not json',
    });
    expect(nojson.status).toBe(400);
    expect(((await nojson.json()) as { error: string }).error).toMatch(/JSON/);
    expect((await post({ distinct_ids: ['nobody'] })).status).toBe(202);
    const unknownCollection = await fetch(`${stack.url}/admin/erase/nope/${app}`, {
      method: 'POST',
      headers: auth,
      body: '{"distinct_ids":["x"]}',
    });
    expect(unknownCollection.status).toBe(404);
    expect((await fetch(`${stack.url}/admin/erase/er-1782933157690-0123456789abcdef`, { headers: auth })).status).toBe(
      404,
    );
    expect((await fetch(`${stack.url}/admin/erase/bad-id`, { headers: auth })).status).toBe(400);
  });

  it(
    'dead-letters a job that cannot run (state failed, its reason) and `start:rollup -- --replay-failed` puts it back',
    { timeout: 60_000 },
    async () => {
      const conn = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
      const queue = new Queue(eraseQueueName(stack.queueName), { connection: conn });
      try {
        const jobId = 'er-1782933157690-00000000000000aa';
        await queue.add('erase', { v: 2, distinctIds: ['secret-person'] }, { jobId, attempts: 1 });
        await waitFor(async () => (await queue.getJob(jobId))?.failedReason, 20_000, 'the bad job failing');
        const got = await erasureState(stack.url, jobId, auth);
        expect(got).toMatchObject({ state: 'failed' });
        expect(String(got.error)).toMatch(/bad erase job/);
        const out = await new Promise<string>((done) => {
          const child = spawn(process.execPath, ['--import', 'tsx', 'services/rollup/main.ts', '--replay-failed'], {
            cwd: ROOT,
            env: { ...process.env, REDIS_URL: inject('redisUrl'), QUEUE_NAME: stack.queueName, LOG_LEVEL: 'silent' },
            stdio: ['ignore', 'pipe', 'pipe'],
          });
          let text = '';
          child.stdout.on('data', (b: Buffer) => (text += b.toString()));
          const kill = setTimeout(() => child.kill('SIGKILL'), 30_000);
          child.on('close', () => {
            clearTimeout(kill);
            done(text);
          });
        });
        expect(out).toContain(`1 erasure job(s) back in queue ${eraseQueueName(stack.queueName)}`);
      } finally {
        await queue.close();
        conn.disconnect();
      }
    },
  );

  it(
    'erases one distinct id and one anonymous id from batch files and rollups; every other row stays exact; twice changes nothing',
    { timeout: 240_000 },
    async () => {
      // One batch that is all the erased person: it must stay as an empty file.
      const allPerson = await fetch(`${stack.url}/push/events/${app}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: body(0, 5, (b, i) => ({ ...event(b, i), distinct_id: ERASE_DISTINCT, message_id: `all-${i}` })),
      });
      expect(allPerson.status).toBe(200);
      const emptyId = ((await allPerson.json()) as { batchId: string }).batchId;
      let next = 1;
      const pusher = async (): Promise<void> => {
        for (let b = next++; b <= BATCHES; b = next++) {
          const r = await fetch(`${stack.url}/push/events/${app}/x`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: body(b, 5 + (b % 11)),
          });
          expect(r.status).toBe(200);
          if (b % 40 === 0) await new Promise((r2) => setTimeout(r2, 600));
        }
      };
      await Promise.all(Array.from({ length: 4 }, pusher));
      const expectedRows = 5 + Array.from({ length: BATCHES }, (_, i) => 5 + ((i + 1) % 11)).reduce((a, b) => a + b, 0);
      // Every batch written and every period rolled (so the store is quiet before the dry run).
      await waitFor(async () => (await store.listKeys(prefix)).length >= BATCHES + 1, 60_000, 'batches written');
      const lastKey = (await store.listKeys(prefix)).at(-1) as string;
      await waitFor(
        async () =>
          ((await readManifest(store, prefix))?.watermarkMs ?? 0) >
          batchIdMs(lastKey.slice(prefix.length, -'.parquet'.length)),
        60_000,
        'every period rolled',
      );
      const manifestBefore = await readManifest(store, prefix);
      expect(manifestBefore?.periods.length).toBeGreaterThanOrEqual(1);

      const isPerson = `(distinct_id = ${sqlString(ERASE_DISTINCT)} OR anonymous_id = ${sqlString(ERASE_ANON)})`;
      const allRows = await batchQuery(store, app, (from) => `SELECT ${ROW} FROM ${from} ORDER BY message_id`);
      expect(allRows.length).toBe(expectedRows);
      const personRows = allRows.filter((r) => r.distinct_id === ERASE_DISTINCT || r.anonymous_id === ERASE_ANON);
      const keptRows = allRows.filter((r) => !(r.distinct_id === ERASE_DISTINCT || r.anonymous_id === ERASE_ANON));
      expect(personRows.length).toBeGreaterThan(50);
      expect(keptRows.some((r) => r.anonymous_id === ERASE_ANON)).toBe(false);
      expect(allRows.some((r) => r.distinct_id !== ERASE_DISTINCT && r.anonymous_id === ERASE_ANON)).toBe(true);
      expect(String(keptRows[0]?.properties)).toContain('"sp":true');
      expect(String(keptRows[0]?.extra)).toContain('12345678901234567890');

      // Dry run: reports, changes nothing.
      const before = await fingerprint();
      const dry = await post({ distinct_ids: [ERASE_DISTINCT], anonymous_ids: [ERASE_ANON], dry_run: true });
      expect(dry.status).toBe(202);
      const dryDone = await finished(String(dry.body.id));
      expect(dryDone.state).toBe('completed');
      expect(dryDone.dry_run).toBe(true);
      expect(Number(dryDone.rows_erased)).toBeGreaterThanOrEqual(personRows.length);
      expect((dryDone.files as unknown[]).length).toBe(dryDone.files_rewritten);
      expect(await fingerprint()).toEqual(before);

      const t0 = Date.now();
      const req = await post({ distinct_ids: [ERASE_DISTINCT], anonymous_ids: [ERASE_ANON] });
      expect(req.status).toBe(202);
      const id = String(req.body.id);
      const done = await finished(id);
      const seconds = (Date.now() - t0) / 1000;
      expect(done.state, String(done.error)).toBe('completed');
      // Each erased row is in its batch file, and once more in a rollup file if its period was rolled.
      expect(Number(done.rows_erased)).toBeGreaterThanOrEqual(personRows.length);
      expect(Number(done.rows_erased)).toBeLessThanOrEqual(2 * personRows.length);
      expect(Number(done.files_scanned)).toBeGreaterThanOrEqual(BATCHES + 1);
      console.log(
        `erasure of ${personRows.length} rows: ${String(done.files_rewritten)} files rewritten of ${String(done.files_scanned)} scanned, ${String(done.rows_erased)} row removals, ${seconds.toFixed(1)} s`,
      );

      // The exact view and the batch files: none of the person's rows, every other row value for value.
      const viewRows = await viewQuery(store, app, (from) => `SELECT ${ROW} FROM ${from} ORDER BY message_id`);
      expect(viewRows).toEqual(keptRows);
      expect(await batchQuery(store, app, (from) => `SELECT ${ROW} FROM ${from} ORDER BY message_id`)).toEqual(
        keptRows,
      );
      expect(
        await viewQuery(store, app, (from) => `SELECT count(*)::BIGINT AS n FROM ${from} WHERE ${isPerson}`),
      ).toEqual([{ n: '0' }]);

      // Every pulled batch: the file the API serves holds none of the person's rows.
      const keys = await store.listKeys(prefix);
      expect(keys.length).toBe(BATCHES + 1);
      let pulledRows = 0;
      for (const key of keys) {
        const batchId = key.slice(prefix.length, -'.parquet'.length);
        const r = await fetch(`${stack.url}/pull/events/${app}/${batchId}`, { headers: auth });
        expect(r.status).toBe(200);
        const bytes = Buffer.from(await r.arrayBuffer());
        const [c] = await duckQuery(
          `SELECT count(*)::BIGINT AS n, count(*) FILTER (WHERE ${isPerson})::BIGINT AS p FROM read_parquet(${sqlString(rootUrl + key)})`,
        );
        expect(createHash('sha256').update(bytes).digest('hex')).toBe(
          createHash('sha256')
            .update((await store.getBytes(key))?.body ?? new Uint8Array())
            .digest('hex'),
        );
        expect(Number(c?.p)).toBe(0);
        pulledRows += Number(c?.n);
      }
      expect(pulledRows).toBe(keptRows.length);

      // The all-person batch is an empty file with the same schema as the others.
      const emptyKey = `${prefix}${emptyId}.parquet`;
      const schema = async (k: string): Promise<unknown> =>
        duckQuery(`SELECT name, type, field_id FROM parquet_schema(${sqlString(rootUrl + k)}) ORDER BY name`);
      expect(
        await duckQuery(`SELECT count(*)::BIGINT AS n FROM read_parquet(${sqlString(rootUrl + emptyKey)})`),
      ).toEqual([{ n: '0' }]);
      expect(await schema(emptyKey)).toEqual(await schema(keys[keys.length - 1] as string));

      // Rollups: rewritten under new keys, the manifest lists exactly what the store holds.
      const manifest = await readManifest(store, prefix);
      expect(manifest).not.toBeNull();
      await expectManifestMatchesStore(store, manifest as NonNullable<typeof manifest>, rootUrl);
      expect(manifest?.periods.flatMap((p) => p.files).some((f) => f.key.includes('~'))).toBe(true);

      // The erasure log: who, counts, hashes; never the ids.
      const logged = await store.getBytes(`erasures/events/${app}/${id}.json`);
      expect(logged).not.toBeNull();
      const text = Buffer.from(logged?.body ?? new Uint8Array()).toString('utf8');
      expect(text).not.toContain(ERASE_DISTINCT);
      expect(text).not.toContain('"anon-5"');
      const record = JSON.parse(text) as {
        requestedBy: string;
        distinctIdHashes: string[];
        anonymousIdHashes: string[];
        rowsErased: number;
        filesRewritten: number;
      };
      const key = Buffer.from(
        Buffer.from((await store.getBytes('erasures/_hash-key'))?.body ?? new Uint8Array())
          .toString('utf8')
          .trim(),
        'hex',
      );
      expect(record.distinctIdHashes).toEqual([hashId(key, ERASE_DISTINCT)]);
      expect(record.anonymousIdHashes).toEqual([hashId(key, ERASE_ANON)]);
      expect(record.requestedBy).toMatch(/^token:/);
      expect({ rows: record.rowsErased, files: record.filesRewritten }).toEqual({
        rows: done.rows_erased,
        files: done.files_rewritten,
      });

      // The rewritten log names every batch file rewritten (the empty one included).
      const page = await listRewritten(store, 'events', app, undefined, 1000, { settleMs: 0 });
      const rewritten = new Set(page.items.flatMap((i) => i.batchIds));
      expect(rewritten.has(emptyId)).toBe(true);
      const batchesWithPerson = new Set(personRows.map((r) => (r.message_id === undefined ? '' : String(r.rat))));
      expect(rewritten.size).toBeGreaterThanOrEqual(batchesWithPerson.size);

      // The ids left Redis with the job's completion (its data keeps no id).
      const conn = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
      const queue = new Queue(eraseQueueName(stack.queueName), { connection: conn });
      try {
        expect((await queue.getJob(id))?.data).toMatchObject({ distinctIds: [], anonymousIds: [] });
      } finally {
        await queue.close();
        conn.disconnect();
      }

      // Twice: nothing more changes.
      const settled = await fingerprint();
      const again = await post({ distinct_ids: [ERASE_DISTINCT], anonymous_ids: [ERASE_ANON] });
      const doneAgain = await finished(String(again.body.id));
      expect(doneAgain).toMatchObject({ state: 'completed', files_rewritten: 0, rows_erased: 0 });
      // A roll may have run meanwhile (only over already-erased files): compare the batch files, and the rows.
      const after = await fingerprint();
      for (const [k, h] of settled) if (k.startsWith(prefix)) expect(after.get(k), k).toBe(h);
      expect(await viewQuery(store, app, (from) => `SELECT ${ROW} FROM ${from} ORDER BY message_id`)).toEqual(keptRows);
    },
  );
});

describe('erasure with an Iceberg table (ICEBERG=on, 1 s commits)', () => {
  let stack: TestStack;
  let server: http.Server;
  let httpBase: string;
  let table: IcebergTable;
  const app = uniqueName('ei').replace(/[^A-Za-z0-9._~-]/g, '');
  const prefix = `events/${app}/`;

  beforeAll(async () => {
    stack = await startTestStack(FAST_ICEBERG_ENV, { api: true, encoder: true, rollup: true });
    const rootUri = storeRootUri(stack.store);
    server = await serveFolder(path.resolve(stack.dataDir));
    httpBase = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    // icebird fetches the file:// locations the metadata names: the loopback server serves the same paths.
    globalThis.fetch = ((input: string | URL | Request, init?: RequestInit) => {
      const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
      return realFetch(url.startsWith(rootUri) ? httpBase + url.slice(rootUri.length) : url, init);
    }) as typeof fetch;
    table = readOnlyTable(stack.store, app, rootUri);
  });
  afterAll(async () => {
    globalThis.fetch = realFetch;
    await new Promise((r) => server?.close(r));
    await stack?.shutdown();
  });

  it(
    'commits an overwrite snapshot, expires every older snapshot, and the table read by icebird holds every other row',
    { timeout: 120_000 },
    async () => {
      const acked: string[] = [];
      for (let b = 0; b < 60; b++) {
        const r = await fetch(`${stack.url}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: body(b, 4 + (b % 5)),
        });
        expect(r.status).toBe(200);
        acked.push(((await r.json()) as { batchId: string }).batchId);
        if (b % 20 === 19) await new Promise((r2) => setTimeout(r2, 1500));
      }
      const last = acked[acked.length - 1] as string;
      // Every period rolled and the table caught up with the last batch.
      await waitFor(
        async () => ((await readManifest(stack.store, prefix))?.watermarkMs ?? 0) > batchIdMs(last),
        60_000,
        'every period rolled',
      );
      await waitFor(() => tableThroughRolled(table, last), 60_000, 'the table holding every batch, rolled');
      const before = (await table.load())?.metadata.snapshots.length ?? 0;
      expect(before).toBeGreaterThan(1);
      const readTable = async (): Promise<Record<string, unknown>[]> => {
        const n = await table.currentVersion();
        return icebergRead({
          tableUrl: `${httpBase}${table.prefix.slice(0, -1)}`,
          metadataFileName: `v${n}.metadata.json`,
        });
      };
      const all = await readTable();
      const isPerson = (r: Record<string, unknown>): boolean =>
        r.distinct_id === ERASE_DISTINCT || r.anonymous_id === ERASE_ANON;
      expect(all.filter(isPerson).length).toBeGreaterThan(10);
      const keptIds = all
        .filter((r) => !isPerson(r))
        .map((r) => String(r.message_id))
        .sort();

      const id = await requestErasure(stack.url, app, auth, {
        distinct_ids: [ERASE_DISTINCT],
        anonymous_ids: [ERASE_ANON],
      });
      const done = await erasureFinished(stack.url, id, auth, 90_000);
      expect(done.state, String(done.error)).toBe('completed');
      const snaps = done.snapshots as { overwrite: string[]; expired: string[] };
      expect(snaps.overwrite.length).toBe(1);
      expect(snaps.expired.length).toBeGreaterThanOrEqual(before - 1);

      const meta = (await table.load())?.metadata;
      // Time travel: every snapshot the table still holds is at or after the overwrite.
      const overwrite = meta?.snapshots.find((s) => String(s['snapshot-id']) === snaps.overwrite[0]);
      expect(overwrite?.summary.operation).toBe('overwrite');
      for (const s of meta?.snapshots ?? [])
        expect(s['timestamp-ms']).toBeGreaterThanOrEqual(overwrite?.['timestamp-ms'] ?? Infinity);
      const after = await readTable();
      expect(after.filter(isPerson)).toEqual([]);
      expect(after.map((row) => String(row.message_id)).sort()).toEqual(keptIds);
      // The files the expired snapshots alone referenced are gone from the store.
      const liveKeys = new Set(await table.dataKeys());
      const rollupFiles = (await stack.store.listKeys(`rollups/${prefix}`)).filter((k) => k.endsWith('.parquet'));
      for (const k of rollupFiles) expect(liveKeys.has(k), k).toBe(true);
    },
  );
});

describe('erasure of batches acknowledged before the request but not yet written', () => {
  it(
    'waits for the list watermark, then rescans: a batch written after the first scan loses the rows too',
    { timeout: 120_000 },
    async () => {
      // No encoder yet: pushed batches stay in flight (acknowledged, not written).
      const a = await startTestStack(
        { ROLLUP_PERIOD_SECONDS: '2', ROLLUP_DELAY_SECONDS: '0' },
        { api: true, encoder: false, rollup: true },
      );
      let encoder: TestStack | undefined;
      try {
        const app = 'ew';
        const store = new FilesystemObjectStore({ root: a.dataDir });
        const acked: string[] = [];
        for (let b = 0; b < 5; b++) {
          const r = await fetch(`${a.url}/push/events/${app}/x`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: body(b, 8),
          });
          expect(r.status).toBe(200);
          acked.push(((await r.json()) as { batchId: string }).batchId);
        }
        expect(await store.listKeys(`events/${app}/`)).toEqual([]);
        const id = await requestErasure(a.url, app, auth, {
          distinct_ids: [ERASE_DISTINCT],
          anonymous_ids: [ERASE_ANON],
        });
        const state = (): Promise<Record<string, unknown>> => erasureState(a.url, id, auth);
        // The first scan found nothing; the job waits for the in-flight batches.
        const waiting = await waitFor(
          async () => {
            const s = await state();
            return s.state === 'waiting' ? s : null;
          },
          30_000,
          'the erasure waiting for the watermark',
        );
        expect(waiting.files_rewritten).toBe(0);
        await new Promise((r) => setTimeout(r, 1500));
        expect((await state()).state).toBe('waiting');

        // The encoder writes them now, after the first scan.
        encoder = await startTestStack(
          { QUEUE_NAME: a.queueName, DATA_DIR: a.dataDir, ROLLUP: 'off' },
          { api: false, encoder: true },
        );
        const done = await waitFor(
          async () => {
            const s = await state();
            return s.state === 'completed' || s.state === 'failed' ? s : null;
          },
          60_000,
          'the erasure completing',
        );
        expect(done.state, String(done.error)).toBe('completed');
        const keys = await store.listKeys(`events/${app}/`);
        expect(keys).toEqual(acked.map((b) => `events/${app}/${b}.parquet`));
        const rows = await batchQuery(store, app, (from) => `SELECT ${ROW} FROM ${from} ORDER BY message_id`);
        // What the pushed events hold (the generator is deterministic).
        const sent = Array.from({ length: 5 }, (_, b) => Array.from({ length: 8 }, (_, i) => event(b, i))).flat();
        const person = sent.filter((e) => e.distinct_id === ERASE_DISTINCT || e.anonymous_id === ERASE_ANON).length;
        expect(person).toBeGreaterThan(0);
        expect(Number(done.rows_erased)).toBeGreaterThanOrEqual(person);
        expect(rows.map((r) => r.message_id)).toEqual(
          sent
            .filter((e) => !(e.distinct_id === ERASE_DISTINCT || e.anonymous_id === ERASE_ANON))
            .map((e) => e.message_id)
            .sort(),
        );
        expect(rows.filter((r) => r.distinct_id === ERASE_DISTINCT || r.anonymous_id === ERASE_ANON)).toEqual([]);
      } finally {
        await encoder?.close();
        await a.shutdown();
      }
    },
  );
});
