/**
 * Spec checks of the metadata an IcebergTable commits (sequence numbers, snapshot and metadata
 * logs, manifest counts, summaries), its conflict rules, a commit race and snapshot expiry, over
 * the in-memory store. The integration test (test/integration/iceberg-table.test.ts) reads real
 * files with independent readers.
 */
import { describe, expect, it } from 'vitest';
import { STATUS_ADDED, STATUS_DELETED, STATUS_EXISTING } from '../../shared/iceberg/avro.js';
import {
  IcebergConflictError,
  IcebergTable,
  THROUGH_BATCH_ID,
  type TableFile,
  batchTableFile,
  currentSnapshot,
  snapshotAsOf,
} from '../../shared/iceberg/table.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';

const H8 = Date.UTC(2026, 11, 1, 8);
const id = (ms: number, n: number): string => `${ms}-${String(n).padStart(4, '0')}-abcdef`;
const batch = (ms: number, n: number, rows = 10): TableFile =>
  batchTableFile(`events/a/${id(ms, n)}.parquet`, id(ms, n), rows, 1000 + n);

function tableOn(
  store: MemoryObjectStore,
  o: Partial<ConstructorParameters<typeof IcebergTable>[0]> = {},
): IcebergTable {
  let clock = H8 + 10 * 3_600_000;
  return new IcebergTable({ store, collection: 'events', app: 'a', rootUri: 'mem://root/', now: () => clock++, ...o });
}

async function metadataAvro(store: MemoryObjectStore): Promise<string[]> {
  return (await store.listKeys('iceberg/events/a/metadata/')).filter((k) => k.endsWith('.avro'));
}

