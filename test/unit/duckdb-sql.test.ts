import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, describe, expect, it } from 'vitest';
import { duckdbReadParquetSql, sqlStringLiteral } from '../../shared/duckdb.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import { S3ObjectStore } from '../../shared/store/s3/index.js';

const EVENTS = 'events/{app}/{batchId}';
const creds = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalr/K7MDENG+bPxRfiCY' };

// DuckDB's parser, without executing: the S3 statements need the httpfs extension, which cannot
// be downloaded here, but every generated statement must at least be exactly one valid statement.
const duck = DuckDBInstance.create(':memory:');
afterAll(async () => (await duck).closeSync());
async function statementCount(sql: string): Promise<number> {
  const connection = await (await duck).connect();
  try {
    return (await connection.extractStatements(sql)).count;
  } finally {
    connection.closeSync();
  }
}

describe('duckdbReadParquetSql on S3', () => {
  it('AWS: bucket glob, httpfs, a secret with region and credentials, no endpoint or path style', async () => {
    const store = new S3ObjectStore({ bucket: 'my-bucket', region: 'eu-west-1' });
    const sql = duckdbReadParquetSql({ store, collection: EVENTS, params: { app: 'myapp' }, credentials: creds });
    expect(sql.glob).toBe('s3://my-bucket/events/myapp/*.parquet');
    expect(sql.from).toBe("read_parquet('s3://my-bucket/events/myapp/*.parquet')");
    expect(sql.setup).toEqual([
      'INSTALL httpfs',
      'LOAD httpfs',
      "CREATE OR REPLACE SECRET events_ingest (TYPE s3, KEY_ID 'AKIDEXAMPLE', SECRET 'wJalr/K7MDENG+bPxRfiCY', REGION 'eu-west-1', SCOPE 's3://my-bucket/')",
    ]);
    for (const s of [...sql.setup, `SELECT count(*) FROM ${sql.from}`]) expect(await statementCount(s)).toBe(1);
  });

  it('MinIO: path style, http endpoint as host:port with USE_SSL false, store prefix in glob and scope', async () => {
    const store = new S3ObjectStore({
      bucket: 'lake',
      prefix: 'ingest',
      endpoint: 'http://127.0.0.1:9000',
      forcePathStyle: true,
    });
    const sql = duckdbReadParquetSql({
      store,
      collection: { storagePath: EVENTS },
      params: { app: 'shop' },
      credentials: creds,
    });
    expect(sql.glob).toBe('s3://lake/ingest/events/shop/*.parquet');
    const secret = sql.setup[2] ?? '';
    expect(secret).toContain("ENDPOINT '127.0.0.1:9000'");
    expect(secret).not.toContain('http://');
    expect(secret).toContain('USE_SSL false');
    expect(secret).toContain("URL_STYLE 'path'");
    expect(secret).toContain("REGION 'us-east-1'");
    expect(secret).toContain("SCOPE 's3://lake/ingest/'");
    expect(await statementCount(secret)).toBe(1);
  });

  it('R2-like: https endpoint keeps SSL, region auto, session token from env', async () => {
    const store = new S3ObjectStore({
      bucket: 'r2b',
      endpoint: 'https://acct123.r2.cloudflarestorage.com',
      region: 'auto',
      forcePathStyle: true,
    });
    const env = { AWS_ACCESS_KEY_ID: 'r2key', AWS_SECRET_ACCESS_KEY: 'r2secret', AWS_SESSION_TOKEN: 'tok' };
    const secret = duckdbReadParquetSql({ store, collection: EVENTS, params: { app: 'a' }, env }).setup[2] ?? '';
    expect(secret).toBe(
      "CREATE OR REPLACE SECRET events_ingest (TYPE s3, KEY_ID 'r2key', SECRET 'r2secret', SESSION_TOKEN 'tok', REGION 'auto', ENDPOINT 'acct123.r2.cloudflarestorage.com', URL_STYLE 'path', SCOPE 's3://r2b/')",
    );
  });

  it('without credentials anywhere the secret has no keys (anonymous reads); explicit ones win over env', () => {
    const store = new S3ObjectStore({ bucket: 'pub' });
    const anon = duckdbReadParquetSql({ store, collection: EVENTS, params: { app: 'a' }, env: {} }).setup[2] ?? '';
    expect(anon).not.toMatch(/KEY_ID|SECRET '/);
    const explicit =
      duckdbReadParquetSql({
        store,
        collection: EVENTS,
        params: { app: 'a' },
        credentials: creds,
        env: { AWS_ACCESS_KEY_ID: 'envkey', AWS_SECRET_ACCESS_KEY: 'x' },
      }).setup[2] ?? '';
    expect(explicit).toContain("KEY_ID 'AKIDEXAMPLE'");
    expect(explicit).not.toContain('envkey');
  });

  it('quotes values so a quote in a credential cannot end the string', async () => {
    const store = new S3ObjectStore({ bucket: 'b' });
    const evil = { accessKeyId: "k'); DROP TABLE x; --", secretAccessKey: "s'" };
    const secret =
      duckdbReadParquetSql({ store, collection: EVENTS, params: { app: 'a' }, credentials: evil, secretName: 'mine' })
        .setup[2] ?? '';
    expect(secret).toContain("KEY_ID 'k''); DROP TABLE x; --'");
    expect(secret).toContain("SECRET 's'''");
    expect(secret.startsWith('CREATE OR REPLACE SECRET mine (')).toBe(true);
    expect(await statementCount(secret)).toBe(1);
    expect(sqlStringLiteral("o'brien")).toBe("'o''brien'");
  });

  it('refuses endpoints DuckDB cannot take and secret names that are not identifiers', () => {
    const withPath = new S3ObjectStore({ bucket: 'b', endpoint: 'http://127.0.0.1:9000/base' });
    expect(() => duckdbReadParquetSql({ store: withPath, collection: EVENTS, params: { app: 'a' } })).toThrow(
      /host:port only/,
    );
    const store = new S3ObjectStore({ bucket: 'b' });
    expect(() =>
      duckdbReadParquetSql({ store, collection: EVENTS, params: { app: 'a' }, secretName: 'x; DROP' }),
    ).toThrow(/identifier/);
  });
});

describe('duckdbReadParquetSql on the filesystem and others', () => {
  it('filesystem: absolute glob under the root, no setup; "*" reads every app', async () => {
    const store = new FilesystemObjectStore({ root: '/srv/ingest/data' });
    const one = duckdbReadParquetSql({ store, collection: EVENTS, params: { app: 'myapp' } });
    expect(one).toEqual({
      setup: [],
      from: "read_parquet('/srv/ingest/data/events/myapp/*.parquet')",
      glob: '/srv/ingest/data/events/myapp/*.parquet',
    });
    const all = duckdbReadParquetSql({ store, collection: EVENTS, params: { app: '*' } });
    expect(all.glob).toBe('/srv/ingest/data/events/*/*.parquet');
    expect(await statementCount(`SELECT * FROM ${all.from}`)).toBe(1);
  });

  it('a relative root is made absolute and a quote in it is escaped', () => {
    const rel = duckdbReadParquetSql({
      store: new FilesystemObjectStore({ root: 'data' }),
      collection: EVENTS,
      params: { app: 'a' },
    });
    expect(rel.glob).toBe(`${process.cwd()}/data/events/a/*.parquet`);
    const quoted = duckdbReadParquetSql({
      store: new FilesystemObjectStore({ root: "/tmp/o'brien" }),
      collection: EVENTS,
      params: { app: 'a' },
    });
    expect(quoted.from).toBe("read_parquet('/tmp/o''brien/events/a/*.parquet')");
  });

  it('other storage paths: every prefix param resolves, literals kept', () => {
    const store = new FilesystemObjectStore({ root: '/d' });
    const sql = duckdbReadParquetSql({
      store,
      collection: 'logs/{tenant}/raw/{app}/{id}',
      params: { tenant: 't1', app: '*' },
    });
    expect(sql.glob).toBe('/d/logs/t1/raw/*/*.parquet');
  });

  it('clear errors: memory store, missing or unsafe params, glob characters in the root, bad storagePath', () => {
    expect(() =>
      duckdbReadParquetSql({ store: new MemoryObjectStore(), collection: EVENTS, params: { app: 'a' } }),
    ).toThrow(/keeps no files DuckDB can open/);
    const fsStore = new FilesystemObjectStore({ root: '/d' });
    expect(() => duckdbReadParquetSql({ store: fsStore, collection: EVENTS })).toThrow(/missing param "app"/);
    expect(() => duckdbReadParquetSql({ store: fsStore, collection: EVENTS, params: { app: '..' } })).toThrow(
      /param "app"/,
    );
    expect(() => duckdbReadParquetSql({ store: fsStore, collection: EVENTS, params: { app: "a'b" } })).toThrow(
      /param "app"/,
    );
    expect(() =>
      duckdbReadParquetSql({
        store: new FilesystemObjectStore({ root: '/d/[x]' }),
        collection: EVENTS,
        params: { app: 'a' },
      }),
    ).toThrow(/glob characters/);
    expect(() => duckdbReadParquetSql({ store: fsStore, collection: 'events/{app}', params: {} })).not.toThrow();
    expect(() => duckdbReadParquetSql({ store: fsStore, collection: 'events/app', params: {} })).toThrow(
      /must end with a \{param\}/,
    );
  });
});
