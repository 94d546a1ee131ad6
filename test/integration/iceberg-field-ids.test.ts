/**
 * Iceberg field ids and `received_at` units in the files the table references, with real files: batch
 * files from our encoder and a rollup file from the rollup code (DuckDB `COPY … FIELD_IDS`), read
 * by DuckDB (`parquet_schema`, values) and by icebird (an independent Iceberg reader) through a
 * committed table. Plus the reason the table has no `app` column: icebird reads a table column
 * that the data files lack as undefined.
 */
import { promises as fs } from 'node:fs';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { icebergRead } from 'icebird';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rollPeriod } from '../../services/rollup/roll.js';
import { storeRootUrl } from '../../shared/duckdb.js';
import { parquetFacts } from '../../shared/iceberg/parquet-footer.js';
import { FIELD_IDS } from '../../shared/iceberg/schema.js';
import { IcebergTable, batchTableFile, rollupTableFile, storeRootUri } from '../../shared/iceberg/table.js';
import { PARQUET_MIME_TYPE } from '../../shared/parquet/encode.js';
import { EVENT_COLUMNS, encodeBatch } from '../../shared/parquet/index.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { serveFolder } from '../helpers/serve-folder.js';

const H8 = Date.UTC(2026, 11, 1, 8);
const COLUMNS = [...EVENT_COLUMNS, 'received_at', 'extra'];

let root: string;
let store: FilesystemObjectStore;
let rootUri: string;
let server: http.Server;
let httpBase: string;
let db: DuckDBInstance;
let duck: DuckDBConnection;
const realFetch = globalThis.fetch;

/** A push body of `n` events; event 0 carries an unknown field (`extra`) and a number JS cannot hold. */
function body(batch: string, n: number): string {
  const events = Array.from({ length: n }, (_, i) => ({
    event_type: 'track',
    event: ['b_click', 'a_open'][i % 2],
    distinct_id: `u-${i}`,
    message_id: `${batch}-${i}`,
    properties: { i, s: 'é\u2028"' },
    ...(i === 0 ? { custom: 'BIG' } : {}),
  }));
  return JSON.stringify({ data: { events }, baseHash: null }).replace('"custom":"BIG"', '"custom":1e400');
}

async function writeBatch(ms: number, n: number, rows: number): Promise<ReturnType<typeof batchTableFile>> {
  const id = `${ms}-${String(n).padStart(4, '0')}-${(0xfe0000 + n).toString(16)}`;
  const encoded = encodeBatch(body(id, rows), ms);
  if (!encoded.ok) throw new Error(encoded.reason);
  const key = `events/f/${id}.parquet`;
  await store.putBytes(key, encoded.bytes, { contentType: PARQUET_MIME_TYPE });
  const facts = await parquetFacts(store, key);
  return batchTableFile(key, id, facts!.recordCount, facts!.fileSizeInBytes);
}

const fileOf = (key: string): string => path.join(store.root, key);
const lit = (s: string): string => `'${s.replaceAll("'", "''")}'`;

/** Field id and timestamp unit of each column, as DuckDB reads the Parquet footer. */
async function footerSchema(key: string): Promise<Record<string, { id: number | null; type: string }>> {
  const r = await duck.runAndReadAll(
    `SELECT name, field_id, coalesce(logical_type::VARCHAR, '') AS t FROM parquet_schema(${lit(fileOf(key))}) WHERE name NOT IN ('arrow_schema', 'duckdb_schema')`,
  );
  return Object.fromEntries(
    r
      .getRowObjectsJson()
      .map((x) => [String(x.name), { id: x.field_id === null ? null : Number(x.field_id), type: String(x.t) }]),
  );
}

/** Rows of files as DuckDB reads them, `received_at` as epoch microseconds, sorted by message id. */
async function duckRows(keys: readonly string[]): Promise<Record<string, unknown>[]> {
  const cols = COLUMNS.map((c) => (c === 'received_at' ? 'epoch_us(received_at) AS received_at' : `"${c}"`)).join(', ');
  const r = await duck.runAndReadAll(
    `SELECT ${cols} FROM read_parquet([${keys.map((k) => lit(fileOf(k))).join(', ')}], union_by_name = true) ORDER BY message_id`,
  );
  return r.getRowObjectsJson();
}

