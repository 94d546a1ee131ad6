/**
 * The encoder's pure pipeline: push body → column text (one validating scan) → Arrow IPC stream →
 * Parquet bytes. `eventsToArrow` builds the same batch as an apache-arrow table (tests, tools);
 * `encodeBatch` writes the IPC stream straight from the column buffers ({@link columnsToIpcStream}).
 *
 * Each stage is a separate export so it can be tested alone; `encodeBatch` chains them. Bad data
 * is returned as `{ ok: false, reason }` (the worker dead-letters it without retrying); only
 * programmer errors and wasm failures throw.
 */
import * as arrow from 'apache-arrow';
// In Node the package's "node" export condition resolves to its CommonJS build, which compiles
// the wasm synchronously at import time — no `await init()` as the browser/ESM build needs.
import {
  Compression,
  EnabledStatistics,
  Table as WasmTable,
  WriterPropertiesBuilder,
  readParquet,
  writeParquet,
  type WriterProperties,
} from 'parquet-wasm';
import {
  EXPECTED_ENVELOPE,
  VALUE_NULL,
  VALUE_STRING,
  scanEnvelope,
  unescapeInto,
  type EnvelopeErrorCode,
  type EventSink,
  type ValueKind,
} from '../envelope.js';
import { FIELD_IDS } from '../iceberg/schema.js';
import { EVENT_COLUMNS, type EventColumnName } from './columns.js';
import { withoutArrowSchema } from './arrow-schema.js';
import { withFieldIds } from './field-ids.js';
import { PARQUET_COMPRESSION_DEFAULT, type ParquetCompression, parquetFileCompression } from './compression.js';

/** Media type of every file the encoder writes (and of pull responses). */
export const PARQUET_MIME_TYPE = 'application/vnd.apache.parquet';

export { EVENT_COLUMNS, type EventColumnName };
export { PARQUET_COMPRESSIONS, PARQUET_COMPRESSION_DEFAULT, type ParquetCompression } from './compression.js';

/**
 * One column as Arrow Utf8 buffers: `offsets` (rows + 1 int32 byte offsets) into `data` (UTF-8),
 * and for `extra` a validity bitmap (bit set = value present, LSB first).
 */
export interface Utf8Column {
  readonly offsets: Int32Array;
  readonly data: Uint8Array;
  readonly validity: Uint8Array | undefined;
  readonly nullCount: number;
}

/**
 * Column-major bytes of a batch: one Utf8 column per fixed column (`""` when the event lacks the
 * field) plus `extra` (JSON text of the event's unknown fields, or null). Every column has
 * `rows` values.
 */
export type EventColumns = { readonly rows: number; readonly extra: Utf8Column } & {
  readonly [K in EventColumnName]: Utf8Column;
};

/** Outcome of {@link parseBatchColumns}; `everyEventHasMessageId` as in {@link scanEnvelope}'s result. */
export type ParseResult =
  | { readonly ok: true; readonly columns: EventColumns; readonly everyEventHasMessageId: boolean }
  | { readonly ok: false; readonly reason: string };

/** Outcome of {@link encodeBatch}. */
export type EncodeResult =
  | { readonly ok: true; readonly bytes: Uint8Array; readonly rows: number }
  | { readonly ok: false; readonly reason: string };

/** Knobs for {@link arrowToParquet}; the defaults are what the events files use. */
export interface ParquetWriteOptions {
  /** Rows per row group. Default: the writer's (1,048,576), i.e. one row group per batch. */
  readonly maxRowGroupSize?: number;
  /** The codec of every column (a collection's `parquetCompression`). Default: {@link PARQUET_COMPRESSION_DEFAULT}. */
  readonly compression?: ParquetCompression;
}

/** parquet-wasm's codec of each setting. */
const WASM_COMPRESSION: Readonly<Record<ParquetCompression, Compression>> = {
  zstd: Compression.ZSTD,
  snappy: Compression.SNAPPY,
  uncompressed: Compression.UNCOMPRESSED,
};

const COLUMN_BYTES: readonly Uint8Array[] = EVENT_COLUMNS.map((name) => new TextEncoder().encode(name));
const INT32_MAX = 0x7fffffff;
const textEncoder = new TextEncoder();

/** The fixed column whose name is the `len` bytes of `bytes` from `at`, if any. */
function columnOfName(bytes: Uint8Array, at: number, len: number): number | undefined {
  for (let col = 0; col < COLUMN_BYTES.length; col++) {
    const name = COLUMN_BYTES[col];
    if (name.length !== len) continue;
    let i = 0;
    while (i < len && name[i] === bytes[at + i]) i++;
    if (i === len) return col;
  }
  return undefined;
}

/** Longest column name: an escaped key that decodes to more bytes names no column. */
const MAX_COLUMN_NAME = Math.max(...COLUMN_BYTES.map((name) => name.length));
/** Longest spelling of a column name: each escape (`\uXXXX\uXXXX` at most) decodes to at least one byte per 12. */
const MAX_ESCAPED_NAME = 12 * MAX_COLUMN_NAME;
/** Scratch for an escaped key's decoded bytes (encoding is synchronous: one user at a time). */
const KEY_SCRATCH = new Uint8Array(MAX_ESCAPED_NAME);

