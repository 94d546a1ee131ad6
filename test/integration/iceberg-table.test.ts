/**
 * The Iceberg table over a real filesystem store, read as third parties would: real batch files
 * from our encoder and a real rollup file from the rollup code, committed as append, replace and
 * delete snapshots; each metadata version read with icebird (an independent Iceberg reader, over
 * HTTP from a loopback server serving the store's folder) and with DuckDB over the snapshot's file
 * list, row for row. Plus a real race on the exclusive create and a committer that stops between
 * its manifest writes and its metadata create.
 */
import { promises as fs } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { icebergRead } from 'icebird';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parquetFacts } from '../../shared/iceberg/parquet-footer.js';
import {
  IcebergTable,
  THROUGH_BATCH_ID,
  batchTableFile,
  currentSnapshot,
  rollupTableFile,
  storeRootUri,
} from '../../shared/iceberg/table.js';
import { encodeBatch } from '../../shared/parquet/index.js';
import { PARQUET_MIME_TYPE } from '../../shared/parquet/encode.js';
import { storeRootUrl } from '../../shared/duckdb.js';
import { rollPeriod } from '../../services/rollup/roll.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { serveFolder } from '../helpers/serve-folder.js';

const H8 = Date.UTC(2026, 11, 1, 8);
const H9 = H8 + 3_600_000;
const EVENTS = ['app_open', 'button_click', 'purchase'];
type Row = Record<string, string | number | null>;

let root: string;
let store: FilesystemObjectStore;
let rootUri: string;
let server: http.Server;
let httpBase: string;
let db: DuckDBInstance;
let duck: DuckDBConnection;
const realFetch = globalThis.fetch;

/** A push body of `n` events whose message ids name the batch and the index. */
function body(batch: string, n: number): string {
  const events = Array.from({ length: n }, (_, i) => ({
    event_type: 'track',
    event: EVENTS[i % EVENTS.length],
    distinct_id: `u-${i % 2}`,
    ts: `2026-12-01T08:00:0${i}Z`,
    message_id: `${batch}-${i}`,
    properties: { i, batch },
    ...(i === 0 ? { custom: true } : {}),
  }));
  return JSON.stringify({ data: { events }, baseHash: null });
}

/** Writes a batch file the way the encoder does and returns its table entry. */
async function writeBatch(ms: number, n: number, rows: number): Promise<ReturnType<typeof batchTableFile>> {
  const id = `${ms}-${String(n).padStart(4, '0')}-${(0xabc000 + n).toString(16)}`;
  const encoded = encodeBatch(body(id, rows), ms);
  if (!encoded.ok) throw new Error(encoded.reason);
  const key = `events/a/${id}.parquet`;
  await store.putBytes(key, encoded.bytes, { contentType: PARQUET_MIME_TYPE });
  // What the committer will do for files the encoder wrote: read the count from the footer.
  const facts = await parquetFacts(store, key);
  expect(facts).toEqual({ recordCount: rows, fileSizeInBytes: encoded.bytes.byteLength });
  return batchTableFile(key, id, facts!.recordCount, facts!.fileSizeInBytes);
}

function normalise(r: Record<string, unknown>): Row {
  const out: Row = {};
  for (const [k, v] of Object.entries(r)) {
    if (k === 'batch_id') continue;
    out[k] =
      v instanceof Date
        ? v.getTime()
        : typeof v === 'bigint'
          ? Number(v)
          : v === undefined
            ? null
            : (v as string | number | null);
  }
  return out;
}

const byMessage = (a: Row, b: Row): number => String(a.message_id).localeCompare(String(b.message_id));

/** The rows of metadata version `n` as icebird reads them over HTTP. */
async function icebirdRows(table: IcebergTable, n: number): Promise<Row[]> {
  const rows = await icebergRead({
    tableUrl: `${httpBase}${table.prefix.slice(0, -1)}`,
    metadataFileName: `v${n}.metadata.json`,
  });
  return rows.map(normalise).sort(byMessage);
}

/** The rows of version `n`'s snapshot read by DuckDB from the file list our table code resolves. */
async function duckRows(table: IcebergTable, n: number): Promise<Row[]> {
  const snapshot = currentSnapshot(await table.readVersion(n));
  const files = (await table.dataKeys(snapshot)).map((k) => fileURLToPath(table.uriOf(k)));
  const list = files.map((f) => `'${f.replaceAll("'", "''")}'`).join(', ');
  const reader = await duck.runAndReadAll(
    `SELECT event_type, event, distinct_id, anonymous_id, ts, message_id, properties, context, dt, epoch_ms(received_at) AS received_at, extra FROM read_parquet([${list}], union_by_name = true)`,
  );
  return reader
    .getRowObjectsJson()
    .map((r) => normalise({ ...r, received_at: Number(r.received_at) }))
    .sort(byMessage);
}

