import { avroMetadata, avroRead } from 'icebird';
import { describe, expect, it } from 'vitest';
import {
  ParquetFooterError,
  footerRowCount,
  parquetFacts,
  rowCountFromTail,
} from '../../shared/iceberg/parquet-footer.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import {
  EVENTS_ARROW_SCHEMA,
  arrowToParquet,
  encodeBatch,
  eventsToArrow,
  parseBatchColumns,
} from '../../shared/parquet/index.js';
import {
  type ManifestEntry,
  MANIFEST_ENTRY_SCHEMA,
  STATUS_ADDED,
  STATUS_DELETED,
  hourOfBound,
  readManifest,
  readManifestList,
  writeManifest,
  writeManifestList,
} from '../../shared/iceberg/avro.js';
import {
  EVENTS_SCHEMA,
  FIELD_IDS,
  NAME_MAPPING,
  PARTITION_SPEC,
  PartitionSpanError,
  SORT_ORDERS,
  hourPartition,
  hourTransform,
  tableProperties,
} from '../../shared/iceberg/schema.js';

describe('iceberg schema', () => {
  it('gives every column of an events file a fixed field id, in file order', () => {
    // These ids are in every manifest and every reader's name mapping: changing one is a breaking change.
    expect(FIELD_IDS).toEqual({
      event_type: 1,
      event: 2,
      distinct_id: 3,
      anonymous_id: 4,
      ts: 5,
      message_id: 6,
      properties: 7,
      context: 8,
      dt: 9,
      received_at: 10,
      extra: 11,
    });
    expect(EVENTS_SCHEMA.fields.map((f) => f.name)).toEqual(EVENTS_ARROW_SCHEMA.fields.map((f) => f.name));
    expect(EVENTS_SCHEMA.fields.find((f) => f.name === 'received_at')?.type).toBe('timestamptz');
    expect(EVENTS_SCHEMA.fields.filter((f) => f.type === 'string')).toHaveLength(10);
  });

  it('maps every column name to its id in schema.name-mapping.default', () => {
    const mapping = JSON.parse(tableProperties()['schema.name-mapping.default'] as string) as {
      'field-id': number;
      names: string[];
    }[];
    expect(mapping).toEqual(NAME_MAPPING);
    expect(mapping.map((m) => [m.names, m['field-id']])).toEqual(EVENTS_SCHEMA.fields.map((f) => [[f.name], f.id]));
  });

  it('partitions by hour(received_at) with partition field id 1000 and records the rollup sort', () => {
    expect(PARTITION_SPEC).toEqual({
      'spec-id': 0,
      fields: [{ 'source-id': 10, 'field-id': 1000, name: 'received_at_hour', transform: 'hour' }],
    });
    expect(SORT_ORDERS).toEqual([
      { 'order-id': 0, fields: [] },
      {
        'order-id': 1,
        fields: [
          { transform: 'identity', 'source-id': 2, direction: 'asc', 'null-order': 'nulls-last' },
          { transform: 'identity', 'source-id': 10, direction: 'asc', 'null-order': 'nulls-last' },
        ],
      },
    ]);
  });

  it('computes the hour transform as whole hours since the epoch, flooring before 1970', () => {
    expect(hourTransform(0)).toBe(0);
    expect(hourTransform(3_599_999)).toBe(0);
    expect(hourTransform(3_600_000)).toBe(1);
    expect(hourTransform(-1)).toBe(-1);
    expect(hourTransform(Date.UTC(2026, 11, 1, 8, 59, 59, 999))).toBe(Date.UTC(2026, 11, 1, 8) / 3_600_000);
  });

  it('gives a file one partition value, and refuses a file whose rows span two hours', () => {
    const h8 = Date.UTC(2026, 11, 1, 8);
    expect(hourPartition(h8, h8 + 3_599_999)).toBe(h8 / 3_600_000);
    expect(() => hourPartition(h8 + 1_800_000, h8 + 3_600_000)).toThrow(PartitionSpanError);
    expect(() => hourPartition(h8 + 1, h8)).toThrow(RangeError);
  });
});