/**
 * The fixed column of the key `body[start, end)` (quotes included), if any. An escaped key
 * (`"message\u005fid"`) is the same key as its plain spelling, as in the scanner's duplicate
 * check: decoded into a scratch buffer (no string, no allocation), and only when it is short
 * enough to spell a column name. Cost: linear in the key, however many keys an event has.
 */
function columnOfKey(body: Uint8Array, start: number, end: number, escaped: boolean): number | undefined {
  if (!escaped) return columnOfName(body, start + 1, end - start - 2);
  if (end - start - 2 > MAX_ESCAPED_NAME) return undefined;
  return columnOfName(KEY_SCRATCH, 0, unescapeInto(body, start + 1, end - 1, KEY_SCRATCH, 0));
}

const BUILDER_OFFSETS = 1024;
const BUILDER_DATA_BYTES = 64 * 1024;

/** A growing Arrow Utf8 column: values are appended as bytes, one row after another. */
class Utf8Builder {
  offsets = new Int32Array(BUILDER_OFFSETS);
  data = new Uint8Array(BUILDER_DATA_BYTES);
  end = 0;

  /** Empties the builder, keeping its (grown) buffers for the next batch. */
  reset(): void {
    this.end = 0;
  }

  /** Bytes its buffers hold now. */
  get capacity(): number {
    return this.offsets.byteLength + this.data.byteLength;
  }

  /** Empties the builder and lets go of grown buffers (back to the starting sizes). */
  release(): void {
    this.end = 0;
    if (this.offsets.length > BUILDER_OFFSETS) this.offsets = new Int32Array(BUILDER_OFFSETS);
    if (this.data.length > BUILDER_DATA_BYTES) this.data = new Uint8Array(BUILDER_DATA_BYTES);
  }

  /** Marks where `row`'s value starts (at the current end). */
  startRow(row: number): void {
    if (row + 1 >= this.offsets.length) {
      const next = new Int32Array(this.offsets.length * 2);
      next.set(this.offsets);
      this.offsets = next;
    }
    this.offsets[row] = this.end;
  }

  reserve(bytes: number): void {
    const need = this.end + bytes;
    if (need <= this.data.length) return;
    if (need > INT32_MAX) throw new RangeError('column exceeds 2 GiB of UTF-8');
    const next = new Uint8Array(Math.max(need, this.data.length * 2));
    next.set(this.data.subarray(0, this.end));
    this.data = next;
  }

  byte(b: number): void {
    this.reserve(1);
    this.data[this.end++] = b;
  }

  /** Appends `src[start, end)` as it is. */
  copy(src: Uint8Array, start: number, end: number): void {
    const len = end - start;
    this.reserve(len);
    const data = this.data;
    let o = this.end;
    // A loop beats subarray + set (an allocation and a native call) for the short values most
    // members are.
    if (len < 64) for (let i = start; i < end; i++) data[o++] = src[i];
    else data.set(src.subarray(start, end), o);
    this.end += len;
  }

  /** Appends the valid JSON value `src[start, end)` without whitespace outside its strings. */
  copyMinified(src: Uint8Array, start: number, end: number): void {
    this.reserve(end - start);
    const data = this.data;
    let o = this.end;
    let inString = false;
    for (let i = start; i < end; i++) {
      const c = src[i];
      if (inString) {
        data[o++] = c;
        // Valid JSON: a backslash always escapes the next byte, so copy it along.
        if (c === 92) data[o++] = src[++i];
        else if (c === 34) inString = false;
      } else if (c !== 32 && c !== 10 && c !== 13 && c !== 9) {
        data[o++] = c;
        if (c === 34) inString = true;
      }
    }
    this.end = o;
  }

  /** Appends a JS string as UTF-8 (a lone surrogate becomes U+FFFD, as in every UTF-8 writer). */
  text(value: string): void {
    // A UTF-16 code unit never needs more than 3 UTF-8 bytes.
    this.reserve(value.length * 3);
    this.end += textEncoder.encodeInto(value, this.data.subarray(this.end)).written;
  }

  /**
   * The column at its exact size: copied out, or (`borrow`) a view of the builder's buffers that
   * is only valid until the next batch is scanned.
   */
  finish(rows: number, borrow: boolean, validity?: Uint8Array, nullCount = 0): Utf8Column {
    this.startRow(rows);
    const offsets = borrow ? this.offsets.subarray(0, rows + 1) : this.offsets.slice(0, rows + 1);
    const data = borrow ? this.data.subarray(0, this.end) : this.data.slice(0, this.end);
    return { offsets, data, validity, nullCount };
  }
}

/**
 * Staging buffers reused by every batch (encoding is synchronous, one batch at a time per
 * thread): reuse avoids allocating and zeroing ten worst-case buffers per batch, and each column
 * is copied out at its exact size. They grow to the largest batch seen (at most maxBodyBytes
 * plus a few bytes per event in all).
 */
const FIXED_BUILDERS = EVENT_COLUMNS.map(() => new Utf8Builder());
const EXTRA_BUILDER = new Utf8Builder();

