/**
 * A collection's `parquetCompression` reaches every writer of its batch files in the services:
 * the encoder (by the job's collection, from its own SyncConfig) and the API's encode of a large
 * body on its encode thread (API_ENCODE_MAX_BYTES). Real Redis, BullMQ, the stack in this
 * process, the filesystem store; files read back by DuckDB and plain hyparquet.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parquetReadObjects } from 'hyparquet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parquetFileCompression } from '../../shared/parquet/compression.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

const base = {
  readRoles: ['admin'],
  writeRoles: ['public'],
  encryption: 'none',
  allowedMimeTypes: ['application/json'],
  listable: true,
};

describe('parquetCompression per collection, through the services', () => {
  let stack: TestStack;
  let conf: string;
  beforeAll(async () => {
    conf = mkdtempSync(join(tmpdir(), 'codec-conf-'));
    const config = {
      version: 1,
      collections: [
        { ...base, name: 'packed', storagePath: 'packed/{app}/{batchId}', parquetCompression: 'zstd' },
        { ...base, name: 'events', storagePath: 'events/{app}/{batchId}' },
      ],
    };
    writeFileSync(join(conf, 'config.json'), JSON.stringify(config));
    stack = await startTestStack({ CONFIG_FILE: join(conf, 'config.json') });
  });
  afterAll(async () => {
    await stack?.shutdown();
    rmSync(conf, { recursive: true, force: true });
  });

  const push = async (path: string, n: number): Promise<string> => {
    const r = await fetch(`${stack.url}/push/${path}/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: batchBody(n),
    });
    expect(r.status).toBe(200);
    return ((await r.json()) as { batchId: string }).batchId;
  };
  const fileOf = (folder: string, id: string): Promise<Uint8Array> =>
    waitFor(
      async () =>
        existsSync(join(folder, `${id}.parquet`)) ? new Uint8Array(readFileSync(join(folder, `${id}.parquet`))) : null,
      20_000,
      `${id} written`,
    );

  it("writes the encoder's and the API's files of a zstd collection as ZSTD, and another collection's with the default (SNAPPY), which plain hyparquet reads", async () => {
    // 10 events: the encoder encodes it; 400 events (> 128 KiB): the API encodes it on its thread.
    const small = await push('packed/a', 10);
    const large = await push('packed/a', 400);
    const other = await push('events/a', 10);
    const packed = join(stack.dataDir, 'packed', 'a');
    const [smallFile, largeFile] = await Promise.all([fileOf(packed, small), fileOf(packed, large)]);
    expect(parquetFileCompression(smallFile)).toBe('zstd');
    expect(parquetFileCompression(largeFile)).toBe('zstd');
    const codecs = await duckQuery(
      `SELECT DISTINCT compression FROM parquet_metadata(${sqlString(join(packed, '*.parquet'))})`,
    );
    expect(codecs).toEqual([{ compression: 'ZSTD' }]);
    expect(
      await duckQuery(`SELECT count(*)::INTEGER AS n FROM read_parquet(${sqlString(join(packed, '*.parquet'))})`),
    ).toEqual([{ n: 410 }]);

    const plainFile = await fileOf(join(stack.dataDir, 'events', 'a'), other);
    expect(parquetFileCompression(plainFile)).toBe('snappy');
    const rows = await parquetReadObjects({
      file: plainFile.buffer.slice(plainFile.byteOffset, plainFile.byteOffset + plainFile.byteLength) as ArrayBuffer,
    });
    expect(rows).toHaveLength(10);
  });
});