const h8 = Date.UTC(2026, 11, 1, 8);
const entries: ManifestEntry[] = [
  {
    status: STATUS_ADDED,
    snapshotId: 42,
    sequenceNumber: null,
    fileSequenceNumber: null,
    dataFile: {
      filePath: 'file:///d/events/a/1.parquet',
      recordCount: 3,
      fileSizeInBytes: 1234,
      hour: h8 / 3_600_000,
      minReceivedAtMs: h8 + 5,
      maxReceivedAtMs: h8 + 5,
      sortOrderId: 0,
    },
  },
  {
    status: STATUS_DELETED,
    snapshotId: 43,
    sequenceNumber: 2,
    fileSequenceNumber: 2,
    dataFile: {
      filePath: 's3://b/p/rollups/x.parquet',
      recordCount: 9_000_000_000,
      fileSizeInBytes: 2 ** 40,
      hour: h8 / 3_600_000 + 1,
      minReceivedAtMs: h8 + 3_600_000,
      maxReceivedAtMs: h8 + 7_199_999,
      sortOrderId: 1,
    },
  },
];

describe('iceberg avro', () => {
  it('writes manifests that read back the same, and that an independent Avro reader reads with the spec field ids', async () => {
    const bytes = await writeManifest(entries, EVENTS_SCHEMA, PARTITION_SPEC);
    expect(await readManifest(bytes)).toEqual(entries);

    const reader = { view: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), offset: 0 };
    const { metadata, syncMarker } = avroMetadata(reader);
    expect(metadata['avro.codec']).toBe('deflate');
    expect(metadata['format-version']).toBe('2');
    expect(metadata.content).toBe('data');
    expect(metadata['partition-spec-id']).toBe('0');
    expect(JSON.parse(metadata['partition-spec'] as string)).toEqual(PARTITION_SPEC.fields);
    // icebird's header reader parses `schema` and `avro.schema` itself.
    expect(metadata.schema).toEqual(EVENTS_SCHEMA);
    const schema = metadata['avro.schema'] as typeof MANIFEST_ENTRY_SCHEMA;
    expect(schema).toEqual(MANIFEST_ENTRY_SCHEMA);
    const ids = JSON.stringify(schema).match(/"field-id":\d+/g) ?? [];
    // status, snapshot_id, sequence_number, file_sequence_number, data_file and its fields, the partition field, map keys/values.
    for (const id of [0, 1, 3, 4, 2, 134, 100, 101, 102, 103, 104, 125, 126, 127, 128, 129, 130, 140, 1000])
      expect(ids).toContain(`"field-id":${id}`);

    const rows = avroRead({ reader, metadata, syncMarker }) as Record<string, unknown>[];
    expect(rows).toHaveLength(2);
    const [a, b] = rows as [Record<string, Record<string, unknown>>, Record<string, Record<string, unknown>>];
    expect(a.status).toBe(1);
    expect(a.data_file?.file_path).toBe('file:///d/events/a/1.parquet');
    expect(Number(a.data_file?.record_count)).toBe(3);
    expect(a.data_file?.partition).toEqual({ received_at_hour: h8 / 3_600_000 });
    expect(Number(b.data_file?.record_count)).toBe(9_000_000_000);
    expect(Number(b.sequence_number)).toBe(2);
  });

  it('writes manifest lists with the v2 fields and partition summaries', async () => {
    const file = {
      manifestPath: 'file:///d/iceberg/events/a/metadata/m-1.avro',
      manifestLength: 4321,
      partitionSpecId: 0,
      content: 0 as const,
      sequenceNumber: 7,
      minSequenceNumber: 3,
      addedSnapshotId: 2 ** 52 + 1,
      addedFilesCount: 1,
      existingFilesCount: 5,
      deletedFilesCount: 2,
      addedRowsCount: 10,
      existingRowsCount: 50,
      deletedRowsCount: 20,
      partitions: [
        {
          containsNull: false,
          containsNan: null,
          lowerBound: new Uint8Array([1, 0, 0, 0]),
          upperBound: new Uint8Array([9, 0, 0, 0]),
        },
      ],
    };
    const bytes = await writeManifestList([file], { snapshotId: 99, parentSnapshotId: null, sequenceNumber: 7 });
    const [back] = await readManifestList(bytes);
    expect(back).toEqual(file);
    expect(hourOfBound(back?.partitions?.[0]?.upperBound as Uint8Array)).toBe(9);

    const reader = { view: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), offset: 0 };
    const { metadata, syncMarker } = avroMetadata(reader);
    const schema = JSON.stringify(metadata['avro.schema']);
    for (const id of [500, 501, 502, 517, 515, 516, 503, 504, 505, 506, 512, 513, 514, 507, 509, 518, 510, 511])
      expect(schema).toContain(`"field-id":${id}`);
    expect(schema).toContain('"element-id":508');
    const [row] = avroRead({ reader, metadata, syncMarker }) as Record<string, unknown>[];
    expect(Number(row?.added_snapshot_id)).toBe(2 ** 52 + 1);
    expect(Number(row?.min_sequence_number)).toBe(3);
  });
});