/**
 * Capacity the staging buffers keep between batches, in all: what the ordinary batches up to
 * API_ENCODE_MAX_BYTES (1 MiB) grow them to. A batch that grew them past it (a large body, or many
 * events: each is 40 bytes of offsets) gives the extra back once its columns are copied out, so
 * an idle process returns near its baseline instead of holding its largest batch's columns.
 */
export const RETAINED_BUILDER_BYTES = 4 * 1024 * 1024;

/** Lets go of the staging buffers' growth once they hold more than RETAINED_BUILDER_BYTES; their contents must be copied out first. */
function releaseLargeBuilders(): void {
  let held = EXTRA_BUILDER.capacity;
  for (const b of FIXED_BUILDERS) held += b.capacity;
  if (held <= RETAINED_BUILDER_BYTES) return;
  for (const b of FIXED_BUILDERS) b.release();
  EXTRA_BUILDER.release();
}

/** Bytes the staging buffers hold now (tests, metrics). */
export function builderBytes(): number {
  return FIXED_BUILDERS.reduce((n, b) => n + b.capacity, EXTRA_BUILDER.capacity);
}

/**
 * Builds the column bytes from the scanner's members, copying each value's bytes as sent.
 * Fixed columns: a JSON string is stored decoded, `null` as `""`, any other value as its JSON
 * text exactly as sent (numbers keep their digits: `1e400`, `-0`, 30-digit integers; strings
 * inside keep their escapes), whitespace outside strings removed. Every other top-level key,
 * including a client-sent `received_at` or `extra` (the server owns those names), goes into
 * `extra` as `{"key":value,...}`, keys and values as sent and in the order sent. No JS object is
 * ever built from event data, so a `__proto__` key is an ordinary key and reaches no prototype.
 */
class ColumnSink implements EventSink {
  readonly fixed: Utf8Builder[];
  readonly extra: Utf8Builder;
  private validity = new Uint8Array(8);
  private nullCount = 0;
  private extraOpen = false;
  private row = -1;

  constructor(
    private readonly body: Uint8Array,
    private readonly maxRows = Number.POSITIVE_INFINITY,
  ) {
    this.fixed = FIXED_BUILDERS;
    this.extra = EXTRA_BUILDER;
    for (const column of this.fixed) column.reset();
    this.extra.reset();
  }

  beginEvent(index: number): void {
    if (index >= this.maxRows) throw ROW_CAP_REACHED;
    this.row = index;
    for (const column of this.fixed) column.startRow(index);
    this.extra.startRow(index);
    this.extraOpen = false;
  }

  member(
    keyStart: number,
    keyEnd: number,
    keyEscaped: boolean,
    valueStart: number,
    valueEnd: number,
    kind: ValueKind,
    escaped: boolean,
    spaced: boolean,
  ): void {
    const body = this.body;
    const col = columnOfKey(body, keyStart, keyEnd, keyEscaped);
    if (col !== undefined) {
      const out = this.fixed[col];
      if (kind === VALUE_STRING) {
        if (escaped) out.text(decodeJson(body, valueStart, valueEnd) as string);
        else out.copy(body, valueStart + 1, valueEnd - 1);
      } else if (kind !== VALUE_NULL) {
        if (spaced) out.copyMinified(body, valueStart, valueEnd);
        else out.copy(body, valueStart, valueEnd);
      }
      return;
    }
    const out = this.extra;
    out.byte(this.extraOpen ? 44 /* , */ : 123 /* { */);
    this.extraOpen = true;
    out.copy(body, keyStart, keyEnd);
    out.byte(58 /* : */);
    if (spaced) out.copyMinified(body, valueStart, valueEnd);
    else out.copy(body, valueStart, valueEnd);
  }

  endEvent(): void {
    const row = this.row;
    if (row >> 3 >= this.validity.length) {
      const next = new Uint8Array(this.validity.length * 2);
      next.set(this.validity);
      this.validity = next;
    }
    if (this.extraOpen) {
      this.extra.byte(125 /* } */);
      this.validity[row >> 3] |= 1 << (row & 7);
    } else {
      this.nullCount++;
    }
  }

  finish(rows: number, borrow: boolean): EventColumns {
    const columns: Record<string, unknown> = {
      rows,
      extra: this.extra.finish(rows, borrow, this.validity.subarray(0, (rows + 7) >> 3), this.nullCount),
    };
    EVENT_COLUMNS.forEach((name, i) => {
      columns[name] = this.fixed[i].finish(rows, borrow);
    });
    return columns as EventColumns;
  }
}

/** The JS value of the JSON text `body[start, end)` (only for an escaped string in a fixed column). */
function decodeJson(body: Uint8Array, start: number, end: number): unknown {
  return JSON.parse(Buffer.from(body.buffer, body.byteOffset + start, end - start).toString('utf8'));
}

/**
 * Validates a push body with the API's own validator ({@link scanEnvelope}) and turns its events
 * into column bytes in the same pass.
 *
 * The API validated the body before enqueueing, but the job payload crosses a process boundary
 * (and may be replayed from the dead-letter set), so the encoder checks again: malformed input
 * is reported as `{ ok: false, reason }` (in the words the API would answer), never thrown.
 *
 * @param body - The request body as received (UTF-8 bytes or text; decompression is the caller's job).
 */
