/**
 * Iceberg v2 manifests and manifest lists as Avro object container files (format/spec.md of
 * apache/iceberg: "Manifests", "Manifest Lists", Appendix A "Avro"), written and read with avsc.
 *
 * avsc keeps the schema object it is given verbatim in the file header (`avro.schema`), so the
 * Iceberg `field-id` / `element-id` properties the spec requires on every field reach readers
 * unchanged; avsc itself ignores them. Blocks are deflate-compressed (every Iceberg reader,
 * including icebird, reads `deflate`; snappy is not in avsc's defaults).
 *
 * Longs are JS numbers: every long we write (snapshot ids, sequence numbers, counts, sizes) is a
 * safe integer (snapshot ids are drawn below 2^53, ./table.ts), and avsc refuses anything larger
 * rather than losing precision.
 */
import avsc from 'avsc';
import {
  type IcebergSchema,
  type PartitionSpec,
  HOUR_PARTITION_FIELD_ID,
  HOUR_PARTITION_NAME,
  RECEIVED_AT_ID,
} from './schema.js';

/** Manifest entry status (spec "Manifest Entry Fields"). */
export const STATUS_EXISTING = 0;
export const STATUS_ADDED = 1;
export const STATUS_DELETED = 2;
export type EntryStatus = typeof STATUS_EXISTING | typeof STATUS_ADDED | typeof STATUS_DELETED;

/** What a manifest says about one data file (the `data_file` fields we write). */
export interface DataFile {
  /** Absolute URI (`file:///…`, `s3://bucket/key`). */
  readonly filePath: string;
  readonly recordCount: number;
  readonly fileSizeInBytes: number;
  /** The `hour(received_at)` partition value. */
  readonly hour: number;
  /** `received_at` bounds (epoch ms), written as `lower_bounds` / `upper_bounds` of field `received_at`. */
  readonly minReceivedAtMs: number;
  readonly maxReceivedAtMs: number;
  /** 0 unsorted (batch files), 1 the rollup order (./schema.ts). */
  readonly sortOrderId: number;
}

export interface ManifestEntry {
  readonly status: EntryStatus;
  /** Null: inherited from the manifest's `added_snapshot_id` (only for ADDED entries). */
  readonly snapshotId: number | null;
  /** Data sequence number; null: inherited (ADDED only). */
  readonly sequenceNumber: number | null;
  readonly fileSequenceNumber: number | null;
  readonly dataFile: DataFile;
}

/** A partition field summary of a manifest (`field_summary`). */
export interface FieldSummary {
  readonly containsNull: boolean;
  readonly containsNan: boolean | null;
  readonly lowerBound: Uint8Array | null;
  readonly upperBound: Uint8Array | null;
}

/** One `manifest_file` record of a manifest list. */
export interface ManifestFile {
  readonly manifestPath: string;
  readonly manifestLength: number;
  readonly partitionSpecId: number;
  /** 0 data, 1 deletes; we only write data manifests. */
  readonly content: 0 | 1;
  readonly sequenceNumber: number;
  readonly minSequenceNumber: number;
  readonly addedSnapshotId: number;
  readonly addedFilesCount: number;
  readonly existingFilesCount: number;
  readonly deletedFilesCount: number;
  readonly addedRowsCount: number;
  readonly existingRowsCount: number;
  readonly deletedRowsCount: number;
  readonly partitions: readonly FieldSummary[] | null;
}

// ---- Avro schemas (field ids from the spec's tables) ----

const optional = (type: unknown): unknown[] => ['null', type];

/** `map<int, binary>` as Iceberg writes maps with non-string keys: an array of key/value records with logicalType map. */
function intBinaryMap(name: string, keyId: number, valueId: number): Record<string, unknown> {
  return {
    type: 'array',
    logicalType: 'map',
    items: {
      type: 'record',
      name,
      fields: [
        { name: 'key', type: 'int', 'field-id': keyId },
        { name: 'value', type: 'bytes', 'field-id': valueId },
      ],
    },
  };
}

