/**
 * The analysts' exact view: rollup files of rolled periods + batch files at or after each
 * prefix's rolled watermark. Built from the manifests read *before* DuckDB resolves any file, so:
 *
 * - a rollup being written is invisible until its manifest lists it (its batch files are read
 *   meanwhile), and once listed the batch files of its period are filtered out by name;
 * - a crash mid-rollup leaves at most a file no manifest lists: never read;
 * - the watermark never moves back, so a count never goes backwards;
 * - a batch replayed into a rolled period is invisible until the period is re-rolled, then read
 *   once, from the new rollup file.
 *
 * Batch files below the watermark are pruned by DuckDB from their file names (a filter on the
 * `filename` column is applied to the file list before any file is opened).
 */
import { type DuckdbReadParquetOptions, duckdbReadParquetSql, sqlStringLiteral } from '../duckdb.js';
import { EVENT_COLUMNS } from '../parquet/index.js';
import { listPrefix, parseStoragePath } from '../paths.js';
import type { ObjectStore } from '../store/types.js';
import { msKey } from './layout.js';
import { type Manifest, readManifest } from './manifest.js';
import { discoverPrefixes, prefixOfKey } from './prefixes.js';

/** Columns of the view, in order: the batch-file columns, then the batch id each row came from (then one column per list-prefix param, e.g. `app`). */
export const VIEW_COLUMNS = [...EVENT_COLUMNS, 'received_at', 'extra', 'batch_id'] as const;

export interface RollupView {
  /** Statements to run first (httpfs + secret on S3). May hold credentials: never log them. */
  setup: string[];
  /** A SELECT with {@link VIEW_COLUMNS}: `CREATE VIEW events AS <select>`. */
  select: string;
  /** The manifests the view was built from (per list prefix). */
  manifests: Manifest[];
}

const COLUMN_LIST = VIEW_COLUMNS.map((c) => `"${c}"`).join(', ');
const BATCH_COLUMNS = VIEW_COLUMNS.filter((c) => c !== 'batch_id')
  .map((c) => `"${c}"`)
  .join(', ');

/** A typed relation with no rows, for a view over nothing yet. */
const EMPTY_SELECT = `SELECT ${[...EVENT_COLUMNS.map((c) => `''::VARCHAR AS "${c}"`), `TIMESTAMPTZ '1970-01-01 00:00:00+00' AS "received_at"`, `NULL::VARCHAR AS "extra"`, `''::VARCHAR AS "batch_id"`].join(', ')} WHERE false`;

/**
 * The exact view for a collection prefix (params as in `duckdbReadParquetSql`; `'*'` = every
 * value). Reads the manifests of the matching prefixes (one GET each, found with a bounded skip
 * scan of the store when a param is `'*'`) and checks whether any batch file lies at or past a
 * watermark (one listing call per prefix).
 */
export async function rollupViewSql(opts: DuckdbReadParquetOptions): Promise<RollupView> {
  const base = duckdbReadParquetSql(opts);
  const storagePath = typeof opts.collection === 'string' ? opts.collection : opts.collection.storagePath;
  const template = parseStoragePath(storagePath);
  const params = opts.params ?? {};
  const pattern = listPrefix(template, params);
  // base.glob = <root URL> + <pattern> + '*.parquet'
  const rootUrl = base.glob.slice(0, base.glob.length - pattern.length - '*.parquet'.length);
  const store: ObjectStore = opts.store;

  const wildcard = template.prefixParams.some((p) => params[p] === '*');
  const prefixes = wildcard
    ? [
        ...new Set([
          ...(await discoverPrefixes(store, template, { match: params })),
          ...(await discoverPrefixes(store, template, { root: 'rollups', match: params })),
        ]),
      ].sort()
    : [pattern];

  const manifests: Manifest[] = [];
  let anyBatch = false;
  for (const prefix of prefixes) {
    const m = await readManifest(store, prefix);
    if (m) manifests.push(m);
    const after = m && m.watermarkMs > 0 ? `${prefix}${msKey(m.watermarkMs)}` : undefined;
    if (!anyBatch) anyBatch = (await store.listKeys(prefix, { startAfter: after, limit: 1 })).length > 0;
  }

  // One VARCHAR column per list-prefix param (`app`), as the batch-file view has: from the
  // manifest's prefix for rollup files, from the file name for batch files.
  const prefixSegments = template.segments.slice(0, -1);
  const paramNames = prefixSegments.flatMap((seg) =>
    seg.kind === 'param' && !(VIEW_COLUMNS as readonly string[]).includes(seg.name) ? [seg.name] : [],
  );
  const pathPattern = `/${prefixSegments.map((seg) => (seg.kind === 'literal' ? seg.value.replaceAll('.', '\\.') : '([^/]+)')).join('/')}/[^/]+\\.parquet$`;
  const groupOf = (name: string): number =>
    prefixSegments.filter((seg) => seg.kind === 'param').findIndex((seg) => seg.kind === 'param' && seg.name === name) +
    1;
  const pathColumns = paramNames.map(
    (n) => `regexp_extract(filename, ${sqlStringLiteral(pathPattern)}, ${groupOf(n)}) AS "${n}"`,
  );
  const extra = (list: string[]): string => (list.length ? `, ${list.join(', ')}` : '');

  const parts: string[] = [];
  for (const m of manifests) {
    const urls = m.periods.flatMap((p) => p.files.map((f) => rootUrl + f.key));
    if (urls.length === 0) continue;
    const values = prefixOfKey(template, `${m.prefix}x`)?.params ?? {};
    parts.push(
      `SELECT ${COLUMN_LIST}${extra(paramNames.map((n) => `${sqlStringLiteral(values[n] ?? '')} AS "${n}"`))} FROM read_parquet([${urls.map(sqlStringLiteral).join(', ')}])`,
    );
  }
  if (anyBatch) {
    const excluded = manifests
      .filter((m) => m.watermarkMs > 0)
      .map(
        (m) =>
          `NOT (filename >= ${sqlStringLiteral(rootUrl + m.prefix)} AND filename < ${sqlStringLiteral(rootUrl + m.prefix + msKey(m.watermarkMs))})`,
      );
    const where = excluded.length > 0 ? ` WHERE ${excluded.join(' AND ')}` : '';
    parts.push(
      `SELECT ${BATCH_COLUMNS}, regexp_extract(filename, '([^/]+)\\.parquet$', 1) AS "batch_id"${extra(pathColumns)} FROM read_parquet(${sqlStringLiteral(base.glob)}, filename = true)${where}`,
    );
  }
  const empty = `SELECT *${extra(paramNames.map((n) => `''::VARCHAR AS "${n}"`))} FROM (${EMPTY_SELECT})`;
  const select =
    parts.length === 0
      ? empty
      : parts.length === 1
        ? (parts[0] as string)
        : parts.map((p) => `(${p})`).join(' UNION ALL ');
  return { setup: base.setup, select, manifests };
}