export function parseBatchColumns(body: string | Uint8Array): ParseResult {
  const r = scanColumns(body, false);
  releaseLargeBuilders();
  return r.ok ? r : { ok: false, reason: r.reason };
}

/** A refused body: the scan's message and its {@link EnvelopeErrorCode}. */
type ScanRefusal = { readonly ok: false; readonly reason: string; readonly code: EnvelopeErrorCode };

/** Thrown by a {@link ColumnSink} given more events than its cap; caught by {@link prepareBatchData}. */
const ROW_CAP_REACHED = Symbol('row cap reached');

/** {@link parseBatchColumns}; with `borrow`, the columns are views valid until the next scan. */
function scanColumns(
  body: string | Uint8Array,
  borrow: boolean,
  maxRows?: number,
): Exclude<ParseResult, { ok: false }> | ScanRefusal {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const sink = new ColumnSink(bytes, maxRows);
  const scan = scanEnvelope(bytes, sink);
  if (!scan.ok) return { ok: false, reason: scan.error, code: scan.code };
  return { ok: true, columns: sink.finish(scan.events, borrow), everyEventHasMessageId: scan.everyEventHasMessageId };
}

/** A column's values as JS strings (null for a missing `extra`): for tests and debugging. */
export function columnValues(column: Utf8Column): (string | null)[] {
  const decoder = new TextDecoder();
  const out: (string | null)[] = [];
  for (let row = 0; row + 1 < column.offsets.length; row++) {
    const present = column.validity === undefined || (column.validity[row >> 3] & (1 << (row & 7))) !== 0;
    out.push(present ? decoder.decode(column.data.subarray(column.offsets[row], column.offsets[row + 1])) : null);
  }
  return out;
}

const UTF8 = new arrow.Utf8();
const RECEIVED_AT_TYPE = new arrow.TimestampMillisecond('UTC');

/**
 * Arrow schema of an events file, in file order. The fixed columns are non-null because missing
 * values are stored as `""`; `received_at` is UTC-adjusted so DuckDB reads TIMESTAMPTZ and
 * `received_at >= now() - INTERVAL ...` compares instants, not wall-clock text.
 */
export const EVENTS_ARROW_SCHEMA = new arrow.Schema([
  ...EVENT_COLUMNS.map((name) => new arrow.Field(name, UTF8, false)),
  new arrow.Field('received_at', RECEIVED_AT_TYPE, false),
  new arrow.Field('extra', UTF8, true),
]);

/**
 * Wraps column bytes into an Arrow table with {@link EVENTS_ARROW_SCHEMA}: the buffers are used as
 * they are (no per-value builders, no copy), so cost stays linear in bytes.
 *
 * @param columns - Output of {@link parseBatchColumns}.
 * @param receivedAtMs - Epoch milliseconds of the batch id; every row gets this `received_at`.
 */
export function eventsToArrow(columns: EventColumns, receivedAtMs: number): arrow.Table {
  if (!Number.isSafeInteger(receivedAtMs)) {
    throw new RangeError(`receivedAtMs must be an integer epoch-ms, got ${receivedAtMs}`);
  }
  const rows = columns.rows;
  const children: arrow.Data[] = [];
  for (const name of EVENT_COLUMNS) {
    const col = columns[name];
    if (col.offsets.length !== rows + 1) {
      throw new RangeError(`column ${name} has ${col.offsets.length - 1} rows, the batch has ${rows}`);
    }
    children.push(
      arrow.makeData({ type: UTF8, length: rows, nullCount: 0, valueOffsets: col.offsets, data: col.data }),
    );
  }
  children.push(
    arrow.makeData({
      type: RECEIVED_AT_TYPE,
      length: rows,
      nullCount: 0,
      data: new BigInt64Array(rows).fill(BigInt(receivedAtMs)),
    }),
  );
  const extra = columns.extra;
  if (extra.offsets.length !== rows + 1)
    throw new RangeError(`column extra has ${extra.offsets.length - 1} rows, the batch has ${rows}`);
  children.push(
    arrow.makeData({
      type: UTF8,
      length: rows,
      nullCount: extra.nullCount,
      valueOffsets: extra.offsets,
      data: extra.data,
      nullBitmap: extra.validity,
    }),
  );
  const struct = arrow.makeData({
    type: new arrow.Struct(EVENTS_ARROW_SCHEMA.fields),
    length: rows,
    nullCount: 0,
    children,
  });
  return new arrow.Table(EVENTS_ARROW_SCHEMA, [new arrow.RecordBatch(EVENTS_ARROW_SCHEMA, struct)]);
}

/**
 * Columns written with a dictionary: the ones with few distinct values inside one batch (event
 * names, the one device that sent the batch, the day). Every other column is (nearly) unique per
 * row — per-event UUIDs, millisecond timestamps, free-form properties and context — and there a
 * dictionary only adds a page of every value plus an index per row. Measured (bench/, 100-event
 * batches of ~600-byte events): dictionaries everywhere except message_id/ts/properties gave
 * 107 B/event; dictionaries only here, 103 B/event and a faster write
 * (docs/decisions/0005-parquet-writer-settings.md).
 */