/** The `manifest_entry` Avro schema for partition spec `hour(received_at)`. */
export const MANIFEST_ENTRY_SCHEMA: Record<string, unknown> = {
  type: 'record',
  name: 'manifest_entry',
  fields: [
    { name: 'status', type: 'int', 'field-id': 0 },
    { name: 'snapshot_id', type: optional('long'), default: null, 'field-id': 1 },
    { name: 'sequence_number', type: optional('long'), default: null, 'field-id': 3 },
    { name: 'file_sequence_number', type: optional('long'), default: null, 'field-id': 4 },
    {
      name: 'data_file',
      'field-id': 2,
      type: {
        type: 'record',
        name: 'r2',
        fields: [
          {
            name: 'content',
            type: 'int',
            'field-id': 134,
            doc: 'Contents of the file: 0=data, 1=position deletes, 2=equality deletes',
          },
          { name: 'file_path', type: 'string', 'field-id': 100, doc: 'Location URI with FS scheme' },
          { name: 'file_format', type: 'string', 'field-id': 101, doc: 'File format name: avro, orc, or parquet' },
          {
            name: 'partition',
            'field-id': 102,
            type: {
              type: 'record',
              name: 'r102',
              fields: [
                {
                  name: HOUR_PARTITION_NAME,
                  type: optional('int'),
                  default: null,
                  'field-id': HOUR_PARTITION_FIELD_ID,
                },
              ],
            },
          },
          { name: 'record_count', type: 'long', 'field-id': 103, doc: 'Number of records in the file' },
          { name: 'file_size_in_bytes', type: 'long', 'field-id': 104, doc: 'Total file size in bytes' },
          { name: 'lower_bounds', type: optional(intBinaryMap('k126_v127', 126, 127)), default: null, 'field-id': 125 },
          { name: 'upper_bounds', type: optional(intBinaryMap('k129_v130', 129, 130)), default: null, 'field-id': 128 },
          { name: 'sort_order_id', type: optional('int'), default: null, 'field-id': 140 },
        ],
      },
    },
  ],
};

/** The `manifest_file` Avro schema (v2 manifest list). */
export const MANIFEST_FILE_SCHEMA: Record<string, unknown> = {
  type: 'record',
  name: 'manifest_file',
  fields: [
    { name: 'manifest_path', type: 'string', 'field-id': 500 },
    { name: 'manifest_length', type: 'long', 'field-id': 501 },
    { name: 'partition_spec_id', type: 'int', 'field-id': 502 },
    { name: 'content', type: 'int', 'field-id': 517 },
    { name: 'sequence_number', type: 'long', 'field-id': 515 },
    { name: 'min_sequence_number', type: 'long', 'field-id': 516 },
    { name: 'added_snapshot_id', type: 'long', 'field-id': 503 },
    { name: 'added_files_count', type: 'int', 'field-id': 504 },
    { name: 'existing_files_count', type: 'int', 'field-id': 505 },
    { name: 'deleted_files_count', type: 'int', 'field-id': 506 },
    { name: 'added_rows_count', type: 'long', 'field-id': 512 },
    { name: 'existing_rows_count', type: 'long', 'field-id': 513 },
    { name: 'deleted_rows_count', type: 'long', 'field-id': 514 },
    {
      name: 'partitions',
      type: optional({
        type: 'array',
        'element-id': 508,
        items: {
          type: 'record',
          name: 'r508',
          fields: [
            { name: 'contains_null', type: 'boolean', 'field-id': 509 },
            { name: 'contains_nan', type: optional('boolean'), default: null, 'field-id': 518 },
            { name: 'lower_bound', type: optional('bytes'), default: null, 'field-id': 510 },
            { name: 'upper_bound', type: optional('bytes'), default: null, 'field-id': 511 },
          ],
        },
      }),
      default: null,
      'field-id': 507,
    },
  ],
};

// ---- single-value serialization (spec Appendix D) ----

/** An `int` as Iceberg stores a bound: 4 bytes little-endian. */
export function intBound(v: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setInt32(0, v, true);
  return out;
}

/** A `timestamptz` bound from epoch ms: microseconds, 8 bytes little-endian. */
export function timestamptzBound(epochMs: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, BigInt(epochMs) * 1000n, true);
  return out;
}

function readInt32(b: Uint8Array): number {
  if (b.byteLength !== 4) throw new RangeError(`int bound has ${b.byteLength} bytes`);
  return new DataView(b.buffer, b.byteOffset, 4).getInt32(0, true);
}

/** Epoch ms from a timestamptz bound (micros, floored: a lower bound stays a lower bound; ours are whole ms). */
function readTimestamptzMs(b: Uint8Array): number {
  if (b.byteLength !== 8) throw new RangeError(`timestamptz bound has ${b.byteLength} bytes`);
  const micros = new DataView(b.buffer, b.byteOffset, 8).getBigInt64(0, true);
  const ms = micros / 1000n - (micros % 1000n < 0n ? 1n : 0n);
  return Number(ms);
}

// ---- container files ----

type Meta = Record<string, string>;

