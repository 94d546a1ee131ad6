/**
 * The copy-on-write rewrite of an erasure (issue 36): find the batch files and rollup files of one
 * list prefix that hold rows of the given `distinct_id`s / `anonymous_id`s, and rewrite each
 * without those rows, every other value exactly as stored.
 *
 * - Finding: DuckDB reads `distinct_id`/`anonymous_id` of the files with an `IN` filter, which it
 *   checks against each row group's min/max statistics first (a rollup is sorted by event, so
 *   most of its row groups are skipped only when the ids fall outside their range; batch files
 *   are small). Files are read in chunks of {@link FIND_CHUNK}.
 * - Batch files: rewritten through the encoder's write path (shared/erasure/rows.ts), put back
 *   under the SAME key (one atomic put; its ETag changes), then recorded in the rewritten log
 *   (shared/erasure/rewritten.ts) for synced folders. A file whose every row is erased stays as a
 *   zero-row file with the same schema.
 * - Rollup files: DuckDB COPY of the file without the rows, with the options roll.ts writes
 *   (ZSTD, row groups, field ids, same sort), put under a NEW key (`…_<last>~<hex>.parquet`), then
 *   the manifest lists it instead of the old file (under the prefix lock, re-read under it, so a
 *   roll job never interleaves), then the old file is deleted (or left to the Iceberg committer
 *   while a retained snapshot references it).
 *
 * Every step is idempotent: a file already rewritten holds none of the rows and is not found
 * again, so a retry after a crash (between any two puts) finds only what is left.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { DuckDBConnection } from '@duckdb/node-api';
import { sqlStringLiteral } from '../../../shared/duckdb.js';
import { type ErasureIds, eraseRowsFromParquet } from '../../../shared/erasure/rows.js';
import { PARQUET_MIME_TYPE } from '../../../shared/parquet/encode.js';
import { batchIdOfKey, rollupFileFirstId, rollupFileKey, rollupPrefix } from '../../../shared/rollup/layout.js';
import { type Manifest, type RollupFile, readManifest, writeManifest } from '../../../shared/rollup/manifest.js';
import type { ObjectStore } from '../../../shared/store/types.js';
import { ROLLUP_FIELD_IDS_SQL, ROLLUP_ROW_GROUP_ROWS, ROLLUP_SORT } from '../roll.js';

/** Files DuckDB reads per finding query. */
export const FIND_CHUNK = 500;
/** Store reads in flight when staging files for DuckDB (non-filesystem stores). */
const STAGE_CONCURRENCY = 16;

export interface EraseContext {
  store: ObjectStore;
  duck: DuckDBConnection;
  /** Where DuckDB opens store keys in place (filesystem store root ending in `/`), or null to stage copies. */
  rootUrl: string | null;
  /** Runs `fn` holding the prefix's rollup lock; `assertLocked` throws once the lock is lost. */
  withPrefixLock: <T>(fn: (assertLocked: () => Promise<void>) => Promise<T>) => Promise<T>;
  /** Which rollup keys may leave the store now (RollContext.mayDelete); all when absent. */
  mayDelete?: (keys: readonly string[]) => Promise<readonly string[]>;
  /** Called before a batch file is put back (so a crash before `onBatchRewritten` can record it on resume). */
  onBatchRewriting?: (batchId: string, rowsErased: number) => Promise<void>;
  /** Called after each batch file rewrite is durable, with its batch id (the rewritten log). */
  onBatchRewritten?: (batchIds: string[]) => Promise<void>;
  /** Called after each file (scanned or rewritten) with the running counts. */
  onProgress?: (c: EraseCounts) => Promise<void>;
  tmpDir?: string;
}

export interface EraseCounts {
  filesScanned: number;
  filesRewritten: number;
  rowsErased: number;
}

export interface RewrittenFile {
  kind: 'batch' | 'rollup';
  /** The key rewritten (batch) or replaced (rollup). */
  key: string;
  /** A rollup's new key (null when all its rows were erased and it left the manifest). */
  newKey?: string | null;
  rowsBefore: number;
  rowsErased: number;
  bytes?: number;
}

export interface ErasePass {
  /** Keys scanned in this pass (batch keys and rollup keys). */
  scanned: string[];
  files: RewrittenFile[];
  counts: EraseCounts;
}

