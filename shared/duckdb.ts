/**
 * SQL for reading a collection's Parquet files with DuckDB, straight from the store the
 * product writes to: a `read_parquet('<glob>')` expression plus the statements DuckDB needs
 * first (the `httpfs` extension and an S3 secret on S3; nothing on the filesystem).
 */
import path from 'node:path';
import { checkParamValue, listPrefix, parseStoragePath } from './paths.js';
import type { ObjectStore, StoreLocation } from './store/types.js';

/** Matches every value of a prefix param (all apps, for example). */
export const ANY_PARAM = '*';

/** S3 credentials written into the DuckDB secret. */
export interface DuckdbS3Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

export interface DuckdbReadParquetOptions {
  /** A store whose location (ObjectStore.location) is a folder or S3 (any other store has no files DuckDB can open). */
  store: ObjectStore;
  /** The collection: its config (anything with a `storagePath`) or the storagePath itself. */
  collection: { storagePath: string } | string;
  /** Values of the list-prefix params (`{ app: 'myapp' }`); `'*'` matches every value. Missing params are an error. */
  params?: Readonly<Record<string, string>>;
  /** S3 only: explicit credentials; otherwise those the store was given (its location's), else `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN` from `env`. */
  credentials?: DuckdbS3Credentials;
  /** S3 only: where to look for credentials when none are given (default `process.env`). */
  env?: Readonly<Record<string, string | undefined>>;
  /** S3 only: name of the DuckDB secret (default `events_ingest`). */
  secretName?: string;
}

export interface DuckdbReadParquet {
  /** Statements to run, in order, before any query that uses `from` (none for the filesystem). May hold credentials: never log them. */
  setup: string[];
  /** `read_parquet('<glob>')`, usable wherever DuckDB takes a table: `SELECT ... FROM <from>`. */
  from: string;
  /** The glob inside `from` (an absolute path, or `s3://bucket/...`). */
  glob: string;
}

/** Characters DuckDB's glob would interpret; refused in roots and prefixes rather than silently matching more files. */
const GLOB_META_RE = /[*?[\]{}]/;
const SECRET_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/** Quotes `value` as a SQL string literal: the only escape inside `'...'` is a doubled quote. */
export function sqlStringLiteral(value: string): string {
  if (value.includes('\0')) throw new Error('SQL string must not contain NUL characters');
  return `'${value.replaceAll("'", "''")}'`;
}

/**
 * The DuckDB SQL that reads a collection's Parquet files where the store keeps them.
 *
 * - Filesystem store: `from` is `read_parquet('<absolute root>/events/<app>/*.parquet')`, `setup` is empty.
 * - S3 store: `from` is `read_parquet('s3://<bucket>/<prefix>events/<app>/*.parquet')`, and `setup` is
 *   `INSTALL httpfs`, `LOAD httpfs` and a `CREATE OR REPLACE SECRET` (TYPE s3) scoped to the bucket with the
 *   region, the endpoint (`host:port`, for MinIO/R2), `URL_STYLE 'path'` when the store uses path-style
 *   URLs, `USE_SSL false` for an `http://` endpoint, and the credentials when any are known.
 * The store says which through ObjectStore.location.
 *
 * Throws an Error naming the problem for any other store, a bad storagePath, a missing or invalid
 * param, or a root/prefix holding glob characters.
 */
export function duckdbReadParquetSql(opts: DuckdbReadParquetOptions): DuckdbReadParquet {
  const storagePath = typeof opts.collection === 'string' ? opts.collection : opts.collection.storagePath;
  const template = parseStoragePath(storagePath);
  const params: Record<string, string> = {};
  for (const name of template.prefixParams) {
    const value = opts.params?.[name];
    if (value === undefined)
      throw new Error(
        `duckdbReadParquetSql: missing param "${name}" for storagePath "${storagePath}" (use "${ANY_PARAM}" for all values)`,
      );
    if (value !== ANY_PARAM) {
      const problem = checkParamValue(value);
      if (problem) throw new Error(`duckdbReadParquetSql: param "${name}" ${problem}`);
    }
    params[name] = value;
  }
  // Params are [A-Za-z0-9._~-] or the wildcard, and literals are checked by parseStoragePath, so the prefix is glob-safe.
  const prefix = listPrefix(template, params);
  const location = opts.store.location?.();
  if (location?.kind === 'file') return fileRead(location.dir, prefix);
  if (location?.kind === 's3') return s3Read(location, prefix, opts);
  throw new Error(
    `duckdbReadParquetSql: store ${opts.store.describe()} keeps no files DuckDB can open; use a filesystem or an S3 store`,
  );
}

/** `read_parquet` of the files under `prefix` in the folder `dir`: no setup. */
function fileRead(dir: string, prefix: string): DuckdbReadParquet {
  const root = path.resolve(dir).split(path.sep).join('/');
  if (GLOB_META_RE.test(root))
    throw new Error(
      `duckdbReadParquetSql: filesystem root ${JSON.stringify(root)} contains glob characters (*?[]{}); DuckDB would misread it`,
    );
  const glob = `${root.replace(/\/$/, '')}/${prefix}*.parquet`;
  return { setup: [], from: `read_parquet(${sqlStringLiteral(glob)})`, glob };
}