describe('IcebergTable commits', () => {
  it('writes contiguous versions with increasing sequence numbers, logs and summaries', async () => {
    const store = new MemoryObjectStore();
    const t = tableOn(store);
    const [b1, b2, b3] = [batch(H8 + 1, 0), batch(H8 + 2, 0, 5), batch(H8 + 3_600_001, 0, 7)] as [
      TableFile,
      TableFile,
      TableFile,
    ];

    const c1 = await t.append([b1, b2], { throughBatchId: id(H8 + 2, 0) });
    expect(c1).toMatchObject({ version: 1, sequenceNumber: 1, attempts: 1, hintWritten: true });
    const v1 = await t.readVersion(1);
    expect(v1).toMatchObject({
      'format-version': 2,
      location: 'mem://root/iceberg/events/a',
      'last-sequence-number': 1,
      'last-column-id': 11,
      'last-partition-id': 1000,
      'current-snapshot-id': c1.snapshotId,
      'default-sort-order-id': 1,
    });
    expect(v1.refs).toEqual({ main: { 'snapshot-id': c1.snapshotId, type: 'branch' } });
    expect(v1['metadata-log']).toEqual([]);
    expect(v1['snapshot-log']).toEqual([
      { 'snapshot-id': c1.snapshotId, 'timestamp-ms': v1.snapshots[0]?.['timestamp-ms'] },
    ]);
    expect(v1.snapshots[0]?.summary).toMatchObject({
      operation: 'append',
      'added-data-files': '2',
      'added-records': '15',
      'total-records': '15',
      'total-data-files': '2',
      [THROUGH_BATCH_ID]: id(H8 + 2, 0),
    });
    expect(v1.snapshots[0]).not.toHaveProperty('parent-snapshot-id');
    expect(new TextDecoder().decode((await store.getBytes('iceberg/events/a/metadata/version-hint.text'))?.body)).toBe(
      '1',
    );

    const c2 = await t.append([b3], { throughBatchId: id(H8 + 3_600_001, 0) });
    const v2 = await t.readVersion(2);
    expect(v2['table-uuid']).toBe(v1['table-uuid']);
    expect(v2['last-sequence-number']).toBe(2);
    expect(v2.snapshots.map((s) => s['sequence-number'])).toEqual([1, 2]);
    expect(v2.snapshots[1]?.['parent-snapshot-id']).toBe(c1.snapshotId);
    expect(v2['metadata-log']).toEqual([
      {
        'metadata-file': 'mem://root/iceberg/events/a/metadata/v1.metadata.json',
        'timestamp-ms': v1['last-updated-ms'],
      },
    ]);
    // Fast append: the new manifest first, the first one carried as it was.
    const m2 = await t.manifestsOf(currentSnapshot(v2)!);
    expect(
      m2.map((m) => [
        m.sequenceNumber,
        m.minSequenceNumber,
        m.addedSnapshotId,
        m.addedFilesCount,
        m.existingFilesCount,
        m.addedRowsCount,
      ]),
    ).toEqual([
      [2, 2, c2.snapshotId, 1, 0, 7],
      [1, 1, c1.snapshotId, 2, 0, 15],
    ]);
    const entries = await t.entriesOf(m2[0]!);
    expect(entries[0]?.dataFile).toMatchObject({
      filePath: `mem://root/${b3.key}`,
      hour: H8 / 3_600_000 + 1,
      sortOrderId: 0,
    });

    // Replace b1+b2 by one rollup file: the first manifest is rewritten with both DELETED.
    const rollup: TableFile = {
      key: 'rollups/events/a/date=2026-12-01/hour=08/x.parquet',
      recordCount: 15,
      fileSizeInBytes: 900,
      minReceivedAtMs: H8 + 1,
      maxReceivedAtMs: H8 + 2,
      sorted: true,
    };
    const c3 = await t.replace([b1.key, b2.key], [rollup]);
    const v3 = await t.readVersion(3);
    const s3 = currentSnapshot(v3)!;
    expect(s3.summary).toMatchObject({
      operation: 'replace',
      'added-data-files': '1',
      'deleted-data-files': '2',
      'added-records': '15',
      'deleted-records': '15',
      'total-records': '22',
      'total-data-files': '2',
      [THROUGH_BATCH_ID]: id(H8 + 3_600_001, 0),
    });
    const m3 = await t.manifestsOf(s3);
    expect(
      m3.map((m) => [
        m.sequenceNumber,
        m.addedFilesCount,
        m.existingFilesCount,
        m.deletedFilesCount,
        m.deletedRowsCount,
      ]),
    ).toEqual([
      [3, 1, 0, 0, 0],
      [3, 0, 0, 2, 15],
      [2, 1, 0, 0, 0],
    ]);
    const deleted = await t.entriesOf(m3[1]!);
    // DELETED entries keep the data and file sequence numbers they were added with (spec: never inherited again).
    expect(deleted.map((e) => [e.status, e.snapshotId, e.sequenceNumber, e.fileSequenceNumber])).toEqual([
      [STATUS_DELETED, c3.snapshotId, 1, 1],
      [STATUS_DELETED, c3.snapshotId, 1, 1],
    ]);
    expect((await t.entriesOf(m3[0]!))[0]).toMatchObject({
      status: STATUS_ADDED,
      sequenceNumber: 3,
      dataFile: { sortOrderId: 1 },
    });
    expect(await t.dataKeys()).toEqual([rollup.key, b3.key]);

    // Delete the rollup (retention): the manifest that only held deletions is dropped.
    await t.delete([rollup.key]);
    const v4 = await t.readVersion(4);
    const m4 = await t.manifestsOf(currentSnapshot(v4)!);
    expect(m4.map((m) => [m.sequenceNumber, m.addedFilesCount, m.existingFilesCount, m.deletedFilesCount])).toEqual([
      [4, 0, 0, 1],
      [2, 1, 0, 0],
    ]);
    expect(currentSnapshot(v4)?.summary).toMatchObject({
      operation: 'delete',
      'deleted-data-files': '1',
      'total-records': '7',
    });
    expect(await t.dataKeys()).toEqual([b3.key]);
    expect(v4['snapshot-log']).toHaveLength(4);
    expect(snapshotAsOf(v4, v4.snapshots[1]!['timestamp-ms'])?.['snapshot-id']).toBe(c2.snapshotId);
  });

  it('refuses to remove a file the table does not hold or to add one it holds', async () => {
    const store = new MemoryObjectStore();
    const t = tableOn(store);
    const b = batch(H8 + 1, 0);
    await t.append([b]);
    await expect(t.append([b])).rejects.toThrow(IcebergConflictError);
    await expect(t.delete(['events/a/nope.parquet'])).rejects.toThrow(IcebergConflictError);
    await expect(t.replace(['events/a/nope.parquet'], [batch(H8 + 2, 0)])).rejects.toThrow(IcebergConflictError);
    expect(await t.currentVersion()).toBe(1);
    // Nothing the refused commits prepared is left behind (they are refused before writing).
    expect(await metadataAvro(store)).toHaveLength(2);
  });

  it('merges carried manifests once a snapshot would list too many', async () => {
    const store = new MemoryObjectStore();
    const t = tableOn(store, { mergeManifestsAbove: 3 });
    for (let i = 0; i < 5; i++) await t.append([batch(H8 + i, 0, i + 1)]);
    const meta = (await t.load())!.metadata;
    const manifests = await t.manifestsOf(currentSnapshot(meta)!);
    expect(manifests.length).toBeLessThanOrEqual(3);
    expect(manifests.reduce((n, m) => n + m.addedRowsCount + m.existingRowsCount, 0)).toBe(15);
    const merged = manifests.find((m) => m.existingFilesCount > 1)!;
    for (const e of await t.entriesOf(merged)) {
      expect(e.status).toBe(STATUS_EXISTING);
      expect(e.sequenceNumber).not.toBeNull();
    }
    expect((await t.dataKeys()).sort()).toEqual([0, 1, 2, 3, 4].map((i) => batch(H8 + i, 0).key).sort());
  });

  it('a committer that loses the race re-reads, retries and leaves no files of its lost attempt', async () => {
    const store = new MemoryObjectStore();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let reached!: () => void;
    const atCreate = new Promise<void>((r) => (reached = r));
    let first = true;
    const slow = tableOn(store, {
      beforeMetadataCreate: async () => {
        if (!first) return;
        first = false;
        reached();
        await gate;
      },
    });
    const fast = tableOn(store);
    const a = slow.append([batch(H8 + 1, 0)]);
    await atCreate;
    const b = await fast.append([batch(H8 + 2, 0)]);
    release();
    const ra = await a;
    expect(b).toMatchObject({ version: 1, attempts: 1 });
    expect(ra).toMatchObject({ version: 2, attempts: 2 });
    const meta = (await slow.load())!.metadata;
    expect(meta.snapshots.map((s) => s['sequence-number'])).toEqual([1, 2]);
    expect((await slow.dataKeys()).sort()).toEqual([batch(H8 + 1, 0).key, batch(H8 + 2, 0).key].sort());
    // Two commits: two manifests + two lists; the lost attempt's manifest and list were deleted.
    const referenced = new Set<string>();
    for (const s of meta.snapshots) {
      referenced.add(s['manifest-list'].slice('mem://root/'.length));
      for (const m of await slow.manifestsOf(s)) referenced.add(m.manifestPath.slice('mem://root/'.length));
    }
    expect((await metadataAvro(store)).sort()).toEqual([...referenced].sort());
  });

  it('finds versions past a stale or missing hint', async () => {
    const store = new MemoryObjectStore();
    const t = tableOn(store);
    await t.append([batch(H8 + 1, 0)]);
    await t.append([batch(H8 + 2, 0)]);
    await store.putBytes('iceberg/events/a/metadata/version-hint.text', new TextEncoder().encode('1'));
    expect(await t.currentVersion()).toBe(2);
    await store.deleteKeys(['iceberg/events/a/metadata/version-hint.text']);
    expect(await t.currentVersion()).toBe(2);
    await t.append([batch(H8 + 3, 0)]);
    expect(await t.currentVersion()).toBe(3);
  });

  it('expires old snapshots and returns only the data files no retained snapshot references', async () => {
    const store = new MemoryObjectStore();
    let clock = H8 + 10 * 3_600_000;
    const t = tableOn(store, { now: () => clock });
    const [b1, b2, b3] = [batch(H8 + 1, 0), batch(H8 + 2, 0), batch(H8 + 3, 0)] as [TableFile, TableFile, TableFile];
    await t.append([b1, b2]);
    clock += 1000;
    await t.append([b3]);
    clock += 1000;
    const rollup: TableFile = {
      key: 'rollups/events/a/r.parquet',
      recordCount: 20,
      fileSizeInBytes: 10,
      minReceivedAtMs: H8 + 1,
      maxReceivedAtMs: H8 + 2,
      sorted: true,
    };
    await t.replace([b1.key, b2.key], [rollup]);
    const replacedAt = clock;
    clock += 1000;
    await t.delete([b3.key]);
    clock += 1000;

    // Keep the replace and the delete: b1 and b2 are live only in the two expired appends; b3 is live in the replace.
    const r1 = await t.expireSnapshots(replacedAt);
    expect(r1.expiredSnapshotIds).toHaveLength(2);
    expect(r1.unreferencedDataKeys.sort()).toEqual([b1.key, b2.key].sort());
    expect(r1.deletedMetadataFiles).toBeGreaterThan(0);
    const after = (await t.load())!;
    expect(after.version).toBe(5);
    expect(after.metadata.snapshots).toHaveLength(2);
    expect(after.metadata['snapshot-log']).toHaveLength(2);
    // Every manifest the retained snapshots name still exists.
    for (const s of after.metadata.snapshots)
      for (const m of await t.manifestsOf(s))
        expect(await store.getBytes(m.manifestPath.slice('mem://root/'.length))).not.toBeNull();

    const r2 = await t.expireSnapshots(clock);
    expect(r2.unreferencedDataKeys).toEqual([b3.key]);
    expect(await t.dataKeys()).toEqual([rollup.key]);
    expect((await t.expireSnapshots(clock)).expiredSnapshotIds).toEqual([]);
  });

  it('cleans the manifests a crashed commit left once they are older than the grace period', async () => {
    const store = new MemoryObjectStore();
    let clock = H8 + 10 * 3_600_000;
    await tableOn(store, { now: () => clock }).append([batch(H8 + 1, 0)]);
    // The "crashed" committer stops for good between its manifest writes and its metadata create.
    let reached!: () => void;
    const atCreate = new Promise<void>((r) => (reached = r));
    const crashed = tableOn(store, {
      now: () => clock,
      beforeMetadataCreate: () => {
        reached();
        return new Promise<never>(() => {});
      },
    });
    void crashed.append([batch(H8 + 2, 0)]);
    await atCreate;
    expect(await metadataAvro(store)).toHaveLength(4);

    const restarted = tableOn(store, { now: () => clock });
    expect(await restarted.cleanOrphans(60_000)).toEqual([]);
    clock += 60_001;
    expect(await restarted.cleanOrphans(60_000)).toHaveLength(2);
    expect(await metadataAvro(store)).toHaveLength(2);
    const c = await restarted.append([batch(H8 + 2, 0)]);
    expect(c.version).toBe(2);
    expect(await restarted.dataKeys()).toHaveLength(2);
  });
});