async function versionsOnDisk(table: IcebergTable): Promise<number[]> {
  const keys = await store.listKeys(table.metadataKey('v'));
  // `metadata/v` also matches version-hint.text.
  return keys
    .flatMap((k) => {
      const m = /\/v(\d+)\.metadata\.json$/.exec(k);
      return m ? [Number(m[1])] : [];
    })
    .sort((a, b) => a - b);
}

beforeAll(async () => {
  root = await fs.mkdtemp(path.join(tmpdir(), 'iceberg-table-'));
  store = new FilesystemObjectStore({ root });
  rootUri = storeRootUri(store);
  server = await serveFolder(store.root);
  httpBase = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  // icebird fetches every location the metadata names; ours are file:// URIs of the store's
  // folder, which the loopback server serves under the same relative paths.
  globalThis.fetch = ((input: string | URL | Request, init?: RequestInit) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    return realFetch(url.startsWith(rootUri) ? httpBase + url.slice(rootUri.length) : url, init);
  }) as typeof fetch;
  db = await DuckDBInstance.create(':memory:');
  duck = await db.connect();
});

afterAll(async () => {
  globalThis.fetch = realFetch;
  duck?.closeSync();
  await new Promise((r) => server?.close(r));
  if (root) await fs.rm(root, { recursive: true, force: true });
});

