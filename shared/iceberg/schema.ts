/**
 * The Iceberg v2 table definition of an events table (format/spec.md of apache/iceberg): schema
 * with stable field ids, the name mapping for files written without field ids, the partition spec
 * `hour(received_at)` and the sort order rollups are written in. Pure: no store, no I/O.
 *
 * Columns are the ones every data file carries, batch files and rollup files alike: the nine fixed
 * string columns, `received_at` and `extra` (shared/parquet/encode.ts). Rollup files also carry
 * `batch_id`, and no file carries `app` (it is the table: one table per app). A column some data
 * files lack would read as null from those files and change value when a rollup replaces them, so
 * neither is in the schema; adding one later is a schema change (a new field id above
 * {@link LAST_COLUMN_ID}) once every file the table references carries it.
 *
 * `app` as an identity partition (the spec's "Column Projection" rule 1 fills a column a file lacks
 * from an identity partition value) was tried and left out: icebird 0.3.1, the independent reader
 * the tests use, resolves a file's columns through the file's `iceberg.schema` key-value metadata
 * or else the table schema by name, so a table column no file has reads as undefined from every
 * file (test/integration/iceberg-field-ids.test.ts), and its partition fallback, reached only for
 * files with that metadata, looks the value up by partition field id in a record its Avro reader
 * keys by name. A column that reads as missing in the reader the acceptance uses is worse than
 * none: the app is the table's name (`iceberg/<collection>/<app>/`), and a query across apps adds
 * it as a literal per table.
 *
 * Field ids are in the files: the encoder stamps {@link FIELD_IDS} into every batch file's Parquet
 * schema (shared/parquet/field-ids.ts) and rollups are written with DuckDB's `FIELD_IDS` copy
 * option (services/rollup/roll.ts); {@link NAME_MAPPING} covers the files written before, which
 * carry none.
 *
 * `received_at` is `timestamptz` (microseconds); batch files store it as Parquet TIMESTAMP(MILLIS,
 * UTC) and rollups (DuckDB) as TIMESTAMP(MICROS, UTC). Both are instants and both are read as the
 * same value: the spec's Parquet table gives what a writer of `timestamptz` uses, and the reference
 * readers convert MILLIS (apache/iceberg ParquetValueReaders, GenericParquetReaders,
 * SparkParquetReaders, the vectorized VectorizedArrowReader), as do DuckDB and icebird (hyparquet);
 * manifest bounds are written in microseconds as the spec requires (./avro.ts). Batch files stay
 * in milliseconds, the unit of batch ids, which no reader of ours or the table's needs changed.
 *
 * Every field is optional: batch files write the fixed columns REQUIRED but DuckDB writes rollup
 * files with every column OPTIONAL, and an optional Iceberg field reads both.
 */
import { EVENT_COLUMNS } from '../parquet/columns.js';

/** An Iceberg primitive type we use. */
export type IcebergPrimitive = 'string' | 'timestamptz';

/** One struct field of a schema (spec Appendix C, "Schemas"). */
export interface IcebergField {
  readonly id: number;
  readonly name: string;
  readonly required: boolean;
  readonly type: IcebergPrimitive;
  readonly doc?: string;
}

/** A schema as table metadata stores it. */
export interface IcebergSchema {
  readonly type: 'struct';
  readonly 'schema-id': number;
  readonly fields: readonly IcebergField[];
}

/** One partition field (spec Appendix C, "Partition Specs"). */
export interface PartitionField {
  readonly 'source-id': number;
  readonly 'field-id': number;
  readonly name: string;
  readonly transform: string;
}

export interface PartitionSpec {
  readonly 'spec-id': number;
  readonly fields: readonly PartitionField[];
}

/** One sort field (spec Appendix C, "Sort Orders"). */
export interface SortField {
  readonly transform: string;
  readonly 'source-id': number;
  readonly direction: 'asc' | 'desc';
  readonly 'null-order': 'nulls-first' | 'nulls-last';
}

export interface SortOrder {
  readonly 'order-id': number;
  readonly fields: readonly SortField[];
}

/** One entry of `schema.name-mapping.default` (spec Appendix C, "Name Mapping Serialization"). */
export interface NameMappingEntry {
  readonly 'field-id': number;
  readonly names: readonly string[];
}

/**
 * Field ids by column name: the one source of the ids, which the table schema, the name mapping,
 * the encoder's batch files and the rollup files all take from here. Stable forever: a reader
 * matches columns to ids through these (and the name mapping) in every file ever written, so an
 * id is never reused or renumbered. Ids follow the file column order: the nine fixed string
 * columns 1–9, `received_at` 10, `extra` 11.
 */
export const FIELD_IDS: Readonly<Record<string, number>> = Object.freeze({
  ...Object.fromEntries(EVENT_COLUMNS.map((name, i) => [name, i + 1])),
  received_at: EVENT_COLUMNS.length + 1,
  extra: EVENT_COLUMNS.length + 2,
});

