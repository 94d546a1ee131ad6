/**
 * `events-ingest query`: runs SQL in an in-memory DuckDB where `events` is a view over either a
 * folder filled by `sync` or the store the server writes to (configured like the server); with
 * neither, the SQL runs as given (it names its files itself, like the README's queries).
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type CollectionConfig, type Env, loadSyncConfig } from '../shared/config.js';
import { ANY_PARAM, duckdbReadParquetSql, duckdbSelectWithPathColumns, sqlStringLiteral } from '../shared/duckdb.js';
import { checkParamValue, parseStoragePath } from '../shared/paths.js';
import {
  type ViewCopyProgress,
  type ViewCopyResult,
  defaultViewCopyDir,
  refreshViewCopy,
} from '../shared/rollup/view-copy.js';
import { rollupViewSql } from '../shared/rollup/view.js';
import { storeFromEnv } from '../shared/store/from-env.js';
import { closeStore } from '../shared/store/optional.js';
import type { ObjectStore } from '../shared/store/types.js';
import { CliError, EXIT, messageOf } from './errors.js';
import { formatCsv, formatJsonLines, formatTable } from './format.js';
import { acquireLock } from './lock.js';
import { formatBytes } from './progress.js';
import { readCursor } from './sync.js';

/**
 * Where `events` reads from. With `--store` on S3, `copy` says how: `true` = through a local copy
 * (`--copy`), `false` = DuckDB's httpfs only (`--no-copy`), absent = httpfs when it loads, else the
 * copy. `cacheDir` is the copy's folder (`--cache-dir`; default under ~/.cache).
 */
export type QuerySource =
  | { kind: 'dir'; dir: string }
  | { kind: 'store'; env: Env; app?: string; collection?: string; copy?: boolean; cacheDir?: string }
  | { kind: 'table'; env: Env; app: string; collection?: string; asOf?: string }
  | { kind: 'none' };

export interface RunQueryOptions {
  /** Lines for the user (stderr): why a copy is made, its progress. Never event contents. */
  notice?: (line: string) => void;
  /** For the default copy folder: `XDG_CACHE_HOME` (default `process.env`). */
  env?: Readonly<Record<string, string | undefined>>;
  signal?: AbortSignal;
  /** How long to wait for another query refreshing the same copy folder (default 2 minutes). */
  lockWaitMs?: number;
}

/** How long `INSTALL httpfs` may try to download before the copy is used instead (a firewall that drops packets would hang it). */
const HTTPFS_INSTALL_TIMEOUT_MS = 30_000;
/** How long a query waits for another query refreshing the same copy folder. */
const COPY_LOCK_WAIT_MS = 120_000;
/** At most one progress line per this many ms while copying. */
const PROGRESS_EVERY_MS = 1_000;

/** The columns of a batch file (docs: README "Columns"); a path param named like one is not added. */
const FILE_COLUMNS = [
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
  'batch_id',
];

export interface QueryResult {
  columns: string[];
  rows: unknown[][];
}

