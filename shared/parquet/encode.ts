/**
 * The encoder's pure pipeline: push body → events → column values → Arrow table → Parquet bytes.
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
  writeParquet,
  type WriterProperties,
} from 'parquet-wasm';

/** The string columns of every events file, in file order (`received_at` and `extra` follow). */
/** Media type of every file the encoder writes (and of pull responses). */
export const PARQUET_MIME_TYPE = 'application/vnd.apache.parquet';

export const EVENT_COLUMNS = [
  'event_type',
  'event',
  'distinct_id',
  'anonymous_id',
  'ts',
  'message_id',
  'properties',
  'context',
  'dt',
] as const;

/** One of the nine fixed string columns. */
export type EventColumnName = (typeof EVENT_COLUMNS)[number];

/** A top-level event field as `JSON.parse` produces it. */
export type EventRecord = Record<string, unknown>;

/** Outcome of {@link parseBatchEvents}. */
export type ParseResult =
  | { readonly ok: true; readonly events: EventRecord[] }
  | { readonly ok: false; readonly reason: string };

/**
 * Column-major text of a batch: one array per fixed column (every entry a string, `""` when the
 * event lacks the field) plus `extra` (JSON text of the event's unknown fields, or null).
 * All arrays have the batch's row count.
 */
export type EventColumns = { readonly [K in EventColumnName]: string[] } & {
  readonly extra: (string | null)[];
};

/** Outcome of {@link encodeBatch}. */
export type EncodeResult =
  | { readonly ok: true; readonly bytes: Uint8Array; readonly rows: number }
  | { readonly ok: false; readonly reason: string };

/** Knobs for {@link arrowToParquet}; the defaults are what the events files use. */
export interface ParquetWriteOptions {
  /** Rows per row group. Default: the writer's (1,048,576), i.e. one row group per batch. */
  readonly maxRowGroupSize?: number;
}

const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * Parses and re-checks a push envelope `{ "data": { "events": [ {...}, ... ] }, "baseHash": ... }`.
 *
 * The API validated the body before enqueueing, but the job payload crosses a process boundary
 * (and may be replayed from the dead-letter set), so the encoder trusts nothing: malformed input
 * is reported as `{ ok: false, reason }`, never thrown.
 *
 * @param body - The request body as received (UTF-8 text or bytes; decompression is the caller's job).
 */
export function parseBatchEvents(body: string | Uint8Array): ParseResult {
  let text: string;
  if (typeof body === 'string') {
    text = body;
  } else {
    try {
      text = utf8Decoder.decode(body);
    } catch {
      return { ok: false, reason: 'body is not valid UTF-8' };
    }
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, reason: 'body is not valid JSON' };
  }
  if (!isJsonObject(parsed)) return { ok: false, reason: 'body is not a JSON object' };
  const data = parsed['data'];
  if (!isJsonObject(data)) return { ok: false, reason: 'data is not a JSON object' };
  const events = data['events'];
  if (!Array.isArray(events)) return { ok: false, reason: 'data.events is not an array' };
  for (let i = 0; i < events.length; i++) {
    if (!isJsonObject(events[i])) {
      return { ok: false, reason: `data.events[${i}] is not a JSON object` };
    }
  }
  return { ok: true, events: events as EventRecord[] };
}

function isJsonObject(value: unknown): value is EventRecord {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const COLUMN_INDEX: ReadonlyMap<string, number> = new Map(EVENT_COLUMNS.map((name, i) => [name, i]));

/**
 * Turns events into column-major text, the shape the Arrow stage packs into buffers.
 *
 * Fixed columns: a string is kept as is (no re-quoting), missing/null → `""`, anything else → its
 * JSON text, so objects never degrade to `[object Object]`. Every other own enumerable top-level
 * key — including a client-sent `received_at` or `extra`, which the server owns — goes into `extra`
 * so nothing a client sent is dropped. `extra` is built as text rather than as an object, so a
 * `__proto__` key stays an ordinary key and cannot reach any prototype.
 *
 * @param events - JSON values as `JSON.parse` produces them (no bigint, no cycles).
 */
export function buildEventColumns(events: readonly EventRecord[]): EventColumns {
  const rows = events.length;
  const fixed = EVENT_COLUMNS.map(() => new Array<string>(rows).fill(''));
  const extra = new Array<string | null>(rows).fill(null);
  for (let row = 0; row < rows; row++) {
    const event = events[row];
    let extraText: string | null = null;
    // Object.keys: own enumerable keys only, so inherited properties never become data. An own
    // `__proto__` data property (JSON.parse creates one) shadows the accessor on read.
    for (const key of Object.keys(event)) {
      const value = event[key];
      const col = COLUMN_INDEX.get(key);
      if (col !== undefined) {
        fixed[col][row] = columnText(value);
        continue;
      }
      const json = JSON.stringify(value);
      // undefined/functions have no JSON form; JSON.stringify of an object omits them too.
      if (json === undefined) continue;
      extraText = `${extraText === null ? '{' : `${extraText},`}${JSON.stringify(key)}:${json}`;
    }
    if (extraText !== null) extra[row] = `${extraText}}`;
  }
  const columns: Record<string, (string | null)[]> = { extra };
  EVENT_COLUMNS.forEach((name, i) => {
    columns[name] = fixed[i];
  });
  return columns as EventColumns;
}

function columnText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null || value === undefined) return '';
  return JSON.stringify(value) ?? '';
}

const textEncoder = new TextEncoder();
/**
 * Reused UTF-8 staging buffer: each column is encoded here, then copied out at its exact size.
 * Reuse avoids allocating (and zeroing) a worst-case 3×chars buffer per column per batch.
 */
let scratch = new Uint8Array(1 << 20);