/** SQL predicate: the row belongs to the person. NULL ids never match (coalesce), so NOT(...) keeps such rows. */
export function personPredicate(ids: ErasureIds): string {
  const inList = (col: string, vals: readonly string[]): string =>
    vals.length === 0 ? 'false' : `coalesce("${col}" IN (${vals.map(sqlStringLiteral).join(', ')}), false)`;
  return `(${inList('distinct_id', ids.distinctIds)} OR ${inList('anonymous_id', ids.anonymousIds)})`;
}

/** Every batch key of the prefix, ascending (bounded by the store's listing; pages of 1,000). */
export async function listBatchKeys(store: ObjectStore, prefix: string): Promise<string[]> {
  const out: string[] = [];
  let startAfter: string | undefined;
  for (;;) {
    const page = await store.listKeys(prefix, { startAfter, limit: 1000 });
    for (const k of page) if (batchIdOfKey(prefix, k) !== null) out.push(k);
    if (page.length < 1000) return out;
    startAfter = page[page.length - 1];
  }
}

/** Paths DuckDB opens for store keys: in place, or copies in a temporary folder (removed by `close`). */
class Stage {
  private dir: string | undefined;
  constructor(private readonly ctx: EraseContext) {}

  async paths(keys: readonly string[]): Promise<string[]> {
    const { rootUrl, store } = this.ctx;
    if (rootUrl !== null) return keys.map((k) => rootUrl + k);
    this.dir ??= await mkdtemp(path.join(this.ctx.tmpDir ?? tmpdir(), `events-ingest-erase-${process.pid}-`));
    const dir = this.dir;
    const out = keys.map((k) => path.join(dir, ...k.split('/')));
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < keys.length; i = next++) {
        const got = await store.getBytes(keys[i] as string);
        await mkdir(path.dirname(out[i] as string), { recursive: true });
        // A key gone since the listing (retention) holds nothing to erase: an empty stand-in is skipped below.
        await writeFile(out[i] as string, got ? got.body : new Uint8Array());
      }
    };
    await Promise.all(Array.from({ length: Math.min(STAGE_CONCURRENCY, keys.length) }, worker));
    return out;
  }

  async close(): Promise<void> {
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
    this.dir = undefined;
  }
}

/** Rows of the person per key, for the keys holding any (DuckDB over the files; see the module comment). */
export async function findHits(
  ctx: EraseContext,
  keys: readonly string[],
  ids: ErasureIds,
): Promise<Map<string, number>> {
  const hits = new Map<string, number>();
  if (keys.length === 0 || (ids.distinctIds.length === 0 && ids.anonymousIds.length === 0)) return hits;
  const pred = personPredicate(ids);
  for (let i = 0; i < keys.length; i += FIND_CHUNK) {
    const chunk = keys.slice(i, i + FIND_CHUNK);
    const stage = new Stage(ctx);
    try {
      const paths = await stage.paths(chunk);
      const byPath = new Map(paths.map((p, j) => [p, chunk[j] as string]));
      // Staged stand-ins of vanished keys are empty files DuckDB cannot open: leave them out.
      const readable = ctx.rootUrl === null ? await nonEmpty(paths) : paths;
      if (readable.length === 0) continue;
      const reader = await ctx.duck.runAndReadAll(
        `SELECT filename, count(*)::BIGINT FROM read_parquet([${readable.map(sqlStringLiteral).join(', ')}], filename = true) WHERE ${pred} GROUP BY filename`,
      );
      for (const [file, n] of reader.getRows() as [string, bigint][]) {
        const key = byPath.get(file);
        if (key !== undefined) hits.set(key, Number(n));
      }
    } finally {
      await stage.close();
    }
  }
  return hits;
}

async function nonEmpty(paths: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  for (const p of paths) if ((await readFile(p)).byteLength > 0) out.push(p);
  return out;
}

/** Rewrites one batch file without the person's rows under its own key; null when it holds none (or is gone). */
export async function rewriteBatchFile(
  store: ObjectStore,
  key: string,
  ids: ErasureIds,
  dryRun: boolean,
  before?: (rowsErased: number) => Promise<void>,
): Promise<RewrittenFile | null> {
  const got = await store.getBytes(key);
  if (!got) return null;
  const r = eraseRowsFromParquet(got.body, ids);
  if (r.file === null) return null;
  if (!dryRun) {
    if (before) await before(r.erased);
    await store.putBytes(key, r.file, { contentType: PARQUET_MIME_TYPE });
  }
  return { kind: 'batch', key, rowsBefore: r.rows, rowsErased: r.erased, bytes: r.file.byteLength };
}

