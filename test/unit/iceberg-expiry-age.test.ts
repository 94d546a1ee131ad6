/**
 * Snapshot expiry counts a snapshot's age from when the next snapshot replaced it, not from its
 * own commit (docs/analysts.md: a reader of an older snapshot has ICEBERG_SNAPSHOT_RETENTION_SECONDS
 * from the next snapshot): an app idle for hours whose table then gets a `delete` (RETENTION_DAYS)
 * keeps the snapshot before it, and the files only it names, for the whole retention.
 */
import { describe, expect, it } from 'vitest';
import { IcebergTable, type TableFile, batchTableFile } from '../../shared/iceberg/table.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';

const H8 = Date.UTC(2026, 11, 1, 8);
const HOUR = 3_600_000;
const id = (ms: number, n: number): string => `${ms}-${String(n).padStart(4, '0')}-abcdef`;
const batch = (ms: number, n: number): TableFile =>
  batchTableFile(`events/a/${id(ms, n)}.parquet`, id(ms, n), 10, 1000 + n);

describe('IcebergTable.expireSnapshots: age from the replacement', () => {
  it('keeps a snapshot that was current for hours until the retention has passed since the next one replaced it', async () => {
    const store = new MemoryObjectStore();
    let clock = H8 + 10 * HOUR;
    const t = new IcebergTable({ store, collection: 'events', app: 'a', rootUri: 'mem://root/', now: () => clock });
    const [old, recent] = [batch(H8 + 1, 0), batch(H8 + HOUR + 1, 0)] as [TableFile, TableFile];
    const appended = await t.append([old, recent], { throughBatchId: recent.key });
    // Idle for 3 hours, then retention drops the old batch.
    clock += 3 * HOUR;
    const deleted = await t.delete([old.key]);
    const retentionMs = 10_000;

    // Right after the delete, and up to the retention later, the append (3 h old) is kept, and nothing is freed.
    for (const at of [clock, clock + retentionMs - 1]) {
      const r = await t.expireSnapshots(at - retentionMs);
      expect(r.expiredSnapshotIds).toEqual([]);
      expect(r.unreferencedDataKeys).toEqual([]);
    }
    expect((await t.load())?.metadata.snapshots.map((s) => s['snapshot-id'])).toEqual([
      appended.snapshotId,
      deleted.snapshotId,
    ]);

    // Once the retention has passed since the delete replaced it: expired, and the old batch file is freed.
    const later = clock + retentionMs;
    const r = await t.expireSnapshots(later - retentionMs);
    expect(r.expiredSnapshotIds).toEqual([appended.snapshotId]);
    expect(r.unreferencedDataKeys).toEqual([old.key]);
    // The current snapshot is kept however old.
    clock += 100 * HOUR;
    expect((await t.expireSnapshots(clock - retentionMs)).expiredSnapshotIds).toEqual([]);
  });
});
