/**
 * Iceberg field ids in the encoder's Parquet files (shared/parquet/field-ids.ts): every column of
 * a batch file carries its id from shared/iceberg/schema.ts, read back by two readers that share
 * no code with the writer (hyparquet's footer parser and DuckDB's `parquet_schema`); the data
 * pages are untouched and the values read back exactly.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as arrow from 'apache-arrow';
import { parquetMetadata, parquetReadObjects } from 'hyparquet';
import { compressors } from 'hyparquet-compressors';
import { Table as WasmTable, WriterPropertiesBuilder, readParquet, writeParquet } from 'parquet-wasm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIELD_IDS } from '../../shared/iceberg/schema.js';
import { ParquetSchemaEditError, withFieldIds } from '../../shared/parquet/field-ids.js';
import { encodeBatchToIpc } from '../../shared/parquet/encode.js';
import {
  EVENTS_ARROW_SCHEMA,
  arrowToParquet,
  encodeBatch,
  prepareBatch,
  restampParquet,
} from '../../shared/parquet/index.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';

const RECEIVED_AT = 1782933157690; // 2026-07-01T19:12:37.690Z
const EVENTS = [
  {
    event_type: 'track',
    event: 'open',
    distinct_id: 'u1',
    ts: '2026-07-01T19:12:00Z',
    message_id: 'm-1',
    properties: { n: 'BIG', s: 'é\u0000"' },
    context: { ip: '1' },
    dt: '2026-07-01',
  },
  { event: 'click', distinct_id: 'u2', custom: [1, 2], received_at: 'client-sent' },
];
/** The push body, with a number no JS value can hold (`1e400`) kept as sent. */
const body = (events: unknown[] = EVENTS): string =>
  JSON.stringify({ data: { events }, baseHash: null }).replace('"n":"BIG"', '"n":1e400');

const ab = (b: Uint8Array): ArrayBuffer => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;

/** Field id of each top-level column as hyparquet reads the footer (the root element is skipped). */
function hyparquetIds(file: Uint8Array): Record<string, number | undefined> {
  const schema = parquetMetadata(ab(file)).schema;
  return Object.fromEntries(schema.slice(1).map((e) => [e.name, e.field_id]));
}

/** The same IPC stream written by parquet-wasm with the encoder's settings but no field ids. */
function writtenWithoutIds(ipc: Uint8Array): Uint8Array {
  const props = new WriterPropertiesBuilder().build();
  return writeParquet(WasmTable.fromIPCStream(ipc), props);
}