/** The new key of a rewritten rollup file: the period's folder, its first and last batch ids, and a random tag. */
export function rewrittenRollupKey(prefix: string, startMs: number, firstId: string, lastId: string): string {
  return rollupFileKey(prefix, startMs, firstId, lastId).replace(
    /\.parquet$/,
    `~${randomBytes(4).toString('hex')}.parquet`,
  );
}

/**
 * Rewrites one rollup file of the manifest without the person's rows: new file, manifest, then the
 * old file's deletion. Runs under the prefix lock; re-reads the manifest under it, so a file a roll
 * job replaced meanwhile is skipped (the final pass scans the manifest again).
 */
async function rewriteRollupFile(
  ctx: EraseContext,
  prefix: string,
  oldKey: string,
  ids: ErasureIds,
  assertLocked: () => Promise<void>,
): Promise<RewrittenFile | null> {
  const manifest = await readManifest(ctx.store, prefix);
  const period = manifest?.periods.find((p) => p.files.some((f) => f.key === oldKey));
  if (!manifest || !period) return null;
  const stage = new Stage(ctx);
  const tmp = path.join(
    ctx.tmpDir ?? tmpdir(),
    `events-ingest-erase-${process.pid}-${randomBytes(6).toString('hex')}.parquet`,
  );
  try {
    const [src] = await stage.paths([oldKey]);
    const from = `read_parquet(${sqlStringLiteral(src as string)})`;
    const before = Number(
      ((await ctx.duck.runAndReadAll(`SELECT count(*)::BIGINT FROM ${from}`)).getRows()[0] as [bigint])[0],
    );
    const order = ROLLUP_SORT.map((c) => `"${c}"`).join(', ');
    await ctx.duck.run(
      `COPY (SELECT * FROM ${from} WHERE NOT ${personPredicate(ids)} ORDER BY ${order}) TO ${sqlStringLiteral(tmp)} (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE ${ROLLUP_ROW_GROUP_ROWS}, ${ROLLUP_FIELD_IDS_SQL})`,
    );
    const [rows, batches, firstId, lastId] = (
      await ctx.duck.runAndReadAll(
        `SELECT count(*)::BIGINT, count(DISTINCT batch_id)::BIGINT, min(batch_id), max(batch_id) FROM read_parquet(${sqlStringLiteral(tmp)})`,
      )
    ).getRows()[0] as [bigint, bigint, string | null, string | null];
    const erased = before - Number(rows);
    if (erased === 0) return null;
    let entry: RollupFile | null = null;
    if (rows > 0n && firstId !== null && lastId !== null) {
      const bytes = await readFile(tmp);
      const key = rewrittenRollupKey(prefix, period.startMs, firstId, lastId);
      await ctx.store.putBytes(key, bytes, { contentType: PARQUET_MIME_TYPE });
      entry = { key, rows: Number(rows), bytes: bytes.byteLength, batches: Number(batches), firstId, lastId };
    }
    const files = period.files.flatMap((f) => (f.key === oldKey ? (entry ? [entry] : []) : [f]));
    const next: Manifest = {
      ...manifest,
      // A period left without rows leaves the manifest (the view skips its batch files below the watermark anyway).
      periods:
        files.length === 0
          ? manifest.periods.filter((p) => p !== period)
          : manifest.periods.map((p) => (p === period ? { ...p, files } : p)),
      updatedAt: Date.now(),
    };
    await assertLocked();
    await writeManifest(ctx.store, next);
    if (ctx.store.deleteKeys) {
      const go = ctx.mayDelete ? await ctx.mayDelete([oldKey]) : [oldKey];
      if (go.length > 0) await ctx.store.deleteKeys(go);
    }
    return {
      kind: 'rollup',
      key: oldKey,
      newKey: entry?.key ?? null,
      rowsBefore: before,
      rowsErased: erased,
      bytes: entry?.bytes ?? 0,
    };
  } finally {
    await rm(tmp, { force: true });
    await stage.close();
  }
}

/**
 * Deletes the prefix's rollup files no manifest lists (an erasure or roll killed between its
 * manifest write and its deletions). Called under the prefix lock, so no roll job is between its
 * file put and its manifest write. Files a retained Iceberg snapshot references stay (mayDelete)
 * until the erasure's expiry frees them. Returns how many were deleted.
 */