const DICTIONARY_COLUMNS: ReadonlySet<string> = new Set<EventColumnName>(['event_type', 'event', 'distinct_id', 'dt']);

/**
 * Columns that carry chunk statistics (min/max, null count): the ones a query filters or prunes
 * on (`received_at` windows, a day, an event name) and `extra`, whose null count says whether any
 * client sent unknown fields. Statistics of JSON text or UUIDs help no reader and, truncated to
 * 64 bytes each for min and max, cost ~1 KB of footer per file: 7% of a 100-event file.
 */
const STATISTICS_COLUMNS: readonly string[] = ['event_type', 'event', 'ts', 'dt', 'received_at', 'extra'];

/**
 * The one place the Parquet writer settings live. parquet-wasm's `WriterProperties` cannot be
 * cached: every builder setter and `build()` consume their receiver, and `writeParquet` consumes
 * the properties it is given, so a fresh (cheap, a few wasm calls) object is built per file.
 */
function buildWriterProperties(opts: ParquetWriteOptions): WriterProperties {
  let builder = new WriterPropertiesBuilder()
    .setCompression(WASM_COMPRESSION[opts.compression ?? PARQUET_COMPRESSION_DEFAULT])
    .setDictionaryEnabled(false)
    // Chunk (row-group) min/max is what DuckDB uses to skip row groups; page-level statistics
    // add a column/offset index to every small file for no reader we have (and wrote slower).
    .setStatisticsEnabled(EnabledStatistics.None);
  for (const column of DICTIONARY_COLUMNS) builder = builder.setColumnDictionaryEnabled(column, true);
  for (const column of STATISTICS_COLUMNS)
    builder = builder.setColumnStatisticsEnabled(column, EnabledStatistics.Chunk);
  if (opts.maxRowGroupSize !== undefined) builder = builder.setMaxRowGroupSize(opts.maxRowGroupSize);
  return builder.build();
}

/**
 * Serialises an Arrow table to Parquet bytes with parquet-wasm: `opts.compression` (default
 * {@link PARQUET_COMPRESSION_DEFAULT}), dictionary encoding on the
 * low-cardinality columns, chunk statistics on the columns queries filter on, and each column's
 * Iceberg field id (shared/iceberg/schema.ts) in the Parquet schema (./field-ids.ts). Wasm-side objects
 * are consumed or freed before returning, so repeated calls do not grow wasm memory beyond what
 * the largest batch needed.
 *
 * @returns A fresh JS-owned Uint8Array (parquet-wasm copies the output out of wasm memory).
 */
export function arrowToParquet(table: arrow.Table, opts: ParquetWriteOptions = {}): Uint8Array {
  return ipcToParquet(arrow.tableToIPC(table, 'stream'), opts);
}

/** {@link arrowToParquet} from the table's Arrow IPC stream (as {@link PreparedBatch.stamp} gives it). */
export function ipcToParquet(ipc: Uint8Array, opts: ParquetWriteOptions = {}): Uint8Array {
  const props = buildWriterProperties(opts);
  let wasmTable: WasmTable;
  try {
    wasmTable = WasmTable.fromIPCStream(ipc);
  } catch (err) {
    props.free();
    throw err;
  }
  // Consumes both wasmTable and props (ownership moves into Rust, which drops them even when it
  // returns an error), so neither may be freed again here.
  return withoutArrowSchema(withFieldIds(writeParquet(wasmTable, props), FIELD_IDS));
}

/**
 * Runs the whole pipeline for one job: scan → columns → Arrow → Parquet.
 *
 * @param body - The push body as received.
 * @param receivedAtMs - The batch id's instant (epoch ms), stamped on every row.
 * @param opts - Writer settings; `compression` is the collection's codec.
 * @returns Parquet bytes and row count, or the reason the data is unusable. An empty `events`
 *   array yields a valid zero-row file.
 */
export function encodeBatch(
  body: string | Uint8Array,
  receivedAtMs: number,
  opts: ParquetWriteOptions = {},
): EncodeResult {
  const ipc = encodeBatchToIpc(body, receivedAtMs);
  if (!ipc.ok) return ipc;
  return { ok: true, bytes: ipcToParquet(ipc.ipc, opts), rows: ipc.rows };
}

/**
 * {@link encodeBatch} up to its Arrow IPC stream (validated, every row stamped `receivedAtMs`):
 * for a caller that turns it into Parquet elsewhere (an encoder's large batches go to a worker
 * thread: services/encoder/pipeline.ts). The stream owns its whole ArrayBuffer (transferable).
 */
export function encodeBatchToIpc(
  body: string | Uint8Array,
  receivedAtMs: number,
): { ok: true; ipc: Uint8Array; rows: number } | { ok: false; reason: string } {
  // Borrowed columns: they are copied into the IPC stream before anything else can scan into
  // the builders.
  const parsed = scanColumns(body, true);
  if (!parsed.ok) {
    releaseLargeBuilders();
    return { ok: false, reason: parsed.reason };
  }
  const ipc = columnsToIpcStream(parsed.columns, receivedAtMs);
  releaseLargeBuilders();
  return { ok: true, ipc, rows: parsed.columns.rows };
}

