/**
 * `duckdbSelectWithPathColumns`: one column per list-prefix param, read from each file's path by
 * DuckDB itself (files written by DuckDB into a temp tree shaped like the store's).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { duckdbReadParquetSql, duckdbSelectWithPathColumns } from '../../shared/duckdb.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';

const root = mkdtempSync(join(os.tmpdir(), 'ingest-pathcols-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function writeFile(rel: string, rows: number): Promise<void> {
  mkdirSync(join(root, rel, '..'), { recursive: true });
  await duckQuery(
    `COPY (SELECT range::VARCHAR AS event_type, 'x' AS event FROM range(${rows})) TO ${sqlString(join(root, rel))} (FORMAT parquet)`,
  );
}

describe('duckdbSelectWithPathColumns', () => {
  it('adds tenant and app from the path for a two-param storagePath; a param named like a file column is left out', async () => {
    await writeFile('logs/t1/raw/a.b-1/1782933157690-0000-000001.parquet', 2);
    await writeFile('logs/t1/raw/c~2/1782933157690-0000-000002.parquet', 3);
    await writeFile('logs/t2/raw/a.b-1/1782933157690-0000-000003.parquet', 5);
    // A file whose path does not fit the template is not matched by the glob at all.
    await writeFile('logs/t2/other/a/1782933157690-0000-000004.parquet', 7);
    const storagePath = 'logs/{tenant}/raw/{app}/{id}';
    const read = duckdbReadParquetSql({
      store: new FilesystemObjectStore({ root }),
      collection: storagePath,
      params: { tenant: '*', app: '*' },
    });
    const select = duckdbSelectWithPathColumns(read, storagePath);
    const rows = await duckQuery(
      `SELECT tenant, app, COUNT(*)::INTEGER AS n FROM (${select}) GROUP BY ALL ORDER BY ALL`,
    );
    expect(rows).toEqual([
      { tenant: 't1', app: 'a.b-1', n: 2 },
      { tenant: 't1', app: 'c~2', n: 3 },
      { tenant: 't2', app: 'a.b-1', n: 5 },
    ]);
    const [cols] = await duckQuery(`SELECT * FROM (${select}) LIMIT 1`);
    expect(Object.keys(cols ?? {})).toEqual(['event_type', 'event', 'tenant', 'app']);

    const clash = duckdbSelectWithPathColumns(read, 'logs/{tenant}/raw/{event}/{id}', ['event_type', 'event']);
    const [one] = await duckQuery(`SELECT * FROM (${clash}) LIMIT 1`);
    expect(Object.keys(one ?? {})).toEqual(['event_type', 'event', 'tenant']);
    expect(one?.event).toBe('x');
  });
});