function ensureScratch(bytes: number): void {
  if (bytes <= scratch.length) return;
  const next = new Uint8Array(Math.max(bytes, scratch.length * 2));
  next.set(scratch);
  scratch = next;
}

const INT32_MAX = 0x7fffffff;

interface Utf8Buffers {
  readonly valueOffsets: Int32Array;
  readonly data: Uint8Array;
  readonly nullBitmap: Uint8Array | undefined;
  readonly nullCount: number;
}

/** Packs one column into Arrow Utf8 buffers: int32 offsets, UTF-8 bytes, validity bitmap if nullable. */
function packUtf8(values: readonly (string | null)[], nullable: boolean): Utf8Buffers {
  const rows = values.length;
  const valueOffsets = new Int32Array(rows + 1);
  let nullBitmap: Uint8Array | undefined;
  let nullCount = 0;
  if (nullable) {
    // Arrow validity: bit set = value present, LSB-first within each byte.
    nullBitmap = new Uint8Array((rows + 7) >> 3);
    for (let i = 0; i < rows; i++) {
      if (values[i] === null) nullCount++;
      else nullBitmap[i >> 3] |= 1 << (i & 7);
    }
  }

  // One encodeInto per value straight into the staging buffer. (Measured: faster than joining
  // the column and encoding once, because Array#join of a thousand strings costs more than the
  // per-call overhead.) A UTF-16 code unit never needs more than 3 UTF-8 bytes (a surrogate pair
  // is 2 units → 4 bytes), so reserving 3×length before each call is always enough. Encoding
  // values separately also keeps lone surrogates in adjacent values from pairing up.
  let end = 0;
  for (let i = 0; i < rows; i++) {
    valueOffsets[i] = end;
    const value = values[i];
    if (value === null || value.length === 0) continue;
    ensureScratch(end + value.length * 3);
    end += textEncoder.encodeInto(value, scratch.subarray(end)).written;
    if (end > INT32_MAX) throw new RangeError('column exceeds 2 GiB of UTF-8');
  }
  valueOffsets[rows] = end;
  // Copy out: the table must own its bytes because scratch is overwritten by the next column.
  return { valueOffsets, data: scratch.slice(0, end), nullBitmap, nullCount };
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
 * Packs column text into an Arrow table with {@link EVENTS_ARROW_SCHEMA}, writing each column's
 * buffers directly (no per-value builders) so cost stays linear in bytes.
 *
 * @param columns - Output of {@link buildEventColumns}.
 * @param receivedAtMs - Epoch milliseconds of the batch id; every row gets this `received_at`.
 */
export function eventsToArrow(columns: EventColumns, receivedAtMs: number): arrow.Table {
  if (!Number.isSafeInteger(receivedAtMs)) {
    throw new RangeError(`receivedAtMs must be an integer epoch-ms, got ${receivedAtMs}`);
  }
  const rows = columns.extra.length;
  const children: arrow.Data[] = [];
  for (const name of EVENT_COLUMNS) {
    const values = columns[name];
    if (values.length !== rows) {
      throw new RangeError(`column ${name} has ${values.length} rows, extra has ${rows}`);
    }
    const buf = packUtf8(values, false);
    children.push(
      arrow.makeData({ type: UTF8, length: rows, nullCount: 0, valueOffsets: buf.valueOffsets, data: buf.data }),
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
  const extra = packUtf8(columns.extra, true);
  children.push(
    arrow.makeData({
      type: UTF8,
      length: rows,
      nullCount: extra.nullCount,
      valueOffsets: extra.valueOffsets,
      data: extra.data,
      nullBitmap: extra.nullBitmap,
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
 * 107 B/event; dictionaries only here, 103 B/event and a faster write.
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
    .setCompression(Compression.ZSTD)
    .setDictionaryEnabled(false)
    // Chunk (row-group) min/max is what DuckDB uses to skip row groups; page-level statistics
    // add a column/offset index to every small file for no reader we have (and wrote slower).
    .setStatisticsEnabled(EnabledStatistics.None);
  for (const column of DICTIONARY_COLUMNS) builder = builder.setColumnDictionaryEnabled(column, true);
  for (const column of STATISTICS_COLUMNS) builder = builder.setColumnStatisticsEnabled(column, EnabledStatistics.Chunk);
  if (opts.maxRowGroupSize !== undefined) builder = builder.setMaxRowGroupSize(opts.maxRowGroupSize);
  return builder.build();
}

/**
 * Serialises an Arrow table to Parquet bytes with parquet-wasm: ZSTD, dictionary encoding on the
 * low-cardinality columns, chunk statistics on the columns queries filter on. Wasm-side objects
 * are consumed or freed before returning, so repeated calls do not grow wasm memory beyond what
 * the largest batch needed.
 *
 * @returns A fresh JS-owned Uint8Array (parquet-wasm copies the output out of wasm memory).
 */
export function arrowToParquet(table: arrow.Table, opts: ParquetWriteOptions = {}): Uint8Array {
  const ipc = arrow.tableToIPC(table, 'stream');
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
  return writeParquet(wasmTable, props);
}

/**
 * Runs the whole pipeline for one job: parse → columns → Arrow → Parquet.
 *
 * @param body - The push body as received.
 * @param receivedAtMs - The batch id's instant (epoch ms), stamped on every row.
 * @returns Parquet bytes and row count, or the reason the data is unusable. An empty `events`
 *   array yields a valid zero-row file.
 */
export function encodeBatch(body: string | Uint8Array, receivedAtMs: number): EncodeResult {
  const parsed = parseBatchEvents(body);
  if (!parsed.ok) return parsed;
  const table = eventsToArrow(buildEventColumns(parsed.events), receivedAtMs);
  return { ok: true, bytes: arrowToParquet(table), rows: table.numRows };
}