export async function sweepUnlistedRollups(ctx: EraseContext, prefix: string): Promise<number> {
  if (!ctx.store.deleteKeys) return 0;
  const manifest = await readManifest(ctx.store, prefix);
  const listed = new Set(manifest?.periods.flatMap((p) => p.files.map((f) => f.key)) ?? []);
  const stale: string[] = [];
  let startAfter: string | undefined;
  for (let page = 0; page < 100; page++) {
    const keys = await ctx.store.listKeys(rollupPrefix(prefix), { startAfter, limit: 1000 });
    for (const k of keys) if (rollupFileFirstId(k) !== null && !listed.has(k)) stale.push(k);
    if (keys.length < 1000) break;
    startAfter = keys[keys.length - 1];
  }
  const go = ctx.mayDelete ? await ctx.mayDelete(stale) : stale;
  if (go.length > 0) await ctx.store.deleteKeys(go);
  return go.length;
}

export interface PassOptions {
  /** Keys already scanned by an earlier pass of this run: not scanned again. */
  skip?: ReadonlySet<string>;
  dryRun?: boolean;
  /** Counts to continue from (a resumed job). */
  counts?: EraseCounts;
}

/**
 * One pass over the prefix: every batch file and every rollup file the manifest lists (minus
 * `skip`), under the prefix lock (no roll job runs meanwhile). With `dryRun`, finds and counts
 * what it would change and changes nothing.
 */
export async function erasePass(
  ctx: EraseContext,
  prefix: string,
  ids: ErasureIds,
  o: PassOptions = {},
): Promise<ErasePass> {
  const counts: EraseCounts = { ...(o.counts ?? { filesScanned: 0, filesRewritten: 0, rowsErased: 0 }) };
  const skip = o.skip ?? new Set<string>();
  const files: RewrittenFile[] = [];
  const scanned: string[] = [];
  const note = async (): Promise<void> => {
    if (ctx.onProgress) await ctx.onProgress({ ...counts });
  };
  await ctx.withPrefixLock(async (assertLocked) => {
    // A crash between a rollup rewrite's manifest write and the old file's deletion left that file: it goes now.
    if (!o.dryRun) await sweepUnlistedRollups(ctx, prefix);
    const batchKeys = (await listBatchKeys(ctx.store, prefix)).filter((k) => !skip.has(k));
    const hits = await findHits(ctx, batchKeys, ids);
    counts.filesScanned += batchKeys.length;
    scanned.push(...batchKeys);
    await note();
    for (const key of batchKeys) {
      if (!hits.has(key)) continue;
      const batchId = batchIdOfKey(prefix, key) as string;
      const r = await rewriteBatchFile(
        ctx.store,
        key,
        ids,
        o.dryRun ?? false,
        ctx.onBatchRewriting
          ? (n) => (ctx.onBatchRewriting as NonNullable<EraseContext['onBatchRewriting']>)(batchId, n)
          : undefined,
      );
      if (!r) continue;
      files.push(r);
      counts.filesRewritten++;
      counts.rowsErased += r.rowsErased;
      if (!o.dryRun && ctx.onBatchRewritten) await ctx.onBatchRewritten([batchId]);
      await note();
    }

    const manifest = await readManifest(ctx.store, prefix);
    const rollupKeys = (manifest?.periods.flatMap((p) => p.files.map((f) => f.key)) ?? []).filter((k) => !skip.has(k));
    const rollupHits = await findHits(ctx, rollupKeys, ids);
    counts.filesScanned += rollupKeys.length;
    scanned.push(...rollupKeys);
    await note();
    for (const key of rollupKeys) {
      const n = rollupHits.get(key);
      if (n === undefined) continue;
      if (o.dryRun) {
        files.push({
          kind: 'rollup',
          key,
          rowsBefore: manifest?.periods.flatMap((p) => p.files).find((f) => f.key === key)?.rows ?? 0,
          rowsErased: n,
        });
        counts.filesRewritten++;
        counts.rowsErased += n;
        continue;
      }
      const r = await rewriteRollupFile(ctx, prefix, key, ids, assertLocked);
      if (!r) continue;
      files.push(r);
      if (r.newKey) scanned.push(r.newKey);
      counts.filesRewritten++;
      counts.rowsErased += r.rowsErased;
      await note();
    }
  });
  return { scanned, files, counts };
}