/** The field id of a column. */
export function fieldId(name: string): number {
  const id = FIELD_IDS[name];
  if (id === undefined) throw new RangeError(`no Iceberg field for column ${JSON.stringify(name)}`);
  return id;
}

/** `received_at`'s field id: the partition source and the only column with bounds in manifests. */
export const RECEIVED_AT_ID = EVENT_COLUMNS.length + 1;
/** The highest field id the table has assigned (`last-column-id`). */
export const LAST_COLUMN_ID = EVENT_COLUMNS.length + 2;

export const SCHEMA_ID = 0;

/** The table schema (schema-id 0). */
export const EVENTS_SCHEMA: IcebergSchema = {
  type: 'struct',
  'schema-id': SCHEMA_ID,
  fields: [
    ...EVENT_COLUMNS.map((name): IcebergField => ({ id: fieldId(name), name, required: false, type: 'string' })),
    {
      id: RECEIVED_AT_ID,
      name: 'received_at',
      required: false,
      type: 'timestamptz',
      doc: 'the batch id instant the server stamped on every row of the batch',
    },
    {
      id: LAST_COLUMN_ID,
      name: 'extra',
      required: false,
      type: 'string',
      doc: 'JSON object of the fields an event carried beyond the fixed columns, or null',
    },
  ],
};

/** `schema.name-mapping.default`: files written before field ids were stamped carry none, so readers map their columns by name. */
export const NAME_MAPPING: readonly NameMappingEntry[] = EVENTS_SCHEMA.fields.map((f) => ({
  'field-id': f.id,
  names: [f.name],
}));

/** The partition field id of `hour(received_at)` (v2 partition field ids start at 1000). */
export const HOUR_PARTITION_FIELD_ID = 1000;
export const HOUR_PARTITION_NAME = 'received_at_hour';
export const PARTITION_SPEC_ID = 0;

/** Partition spec 0: `hour(received_at)`. */
export const PARTITION_SPEC: PartitionSpec = {
  'spec-id': PARTITION_SPEC_ID,
  fields: [
    { 'source-id': RECEIVED_AT_ID, 'field-id': HOUR_PARTITION_FIELD_ID, name: HOUR_PARTITION_NAME, transform: 'hour' },
  ],
};

/** Order 0 is reserved for "unsorted" (batch files keep the order events were sent in). */
export const UNSORTED_ORDER_ID = 0;
/** The order rollup files are written in (services/rollup/roll.ts ROLLUP_SORT, less `batch_id`, which is not a table column). */
export const ROLLUP_ORDER_ID = 1;

/**
 * Sort orders: unsorted, and rollups' `event, received_at` ascending. DuckDB's `ORDER BY` puts
 * nulls last by default; neither column is ever null in our files, but the order says what DuckDB does.
 */
export const SORT_ORDERS: readonly SortOrder[] = [
  { 'order-id': UNSORTED_ORDER_ID, fields: [] },
  {
    'order-id': ROLLUP_ORDER_ID,
    fields: ['event', 'received_at'].map((name): SortField => ({
      transform: 'identity',
      'source-id': fieldId(name),
      direction: 'asc',
      'null-order': 'nulls-last',
    })),
  },
];

const HOUR_MS = 3_600_000;

/** Iceberg's `hour` transform of an epoch-ms instant: whole hours since 1970-01-01T00:00Z (floor, so negative instants round down). */
export function hourTransform(epochMs: number): number {
  if (!Number.isFinite(epochMs)) throw new RangeError(`not an instant: ${epochMs}`);
  return Math.floor(epochMs / HOUR_MS);
}

/** Thrown when a data file's rows do not share one partition value. */
export class PartitionSpanError extends Error {
  override readonly name = 'PartitionSpanError';
}

/**
 * The `hour(received_at)` partition value of a file whose `received_at` lies in
 * `[minMs, maxMs]`. A batch file's rows all carry its batch id's instant, so min = max; a rollup
 * file covers one period, which lies in one hour only when ROLLUP_PERIOD_SECONDS divides 3600.
 * A file spanning two hours cannot have one partition value (the spec requires the same value for
 * every row, and a reader that prunes by hour would skip rows): that is an error, not a guess.
 */
export function hourPartition(minMs: number, maxMs: number): number {
  if (maxMs < minMs) throw new RangeError(`received_at range is empty: ${minMs} > ${maxMs}`);
  const first = hourTransform(minMs);
  const last = hourTransform(maxMs);
  if (first !== last) {
    throw new PartitionSpanError(
      `received_at spans hours ${first}..${last} (${new Date(minMs).toISOString()} .. ${new Date(maxMs).toISOString()}); a data file must lie in one hour (ROLLUP_PERIOD_SECONDS must divide 3600)`,
    );
  }
  return first;
}

/** Table properties every metadata version carries. */
export function tableProperties(): Record<string, string> {
  return {
    'schema.name-mapping.default': JSON.stringify(NAME_MAPPING),
    'write.format.default': 'parquet',
  };
}