function footerStart(file: Uint8Array): number {
  return file.byteLength - 8 - new DataView(file.buffer, file.byteOffset + file.byteLength - 8, 4).getUint32(0, true);
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'field-ids-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('Iceberg field ids in batch files', () => {
  it('every column of an encoded batch file carries its field id from the table schema (hyparquet and DuckDB read them)', async () => {
    const r = encodeBatch(body(), RECEIVED_AT);
    if (!r.ok) throw new Error(r.reason);
    const expected = Object.fromEntries(EVENTS_ARROW_SCHEMA.fields.map((f) => [f.name, FIELD_IDS[f.name]]));
    expect(Object.keys(expected)).toHaveLength(11);
    expect(Object.values(expected).every((id) => Number.isInteger(id))).toBe(true);
    expect(hyparquetIds(r.bytes)).toEqual(expected);

    const file = join(dir, 'batch.parquet');
    await writeFile(file, r.bytes);
    const rows = await duckQuery(
      `SELECT name, field_id FROM parquet_schema(${sqlString(file)}) WHERE name <> 'arrow_schema'`,
    );
    expect(Object.fromEntries(rows.map((x) => [x.name, Number(x.field_id)]))).toEqual(expected);
  });

  it('the prepared (API-encoded), thread-encoded and re-stamped paths carry the same ids', () => {
    const prepared = prepareBatch(Buffer.from(body()));
    if (!prepared.ok) throw new Error(prepared.reason);
    const direct = encodeBatch(body(), RECEIVED_AT);
    if (!direct.ok) throw new Error(direct.reason);
    const fromPrepared = prepared.batch.toParquet(RECEIVED_AT);
    expect(Buffer.from(fromPrepared).equals(Buffer.from(direct.bytes))).toBe(true);
    const ids = hyparquetIds(direct.bytes);
    expect(hyparquetIds(restampParquet(direct.bytes, RECEIVED_AT + 1))).toEqual(ids);
  });

  it('only the footer changes: data pages are the same bytes, values read back exactly, 2 bytes per column', async () => {
    const ipc = encodeBatchToIpc(body(), RECEIVED_AT);
    if (!ipc.ok) throw new Error(ipc.reason);
    const plain = writtenWithoutIds(ipc.ipc);
    expect(Object.values(hyparquetIds(plain)).every((id) => id === undefined)).toBe(true);
    const stamped = withFieldIds(plain, FIELD_IDS);
    expect(stamped.byteLength - plain.byteLength).toBe(2 * 11);
    const start = footerStart(plain);
    expect(footerStart(stamped)).toBe(start);
    expect(Buffer.from(stamped.subarray(0, start)).equals(Buffer.from(plain.subarray(0, start)))).toBe(true);

    // Values: hyparquet, DuckDB and parquet-wasm read the same rows from both files.
    const [a, b] = await Promise.all([plain, stamped].map((f) => parquetReadObjects({ file: ab(f), compressors })));
    expect(b).toEqual(a);
    expect(b[0]).toMatchObject({ event: 'open', properties: '{"n":1e400,"s":"é\\u0000\\""}', extra: null });
    expect(b[1]).toMatchObject({
      event: 'click',
      event_type: '',
      extra: '{"custom":[1,2],"received_at":"client-sent"}',
    });
    const files = await Promise.all(
      [plain, stamped].map(async (f, i) => {
        const p = join(dir, `values-${i}.parquet`);
        await writeFile(p, f);
        return p;
      }),
    );
    const [da, db] = await Promise.all(
      files.map((f) => duckQuery(`SELECT *, epoch_ms(received_at) AS ms FROM read_parquet(${sqlString(f)})`)),
    );
    expect(db).toEqual(da);
    expect(db.map((x) => Number(x.ms))).toEqual([RECEIVED_AT, RECEIVED_AT]);
    const wasm = (f: Uint8Array): unknown[] =>
      arrow
        .tableFromIPC(readParquet(f).intoIPCStream())
        .toArray()
        .map((row) => ({ ...row.toJSON() }));
    expect(wasm(stamped)).toEqual(wasm(plain));
  });

  it('is idempotent and leaves columns without an id, nested columns and prototype names alone', () => {
    const r = encodeBatch(body(), RECEIVED_AT);
    if (!r.ok) throw new Error(r.reason);
    // Ids already present: nothing to do, the same array comes back.
    expect(withFieldIds(r.bytes, FIELD_IDS)).toBe(r.bytes);

    const utf8 = new arrow.Utf8();
    const inner = new arrow.Field('event', utf8, true);
    const table = new arrow.Table({
      nested: arrow.vectorFromArray([{ event: 'x' }], new arrow.Struct([inner])),
      event: arrow.vectorFromArray(['open'], utf8),
      constructor: arrow.vectorFromArray(['c'], utf8),
      batch_id: arrow.vectorFromArray(['b'], utf8),
    });
    const schema = parquetMetadata(ab(arrowToParquet(table))).schema;
    // Depth-first: root, the struct `nested`, its child `event`, then the top-level columns.
    expect(schema.slice(1).map((e) => [e.name, e.field_id])).toEqual([
      ['nested', undefined],
      ['event', undefined],
      ['event', FIELD_IDS.event],
      ['constructor', undefined],
      ['batch_id', undefined],
    ]);
    // The last schema's edit is reused only for a file with the same schema bytes: an events file
    // after the other schema, and a file with another field count of the same names, get their own.
    const again = encodeBatch(body(), RECEIVED_AT);
    if (!again.ok) throw new Error(again.reason);
    expect(hyparquetIds(again.bytes)).toEqual(hyparquetIds(r.bytes));
    const fewer = new arrow.Table({
      event: arrow.vectorFromArray(['open'], utf8),
      extra: arrow.vectorFromArray(['{}'], utf8),
    });
    expect(hyparquetIds(arrowToParquet(fewer))).toEqual({ event: FIELD_IDS.event, extra: FIELD_IDS.extra });
    const third = encodeBatch(body(), RECEIVED_AT);
    if (!third.ok) throw new Error(third.reason);
    expect(Buffer.from(third.bytes).equals(Buffer.from(r.bytes))).toBe(true);
  });

  it('refuses bytes that are not a Parquet file', () => {
    expect(() => withFieldIds(new Uint8Array(4), FIELD_IDS)).toThrow(ParquetSchemaEditError);
    expect(() => withFieldIds(Buffer.from('not parquet at all, no magic'), FIELD_IDS)).toThrow(/no PAR1/);
    const bad = Buffer.from('PAR1\xff\xff\xff\x7fPAR1', 'latin1');
    expect(() => withFieldIds(bad, FIELD_IDS)).toThrow(/footer longer than the file/);
  });
});