/**
 * A push body scanned once, held as its Arrow IPC stream until its batch id (and so its
 * `received_at`) is known. The API prepares a body this way in place of its plain check when it
 * encodes the file itself (API_ENCODE_MAX_BYTES): the scan validates exactly as the check does,
 * and its columns are not scanned again.
 */
export interface PreparedBatch {
  readonly rows: number;
  /** Arrow IPC bytes held (about the body's size less its keys and quoting). */
  readonly ipcBytes: number;
  /** The Arrow IPC stream with every row's `received_at` set to `receivedAtMs` (the held bytes, stamped in place). */
  stamp(receivedAtMs: number): Uint8Array;
  /** The Parquet file, every row's `received_at` set to `receivedAtMs`: the same bytes {@link encodeBatch} gives for the body. */
  toParquet(receivedAtMs: number, opts?: ParquetWriteOptions): Uint8Array;
}

/** Outcome of {@link prepareBatch}; `everyEventHasMessageId` and `code` as in {@link scanEnvelope}'s result. */
export type PrepareResult =
  | { ok: true; batch: PreparedBatch; everyEventHasMessageId: boolean }
  | { ok: false; reason: string; code: EnvelopeErrorCode };

/**
 * {@link prepareBatch}'s result as plain data (structured-cloneable; `ipc` owns its whole
 * ArrayBuffer, so it can move between threads): the scan thread prepares large bodies off the
 * API's event loop and sends this back (shared/envelope-thread.ts). {@link preparedBatchOf} turns it
 * into the {@link PreparedBatch}.
 */
export type PreparedData =
  | { ok: true; rows: number; everyEventHasMessageId: boolean; ipc: Uint8Array; stampAt: number }
  | { ok: false; reason: string; code: EnvelopeErrorCode };

/**
 * {@link prepareBatch} up to its plain data. With `maxRows`, a body of more events is not
 * prepared: its columns stop at that many rows and the result is `null`, and the caller answers
 * it from the plain check (which counts every event and finds any error after them). A body of
 * many tiny events would otherwise build columns many times its own size (48 bytes per row: a
 * 1 MiB body of `{}` events, 17 MB) before its count could refuse it.
 */
export function prepareBatchData(body: Uint8Array, maxRows?: number): PreparedData | null {
  if (body.length === 0) return { ok: false, reason: `empty body: expected ${EXPECTED_ENVELOPE}`, code: 'empty' };
  let parsed: ReturnType<typeof scanColumns>;
  try {
    parsed = scanColumns(body, true, maxRows);
  } catch (err) {
    releaseLargeBuilders();
    if (err === ROW_CAP_REACHED) return null;
    throw err;
  }
  if (!parsed.ok) {
    releaseLargeBuilders();
    return parsed;
  }
  const { bytes, stampAt } = writeIpcStream(parsed.columns, 0);
  releaseLargeBuilders();
  return {
    ok: true,
    rows: parsed.columns.rows,
    everyEventHasMessageId: parsed.everyEventHasMessageId,
    ipc: bytes,
    stampAt,
  };
}

/** The {@link PrepareResult} of prepared data (from this thread or the scan thread). */
export function preparedBatchOf(data: PreparedData): PrepareResult {
  if (!data.ok) return data;
  const { rows, ipc: bytes, stampAt } = data;
  if (!Number.isSafeInteger(stampAt) || stampAt < 0 || stampAt + rows * 8 > bytes.byteLength)
    throw new RangeError(`prepared stream of ${bytes.byteLength} bytes cannot hold ${rows} stamps at ${stampAt}`);
  return {
    ok: true,
    everyEventHasMessageId: data.everyEventHasMessageId,
    batch: {
      rows,
      ipcBytes: bytes.byteLength,
      stamp(receivedAtMs) {
        if (!Number.isSafeInteger(receivedAtMs))
          throw new RangeError(`receivedAtMs must be an integer epoch-ms, got ${receivedAtMs}`);
        stampRows(new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), stampAt, rows, receivedAtMs);
        return bytes;
      },
      toParquet(receivedAtMs, opts = {}) {
        return ipcToParquet(this.stamp(receivedAtMs), opts);
      },
    },
  };
}

/**
 * Validates a push body ({@link scanEnvelope}, the API's own check) and copies its columns into an
 * Arrow IPC stream in the same pass: the result owns its bytes, so other scans may run before it
 * is turned into Parquet.
 */
export function prepareBatch(body: Uint8Array): PrepareResult {
  return preparedBatchOf(prepareBatchData(body) as PreparedData);
}

/**
 * An events file with every row's `received_at` set to `receivedAtMs`, the rest as it was: for a
 * batch whose file the API encoded (a `parquet` job payload) and that an operator queues again
 * under a new id (`replay --reissue`), whose instant every row must carry. Rare, so it goes the
 * long way: parquet-wasm reads the file, apache-arrow swaps the column, the file is written again
 * with the same writer settings and the codec it was written with ({@link sameCompression}).
 */