describe('parquet footer row counts', () => {
  it('reads num_rows from the footer of files our encoder writes, one row group or several', () => {
    for (const n of [0, 1, 7, 300]) {
      const events = Array.from({ length: n }, (_, i) => ({
        event: `e${i}`,
        properties: { i, nested: [1, { a: true }] },
      }));
      const encoded = encodeBatch(JSON.stringify({ data: { events }, baseHash: null }), h8);
      if (!encoded.ok) throw new Error(encoded.reason);
      expect(rowCountFromTail(encoded.bytes)).toBe(n);
      // Only the tail is needed: the footer plus its length and magic.
      const len = new DataView(
        encoded.bytes.buffer,
        encoded.bytes.byteOffset + encoded.bytes.byteLength - 8,
        4,
      ).getUint32(0, true);
      expect(rowCountFromTail(encoded.bytes.subarray(encoded.bytes.byteLength - len - 8))).toBe(n);
      expect(rowCountFromTail(encoded.bytes.subarray(encoded.bytes.byteLength - len - 7))).toBeNull();
    }
    const many = eventsToArrow(
      parseColumns(
        JSON.stringify({
          data: { events: Array.from({ length: 10 }, (_, i) => ({ event: `e${i}` })) },
          baseHash: null,
        }),
      ),
      h8,
    );
    expect(rowCountFromTail(arrowToParquet(many, { maxRowGroupSize: 3 }))).toBe(10);
  });

  it('reads the count through a store, from the tail only, also when the footer is longer than the first read', async () => {
    const store = new MemoryObjectStore();
    const small = encodeBatch(
      JSON.stringify({ data: { events: [{ event: 'a' }, { event: 'b' }] }, baseHash: null }),
      h8,
    );
    if (!small.ok) throw new Error(small.reason);
    await store.putBytes('events/a/small.parquet', small.bytes);
    // One row per row group: a footer of several hundred KB, past the 64 KiB first read.
    const big = arrowToParquet(
      eventsToArrow(
        parseColumns(
          JSON.stringify({
            data: { events: Array.from({ length: 400 }, (_, i) => ({ event: `e${i}` })) },
            baseHash: null,
          }),
        ),
        h8,
      ),
      { maxRowGroupSize: 1 },
    );
    const footerLen = new DataView(big.buffer, big.byteOffset + big.byteLength - 8, 4).getUint32(0, true);
    expect(footerLen).toBeGreaterThan(64 * 1024);
    await store.putBytes('events/a/big.parquet', big);
    expect(await parquetFacts(store, 'events/a/small.parquet')).toEqual({
      recordCount: 2,
      fileSizeInBytes: small.bytes.byteLength,
    });
    expect(await parquetFacts(store, 'events/a/big.parquet')).toEqual({
      recordCount: 400,
      fileSizeInBytes: big.byteLength,
    });
    expect(await parquetFacts(store, 'events/a/none.parquet')).toBeNull();
  });

  it('refuses bytes that are not a Parquet file', () => {
    expect(() => rowCountFromTail(new TextEncoder().encode('not a parquet file at all'))).toThrow(ParquetFooterError);
    expect(() => footerRowCount(new Uint8Array([0x15, 0x02, 0x00]))).toThrow(ParquetFooterError);
  });
});

function parseColumns(body: string): Parameters<typeof eventsToArrow>[0] {
  const parsed = parseBatchColumns(body);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.columns;
}
