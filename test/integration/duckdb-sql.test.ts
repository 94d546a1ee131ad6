import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { duckdbReadParquetSql } from '../../shared/duckdb.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { S3RVER_CREDENTIALS, s3StoreFor, startS3Server } from '../helpers/s3.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };

/** Runs statements in order on one fresh connection (secrets and views live per database). */
async function runAll(db: DuckDBInstance, statements: readonly string[]): Promise<Record<string, unknown>[]> {
  const connection = await db.connect();
  try {
    let rows: Record<string, unknown>[] = [];
    for (const s of statements) rows = (await connection.runAndReadAll(s)).getRowObjectsJson();
    return rows;
  } finally {
    connection.closeSync();
  }
}

async function push(url: string, app: string, events: number): Promise<string> {
  const r = await fetch(`${url}/push/events/${app}/x`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: batchBody(events),
  });
  expect(r.status).toBe(200);
  return ((await r.json()) as { batchId: string }).batchId;
}

async function waitListed(url: string, app: string, n: number): Promise<string[]> {
  return waitFor(
    async () => {
      const r = await fetch(`${url}/list/events/${app}?limit=1000`, { headers: auth });
      const body = (await r.json()) as { items: string[] };
      return body.items.length === n ? body.items : null;
    },
    30_000,
    `${n} batches of ${app} listed`,
  );
}

describe('duckdbReadParquetSql: DuckDB runs the generated SQL on files the product wrote', () => {
  let s: TestStack;
  let db: DuckDBInstance;
  beforeAll(async () => {
    s = await startTestStack();
    db = await DuckDBInstance.create(':memory:');
  });
  afterAll(async () => {
    db?.closeSync();
    await s?.shutdown();
  });

  it('filesystem store: one app, every app, and both README queries over the `from` expression', async () => {
    const alpha = [await push(s.url, 'alpha', 30), await push(s.url, 'alpha', 20)];
    const beta = [await push(s.url, 'beta', 7)];
    expect(await waitListed(s.url, 'alpha', 2)).toEqual(alpha.map((id) => `${id}.parquet`));
    await waitListed(s.url, 'beta', 1);

    const one = duckdbReadParquetSql({
      store: s.store,
      collection: 'events/{app}/{batchId}',
      params: { app: 'alpha' },
    });
    expect(one.setup).toEqual([]);
    expect(one.glob.startsWith(`${s.dataDir}/`)).toBe(true);
    const [count] = await runAll(db, [
      ...one.setup,
      `SELECT COUNT(*)::INTEGER AS n, COUNT(DISTINCT filename)::INTEGER AS files FROM read_parquet('${one.glob}', filename = true)`,
    ]);
    expect(count).toEqual({ n: 50, files: 2 });

    const all = duckdbReadParquetSql({
      store: s.store,
      collection: { storagePath: 'events/{app}/{batchId}' },
      params: { app: '*' },
    });
    const byType = await runAll(db, [
      `SELECT event_type, COUNT(*)::INTEGER AS n FROM ${all.from} GROUP BY event_type ORDER BY n DESC`,
    ]);
    expect(byType.reduce((a, r) => a + Number(r.n), 0)).toBe(57);
    const hours = await runAll(db, [
      `SELECT time_bucket(INTERVAL '1 hour', received_at::TIMESTAMPTZ) AS hour, COUNT(*)::INTEGER AS n FROM ${all.from} WHERE received_at >= now() - INTERVAL '7 days' GROUP BY 1 ORDER BY 1`,
    ]);
    expect(hours.reduce((a, r) => a + Number(r.n), 0)).toBe(57);
    const ids = await runAll(db, [
      `SELECT DISTINCT regexp_extract(filename, '([^/]+)\\.parquet$', 1) AS id FROM read_parquet('${all.glob}', filename = true) ORDER BY 1`,
    ]);
    expect(ids.map((r) => r.id)).toEqual([...alpha, ...beta].sort());
  });

  it('S3 store (s3rver): runs only where the httpfs extension is already installed (it cannot be downloaded here)', async (ctx) => {
    // Never INSTALL here: that would reach extensions.duckdb.org. LOAD succeeds only with a local copy.
    const probe = await runAll(db, ['SET autoinstall_known_extensions = false', 'LOAD httpfs']).then(
      () => true,
      () => false,
    );
    if (!probe) ctx.skip();
    const s3 = await startS3Server();
    try {
      const store = s3StoreFor(s3, 'lake');
      await store.putBytes(
        'events/gamma/1782933157690-0000-735223.parquet',
        new Uint8Array(
          await (
            await fetch(`${s.url}/pull/events/beta/${(await waitListed(s.url, 'beta', 1))[0]}`, { headers: auth })
          ).arrayBuffer(),
        ),
      );
      const sql = duckdbReadParquetSql({
        store,
        collection: 'events/{app}/{batchId}',
        params: { app: 'gamma' },
        credentials: { ...S3RVER_CREDENTIALS },
      });
      const [row] = await runAll(db, [
        ...sql.setup.filter((st) => !st.startsWith('INSTALL')),
        `SELECT COUNT(*)::INTEGER AS n FROM ${sql.from}`,
      ]);
      expect(row).toEqual({ n: 7 });
    } finally {
      await s3.close();
    }
  });
});
