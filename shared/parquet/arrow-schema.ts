/**
 * Takes the `ARROW:schema` entry out of a Parquet file's key-value metadata.
 *
 * arrow-rs (inside parquet-wasm) stores the whole Arrow schema, IPC-serialised and base64-encoded,
 * in every file's footer (FileMetaData.key_value_metadata, parquet.thrift field 5), and
 * parquet-wasm has no setting to leave it out. For the events schema that entry is 848 bytes of
 * every file: 29% of a 1-event batch file, 21% of a 10-event one, 6% of a 100-event one. No
 * reader needs it: the Parquet schema says everything it says for this schema (UTF-8 strings, a
 * millisecond timestamp adjusted to UTC, which columns are optional), DuckDB, hyparquet and
 * Iceberg readers read the Parquet schema only, and parquet-wasm (arrow-rs) reads the same Arrow
 * types, nullability and `UTC` zone back without it (test/unit/parquet-arrow-schema.test.ts;
 * docs/decisions/0005-parquet-writer-settings.md).
 *
 * The edit: walk FileMetaData's fields to field 5, copy its KeyValue elements except those keyed
 * `ARROW:schema`; with none left the field goes too, and the next field's header is rewritten to
 * count from the field before it. Column chunks and pages sit before the footer and are
 * addressed by absolute offsets, so nothing else moves; only the footer length changes.
 */
import {
  CompactReader,
  T_BINARY,
  T_LIST,
  T_STRUCT,
  fieldHeader,
  footerBounds,
  listHeader,
  spliceFooter,
} from './thrift-compact.js';

/** Thrown when bytes are not a Parquet file whose footer this module can read. */
export class ParquetMetadataEditError extends Error {
  override readonly name = 'ParquetMetadataEditError';
}

/** FileMetaData.key_value_metadata and KeyValue.key (parquet.thrift). */
const FMD_KEY_VALUE_METADATA = 5;
const KV_KEY = 1;
/** The key arrow-rs and pyarrow store the Arrow schema under. */
const ARROW_SCHEMA_KEY = new TextEncoder().encode('ARROW:schema');

/** Whether `b[at, at + len)` is the `ARROW:schema` key. */
function isArrowSchemaKey(b: Uint8Array, at: number, len: number): boolean {
  if (len !== ARROW_SCHEMA_KEY.length) return false;
  for (let i = 0; i < len; i++) if (b[at + i] !== ARROW_SCHEMA_KEY[i]) return false;
  return true;
}

/**
 * `file` without the `ARROW:schema` key-value entry (see the module comment); `file` itself when
 * it has none. Other entries are kept as they are, in their order.
 *
 * @throws ParquetMetadataEditError when `file` is not a Parquet file or its footer cannot be read.
 */
export function withoutArrowSchema(file: Uint8Array): Uint8Array {
  const fail = (m: string): Error => new ParquetMetadataEditError(m);
  const { start: footerStart, end: footerEnd, length: footerLength } = footerBounds(file, fail);

  const r = new CompactReader(file, footerStart, footerEnd, fail);
  let lastId = 0;
  for (;;) {
    const fieldStart = r.at;
    const h = r.byte();
    if (h === 0) return file;
    const delta = h >> 4;
    const id = delta === 0 ? r.zigzag() : lastId + delta;
    const t = h & 0x0f;
    if (id !== FMD_KEY_VALUE_METADATA || t !== T_LIST) {
      r.skipValue(t, 0);
      lastId = id;
      continue;
    }
    const { size, elementType } = r.listHeader();
    if (elementType !== T_STRUCT)
      throw new ParquetMetadataEditError('FileMetaData.key_value_metadata is not a list of structs');
    // Each element's [start, end) and whether it is the Arrow schema.
    const kept: [number, number][] = [];
    for (let i = 0; i < size; i++) {
      const start = r.at;
      let arrowSchema = false;
      let kvLast = 0;
      for (;;) {
        const fh = r.byte();
        if (fh === 0) break;
        const fd = fh >> 4;
        const fid = fd === 0 ? r.zigzag() : kvLast + fd;
        const ft = fh & 0x0f;
        if (fid === KV_KEY && ft === T_BINARY) {
          const len = r.varint();
          arrowSchema = isArrowSchemaKey(file, r.at, len);
          r.skip(len);
        } else r.skipValue(ft, 1);
        kvLast = fid;
      }
      if (!arrowSchema) kept.push([start, r.at]);
    }
    if (kept.length === size) return file;
    // The bytes from this field's header through the next field's header, rewritten.
    const nextStart = r.at;
    const nh = r.byte();
    const nextId = nh === 0 ? 0 : nh >> 4 === 0 ? r.zigzag() : id + (nh >> 4);
    const replaced: number[] = [];
    if (kept.length > 0) {
      fieldHeader(id, lastId, T_LIST, replaced);
      listHeader(kept.length, T_STRUCT, replaced);
      for (const [s, e] of kept) for (let i = s; i < e; i++) replaced.push(file[i] as number);
      for (let i = nextStart; i < r.at; i++) replaced.push(file[i] as number);
    } else if (nh === 0) replaced.push(0);
    else fieldHeader(nextId, lastId, nh & 0x0f, replaced);
    return spliceFooter(file, fieldStart, r.at, replaced, footerLength);
  }
}
