/**
 * The app's Iceberg table as the CLI reads it (`query --table`, `table`): the snapshot's data
 * files from the table's metadata (shared/iceberg/table.ts), read through our own DuckDB as one
 * `events` view (no Iceberg extension needed). Read-only: it never commits.
 */
import { type CollectionConfig, type Env, loadSyncConfig } from '../shared/config.js';
import { sqlStringLiteral } from '../shared/duckdb.js';
import {
  IcebergTable,
  type Snapshot,
  THROUGH_BATCH_ID,
  type TableMetadata,
  currentSnapshot,
  snapshotAsOf,
  storeRootUri,
  tableAppName,
} from '../shared/iceberg/table.js';
import { checkParamValue } from '../shared/paths.js';
import { rollupFileFirstId } from '../shared/rollup/layout.js';
import { storeRootUrl } from '../shared/duckdb.js';
import { VIEW_COLUMNS } from '../shared/rollup/view.js';
import { storeFromEnv } from '../shared/store/from-env.js';
import { createStore } from '../shared/store/create.js';
import { closeStore } from '../shared/store/optional.js';
import { DEFAULT_COPY_CONCURRENCY, fetchObject } from '../shared/rollup/view-copy.js';
import path from 'node:path';
import type { ObjectStore } from '../shared/store/types.js';
import { CliError, EXIT, messageOf } from './errors.js';

export interface TableTarget {
  env: Env;
  app: string;
  collection?: string;
  /** `--as-of`: a snapshot id, or an ISO timestamp (the snapshot current then). */
  asOf?: string;
}

/** The store and the table of `--app` in `--collection` (default the first). Close the store after use (closeStore). */
export function openTable(t: TableTarget): { store: ObjectStore; table: IcebergTable; collection: CollectionConfig } {
  const config = loadSyncConfig(t.env);
  const collection =
    t.collection === undefined ? config.collections[0] : config.collections.find((c) => c.name === t.collection);
  if (!collection)
    throw new CliError(
      `no collection "${t.collection}" in the config (have: ${config.collections.map((c) => c.name).join(', ')})`,
      EXIT.usage,
    );
  const bad = checkParamValue(t.app);
  if (bad) throw new CliError(`--app ${JSON.stringify(t.app)}: an app name ${bad}`, EXIT.usage);
  const store = storeFromEnv(t.env);
  try {
    const table = new IcebergTable({
      store,
      collection: collection.name,
      app: tableAppName({ app: t.app }),
      rootUri: storeRootUri(store),
      createIfAbsent: () => Promise.reject(new Error('the CLI reads the table; it never commits')),
    });
    return { store, table, collection };
  } catch (err) {
    // Closing only releases sockets; the error to report is the one above.
    void closeStore(store).catch(() => undefined);
    throw new CliError(messageOf(err));
  }
}

/** The snapshot `asOf` names (default the current one) in `meta`. */
export function pickSnapshot(meta: TableMetadata, asOf: string | undefined): Snapshot {
  if (asOf === undefined) {
    const cur = currentSnapshot(meta);
    if (!cur) throw new CliError('the table has no snapshot yet');
    return cur;
  }
  if (/^\d+$/.test(asOf)) {
    const s = meta.snapshots.find((x) => String(x['snapshot-id']) === asOf);
    if (!s)
      throw new CliError(
        `--as-of ${asOf}: no such snapshot in the table (expired after ICEBERG_SNAPSHOT_RETENTION_SECONDS, or never; see "events-ingest table")`,
      );
    return s;
  }
  const ms = Date.parse(asOf);
  if (!Number.isFinite(ms))
    throw new CliError(`--as-of ${JSON.stringify(asOf)}: neither a snapshot id nor an ISO timestamp`, EXIT.usage);
  const s = snapshotAsOf(meta, ms);
  if (!s)
    throw new CliError(
      `--as-of ${asOf}: the table has no snapshot that old (the oldest retained is ${new Date(Math.min(...meta.snapshots.map((x) => x['timestamp-ms']))).toISOString()})`,
    );
  return s;
}

/**
 * Where the view reads the snapshot's files when DuckDB cannot open the store (S3 without httpfs):
 * `dir`, a fresh folder the files are fetched into with the store's own client (the caller removes it).
 */
export interface TableLocalCopy {
  dir: string;
  /** Told once the files are fetched: how many and how many bytes (never contents). */
  onCopied?: (files: number, bytes: number, ms: number) => void;
}

