/**
 * The `ARROW:schema` footer entry is left out of every batch file (shared/parquet/arrow-schema.ts):
 * read back by hyparquet's footer parser (no code shared with the edit) and by parquet-wasm, the
 * files hold the same values and schema, other key-value entries survive, and the files are
 * smaller by the entry.
 */
import { randomUUID } from 'node:crypto';
import * as arrow from 'apache-arrow';
import { parquetMetadata, parquetReadObjects } from 'hyparquet';
import { compressors } from 'hyparquet-compressors';
import { Table as WasmTable, WriterPropertiesBuilder, readParquet, writeParquet } from 'parquet-wasm';
import { describe, expect, it } from 'vitest';
import { ParquetMetadataEditError, withoutArrowSchema } from '../../shared/parquet/arrow-schema.js';
import {
  EVENTS_ARROW_SCHEMA,
  arrowToParquet,
  encodeBatch,
  parseBatchColumns,
  eventsToArrow,
} from '../../shared/parquet/index.js';
import { batchBody, sampleEvent } from '../helpers/events.js';

const RECEIVED_AT = 1782933157690;

const buf = (b: Uint8Array): ArrayBuffer => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
const kv = (b: Uint8Array): { key: string; value?: string }[] | undefined => parquetMetadata(buf(b)).key_value_metadata;
const rowsOf = (b: Uint8Array): Promise<Record<string, unknown>[]> =>
  parquetReadObjects({ file: buf(b), compressors, utf8: true });

/** A batch of `n` events as parquet-wasm writes it (with its ARROW:schema), optionally with more key-value entries. */
function rawFile(n: number, more?: Map<string, string>): Uint8Array {
  const parsed = parseBatchColumns(batchBody(n, (i) => sampleEvent(i, randomUUID())));
  if (!parsed.ok) throw new Error(parsed.reason);
  const ipc = arrow.tableToIPC(eventsToArrow(parsed.columns, RECEIVED_AT), 'stream');
  let props = new WriterPropertiesBuilder();
  if (more) props = props.setKeyValueMetadata(more);
  return writeParquet(WasmTable.fromIPCStream(ipc), props.build());
}

describe('withoutArrowSchema', () => {
  it('takes the entry out of a parquet-wasm file: the footer shrinks by it, the values and the rest of the footer read the same', async () => {
    const raw = rawFile(10);
    const entries = kv(raw) ?? [];
    expect(entries.map((e) => e.key)).toEqual(['ARROW:schema']);
    const edited = withoutArrowSchema(raw);
    expect(kv(edited)).toBeUndefined();
    // The entry's key and value plus their two field headers, the list header and the field header.
    const entryBytes = 'ARROW:schema'.length + (entries[0]?.value?.length ?? 0);
    expect(raw.byteLength - edited.byteLength).toBeGreaterThanOrEqual(entryBytes);
    expect(raw.byteLength - edited.byteLength).toBeLessThanOrEqual(entryBytes + 10);
    const [before, after] = [parquetMetadata(buf(raw)), parquetMetadata(buf(edited))];
    expect(after.created_by).toBe(before.created_by);
    expect(after.num_rows).toBe(10n);
    expect(after.schema).toEqual(before.schema);
    expect(after.row_groups).toEqual(before.row_groups);
    expect(await rowsOf(edited)).toEqual(await rowsOf(raw));
  });

  it('keeps every other key-value entry, in its order', () => {
    const raw = rawFile(
      3,
      new Map([
        ['owner', 'team-a'],
        ['note', 'kept'],
      ]),
    );
    expect(kv(raw)?.map((e) => e.key)).toEqual(expect.arrayContaining(['owner', 'note', 'ARROW:schema']));
    const keys = (kv(raw) ?? []).map((e) => e.key).filter((k) => k !== 'ARROW:schema');
    const edited = withoutArrowSchema(raw);
    expect(kv(edited)).toEqual((kv(raw) ?? []).filter((e) => e.key !== 'ARROW:schema'));
    expect(kv(edited)?.map((e) => e.key)).toEqual(keys);
    expect(parquetMetadata(buf(edited)).created_by).toBe(parquetMetadata(buf(raw)).created_by);
  });

  it('returns a file without the entry as it is', () => {
    const once = withoutArrowSchema(rawFile(2));
    expect(withoutArrowSchema(once)).toBe(once);
  });

  it('refuses bytes that are not a Parquet file', () => {
    expect(() => withoutArrowSchema(new Uint8Array(4))).toThrow(ParquetMetadataEditError);
    expect(() => withoutArrowSchema(Buffer.from('not parquet at all, no magic'))).toThrow(/no PAR1/);
    const bad = Buffer.from(rawFile(1));
    bad.writeUInt32LE(bad.length, bad.length - 8);
    expect(() => withoutArrowSchema(bad)).toThrow(/footer longer than the file/);
  });
});

describe('batch files', () => {
  it('carry no ARROW:schema entry, and parquet-wasm reads them back with the events schema', async () => {
    for (const n of [0, 1, 10, 100]) {
      const r = encodeBatch(
        batchBody(n, (i) => sampleEvent(i, randomUUID())),
        RECEIVED_AT,
      );
      if (!r.ok) throw new Error(r.reason);
      expect(kv(r.bytes)).toBeUndefined();
      expect(await rowsOf(r.bytes)).toHaveLength(n);
      // The restamp and erasure paths read files through parquet-wasm and write them again.
      const table = arrow.tableFromIPC(readParquet(r.bytes).intoIPCStream());
      const shape = (fields: arrow.Field[]): string[] => fields.map((f) => `${f.name} ${String(f.type)} ${f.nullable}`);
      expect(shape(table.schema.fields)).toEqual(shape(EVENTS_ARROW_SCHEMA.fields));
      expect(
        (table.schema.fields.find((f) => f.name === 'received_at')?.type as arrow.TimestampMillisecond).timezone,
      ).toBe('UTC');
      const again = arrowToParquet(table);
      expect(kv(again)).toBeUndefined();
      expect(await rowsOf(again)).toEqual(await rowsOf(r.bytes));
    }
  });
});
