/**
 * `events-ingest query`: runs SQL in an in-memory DuckDB where `events` is a view over either a
 * folder filled by `sync` or the store the server writes to (configured like the server); with
 * neither, the SQL runs as given (it names its files itself, like the README's queries).
 */
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { type Env, loadSyncConfig } from '../shared/config.js';
import { ANY_PARAM, duckdbReadParquetSql, duckdbSelectWithPathColumns, sqlStringLiteral } from '../shared/duckdb.js';
import { parseStoragePath } from '../shared/paths.js';
import { rollupViewSql } from '../shared/rollup/view.js';
import { storeFromEnv } from '../shared/store/from-env.js';
import { CliError, EXIT, messageOf } from './errors.js';
import { formatCsv, formatJsonLines, formatTable } from './format.js';
import { readCursor } from './sync.js';

export type QuerySource = { kind: 'dir'; dir: string } | { kind: 'store'; env: Env; app?: string; collection?: string } | { kind: 'none' };

/** The columns of a batch file (docs: README "Columns"); a path param named like one is not added. */
const FILE_COLUMNS = ['event_type', 'event', 'distinct_id', 'anonymous_id', 'ts', 'message_id', 'properties', 'context', 'dt', 'received_at', 'extra', 'batch_id'];

export interface QueryResult {
  columns: string[];
  rows: unknown[][];
}

/** The statements that define the `events` view for `source`; the S3 ones may hold credentials (never print them). */
export async function eventsViewSql(source: QuerySource): Promise<string[]> {
  if (source.kind === 'none') return [];
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
    return [`CREATE VIEW events AS SELECT *${app === undefined ? '' : `, ${sqlStringLiteral(app)} AS app`} FROM ${files}`];
  }
  const config = loadSyncConfig(source.env);
  const collection = source.collection === undefined ? config.collections[0] : config.collections.find((c) => c.name === source.collection);
  if (!collection) throw new CliError(`no collection "${source.collection}" in the config (have: ${config.collections.map((c) => c.name).join(', ')})`, EXIT.usage);
  const template = parseStoragePath(collection.storagePath);
  // `--app` picks the app; every other prefix param (and the app when not given) matches everything.
  const params = Object.fromEntries(template.prefixParams.map((p) => [p, p === 'app' && source.app !== undefined ? source.app : ANY_PARAM]));
  if (source.app !== undefined && !template.prefixParams.includes('app')) {
    throw new CliError(`collection "${collection.name}" (storagePath ${collection.storagePath}) has no {app} param`, EXIT.usage);
  }
  let sql;
  try {
    sql = duckdbReadParquetSql({ store: storeFromEnv(source.env), collection, params });
  } catch (err) {
    throw new CliError(messageOf(err));
  }
  // One column per prefix param (`app`), from each file's path: rows of several apps stay apart.
  return [...sql.setup, `CREATE VIEW events AS ${duckdbSelectWithPathColumns(sql, collection.storagePath, FILE_COLUMNS)}`];
}

/**
 * The `events` view statements, exact over rollups: with `--store`, rollup files of rolled periods
 * plus batch files after each prefix's rolled watermark (shared/rollup/view.ts).
 */
export async function eventsViewStatements(source: QuerySource): Promise<string[]> {
  const raw = await eventsViewSql(source);
  if (source.kind !== 'store') return raw;
  const config = loadSyncConfig(source.env);
  const collection = source.collection === undefined ? config.collections[0] : config.collections.find((c) => c.name === source.collection);
  if (!collection) return raw;
  const template = parseStoragePath(collection.storagePath);
  const params = Object.fromEntries(template.prefixParams.map((p) => [p, p === 'app' && source.app !== undefined ? source.app : ANY_PARAM]));
  try {
    const view = await rollupViewSql({ store: storeFromEnv(source.env), collection, params });
    // Nothing rolled yet: the view is the batch files, exactly what `raw` reads.
    if (view.manifests.length === 0) return raw;
    return [...view.setup, `CREATE VIEW events AS ${view.select}`];
  } catch (err) {
    throw new CliError(messageOf(err));
  }
}

/** Runs `sql` with the `events` view defined; DuckDB errors become CliErrors (exit 1) with DuckDB's message. */
export async function runQuery(sql: string, source: QuerySource): Promise<QueryResult> {
  const setup = await eventsViewStatements(source);
  let duck: typeof import('@duckdb/node-api');
  try {
    duck = await import('@duckdb/node-api');
  } catch {
    throw new CliError('query needs the @duckdb/node-api package (npm install @duckdb/node-api)');
  }
  const instance = await duck.DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    for (const [i, statement] of setup.entries()) {
      try {
        await connection.run(statement);
      } catch (err) {
        // The statement itself is not printed: a CREATE SECRET holds credentials.
        const what = statement.startsWith('CREATE VIEW') ? 'defining the events view' : `setup statement ${i + 1} (${statement.split(' ').slice(0, 2).join(' ')})`;
        throw new CliError(`DuckDB failed ${what}: ${messageOf(err)}`);
      }
    }
    try {
      const reader = await connection.runAndReadAll(sql);
      return { columns: reader.columnNames(), rows: reader.getRowsJson() as unknown[][] };
    } catch (err) {
      const hint = source.kind === 'none' && /Table with name events does not exist/i.test(messageOf(err)) ? ' (the events view needs --dir <dir> or --store)' : '';
      throw new CliError(`DuckDB: ${messageOf(err)}${hint}`);
    }
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

/** Renders a result in the chosen format. */
export function renderResult(result: QueryResult, format: 'table' | 'json' | 'csv'): string {
  if (format === 'json') return formatJsonLines(result.columns, result.rows);
  if (format === 'csv') return formatCsv(result.columns, result.rows);
  return formatTable(result.columns, result.rows);
}