/** Fetches `keys` of `store` into `dir` (same keys as paths), a few at a time; returns the bytes fetched. */
async function copyKeys(store: ObjectStore, keys: readonly string[], dir: string): Promise<number> {
  let next = 0;
  let bytes = 0;
  let failure: CliError | undefined;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < keys.length && !failure; i = next++) {
      const key = keys[i] as string;
      try {
        bytes += await fetchObject(store, key, path.join(dir, ...key.split('/')));
      } catch (err) {
        // A snapshot's file can go once the snapshot expires (ICEBERG_SNAPSHOT_RETENTION_SECONDS after the next one).
        failure ??= new CliError(
          `copying the snapshot's files from ${store.describe()} failed at ${key}: ${messageOf(err)}`,
        );
      }
    }
  };
  // Every worker has stopped before this returns or throws: the caller removes the folder after.
  await Promise.all(Array.from({ length: Math.min(DEFAULT_COPY_CONCURRENCY, keys.length) }, worker));
  if (failure) throw failure;
  return bytes;
}

/**
 * The statements that define `events` over the snapshot `t.asOf` names: its batch files and rollup
 * files, with an `app` column; read in the store, or in `local` (a copy of just those files).
 */
export async function tableViewStatements(t: TableTarget, local?: TableLocalCopy): Promise<string[]> {
  const { store, table } = openTable(t);
  try {
    const loaded = await table.load();
    if (!loaded)
      throw new CliError(
        `no Iceberg table for app ${JSON.stringify(t.app)} in ${store.describe()} (is ICEBERG=on on the rollup service, and has it committed yet?)`,
      );
    const snap = pickSnapshot(loaded.metadata, t.asOf);
    const keys = await table.dataKeys(snap);
    if (local) {
      const started = Date.now();
      const bytes = await copyKeys(store, keys, local.dir);
      local.onCopied?.(keys.length, bytes, Date.now() - started);
    }
    const { rootUrl, setup } = storeRootUrl(local ? createStore({ kind: 'filesystem', root: local.dir }) : store);
    const urls = (ks: string[]): string => `[${ks.map((k) => sqlStringLiteral(rootUrl + k)).join(', ')}]`;
    const rollups = keys.filter((k) => rollupFileFirstId(k) !== null);
    const batches = keys.filter((k) => rollupFileFirstId(k) === null);
    const app = `${sqlStringLiteral(t.app)} AS "app"`;
    const cols = VIEW_COLUMNS.map((c) => `"${c}"`).join(', ');
    const batchCols = VIEW_COLUMNS.filter((c) => c !== 'batch_id')
      .map((c) => `"${c}"`)
      .join(', ');
    const parts: string[] = [];
    if (rollups.length > 0) parts.push(`SELECT ${cols}, ${app} FROM read_parquet(${urls(rollups)})`);
    if (batches.length > 0)
      parts.push(
        `SELECT ${batchCols}, regexp_extract(filename, '([^/]+)\\.parquet$', 1) AS "batch_id", ${app} FROM read_parquet(${urls(batches)}, filename = true)`,
      );
    if (parts.length === 0) {
      const empty = VIEW_COLUMNS.map((c) =>
        c === 'received_at' ? `TIMESTAMPTZ '1970-01-01 00:00:00+00' AS "received_at"` : `NULL::VARCHAR AS "${c}"`,
      );
      parts.push(`SELECT ${empty.join(', ')}, ${app} WHERE false`);
    }
    return [...setup, `CREATE VIEW events AS ${parts.map((p) => `(${p})`).join(' UNION ALL ')}`];
  } finally {
    await closeStore(store);
  }
}

/** `events-ingest table`: the table's retained snapshots, oldest first, the current one marked. */
export async function tableSnapshots(t: TableTarget): Promise<{ columns: string[]; rows: unknown[][] }> {
  const { store, table } = openTable(t);
  try {
    const loaded = await table.load();
    if (!loaded)
      throw new CliError(
        `no Iceberg table for app ${JSON.stringify(t.app)} in ${store.describe()} (is ICEBERG=on on the rollup service, and has it committed yet?)`,
      );
    const meta = loaded.metadata;
    const current = meta['current-snapshot-id'];
    const rows = [...meta.snapshots]
      .sort((a, b) => a['sequence-number'] - b['sequence-number'])
      .map((s) => [
        String(s['snapshot-id']),
        new Date(s['timestamp-ms']).toISOString(),
        s.summary.operation,
        Number(s.summary['total-data-files'] ?? 0),
        Number(s.summary['total-records'] ?? 0),
        s.summary[THROUGH_BATCH_ID] ?? null,
        s['snapshot-id'] === current ? '*' : '',
      ]);
    return { columns: ['snapshot_id', 'time', 'operation', 'files', 'rows', 'through_batch_id', 'current'], rows };
  } finally {
    await closeStore(store);
  }
}