/** The statements that define the `events` view for `source`; the S3 ones may hold credentials (never print them). */
export async function eventsViewSql(source: QuerySource): Promise<string[]> {
  if (source.kind === 'none') return [];
  if (source.kind === 'table') return (await import('./table.js')).tableViewStatements(source);
  if (source.kind === 'dir') {
    const dir = path.resolve(source.dir);
    if (!existsSync(dir)) throw new CliError(`--dir ${dir} does not exist`);
    if (!readdirSync(dir).some((n) => n.endsWith('.parquet') && !n.startsWith('.'))) {
      throw new CliError(`no .parquet files in ${dir} (run "events-ingest sync" into it first)`);
    }
    if (/[*?[\]{}]/.test(dir)) throw new CliError(`--dir ${dir} contains glob characters (*?[]{})`);
    const files = `read_parquet(${sqlStringLiteral(`${dir.split(path.sep).join('/')}/*.parquet`)})`;
    // A synced folder holds one app, named in its cursor: the view has the same `app` column as --store's.
    let app: string | undefined;
    try {
      app = (await readCursor(dir))?.app;
    } catch {
      app = undefined;
    }
    return [
      `CREATE VIEW events AS SELECT *${app === undefined ? '' : `, ${sqlStringLiteral(app)} AS app`} FROM ${files}`,
    ];
  }
  const { collection, params } = storeTarget(source);
  let sql;
  try {
    sql = duckdbReadParquetSql({ store: storeFromEnv(source.env), collection, params });
  } catch (err) {
    throw new CliError(messageOf(err));
  }
  // One column per prefix param (`app`), from each file's path: rows of several apps stay apart.
  return [
    ...sql.setup,
    `CREATE VIEW events AS ${duckdbSelectWithPathColumns(sql, collection.storagePath, FILE_COLUMNS)}`,
  ];
}

/**
 * The `events` view statements, exact over rollups: with `--store`, rollup files of rolled periods
 * plus batch files after each prefix's rolled watermark (shared/rollup/view.ts).
 */
export async function eventsViewStatements(source: QuerySource): Promise<string[]> {
  const raw = await eventsViewSql(source);
  if (source.kind !== 'store') return raw;
  const { collection, params } = storeTarget(source);
  try {
    const view = await rollupViewSql({ store: storeFromEnv(source.env), collection, params });
    // Nothing rolled yet: the view is the batch files, exactly what `raw` reads.
    if (view.manifests.length === 0) return raw;
    return [...view.setup, `CREATE VIEW events AS ${view.select}`];
  } catch (err) {
    throw new CliError(messageOf(err));
  }
}

/** The collection `--store` reads (`--collection`, default the first) and the list-prefix params (`--app`, else every value). */
function storeTarget(source: Extract<QuerySource, { kind: 'store' }>): {
  collection: CollectionConfig;
  params: Record<string, string>;
} {
  const config = loadSyncConfig(source.env);
  const collection =
    source.collection === undefined
      ? config.collections[0]
      : config.collections.find((c) => c.name === source.collection);
  if (!collection)
    throw new CliError(
      `no collection "${source.collection}" in the config (have: ${config.collections.map((c) => c.name).join(', ')})`,
      EXIT.usage,
    );
  const template = parseStoragePath(collection.storagePath);
  if (source.app !== undefined && !template.prefixParams.includes('app')) {
    throw new CliError(
      `collection "${collection.name}" (storagePath ${collection.storagePath}) has no {app} param`,
      EXIT.usage,
    );
  }
  // The rule the server applies to the app in a push path (shared/paths.ts), so the CLI refuses what no push could have stored.
  const badApp = source.app === undefined || source.app === ANY_PARAM ? null : checkParamValue(source.app);
  if (badApp) throw new CliError(`--app ${JSON.stringify(source.app)}: an app name ${badApp}`, EXIT.usage);
  // `--app` picks the app; every other prefix param (and the app when not given) matches everything.
  const params = Object.fromEntries(
    template.prefixParams.map((p) => [p, p === 'app' && source.app !== undefined ? source.app : ANY_PARAM]),
  );
  return { collection, params };
}

type DuckConnection = Awaited<
  ReturnType<Awaited<ReturnType<typeof import('@duckdb/node-api').DuckDBInstance.create>>['connect']>
>;

/**
 * When the view over `source` cannot be defined because the store holds nothing under what it
 * reads (DuckDB then says "No files found" with its SQL), the plain reason: no events for that
 * app (or at all) in the store, named as `where` (default: the store itself; the S3 bucket when
 * the view reads a local copy of it). Null when there are objects there (DuckDB's own error
 * stands) or the store cannot be listed.
 */
async function noEventsReason(source: Extract<QuerySource, { kind: 'store' }>, where?: string): Promise<string | null> {
  const { collection, params } = storeTarget(source);
  const template = parseStoragePath(collection.storagePath);
  // The fixed part of the prefix: literals and chosen params up to the first wildcard.
  const fixed: string[] = [];
  for (const seg of template.segments.slice(0, -1)) {
    const value = seg.kind === 'literal' ? seg.value : params[seg.name];
    if (value === undefined || value === ANY_PARAM) break;
    fixed.push(value);
  }
  const store = storeFromEnv(source.env);
  try {
    if ((await store.listKeys(fixed.length ? `${fixed.join('/')}/` : '', { limit: 1 })).length > 0) return null;
    const what =
      source.app === undefined || source.app === ANY_PARAM
        ? `no events in collection "${collection.name}"`
        : `no events for app ${JSON.stringify(source.app)}`;
    return `${what} in ${where ?? store.describe()}`;
  } catch {
    // Cannot tell: DuckDB's error is shown as it is.
    return null;
  } finally {
    await closeStore(store);
  }
}

/**
 * Loads DuckDB's httpfs extension (installing it first if needed, which downloads it from
 * extensions.duckdb.org); null when it loaded, else DuckDB's reason (first line).
 */
async function httpfsProblem(connection: DuckConnection): Promise<string | null> {
  try {
    await connection.run('LOAD httpfs');
    return null;
  } catch {
    // Not installed here: try to install it (a download), bounded.
  }
  const timer = setTimeout(() => connection.interrupt(), HTTPFS_INSTALL_TIMEOUT_MS);
  try {
    await connection.run('INSTALL httpfs');
    await connection.run('LOAD httpfs');
    return null;
  } catch (err) {
    return messageOf(err).split('\n')[0] ?? 'unknown error';
  } finally {
    clearTimeout(timer);
  }
}

/** DuckDB's version and platform, for the notice saying where httpfs goes. */
async function duckdbPlatform(connection: DuckConnection): Promise<{ version: string; platform: string }> {
  try {
    const r = await connection.runAndReadAll('SELECT version() AS v, (SELECT platform FROM pragma_platform()) AS p');
    const [v, p] = (r.getRowsJson()[0] ?? []) as unknown[];
    return { version: String(v ?? '?'), platform: String(p ?? '?') };
  } catch {
    return { version: '<version>', platform: '<platform>' };
  }
}

/**
 * Whether `query --store` on S3 reads through httpfs or the local copy: httpfs when it loads;
 * otherwise the copy, with a notice saying why and how to read S3 directly (or, with `--no-copy`,
 * a CliError saying the same).
 */
async function httpfsOrCopy(
  connection: DuckConnection,
  noCopy: boolean,
  dir: string,
  notice?: (line: string) => void,
): Promise<'httpfs' | 'copy'> {
  const problem = await httpfsProblem(connection);
  if (problem === null) return 'httpfs';
  const { version, platform } = await duckdbPlatform(connection);
  const direct =
    `to read S3 directly, install httpfs once where extensions.duckdb.org is reachable ` +
    `(INSTALL httpfs in DuckDB ${version}), or put httpfs.duckdb_extension in ~/.duckdb/extensions/${version}/${platform}/`;
  if (noCopy)
    throw new CliError(
      `--no-copy: DuckDB's httpfs extension is not available (${problem}); ${direct}, or drop --no-copy to read through a local copy`,
    );
  notice?.(
    `events-ingest: DuckDB's httpfs extension is not available (${problem}), so query --store reads S3 through a local copy of the objects the view needs, ` +
      `fetched with the server's own S3 client into ${dir} (kept: the next run fetches only new or changed objects). ` +
      `To skip the httpfs attempt, pass --copy; ${direct}.`,
  );
  return 'copy';
}

/**
 * Refreshes the local copy of what the view reads from `store` (shared/rollup/view-copy.ts)
 * under the copy folder's lock, printing progress (objects and bytes, never contents), and
 * returns the source that reads the copy: the same view SQL over a filesystem store. The lock
 * is held until `release` (after the query), so a second query never prunes files under this one.
 */
async function viewCopySource(
  source: Extract<QuerySource, { kind: 'store' }>,
  store: ObjectStore,
  dir: string,
  opts: RunQueryOptions,
): Promise<{ source: QuerySource; release: () => Promise<void> }> {
  const notice = opts.notice ?? (() => undefined);
  const { collection, params } = storeTarget(source);
  try {
    mkdirSync(dir, { recursive: true });
  } catch (err) {
    throw new CliError(`cannot create the copy folder ${dir}: ${messageOf(err)}`);
  }
  const lock = await waitForLock(dir, opts.lockWaitMs ?? COPY_LOCK_WAIT_MS, opts.signal);
  try {
    const started = Date.now();
    let lastLine = started;
    const onProgress = (p: ViewCopyProgress): void => {
      if (Date.now() - lastLine < PROGRESS_EVERY_MS) return;
      lastLine = Date.now();
      notice(
        `copy: ${p.fetched} objects fetched (${formatBytes(p.fetchedBytes)}), ${p.cached} already here, ${p.needed} needed so far`,
      );
    };
    let result: ViewCopyResult;
    try {
      result = await refreshViewCopy({ store, collection, params, dir, onProgress, signal: opts.signal });
    } catch (err) {
      if (opts.signal?.aborted) throw opts.signal.reason;
      throw new CliError(`copying the view from ${store.describe()} to ${dir} failed: ${messageOf(err)}`);
    }
    const removed = result.removed > 0 ? `, ${result.removed} no longer needed removed` : '';
    notice(
      `copy: ${result.needed} objects in the view (${result.prefixes} prefixes): ${result.fetched} fetched (${formatBytes(result.fetchedBytes)}), ${result.cached} already in ${dir}${removed} (${((Date.now() - started) / 1000).toFixed(1)} s)`,
    );
    const env: Env = { ...source.env, STORE: 'fs', DATA_DIR: result.root };
    return {
      source: { kind: 'store', env, app: source.app, collection: source.collection },
      release: () => lock.release(),
    };
  } catch (err) {
    await lock.release();
    throw err;
  }
}

/** The copy folder's lock, waiting (bounded) while another query refreshes the same folder. */
async function waitForLock(
  dir: string,
  waitMs: number,
  signal?: AbortSignal,
): Promise<{ release: () => Promise<void> }> {
  const until = Date.now() + waitMs;
  for (;;) {
    try {
      return await acquireLock(dir, 'query');
    } catch (err) {
      if (!(err instanceof CliError) || err.exitCode !== EXIT.locked || Date.now() > until) throw err;
    }
    signal?.throwIfAborted();
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Runs `sql` with the `events` view defined; DuckDB errors become CliErrors (exit 1) with
 * DuckDB's message. With `--store` on S3 the view reads S3 through DuckDB's httpfs, or through
 * a local copy (see {@link QuerySource}), saying why on `opts.notice`.
 */
export async function runQuery(sql: string, source: QuerySource, opts: RunQueryOptions = {}): Promise<QueryResult> {
  let duck: typeof import('@duckdb/node-api');
  try {
    duck = await import('@duckdb/node-api');
  } catch {
    throw new CliError('query needs the @duckdb/node-api package (npm install @duckdb/node-api)');
  }
  const instance = await duck.DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  let release = async (): Promise<void> => undefined;
  /** The S3 store `--store` opened (closed at the end). */
  let s3: ObjectStore | undefined;
  let tableCopyDir: string | undefined;
  try {
    let effective = source;
    if (source.kind === 'table' && source.env.STORE === 's3') {
      // As `--store`: DuckDB's httpfs when it loads; else a temporary copy of just the snapshot's files, fetched with the server's S3 client.
      const problem = await httpfsProblem(connection);
      if (problem !== null) {
        tableCopyDir = mkdtempSync(path.join(os.tmpdir(), 'events-ingest-table-'));
        const dir = tableCopyDir;
        const setup = await (
          await import('./table.js')
        ).tableViewStatements(source, {
          dir,
          onCopied: (files, bytes, ms) =>
            opts.notice?.(
              `events-ingest: DuckDB's httpfs extension is not available (${problem}), so query --table read the snapshot's ${files} data files (${formatBytes(bytes)}) ` +
                `through a temporary local copy fetched with the server's S3 client in ${(ms / 1000).toFixed(1)} s (removed after the query)`,
            ),
        });
        // The view is defined: nothing more to set up below.
        effective = { kind: 'none' };
        for (const [i, statement] of setup.entries()) {
          try {
            await connection.run(statement);
          } catch (err) {
            throw new CliError(
              `DuckDB failed ${statement.startsWith('CREATE VIEW') ? 'defining the events view' : `setup statement ${i + 1}`}: ${messageOf(err)}`,
            );
          }
        }
      }
    }
    if (source.kind === 'store' && source.env.STORE === 's3') {
      const store = storeFromEnv(source.env);
      s3 = store;
      const dir = path.resolve(source.cacheDir ?? defaultViewCopyDir(store, opts.env ?? process.env, os.homedir()));
      const copy =
        source.copy === true || (await httpfsOrCopy(connection, source.copy === false, dir, opts.notice)) === 'copy';
      if (copy) {
        const got = await viewCopySource(source, store, dir, opts);
        effective = got.source;
        release = got.release;
      }
    }
    const setup = await eventsViewStatements(effective);
    for (const [i, statement] of setup.entries()) {
      try {
        await connection.run(statement);
      } catch (err) {
        const empty =
          statement.startsWith('CREATE VIEW') && effective.kind === 'store'
            ? await noEventsReason(effective, s3?.describe())
            : null;
        if (empty) throw new CliError(empty);
        // The statement itself is not printed: a CREATE SECRET holds credentials.
        const what = statement.startsWith('CREATE VIEW')
          ? 'defining the events view'
          : `setup statement ${i + 1} (${statement.split(' ').slice(0, 2).join(' ')})`;
        throw new CliError(`DuckDB failed ${what}: ${messageOf(err)}`);
      }
    }
    try {
      const reader = await connection.runAndReadAll(sql);
      return { columns: reader.columnNames(), rows: reader.getRowsJson() as unknown[][] };
    } catch (err) {
      const hint =
        source.kind === 'none' && /Table with name events does not exist/i.test(messageOf(err))
          ? ' (the events view needs --dir <dir> or --store)'
          : '';
      throw new CliError(`DuckDB: ${messageOf(err)}${hint}`);
    }
  } finally {
    connection.closeSync();
    instance.closeSync();
    if (s3) await closeStore(s3);
    await release();
    if (tableCopyDir) rmSync(tableCopyDir, { recursive: true, force: true });
  }
}

/** Renders a result in the chosen format. */
export function renderResult(result: QueryResult, format: 'table' | 'json' | 'csv'): string {
  if (format === 'json') return formatJsonLines(result.columns, result.rows);
  if (format === 'csv') return formatCsv(result.columns, result.rows);
  return formatTable(result.columns, result.rows);
}