describe('Iceberg table over the filesystem store', () => {
  it('append, replace (rollup) and delete snapshots read the same rows in icebird and DuckDB', async () => {
    const table = new IcebergTable({ store, collection: 'events', app: 'a', rootUri });
    const h8 = [
      await writeBatch(H8 + 1_000, 0, 3),
      await writeBatch(H8 + 2_000, 1, 2),
      await writeBatch(H8 + 2_000, 2, 4),
    ];
    const h9 = [await writeBatch(H9 + 5_000, 0, 2), await writeBatch(H9 + 6_000, 0, 1)];
    const all = [...h8, ...h9];
    const through = all[all.length - 1]!.key.slice('events/a/'.length, -'.parquet'.length);

    // v1: first append of the first three; v2: the rest.
    expect((await table.append(h8, { throughBatchId: h8[2]!.key.slice(9, -8) })).version).toBe(1);
    expect((await table.append(h9, { throughBatchId: through })).version).toBe(2);
    const v1Rows = await icebirdRows(table, 1);
    expect(v1Rows.map((r) => r.message_id)).toEqual(
      h8.flatMap((f) => Array.from({ length: f.recordCount }, (_, i) => `${f.key.slice(9, -8)}-${i}`)).sort(),
    );
    expect(v1Rows.every((r) => r.received_at === H8 + 1_000 || r.received_at === H8 + 2_000)).toBe(true);
    expect(await duckRows(table, 1)).toEqual(v1Rows);
    const v2Rows = await icebirdRows(table, 2);
    expect(v2Rows).toHaveLength(12);
    expect(await duckRows(table, 2)).toEqual(v2Rows);
    // Exact values, not just counts: the extra column and JSON text survive as the encoder wrote them.
    expect(v2Rows.find((r) => r.message_id === `${h9[0]!.key.slice(9, -8)}-0`)).toMatchObject({
      event: 'app_open',
      extra: '{"custom":true}',
      properties: `{"i":0,"batch":"${h9[0]!.key.slice(9, -8)}"}`,
      received_at: H9 + 5_000,
    });
    expect((await table.readVersion(2)).snapshots[1]?.summary[THROUGH_BATCH_ID]).toBe(through);

    // v3: the rollup code rolls hour 8 into one sorted file, committed as a replace: same rows.
    const rolled = await rollPeriod(
      { store, duck, periodSeconds: 3600, rootUrl: storeRootUrl(store).rootUrl, assertLocked: async () => {} },
      'events/a/',
      H8,
      'roll',
    );
    expect(rolled.outcome).toBe('rolled');
    const rollupFiles = rolled.files.map(rollupTableFile);
    for (const f of rolled.files)
      expect(await parquetFacts(store, f.key)).toEqual({ recordCount: f.rows, fileSizeInBytes: f.bytes });
    expect(
      (
        await table.replace(
          h8.map((f) => f.key),
          rollupFiles,
        )
      ).version,
    ).toBe(3);
    const v3Rows = await icebirdRows(table, 3);
    expect(v3Rows).toEqual(v2Rows);
    expect(await duckRows(table, 3)).toEqual(v2Rows);
    expect((await table.dataKeys()).sort()).toEqual([...rollupFiles.map((f) => f.key), ...h9.map((f) => f.key)].sort());

    // v4: retention drops hour 8 (the rollup file).
    expect((await table.delete(rollupFiles.map((f) => f.key))).version).toBe(4);
    const v4Rows = await icebirdRows(table, 4);
    expect(v4Rows).toEqual(v2Rows.filter((r) => (r.received_at as number) >= H9));
    expect(await duckRows(table, 4)).toEqual(v4Rows);
    // Older versions still read as they were (time travel by metadata version).
    expect(await icebirdRows(table, 1)).toEqual(v1Rows);
    // The latest version through version-hint.text, as a catalog-less reader finds it.
    const latest = await icebergRead({ tableUrl: `${httpBase}${table.prefix.slice(0, -1)}` });
    expect(latest.map(normalise).sort(byMessage)).toEqual(v4Rows);

    // Expiry: only snapshots from the delete on are kept; the batch files of hour 8 and the rollup are no longer referenced.
    const v4 = await table.readVersion(4);
    const expiry = await table.expireSnapshots(currentSnapshot(v4)!['timestamp-ms']);
    expect(expiry.unreferencedDataKeys.sort()).toEqual(
      [...h8.map((f) => f.key), ...rollupFiles.map((f) => f.key)].sort(),
    );
    expect(await icebirdRows(table, expiry.version!)).toEqual(v4Rows);
    expect(await versionsOnDisk(table)).toEqual([1, 2, 3, 4, 5]);
  });

  it('two committers racing for the same version: one wins, the other retries on top of it', async () => {
    const store2 = store;
    let arrived = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const hook = async (): Promise<void> => {
      // Both reach the create for the same version before either tries it.
      if (++arrived === 2) release();
      await gate;
    };
    const mk = (): IcebergTable =>
      new IcebergTable({ store: store2, collection: 'events', app: 'race', rootUri, beforeMetadataCreate: hook });
    const [x, y] = [mk(), mk()];
    const [fx, fy] = [await writeBatch(H8 + 10_000, 0, 2), await writeBatch(H8 + 11_000, 0, 3)];
    const [rx, ry] = await Promise.all([x.append([fx]), y.append([fy])]);
    expect([rx.attempts, ry.attempts].sort()).toEqual([1, 2]);
    expect([rx.version, ry.version].sort()).toEqual([1, 2]);
    expect(await versionsOnDisk(x)).toEqual([1, 2]);
    const rows = await icebirdRows(x, 2);
    expect(rows.map((r) => r.message_id)).toEqual(
      [
        ...['0', '1'].map((i) => `${fx.key.slice(9, -8)}-${i}`),
        ...['0', '1', '2'].map((i) => `${fy.key.slice(9, -8)}-${i}`),
      ].sort(),
    );
    // The loser's first manifest and list were deleted: every .avro file is referenced.
    const avro = (await store2.listKeys(x.metadataKey(''))).filter((k) => k.endsWith('.avro'));
    expect(avro).toHaveLength(4);
    expect(await x.cleanOrphans(0)).toEqual([]);
  });

  it('a committer that stops between its manifests and its metadata leaves the last version readable; the next one cleans up and goes on', async () => {
    const mk = (o: Partial<ConstructorParameters<typeof IcebergTable>[0]> = {}): IcebergTable =>
      new IcebergTable({ store, collection: 'events', app: 'crash', rootUri, ...o });
    const f1 = await writeBatch(H9 + 20_000, 0, 2);
    await mk().append([f1]);
    let reached!: () => void;
    const atCreate = new Promise<void>((r) => (reached = r));
    const f2 = await writeBatch(H9 + 21_000, 0, 3);
    // Never resolves: the process "died" here, with its manifest and manifest list written.
    void mk({
      beforeMetadataCreate: () => {
        reached();
        return new Promise<never>(() => {});
      },
    }).append([f2]);
    await atCreate;
    const t = mk();
    expect((await store.listKeys(t.metadataKey(''))).filter((k) => k.endsWith('.avro'))).toHaveLength(4);
    expect((await icebirdRows(t, 1)).map((r) => r.message_id)).toEqual([
      `${f1.key.slice(9, -8)}-0`,
      `${f1.key.slice(9, -8)}-1`,
    ]);

    const orphans = await t.cleanOrphans(0);
    expect(orphans).toHaveLength(2);
    expect((await store.listKeys(t.metadataKey(''))).filter((k) => k.endsWith('.avro'))).toHaveLength(2);
    expect((await t.append([f2])).version).toBe(2);
    expect(await versionsOnDisk(t)).toEqual([1, 2]);
    expect(await icebirdRows(t, 2)).toHaveLength(5);
    expect(await duckRows(t, 2)).toEqual(await icebirdRows(t, 2));
  });
});