export function restampParquet(file: Uint8Array, receivedAtMs: number): Uint8Array {
  if (!Number.isSafeInteger(receivedAtMs))
    throw new RangeError(`receivedAtMs must be an integer epoch-ms, got ${receivedAtMs}`);
  const table = arrow.tableFromIPC(readParquet(file).intoIPCStream());
  const stamps = arrow.makeVector(
    arrow.makeData({
      type: RECEIVED_AT_TYPE,
      length: table.numRows,
      nullCount: 0,
      data: new BigInt64Array(table.numRows).fill(BigInt(receivedAtMs)),
    }),
  );
  return arrowToParquet(table.setChild('received_at', stamps), sameCompression(file));
}

/**
 * Writer settings that keep a rewritten file's codec (a reissue's restamp, an erasure's rewrite):
 * the file was written under its collection's `parquetCompression` at the time, and a rewrite
 * changes rows, not how the file is read. A zero-row file (no column chunk names a codec) gets
 * the default.
 */
export function sameCompression(file: Uint8Array): ParquetWriteOptions {
  const compression = parquetFileCompression(file);
  return compression === undefined ? {} : { compression };
}

/*
 * The Arrow IPC stream of one events batch, written straight from the column buffers.
 *
 * parquet-wasm takes its input as an Arrow IPC stream. Building it through apache-arrow
 * (`makeData` → `Table` → `tableToIPC`) allocates a few hundred objects per batch and serialises
 * the unchanging schema every time; for the 1–20-event batches browser SDKs send that was about
 * as much CPU as scanning the events. Here the schema message is serialised once (by apache-arrow)
 * and each batch is one RecordBatch message whose flatbuffer header has a fixed layout (the
 * events schema never changes; only lengths and offsets do), followed by the column buffers
 * (docs/decisions/0004-arrow-ipc-writer.md).
 *
 * Format (Arrow columnar format, "Encapsulated message format"): `0xFFFFFFFF`, int32 metadata
 * length (8-byte padded), the `Message` flatbuffer, then the body: every buffer padded to 8 bytes.
 * The stream ends with `0xFFFFFFFF 0x00000000`.
 */

const CONTINUATION = 0xffffffff;
/** MetadataVersion.V5 and MessageHeader.RecordBatch (Message.fbs). */
const METADATA_V5 = 4;
const HEADER_RECORD_BATCH = 3;

/** Fields of the events schema (9 fixed strings, received_at, extra) and their buffers (validity + values). */
const FIELD_COUNT = EVENT_COLUMNS.length + 2;
const BUFFER_COUNT = EVENT_COLUMNS.length * 3 + 2 + 3;

/*
 * The Message flatbuffer, positions from its start (flatbuffers: a table begins with the signed
 * offset back to its vtable; offsets to vectors and sub-tables point forward; 8-byte scalars and
 * struct vectors of 8-byte fields sit 8-byte aligned):
 *   0  root offset → Message table (16)
 *   4  Message vtable: size 12, table size 20, version @16, header_type @18, header @4, bodyLength @8
 *  16  Message table: vtable back-offset, header → RecordBatch (48), bodyLength, version, header_type
 *  36  RecordBatch vtable: size 10, table size 20, length @8, nodes @4, buffers @16
 *  48  RecordBatch table: vtable back-offset, nodes → 68, length, buffers → 252
 *  68  nodes: count, then FieldNode {length, null_count} × 11 (from 72)
 * 252  buffers: count, then Buffer {offset, length} × 32 (from 256)
 */
const MSG_VTABLE = 4;
const MSG_TABLE = 16;
const RB_VTABLE = 36;
const RB_TABLE = 48;
const NODES = 68;
const BUFFERS = 252;
const META_BYTES = BUFFERS + 4 + BUFFER_COUNT * 16;
const META_PADDED = (META_BYTES + 7) & ~7;

/** The flatbuffer bytes that never change; each batch fills in lengths, counts and offsets. */
const META_TEMPLATE = (() => {
  const b = new Uint8Array(META_PADDED);
  const v = new DataView(b.buffer);
  v.setUint32(0, MSG_TABLE, true);
  for (const [i, x] of [12, 20, 16, 18, 4, 8].entries()) v.setUint16(MSG_VTABLE + 2 * i, x, true);
  v.setInt32(MSG_TABLE, MSG_TABLE - MSG_VTABLE, true);
  v.setUint32(MSG_TABLE + 4, RB_TABLE - (MSG_TABLE + 4), true);
  v.setInt16(MSG_TABLE + 16, METADATA_V5, true);
  v.setUint8(MSG_TABLE + 18, HEADER_RECORD_BATCH);
  for (const [i, x] of [10, 20, 8, 4, 16].entries()) v.setUint16(RB_VTABLE + 2 * i, x, true);
  v.setInt32(RB_TABLE, RB_TABLE - RB_VTABLE, true);
  v.setUint32(RB_TABLE + 4, NODES - (RB_TABLE + 4), true);
  v.setUint32(RB_TABLE + 16, BUFFERS - (RB_TABLE + 16), true);
  v.setUint32(NODES, FIELD_COUNT, true);
  v.setUint32(BUFFERS, BUFFER_COUNT, true);
  return b;
})();