/** The file header's key-value metadata for a manifest (spec "Manifests": required for v2). */
export function manifestMetadata(schema: IcebergSchema, spec: PartitionSpec): Meta {
  return {
    schema: JSON.stringify(schema),
    'schema-id': String(schema['schema-id']),
    'partition-spec': JSON.stringify(spec.fields),
    'partition-spec-id': String(spec['spec-id']),
    'format-version': '2',
    content: 'data',
  };
}

/** Encodes records into one Avro object container file (deflate, header always written). */
async function writeContainer(
  schema: Record<string, unknown>,
  records: readonly Record<string, unknown>[],
  meta: Meta,
): Promise<Uint8Array> {
  const metadata: Record<string, Buffer> = {};
  for (const [k, v] of Object.entries(meta)) metadata[k] = Buffer.from(v, 'utf8');
  // avsc's typings omit the `metadata` option; it is documented and in its code (containers.js).
  const opts = { codec: 'deflate', writeHeader: 'always', metadata } as unknown as ConstructorParameters<
    typeof avsc.streams.BlockEncoder
  >[1];
  const encoder = new avsc.streams.BlockEncoder(schema as unknown as avsc.Schema, opts);
  const chunks: Buffer[] = [];
  const done = new Promise<void>((resolve, reject) => {
    encoder.on('data', (c: Buffer) => chunks.push(c));
    encoder.on('end', () => resolve());
    encoder.on('error', reject);
  });
  for (const r of records) encoder.write(r);
  encoder.end();
  await done;
  const out = Buffer.concat(chunks);
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

/** Decodes every record of an Avro object container file (with the writer's schema from its header). */
async function readContainer(bytes: Uint8Array): Promise<Record<string, unknown>[]> {
  const decoder = new avsc.streams.BlockDecoder();
  const records: Record<string, unknown>[] = [];
  const done = new Promise<void>((resolve, reject) => {
    decoder.on('data', (r: Record<string, unknown>) => records.push(r));
    decoder.on('end', () => resolve());
    decoder.on('error', reject);
  });
  decoder.end(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  await done;
  return records;
}

interface KeyValue {
  key: number;
  value: Buffer;
}

function entryRecord(e: ManifestEntry): Record<string, unknown> {
  const f = e.dataFile;
  return {
    status: e.status,
    snapshot_id: e.snapshotId,
    sequence_number: e.sequenceNumber,
    file_sequence_number: e.fileSequenceNumber,
    data_file: {
      content: 0,
      file_path: f.filePath,
      file_format: 'PARQUET',
      partition: { [HOUR_PARTITION_NAME]: f.hour },
      record_count: f.recordCount,
      file_size_in_bytes: f.fileSizeInBytes,
      lower_bounds: [{ key: RECEIVED_AT_ID, value: Buffer.from(timestamptzBound(f.minReceivedAtMs)) }],
      upper_bounds: [{ key: RECEIVED_AT_ID, value: Buffer.from(timestamptzBound(f.maxReceivedAtMs)) }],
      sort_order_id: f.sortOrderId,
    },
  };
}

function boundOf(list: unknown, what: string, path: string): number {
  const hit = Array.isArray(list) ? (list as KeyValue[]).find((kv) => kv.key === RECEIVED_AT_ID) : undefined;
  if (!hit) throw new Error(`manifest entry of ${path} has no received_at ${what} bound`);
  return readTimestamptzMs(hit.value);
}

function entryOf(r: Record<string, unknown>): ManifestEntry {
  const d = r.data_file as Record<string, unknown>;
  const filePath = d.file_path as string;
  const hour = (d.partition as Record<string, unknown>)[HOUR_PARTITION_NAME];
  if (typeof hour !== 'number')
    throw new Error(`manifest entry of ${filePath} has no ${HOUR_PARTITION_NAME} partition value`);
  return {
    status: r.status as EntryStatus,
    snapshotId: (r.snapshot_id as number | null) ?? null,
    sequenceNumber: (r.sequence_number as number | null) ?? null,
    fileSequenceNumber: (r.file_sequence_number as number | null) ?? null,
    dataFile: {
      filePath,
      recordCount: d.record_count as number,
      fileSizeInBytes: d.file_size_in_bytes as number,
      hour,
      minReceivedAtMs: boundOf(d.lower_bounds, 'lower', filePath),
      maxReceivedAtMs: boundOf(d.upper_bounds, 'upper', filePath),
      sortOrderId: (d.sort_order_id as number | null) ?? 0,
    },
  };
}

/** A manifest file's bytes. Entries must all use the partition spec given (ours has one). */
export function writeManifest(
  entries: readonly ManifestEntry[],
  schema: IcebergSchema,
  spec: PartitionSpec,
): Promise<Uint8Array> {
  return writeContainer(MANIFEST_ENTRY_SCHEMA, entries.map(entryRecord), manifestMetadata(schema, spec));
}

/** The entries of a manifest we wrote. */
export async function readManifest(bytes: Uint8Array): Promise<ManifestEntry[]> {
  return (await readContainer(bytes)).map(entryOf);
}

function manifestFileRecord(m: ManifestFile): Record<string, unknown> {
  return {
    manifest_path: m.manifestPath,
    manifest_length: m.manifestLength,
    partition_spec_id: m.partitionSpecId,
    content: m.content,
    sequence_number: m.sequenceNumber,
    min_sequence_number: m.minSequenceNumber,
    added_snapshot_id: m.addedSnapshotId,
    added_files_count: m.addedFilesCount,
    existing_files_count: m.existingFilesCount,
    deleted_files_count: m.deletedFilesCount,
    added_rows_count: m.addedRowsCount,
    existing_rows_count: m.existingRowsCount,
    deleted_rows_count: m.deletedRowsCount,
    partitions:
      m.partitions?.map((p) => ({
        contains_null: p.containsNull,
        contains_nan: p.containsNan,
        lower_bound: p.lowerBound ? Buffer.from(p.lowerBound) : null,
        upper_bound: p.upperBound ? Buffer.from(p.upperBound) : null,
      })) ?? null,
  };
}

function manifestFileOf(r: Record<string, unknown>): ManifestFile {
  const parts = r.partitions as Record<string, unknown>[] | null;
  const bytes = (v: unknown): Uint8Array | null => (v == null ? null : new Uint8Array(v as Buffer));
  return {
    manifestPath: r.manifest_path as string,
    manifestLength: r.manifest_length as number,
    partitionSpecId: r.partition_spec_id as number,
    content: r.content as 0 | 1,
    sequenceNumber: r.sequence_number as number,
    minSequenceNumber: r.min_sequence_number as number,
    addedSnapshotId: r.added_snapshot_id as number,
    addedFilesCount: r.added_files_count as number,
    existingFilesCount: r.existing_files_count as number,
    deletedFilesCount: r.deleted_files_count as number,
    addedRowsCount: r.added_rows_count as number,
    existingRowsCount: r.existing_rows_count as number,
    deletedRowsCount: r.deleted_rows_count as number,
    partitions:
      parts?.map((p) => ({
        containsNull: p.contains_null as boolean,
        containsNan: (p.contains_nan as boolean | null) ?? null,
        lowerBound: bytes(p.lower_bound),
        upperBound: bytes(p.upper_bound),
      })) ?? null,
  };
}

/** Header metadata Iceberg's reference writer puts on a manifest list (informational for readers). */
export interface ManifestListMeta {
  readonly snapshotId: number;
  readonly parentSnapshotId: number | null;
  readonly sequenceNumber: number;
}

/** A manifest list file's bytes. */
export function writeManifestList(files: readonly ManifestFile[], meta: ManifestListMeta): Promise<Uint8Array> {
  return writeContainer(MANIFEST_FILE_SCHEMA, files.map(manifestFileRecord), {
    'snapshot-id': String(meta.snapshotId),
    'parent-snapshot-id': meta.parentSnapshotId === null ? 'null' : String(meta.parentSnapshotId),
    'sequence-number': String(meta.sequenceNumber),
    'format-version': '2',
  });
}

/** The manifests a manifest list names. */
export async function readManifestList(bytes: Uint8Array): Promise<ManifestFile[]> {
  return (await readContainer(bytes)).map(manifestFileOf);
}

/** The `hour` partition summary of a manifest's entries (all non-null ints). */
export function hourSummary(entries: readonly ManifestEntry[]): FieldSummary[] {
  if (entries.length === 0) return [{ containsNull: false, containsNan: null, lowerBound: null, upperBound: null }];
  let lo = Infinity;
  let hi = -Infinity;
  for (const e of entries) {
    lo = Math.min(lo, e.dataFile.hour);
    hi = Math.max(hi, e.dataFile.hour);
  }
  return [{ containsNull: false, containsNan: null, lowerBound: intBound(lo), upperBound: intBound(hi) }];
}

/** The `hour` value of an int partition bound (tests, tools). */
export function hourOfBound(b: Uint8Array): number {
  return readInt32(b);
}