beforeAll(async () => {
  root = await fs.mkdtemp(path.join(tmpdir(), 'iceberg-field-ids-'));
  store = new FilesystemObjectStore({ root });
  rootUri = storeRootUri(store);
  server = await serveFolder(store.root);
  httpBase = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
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

describe('Iceberg field ids in the data files', () => {
  it('batch files and rollups carry the schema field ids; values and received_at instants survive the rollup exactly; icebird reads both', async () => {
    const batches = [await writeBatch(H8 + 1_000, 0, 3), await writeBatch(H8 + 2_500, 0, 2)];
    const ids = Object.fromEntries(COLUMNS.map((c) => [c, FIELD_IDS[c]]));
    expect(Object.values(ids).every((id) => Number.isInteger(id))).toBe(true);

    for (const b of batches) {
      const schema = await footerSchema(b.key);
      expect(Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, v.id]))).toEqual(ids);
      // Batch files: TIMESTAMP(MILLIS, UTC).
      expect(schema.received_at!.type).toMatch(/isAdjustedToUTC=1.*MILLIS=MilliSeconds\(\)/);
    }
    const before = await duckRows(batches.map((b) => b.key));
    expect(before).toHaveLength(5);
    expect(before.find((r) => r.extra !== null)).toMatchObject({
      extra: '{"custom":1e400}',
      properties: '{"i":0,"s":"é\u2028\\""}',
    });

    const rolled = await rollPeriod(
      { store, duck, periodSeconds: 3600, rootUrl: storeRootUrl(store).rootUrl, assertLocked: async () => {} },
      'events/f/',
      H8,
      'roll',
    );
    expect(rolled.outcome).toBe('rolled');
    expect(rolled.files).toHaveLength(1);
    const rollKey = rolled.files[0]!.key;
    const rollSchema = await footerSchema(rollKey);
    // Every table column has its id; batch_id (not a table column) has none.
    expect(Object.fromEntries(Object.entries(rollSchema).map(([k, v]) => [k, v.id]))).toEqual({
      ...ids,
      batch_id: null,
    });
    // Rollups (DuckDB): TIMESTAMP(MICROS, UTC), the unit the spec gives timestamptz.
    expect(rollSchema.received_at!.type).toMatch(/isAdjustedToUTC=1.*MICROS=MicroSeconds\(\)/);
    // Same rows, value for value, the same instants in both units.
    expect(await duckRows([rollKey])).toEqual(before);
    expect(before.map((r) => Number(r.received_at))).toEqual([
      ...Array(3).fill((H8 + 1_000) * 1000),
      ...Array(2).fill((H8 + 2_500) * 1000),
    ]);

    // icebird reads the ms batch files and the µs rollup as the same instants and values.
    const table = new IcebergTable({ store, collection: 'events', app: 'f', rootUri });
    await table.append(batches);
    await table.replace(
      batches.map((b) => b.key),
      rolled.files.map(rollupTableFile),
    );
    const read = async (n: number): Promise<Record<string, unknown>[]> => {
      const rows = await icebergRead({
        tableUrl: `${httpBase}${table.prefix.slice(0, -1)}`,
        metadataFileName: `v${n}.metadata.json`,
      });
      return rows
        .map((r): Record<string, unknown> => ({
          ...(r as Record<string, unknown>),
          received_at: (r.received_at as Date).getTime(),
        }))
        .sort((a, b) => String(a.message_id).localeCompare(String(b.message_id)));
    };
    const [v1, v2] = [await read(1), await read(2)];
    expect(v1).toHaveLength(5);
    expect(v2).toEqual(v1);
    expect(v1.map((r) => r.received_at)).toEqual(before.map((r) => Number(r.received_at) / 1000));
    expect(v1.map((r) => r.extra)).toEqual(before.map((r) => r.extra));
    expect(v1.map((r) => r.properties)).toEqual(before.map((r) => r.properties));
  });

  it('why the table has no app column: icebird reads a table column that its data files lack as undefined', async () => {
    const batch = await writeBatch(H8 + 9_000, 0, 2);
    const table = new IcebergTable({ store, collection: 'events', app: 'appcol', rootUri });
    await table.append([batch]);
    const tableUrl = `${httpBase}${table.prefix.slice(0, -1)}`;
    expect(await icebergRead({ tableUrl, metadataFileName: 'v1.metadata.json' })).toHaveLength(2);

    // The same version with `app` (a new id) in its schema, as an identity-partition column would be.
    const meta = JSON.parse(
      Buffer.from((await store.getBytes(table.metadataKey('v1.metadata.json')))!.body).toString('utf8'),
    ) as {
      schemas: { fields: unknown[] }[];
      'last-column-id': number;
    };
    const appId = meta['last-column-id'] + 1;
    meta.schemas[0]!.fields.push({ id: appId, name: 'app', required: false, type: 'string' });
    meta['last-column-id'] = appId;
    await store.putBytes(table.metadataKey('app-column.metadata.json'), Buffer.from(JSON.stringify(meta)), {
      contentType: 'application/json',
    });
    // icebird resolves the file's columns by the table schema's names (our files have no
    // `iceberg.schema` key-value metadata), so `app` is a column it asks the file for and gets
    // nothing: the partition-value rule of the spec is never reached.
    const rows = await icebergRead({ tableUrl, metadataFileName: 'app-column.metadata.json' });
    expect(rows).toHaveLength(2);
    expect(rows.map((r) => r.app)).toEqual([undefined, undefined]);
    expect(rows.map((r) => r.event).sort()).toEqual(['a_open', 'b_click']);
  });
});