/** `read_parquet` of the files under `prefix` in an S3 store, after httpfs and a secret scoped to the store's bucket and prefix. */
function s3Read(
  s3: Extract<StoreLocation, { kind: 's3' }>,
  prefix: string,
  opts: DuckdbReadParquetOptions,
): DuckdbReadParquet {
  if (GLOB_META_RE.test(s3.prefix) || GLOB_META_RE.test(s3.bucket)) {
    throw new Error(
      `duckdbReadParquetSql: S3 bucket/prefix ${JSON.stringify(`${s3.bucket}/${s3.prefix}`)} contains glob characters (*?[]{})`,
    );
  }
  const glob = `s3://${s3.bucket}/${s3.prefix}${prefix}*.parquet`;
  const secretName = opts.secretName ?? 'events_ingest';
  if (!SECRET_NAME_RE.test(secretName))
    throw new Error(`duckdbReadParquetSql: secretName ${JSON.stringify(secretName)} must be an identifier`);
  const fields: string[] = ['TYPE s3'];
  const creds = opts.credentials ?? s3.credentials ?? credentialsFromEnv(opts.env ?? process.env);
  if (creds) {
    fields.push(`KEY_ID ${sqlStringLiteral(creds.accessKeyId)}`, `SECRET ${sqlStringLiteral(creds.secretAccessKey)}`);
    if (creds.sessionToken) fields.push(`SESSION_TOKEN ${sqlStringLiteral(creds.sessionToken)}`);
  }
  fields.push(`REGION ${sqlStringLiteral(s3.region)}`);
  if (s3.endpoint !== undefined) {
    const endpoint = endpointParts(s3.endpoint);
    fields.push(`ENDPOINT ${sqlStringLiteral(endpoint.host)}`);
    if (!endpoint.tls) fields.push('USE_SSL false');
  }
  if (s3.forcePathStyle) fields.push(`URL_STYLE 'path'`);
  // Scoped so this secret is only used for our bucket, whatever other secrets the session holds.
  fields.push(`SCOPE ${sqlStringLiteral(`s3://${s3.bucket}/${s3.prefix}`)}`);
  return {
    setup: ['INSTALL httpfs', 'LOAD httpfs', `CREATE OR REPLACE SECRET ${secretName} (${fields.join(', ')})`],
    from: `read_parquet(${sqlStringLiteral(glob)})`,
    glob,
  };
}

/**
 * A `SELECT` over `read.glob` that adds one VARCHAR column per list-prefix param of
 * `storagePath` (`app` for the default `events/{app}/{batchId}`), taken from each file's path,
 * so rows read over every app (`app: '*'`) can be told apart. Usable wherever DuckDB takes a
 * subquery: `CREATE VIEW events AS <this>`. A param named like one of the file's columns would
 * clash: it is left out (the file's column wins).
 */
export function duckdbSelectWithPathColumns(
  read: Pick<DuckdbReadParquet, 'glob'>,
  storagePath: string,
  fileColumns: readonly string[] = [],
): string {
  const template = parseStoragePath(storagePath);
  const prefix = template.segments.slice(0, -1);
  let group = 0;
  const columns: string[] = [];
  // Anchored at the end: the prefix's segments, then the batch file. RE2 syntax (DuckDB's regexp_extract).
  const pattern = `/${prefix.map((s) => (s.kind === 'literal' ? s.value.replaceAll('.', '\\.') : '([^/]+)')).join('/')}/[^/]+\\.parquet$`;
  for (const s of prefix) {
    if (s.kind !== 'param') continue;
    group++;
    if (fileColumns.includes(s.name)) continue;
    columns.push(`regexp_extract(filename, ${sqlStringLiteral(pattern)}, ${group}) AS "${s.name}"`);
  }
  const from = `read_parquet(${sqlStringLiteral(read.glob)}${columns.length ? ', filename = true' : ''})`;
  return columns.length ? `SELECT * EXCLUDE (filename), ${columns.join(', ')} FROM ${from}` : `SELECT * FROM ${from}`;
}

/** The standard AWS variables; null when the key pair is incomplete (DuckDB then reads anonymously). */
function credentialsFromEnv(env: Readonly<Record<string, string | undefined>>): DuckdbS3Credentials | null {
  const accessKeyId = env.AWS_ACCESS_KEY_ID;
  const secretAccessKey = env.AWS_SECRET_ACCESS_KEY;
  if (!accessKeyId || !secretAccessKey) return null;
  return { accessKeyId, secretAccessKey, sessionToken: env.AWS_SESSION_TOKEN || undefined };
}

/** DuckDB wants `host[:port]` without a scheme, and TLS as a separate flag. */
function endpointParts(endpoint: string): { host: string; tls: boolean } {
  let url: URL;
  try {
    // A bare `host:port` (no scheme) is how DuckDB itself spells it; treat it as https like DuckDB does.
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(endpoint) ? endpoint : `https://${endpoint}`);
  } catch {
    throw new Error(`duckdbReadParquetSql: S3 endpoint ${JSON.stringify(endpoint)} is not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new Error(`duckdbReadParquetSql: S3 endpoint ${JSON.stringify(endpoint)} must be http(s)`);
  if (url.pathname !== '/' && url.pathname !== '')
    throw new Error(
      `duckdbReadParquetSql: S3 endpoint ${JSON.stringify(endpoint)} has a path; DuckDB takes host:port only`,
    );
  return { host: url.host, tls: url.protocol === 'https:' };
}

/** The DuckDB URL of the store's root (ends with `/`) and the setup statements to read it. */
export function storeRootUrl(
  store: ObjectStore,
  env?: Readonly<Record<string, string | undefined>>,
): { rootUrl: string; setup: string[] } {
  const sql = duckdbReadParquetSql({ store, collection: 'r/{id}', params: {}, env });
  return { rootUrl: sql.glob.slice(0, -'r/*.parquet'.length), setup: sql.setup };
}