/** The schema message as apache-arrow writes it (the stream of an empty table minus its end marker). */
const SCHEMA_MESSAGE = (() => {
  const empty = arrow.tableToIPC(new arrow.Table(EVENTS_ARROW_SCHEMA), 'stream');
  const tail = new DataView(empty.buffer, empty.byteOffset + empty.byteLength - 8, 8);
  if (tail.getUint32(0, true) !== CONTINUATION || tail.getUint32(4, true) !== 0)
    throw new Error('apache-arrow stream does not end with the end-of-stream marker');
  return empty.slice(0, empty.byteLength - 8);
})();

const pad8 = (n: number): number => (n + 7) & ~7;

/**
 * The events batch as an Arrow IPC stream (schema, one record batch, end marker), equal in content
 * to `tableToIPC(eventsToArrow(columns, receivedAtMs), 'stream')`.
 *
 * @param columns - Output of the scan (views into the staging buffers are fine: every byte is copied).
 * @param receivedAtMs - Epoch milliseconds stamped on every row's `received_at`.
 */
export function columnsToIpcStream(columns: EventColumns, receivedAtMs: number): Uint8Array {
  return writeIpcStream(columns, receivedAtMs).bytes;
}

/** {@link columnsToIpcStream}, plus where the `received_at` values start (8 bytes per row). */
function writeIpcStream(columns: EventColumns, receivedAtMs: number): { bytes: Uint8Array; stampAt: number } {
  if (!Number.isSafeInteger(receivedAtMs))
    throw new RangeError(`receivedAtMs must be an integer epoch-ms, got ${receivedAtMs}`);
  const rows = columns.rows;
  const utf8: Utf8Column[] = EVENT_COLUMNS.map((name) => columns[name]);
  utf8.push(columns.extra);
  for (const [i, col] of utf8.entries()) {
    if (col.offsets.length !== rows + 1)
      throw new RangeError(
        `column ${i < EVENT_COLUMNS.length ? EVENT_COLUMNS[i] : 'extra'} has ${col.offsets.length - 1} rows, the batch has ${rows}`,
      );
  }
  const extra = columns.extra;
  const extraValidity = extra.nullCount > 0 && extra.validity ? extra.validity.subarray(0, (rows + 7) >> 3) : undefined;

  // Buffer lengths in body order: per string column validity, offsets, data; received_at validity, values.
  const lengths: number[] = [];
  for (const col of utf8.slice(0, EVENT_COLUMNS.length)) lengths.push(0, (rows + 1) * 4, col.offsets[rows]);
  lengths.push(0, rows * 8);
  lengths.push(extraValidity?.byteLength ?? 0, (rows + 1) * 4, extra.offsets[rows]);
  let bodyLength = 0;
  for (const n of lengths) bodyLength += pad8(n);

  const batchStart = SCHEMA_MESSAGE.byteLength;
  const metaStart = batchStart + 8;
  const bodyStart = metaStart + META_PADDED;
  const out = new Uint8Array(bodyStart + bodyLength + 8);
  const view = new DataView(out.buffer);
  out.set(SCHEMA_MESSAGE, 0);
  view.setUint32(batchStart, CONTINUATION, true);
  view.setInt32(batchStart + 4, META_PADDED, true);
  out.set(META_TEMPLATE, metaStart);
  view.setBigInt64(metaStart + MSG_TABLE + 8, BigInt(bodyLength), true);
  view.setBigInt64(metaStart + RB_TABLE + 8, BigInt(rows), true);
  for (let f = 0; f < FIELD_COUNT; f++) {
    const at = metaStart + NODES + 4 + f * 16;
    view.setBigInt64(at, BigInt(rows), true);
    view.setBigInt64(at + 8, BigInt(f === FIELD_COUNT - 1 ? extra.nullCount : 0), true);
  }
  let offset = 0;
  for (const [i, n] of lengths.entries()) {
    const at = metaStart + BUFFERS + 4 + i * 16;
    view.setBigInt64(at, BigInt(offset), true);
    view.setBigInt64(at + 8, BigInt(n), true);
    offset += pad8(n);
  }

  // The body (padding bytes stay zero).
  let at = bodyStart;
  const putBytes = (bytes: Uint8Array): void => {
    out.set(bytes, at);
    at += pad8(bytes.byteLength);
  };
  const putOffsets = (offsets: Int32Array): void =>
    putBytes(new Uint8Array(offsets.buffer, offsets.byteOffset, (rows + 1) * 4));
  for (const col of utf8.slice(0, EVENT_COLUMNS.length)) {
    putOffsets(col.offsets);
    putBytes(col.data.subarray(0, col.offsets[rows]));
  }
  const stampAt = at;
  stampRows(view, stampAt, rows, receivedAtMs);
  at += rows * 8;
  if (extraValidity) putBytes(extraValidity);
  putOffsets(extra.offsets);
  putBytes(extra.data.subarray(0, extra.offsets[rows]));

  view.setUint32(out.byteLength - 8, CONTINUATION, true);
  return { bytes: out, stampAt };
}

/** Writes `receivedAtMs` as every row's `received_at` (int64 little-endian from `at`). */
function stampRows(view: DataView, at: number, rows: number, receivedAtMs: number): void {
  const stamp = BigInt(receivedAtMs);
  for (let r = 0; r < rows; r++) view.setBigInt64(at + r * 8, stamp, true);
}
