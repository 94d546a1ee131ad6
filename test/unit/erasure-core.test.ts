/**
 * The pure parts of an erasure (issue 36): the row filter of a batch file (exact values, empty
 * file with the same schema), the SQL predicate, the request schema, the state mapping, the
 * redaction of ids from failure messages, the erasure log's hash, and the key names.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Job } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eraseRowsFromParquet, parquetToArrow } from '../../shared/erasure/rows.js';
import {
  erasureHashKey,
  erasureLogKey,
  hashId,
  writeErasureRecord,
  type ErasureRecord,
} from '../../shared/erasure/log.js';
import { encodeBatch } from '../../shared/parquet/encode.js';
import {
  IcebergConflictError,
  IcebergTable,
  type TableFile,
  batchTableFile,
  currentSnapshot,
} from '../../shared/iceberg/table.js';
import { rollupFileFirstId } from '../../shared/rollup/layout.js';
import { keyFamily, eraseQueueName, rollupQueuePrefix, queueKey } from '../../shared/redis/keyspace.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import { personPredicate, rewrittenRollupKey } from '../../services/rollup/erasure/erase.js';
import { redacted } from '../../services/rollup/erasure/job.js';
import { EraseRequestSchema, MAX_ERASE_IDS, isErasureId, newErasureId } from '../../shared/redis/jobs/erase.js';
import { eraseStateOf } from '../../services/api/erase.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';

const ALL = [
  'event_type',
  'event',
  'distinct_id',
  'anonymous_id',
  'ts',
  'message_id',
  'properties',
  'context',
  'dt',
  'received_at',
  'extra',
];

function batch(n: number, who: (i: number) => { d: string | null; a: string | null }): Uint8Array {
  const events = Array.from({ length: n }, (_, i) => {
    const { d, a } = who(i);
    return `{"event_type":"track","event":"e${i % 3}","distinct_id":${JSON.stringify(d)},"anonymous_id":${JSON.stringify(a)},"ts":"2026-12-04T00:00:00.${String(i).padStart(3, '0')}Z","message_id":"m${i}","properties":{"a": [1, 2.50, "é\\u00e9"], "n":null},"context":{"i":${i}},"dt":"2026-12-04","zz_unknown":{"big":12345678901234567890,"s":"x${i}"}}`;
  });
  const r = encodeBatch(`{"data":{"events":[${events.join(',')}]},"baseHash":null}`, 1_796_000_000_000);
  if (!r.ok) throw new Error(r.reason);
  return r.bytes;
}

describe('eraseRowsFromParquet', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'erase-unit-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const rowsOf = async (name: string, bytes: Uint8Array): Promise<Record<string, unknown>[]> => {
    const f = join(dir, name);
    await writeFile(f, bytes);
    return duckQuery(
      `SELECT ${ALL.map((c) => (c === 'received_at' ? 'epoch_ms(received_at)::VARCHAR AS received_at' : c)).join(', ')} FROM read_parquet(${sqlString(f)}) ORDER BY message_id`,
    );
  };

  it('drops exactly the rows of the ids and keeps every other value as stored (properties and extra text included)', async () => {
    const file = batch(40, (i) => ({
      d: i % 4 === 0 ? 'gone' : i % 7 === 0 ? null : `u${i % 5}`,
      a: i % 9 === 0 ? 'anon-gone' : null,
    }));
    const r = eraseRowsFromParquet(file, { distinctIds: ['gone'], anonymousIds: ['anon-gone'] });
    const before = await rowsOf('before.parquet', file);
    const expected = before.filter((row) => row.distinct_id !== 'gone' && row.anonymous_id !== 'anon-gone');
    expect(r.erased).toBe(before.length - expected.length);
    expect(r.erased).toBeGreaterThan(5);
    expect(r.rows).toBe(40);
    const after = await rowsOf('after.parquet', r.file as Uint8Array);
    expect(after).toEqual(expected);
    // Rows without an id (stored as '') are kept, and the JSON text is byte-for-byte the stored text.
    expect(after.some((row) => row.distinct_id === '')).toBe(true);
    expect(String(after[0]?.extra)).toContain('12345678901234567890');
    // Same schema (names, types, Iceberg field ids).
    const schema = async (name: string): Promise<unknown> =>
      duckQuery(
        `SELECT name, type, converted_type, field_id FROM parquet_schema(${sqlString(join(dir, name))}) ORDER BY name`,
      );
    expect(await schema('after.parquet')).toEqual(await schema('before.parquet'));
  });

  it('returns null when no row matches, and a zero-row file with the same schema when every row does', async () => {
    const file = batch(6, () => ({ d: 'p', a: null }));
    expect(eraseRowsFromParquet(file, { distinctIds: ['other'], anonymousIds: [] })).toEqual({
      file: null,
      rows: 6,
      erased: 0,
    });
    const r = eraseRowsFromParquet(file, { distinctIds: ['p'], anonymousIds: [] });
    expect(r.erased).toBe(6);
    expect(parquetToArrow(r.file as Uint8Array).numRows).toBe(0);
    expect(await rowsOf('empty.parquet', r.file as Uint8Array)).toEqual([]);
    expect(parquetToArrow(r.file as Uint8Array).schema.fields.map((f) => f.name)).toEqual(
      parquetToArrow(file).schema.fields.map((f) => f.name),
    );
    // Idempotent: the rewritten file holds nothing more to erase.
    expect(eraseRowsFromParquet(r.file as Uint8Array, { distinctIds: ['p'], anonymousIds: [] }).file).toBeNull();
  });
});

describe('erasure helpers', () => {
  it('personPredicate quotes ids and never matches NULL', async () => {
    const pred = personPredicate({ distinctIds: ["o'brien"], anonymousIds: [] });
    expect(pred).toContain("'o''brien'");
    const rows = await duckQuery(
      `SELECT count(*) FILTER (WHERE NOT ${pred})::INT AS kept FROM (VALUES ('o''brien', NULL), (NULL, 'x'), ('y', NULL)) t(distinct_id, anonymous_id)`,
    );
    expect(rows).toEqual([{ kept: 2 }]);
    expect(personPredicate({ distinctIds: [], anonymousIds: [] })).toBe('(false OR false)');
  });

  it('the request schema bounds counts and names the problem', () => {
    expect(EraseRequestSchema.safeParse({ distinct_ids: ['a'] }).success).toBe(true);
    expect(EraseRequestSchema.safeParse({}).success).toBe(false);
    expect(
      EraseRequestSchema.safeParse({ distinct_ids: Array.from({ length: MAX_ERASE_IDS + 1 }, (_, i) => `u${i}`) })
        .success,
    ).toBe(false);
    expect(EraseRequestSchema.safeParse({ distinct_ids: [''] }).success).toBe(false);
    expect(EraseRequestSchema.safeParse({ distinct_ids: ['x'.repeat(1024)] }).success).toBe(true);
    expect(EraseRequestSchema.safeParse({ distinct_ids: ['x'.repeat(1025)] }).success).toBe(false);
    expect(EraseRequestSchema.safeParse({ anonymous_ids: ['a'], dry_run: 'yes' }).success).toBe(false);
    const id = newErasureId(1_796_000_000_000);
    expect(isErasureId(id)).toBe(true);
    expect(isErasureId('er-1-2')).toBe(false);
  });

  it('maps BullMQ states to erasure states', () => {
    expect(eraseStateOf('waiting', null, 0)).toBe('queued');
    expect(eraseStateOf('delayed', { files_scanned: 3 }, 1)).toBe('running');
    expect(eraseStateOf('active', { state: 'waiting' }, 0)).toBe('waiting');
    expect(eraseStateOf('active', { state: 'running' }, 0)).toBe('running');
    expect(eraseStateOf('completed', null, 1)).toBe('completed');
    expect(eraseStateOf('failed', null, 10)).toBe('failed');
  });

  it('redacts every erased id from a failure message', () => {
    const job = { data: { distinctIds: ['alice@example.com'], anonymousIds: ['anon-1'] } } as unknown as Job;
    expect(redacted(new Error("Binder Error near 'alice@example.com' and anon-1"), job).message).toBe(
      "Binder Error near '<id>' and <id>",
    );
    const e = new Error('store down');
    expect(redacted(e, job)).toBe(e);
  });

  it('hashes ids with HMAC-SHA256 under ERASURE_HASH_KEY or a stored key; the log is append-only', async () => {
    const store = new MemoryObjectStore();
    await expect(erasureHashKey(store, 'short')).rejects.toThrow(/32/);
    expect(Buffer.from(await erasureHashKey(store, 'k'.repeat(32))).toString()).toBe('k'.repeat(32));
    const k1 = await erasureHashKey(store, undefined);
    expect(Buffer.from(k1).length).toBe(32);
    expect(await erasureHashKey(store, undefined)).toEqual(k1);
    const h = hashId(k1, 'alice');
    expect(h).toMatch(/^[0-9a-f]{64}$/);
    expect(hashId(Buffer.from('x'.repeat(32)), 'alice')).not.toBe(h);
    const rec: ErasureRecord = {
      v: 1,
      id: 'er-1',
      collection: 'events',
      app: 'a',
      requestedBy: 'token:ab',
      requestedAt: 'x',
      completedAt: 'y',
      distinctIdHashes: [h],
      anonymousIdHashes: [],
      filesScanned: 1,
      filesRewritten: 1,
      rowsErased: 2,
      files: ['k'],
      snapshots: { overwrite: [], expired: [] },
    };
    expect(await writeErasureRecord(store, rec)).toBe(true);
    expect(await writeErasureRecord(store, { ...rec, rowsErased: 99 })).toBe(false);
    expect(
      JSON.parse(
        Buffer.from((await store.getBytes(erasureLogKey('events', 'a', 'er-1')))?.body ?? new Uint8Array()).toString(),
      ).rowsErased,
    ).toBe(2);
  });

  it('a rewritten rollup key is a rollup file name with a tag; the erase queue is a named key family', () => {
    const key = rewrittenRollupKey(
      'events/a/',
      1_796_000_000_000,
      '1796000000000-0000-aaaaaa',
      '1796000000999-0000-bbbbbb',
    );
    expect(key).toMatch(/_1796000000999-0000-bbbbbb~[0-9a-f]{8}\.parquet$/);
    expect(rollupFileFirstId(key)).toBe('1796000000000-0000-aaaaaa');
    expect(keyFamily(queueKey(rollupQueuePrefix('q', false), eraseQueueName('q'), 'completed'))).toBe('erase-queue');
    expect(keyFamily(queueKey(rollupQueuePrefix('q', true), eraseQueueName('q'), 'er-1'), { queueName: 'q' })).toBe(
      'erase-queue',
    );
  });
});

describe('IcebergTable.overwrite (erasure)', () => {
  const H8 = Date.UTC(2026, 11, 1, 8);
  const bid = (n: number): string => `${H8 + n}-0000-abcdef`;
  const file = (n: number, rows: number, bytes: number): TableFile =>
    batchTableFile(`events/a/${bid(n)}.parquet`, bid(n), rows, bytes);

  it('replaces a file rewritten in place (same key) with its new size and count in one overwrite snapshot; expiry keeps the key', async () => {
    const store = new MemoryObjectStore();
    let clock = H8 + 10 * 3_600_000;
    const t = new IcebergTable({ store, collection: 'events', app: 'a', rootUri: 'mem://root/', now: () => clock++ });
    await t.append([file(1, 10, 1000), file(2, 5, 900)], { throughBatchId: bid(2) });
    await expect(t.append([file(1, 9, 950)])).rejects.toBeInstanceOf(IcebergConflictError);
    const c = await t.overwrite([`events/a/${bid(1)}.parquet`], [file(1, 7, 800)]);
    const meta = await t.readVersion(c.version);
    const snap = currentSnapshot(meta);
    expect(snap?.summary).toMatchObject({
      operation: 'overwrite',
      'total-records': '12',
      'total-data-files': '2',
      'deleted-records': '10',
      'added-records': '7',
    });
    const live = await t.liveFiles(snap);
    expect(
      [...live.values()]
        .map((l) => [
          t.keyOf(l.entry.dataFile.filePath),
          l.entry.dataFile.recordCount,
          l.entry.dataFile.fileSizeInBytes,
        ])
        .sort(),
    ).toEqual([
      [`events/a/${bid(1)}.parquet`, 7, 800],
      [`events/a/${bid(2)}.parquet`, 5, 900],
    ]);
    const exp = await t.expireSnapshots(clock + 1, { retainLast: 1 });
    expect(exp.expiredSnapshotIds.length).toBe(1);
    expect(exp.unreferencedDataKeys).toEqual([]);
    expect(() => t.overwrite([], [])).toThrow(/remove/);
  });
});
