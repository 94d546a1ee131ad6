import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Plain hyparquet: no hyparquet-compressors, as a browser dashboard reading pullParquet bytes has it.
import { parquetReadObjects } from 'hyparquet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  PARQUET_COMPRESSIONS,
  PARQUET_COMPRESSION_DEFAULT,
  type ParquetCompression,
  encodeBatch,
  prepareBatch,
  restampParquet,
} from '../../shared/parquet/encode.js';
import { parquetFileCompression } from '../../shared/parquet/compression.js';
import { eraseRowsFromParquet } from '../../shared/erasure/rows.js';
import { compressionOfCollections, parseSyncConfig } from '../../shared/config.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';

const RECEIVED_AT = 1782933157690;
const body = (n: number): string =>
  JSON.stringify({
    data: {
      events: Array.from({ length: n }, (_, i) => ({
        event: `e${i}`,
        distinct_id: `u${i % 2}`,
        message_id: `m${i}`,
        properties: { i },
      })),
    },
  });

function encoded(n: number, compression?: ParquetCompression): Uint8Array {
  const r = encodeBatch(body(n), RECEIVED_AT, compression === undefined ? {} : { compression });
  if (!r.ok) throw new Error(r.reason);
  return r.bytes;
}

const ab = (f: Uint8Array): ArrayBuffer => f.buffer.slice(f.byteOffset, f.byteOffset + f.byteLength) as ArrayBuffer;

describe('batch-file codec (parquetCompression)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'codec-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it.each(PARQUET_COMPRESSIONS)(
    'writes every column chunk with %s, and reads the codec back from the footer',
    async (codec) => {
      const file = encoded(5, codec);
      expect(parquetFileCompression(file)).toBe(codec);
      const path = join(dir, `${codec}.parquet`);
      await writeFile(path, file);
      const chunks = await duckQuery(`SELECT DISTINCT compression FROM parquet_metadata(${sqlString(path)})`);
      expect(chunks).toEqual([{ compression: codec.toUpperCase() }]);
      expect(await duckQuery(`SELECT count(*) AS n FROM read_parquet(${sqlString(path)})`)).toEqual([{ n: '5' }]);
    },
  );

  it('writes the default (snappy) when none is given, which plain hyparquet opens; ZSTD needs its compressors', async () => {
    expect(PARQUET_COMPRESSION_DEFAULT).toBe('snappy');
    const file = encoded(3);
    expect(parquetFileCompression(file)).toBe('snappy');
    const rows = await parquetReadObjects({ file: ab(file) });
    expect(rows.map((r) => r.event)).toEqual(['e0', 'e1', 'e2']);
    expect((await parquetReadObjects({ file: ab(encoded(3, 'uncompressed')) })).length).toBe(3);
    // Why the default is not ZSTD (docs/decisions/0022-batch-file-codec.md).
    await expect(parquetReadObjects({ file: ab(encoded(3, 'zstd')) })).rejects.toThrow(/ZSTD/);
  });

  it('encodes a prepared body with the codec asked for', () => {
    const prepared = prepareBatch(Buffer.from(body(2)));
    if (!prepared.ok) throw new Error(prepared.reason);
    expect(parquetFileCompression(prepared.batch.toParquet(RECEIVED_AT, { compression: 'zstd' }))).toBe('zstd');
  });

  it("keeps a file's own codec when a reissue restamps it or an erasure rewrites it", () => {
    for (const codec of PARQUET_COMPRESSIONS) {
      expect(parquetFileCompression(restampParquet(encoded(4, codec), RECEIVED_AT + 1))).toBe(codec);
      const erased = eraseRowsFromParquet(encoded(4, codec), { distinctIds: ['u0'], anonymousIds: [] });
      expect(erased.erased).toBe(2);
      expect(parquetFileCompression(erased.file as Uint8Array)).toBe(codec);
    }
  });

  it('names no codec for a zero-row file, and refuses bytes that are not Parquet', () => {
    expect(parquetFileCompression(encoded(0, 'zstd'))).toBeUndefined();
    expect(() => parquetFileCompression(new TextEncoder().encode('{"data":{"events":[]}}'))).toThrow(
      /not a Parquet file/,
    );
  });

  it('takes parquetCompression per collection in the SyncConfig, refuses an unknown codec, and maps job collections to codecs', () => {
    const base = { name: 'a', storagePath: 'a/{app}/{batchId}' };
    const cfg = parseSyncConfig({
      version: 1,
      collections: [
        { ...base, parquetCompression: 'zstd' },
        { name: 'b', storagePath: 'b/{app}/{batchId}' },
      ],
    });
    const of = compressionOfCollections(cfg.collections);
    expect([of('a'), of('b'), of('gone')]).toEqual(['zstd', 'snappy', 'snappy']);
    expect(() => parseSyncConfig({ version: 1, collections: [{ ...base, parquetCompression: 'gzip' }] })).toThrow(
      /collections\.0\.parquetCompression/,
    );
  });
});
