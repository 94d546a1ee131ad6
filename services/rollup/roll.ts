/**
 * Writing one period's rollup: list the period's batch files, let DuckDB read and sort them into
 * a local temporary Parquet file, put it in the store under its final key (an atomic put), then
 * rewrite the manifest (another atomic put), then delete what no manifest lists any more.
 *
 * DuckDB writes the files (COPY … TO … FORMAT parquet): it reads the batch files where the store
 * keeps them (the same paths and S3 settings as `duckdbReadParquetSql`), sorts out of core, and
 * writes ZSTD with row groups of 122,880 rows; the test suite checks every row is kept as is.
 *
 * The caller holds the prefix's lock (./redis-keys.ts) and has checked that every batch id of the
 * period is final (./plan.ts); this module re-checks the order rule against the manifest.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { DuckDBConnection } from '@duckdb/node-api';
import { sqlStringLiteral } from '../../shared/duckdb.js';
import { FIELD_IDS } from '../../shared/iceberg/schema.js';
import { PARQUET_MIME_TYPE } from '../../shared/parquet/encode.js';
import { EVENT_COLUMNS } from '../../shared/parquet/index.js';
import type { ObjectStore } from '../../shared/store/types.js';
import {
  batchIdOfKey,
  idInRange,
  msKey,
  partitionPrefix,
  periodStart,
  rollupFileFirstId,
  rollupFileKey,
} from '../../shared/rollup/layout.js';
import {
  type Manifest,
  type RollupFile,
  type RollupPeriod,
  emptyManifest,
  manifestFiles,
  readManifest,
  writeManifest,
} from '../../shared/rollup/manifest.js';
import { raiseRetentionMark } from '../../shared/rollup/retention.js';

/** Batch files per rollup file at most; a period with more is split into several files. */
export const MAX_BATCHES_PER_FILE = 20_000;
/** Rows per Parquet row group in rollup files (DuckDB's default, a multiple of its 2,048-row vectors). */
export const ROLLUP_ROW_GROUP_ROWS = 122_880;
/** Sort order inside a rollup file: groups an event's rows (dictionary runs, min/max pruning), then time. */
export const ROLLUP_SORT = ['event', 'received_at', 'batch_id'] as const;

/**
 * DuckDB's `FIELD_IDS` copy option: every table column the rollup file carries gets its Iceberg
 * field id (shared/iceberg/schema.ts) in the Parquet schema, as the encoder's batch files do;
 * `batch_id`, which is not a table column, gets none.
 */
export const ROLLUP_FIELD_IDS_SQL = `FIELD_IDS {${Object.entries(FIELD_IDS)
  .map(([name, id]) => `"${name}": ${id}`)
  .join(', ')}}`;

/** Thrown when a period cannot be rolled yet (a retry later will do it). */
export class RollupNotReadyError extends Error {
  override readonly name = 'RollupNotReadyError';
}

export interface RollContext {
  store: ObjectStore;
  duck: DuckDBConnection;
  periodSeconds: number;
  /**
   * Where DuckDB opens store keys in place (the filesystem store's root, ending in `/`), or null
   * to copy them through the store into a local staging folder first (S3 and any other store:
   * the rollup process needs no DuckDB extension or S3 credentials of its own).
   */
  rootUrl: string | null;
  /** Called before the manifest is written; throws when the prefix lock was lost. */
  assertLocked: () => Promise<void>;
  /**
   * Which of `keys` may leave the store now (all when absent). With an Iceberg table
   * (services/rollup/iceberg-committer.ts) a file stays while a retained snapshot references it
   * or the table has yet to take it; the committer deletes it once expiry frees it.
   */
  mayDelete?: (keys: readonly string[]) => Promise<readonly string[]>;
  now?: () => number;
  tmpDir?: string;
}

export interface RollOutcome {
  /** `rolled`: files written; `empty`: no rows, watermark moved; `noop`: nothing to do. */
  outcome: 'rolled' | 'empty' | 'noop';
  files: RollupFile[];
  rows: number;
  bytes: number;
  /** Keys deleted afterwards (superseded or orphaned rollup files). */
  deleted: number;
  watermarkMs: number;
}

/** Batch keys of `prefix` with ids in `[startMs, endMs)`, ascending. */
export async function batchKeysInPeriod(
  store: ObjectStore,
  prefix: string,
  startMs: number,
  endMs: number,
): Promise<string[]> {
  const out: string[] = [];
  const stop = `${prefix}${msKey(endMs)}`;
  let startAfter = startMs > 0 ? `${prefix}${msKey(startMs)}` : undefined;
  for (;;) {
    const page = await store.listKeys(prefix, { startAfter, limit: 1000 });
    for (const key of page) {
      if (key >= stop) return out;
      if (batchIdOfKey(prefix, key) !== null) out.push(key);
    }
    if (page.length < 1000) return out;
    startAfter = page[page.length - 1];
  }
}

/** The first batch key at or after the manifest's watermark, or undefined. */
export async function firstUnrolledKey(
  store: ObjectStore,
  prefix: string,
  watermarkMs: number,
): Promise<string | undefined> {
  let startAfter = watermarkMs > 0 ? `${prefix}${msKey(watermarkMs)}` : undefined;
  // Bounded: stray non-batch keys are skipped a page at a time, at most 10 pages.
  for (let i = 0; i < 10; i++) {
    const page = await store.listKeys(prefix, { startAfter, limit: 100 });
    const hit = page.find((k) => batchIdOfKey(prefix, k) !== null);
    if (hit !== undefined || page.length < 100) return hit;
    startAfter = page[page.length - 1];
  }
  return undefined;
}

/** Parallel store reads when staging. */
const STAGE_CONCURRENCY = 16;

/** A local folder holding copies of store objects for DuckDB; removed by `close`. */
class Stage {
  private dir: string | undefined;
  constructor(private readonly ctx: RollContext) {}

  /** Paths DuckDB opens for `keys`, in order: in place on the filesystem, else copied here first. */
  async paths(keys: readonly string[]): Promise<string[]> {
    const { rootUrl, store } = this.ctx;
    if (rootUrl !== null) return keys.map((k) => rootUrl + k);
    this.dir ??= await mkdtemp(path.join(this.ctx.tmpDir ?? tmpdir(), `${TMP_PREFIX}${process.pid}-`));
    const dir = this.dir;
    const out = keys.map((k) => path.join(dir, ...k.split('/')));
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < keys.length; i = next++) {
        const key = keys[i] as string;
        const got = await store.getBytes(key);
        if (!got) throw new RollupNotReadyError(`${key} disappeared while it was being rolled`);
        await mkdir(path.dirname(out[i] as string), { recursive: true });
        await writeFile(out[i] as string, got.body);
      }
    };
    await Promise.all(Array.from({ length: Math.min(STAGE_CONCURRENCY, keys.length) }, worker));
    return out;
  }

  async close(): Promise<void> {
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}

const SELECT_COLUMNS = [...EVENT_COLUMNS, 'received_at', 'extra'].map((c) => `"${c}"`).join(', ');
const urlList = (urls: readonly string[]): string => `[${urls.map(sqlStringLiteral).join(', ')}]`;

const TMP_PREFIX = 'events-ingest-rollup-';

/** Removes local temporary rollup files and staging folders left by rollup processes that no longer run (killed mid-write). */
export async function removeStaleTempFiles(dir = tmpdir()): Promise<number> {
  let removed = 0;
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const m = new RegExp(`^${TMP_PREFIX}(\\d+)-[0-9A-Za-z]+(?:\\.parquet)?$`).exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    let alive = pid === process.pid;
    if (!alive) {
      try {
        process.kill(pid, 0);
        alive = true;
      } catch (err) {
        alive = (err as NodeJS.ErrnoException).code === 'EPERM';
      }
    }
    if (!alive) {
      await rm(path.join(dir, name), { recursive: true, force: true });
      removed++;
    }
  }
  return removed;
}

/** Writes `select` sorted into a local Parquet file and returns its facts (no rows → null). */
async function copyToFile(
  ctx: RollContext,
  select: string,
): Promise<{ file: string; rows: number; batches: number; firstId: string; lastId: string } | null> {
  const file = path.join(
    ctx.tmpDir ?? tmpdir(),
    `${TMP_PREFIX}${process.pid}-${randomBytes(6).toString('hex')}.parquet`,
  );
  const order = ROLLUP_SORT.map((c) => `"${c}"`).join(', ');
  try {
    await ctx.duck.run(
      `COPY (SELECT * FROM (${select}) ORDER BY ${order}) TO ${sqlStringLiteral(file)} (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE ${ROLLUP_ROW_GROUP_ROWS}, ${ROLLUP_FIELD_IDS_SQL})`,
    );
    const reader = await ctx.duck.runAndReadAll(
      `SELECT count(*)::BIGINT, count(DISTINCT batch_id)::BIGINT, min(batch_id), max(batch_id) FROM read_parquet(${sqlStringLiteral(file)})`,
    );
    const [rows, batches, firstId, lastId] = reader.getRows()[0] as [bigint, bigint, string | null, string | null];
    if (rows === 0n || firstId === null || lastId === null) {
      await rm(file, { force: true });
      return null;
    }
    return { file, rows: Number(rows), batches: Number(batches), firstId, lastId };
  } catch (err) {
    await rm(file, { force: true });
    throw err;
  }
}

/**
 * Rolls the period of `prefix` starting at `startMs` (see the module comment). `kind: 'roll'`
 * is the prefix's next period: it must be the first period holding a batch file at or after the
 * watermark, and moves the watermark to its end. `kind: 'reroll'` rewrites an already rolled
 * period with the batch files no rollup file covers yet (replayed batches); the watermark stays.
 */
export async function rollPeriod(
  ctx: RollContext,
  prefix: string,
  startMs: number,
  kind: 'roll' | 'reroll',
): Promise<RollOutcome> {
  const periodMs = ctx.periodSeconds * 1000;
  if (startMs % periodMs !== 0) throw new Error(`period start ${startMs} is not a multiple of ${ctx.periodSeconds} s`);
  const endMs = startMs + periodMs;
  const now = ctx.now ?? Date.now;
  const manifest: Manifest = (await readManifest(ctx.store, prefix)) ?? emptyManifest(prefix, ctx.periodSeconds);
  if (manifest.periodSeconds !== ctx.periodSeconds) {
    throw new Error(
      `manifest of ${prefix} was written with ROLLUP_PERIOD_SECONDS=${manifest.periodSeconds}, not ${ctx.periodSeconds}; keep the period or move rollups/ aside`,
    );
  }
  const existing = manifest.periods.find((p) => p.startMs === startMs);
  const forward = startMs >= manifest.watermarkMs;
  const done = (deleted = 0): RollOutcome => ({
    outcome: 'noop',
    files: [],
    rows: 0,
    bytes: 0,
    deleted,
    watermarkMs: manifest.watermarkMs,
  });

  if (kind === 'roll' && !forward) return done();
  if (kind === 'reroll' && forward) return done(); // not rolled yet: the forward roll will take the batch
  if (forward) {
    const first = await firstUnrolledKey(ctx.store, prefix, manifest.watermarkMs);
    const firstId = first === undefined ? null : batchIdOfKey(prefix, first);
    if (firstId === null) return done();
    const firstStart = periodStart(Number(firstId.slice(0, 13)), periodMs);
    if (firstStart < startMs) throw new RollupNotReadyError(`period ${firstStart} of ${prefix} comes first`);
    if (firstStart > startMs) return done(); // nothing in this period: the planner will name the next one
  }

  const keys = await batchKeysInPeriod(ctx.store, prefix, startMs, endMs);
  const outputs: NonNullable<Awaited<ReturnType<typeof copyToFile>>>[] = [];
  const stage = new Stage(ctx);
  try {
    const batchSelect = async (chunk: readonly string[]): Promise<string> =>
      `SELECT ${SELECT_COLUMNS}, regexp_extract(filename, '([^/]+)\\.parquet$', 1) AS "batch_id" FROM read_parquet(${urlList(await stage.paths(chunk))}, filename = true)`;
    if (existing) {
      // Re-roll: the period's current rows plus rows of batch files no rollup file covers yet.
      const old = urlList(await stage.paths(existing.files.map((f) => f.key)));
      const parts = [`SELECT ${SELECT_COLUMNS}, "batch_id" FROM read_parquet(${old})`];
      if (keys.length > 0)
        parts.push(
          `SELECT * FROM (${await batchSelect(keys)}) WHERE "batch_id" NOT IN (SELECT DISTINCT "batch_id" FROM read_parquet(${old}))`,
        );
      const added =
        keys.length === 0
          ? 0
          : Number(
              (
                (await ctx.duck.runAndReadAll(`SELECT count(*)::BIGINT FROM (${parts[1]})`)).getRows()[0] as [bigint]
              )[0],
            );
      if (added === 0) return done();
      const out = await copyToFile(ctx, parts.map((p) => `(${p})`).join(' UNION ALL '));
      if (out) outputs.push(out);
    } else {
      for (let i = 0; i < keys.length; i += MAX_BATCHES_PER_FILE) {
        const out = await copyToFile(ctx, await batchSelect(keys.slice(i, i + MAX_BATCHES_PER_FILE)));
        if (out) outputs.push(out);
      }
    }

    const files: RollupFile[] = [];
    for (const o of outputs) {
      const key = rollupFileKey(prefix, startMs, o.firstId, o.lastId);
      const bytes = await readFile(o.file);
      await ctx.store.putBytes(key, bytes, { contentType: PARQUET_MIME_TYPE });
      files.push({
        key,
        rows: o.rows,
        bytes: bytes.byteLength,
        batches: o.batches,
        firstId: o.firstId,
        lastId: o.lastId,
      });
    }

    const period: RollupPeriod | null =
      files.length === 0
        ? null
        : { startMs, endMs, files, rolledAt: now(), rawDeletedThrough: existing?.rawDeletedThrough ?? '' };
    const next: Manifest = {
      ...manifest,
      watermarkMs: forward ? endMs : manifest.watermarkMs,
      periods: [...manifest.periods.filter((p) => p.startMs !== startMs), ...(period ? [period] : [])].sort(
        (a, b) => a.startMs - b.startMs,
      ),
      updatedAt: now(),
    };
    await ctx.assertLocked();
    await writeManifest(ctx.store, next);

    const deleted = await deleteUnlisted(ctx, next, prefix, startMs, endMs);
    const rows = files.reduce((n, f) => n + f.rows, 0);
    return {
      outcome: files.length ? 'rolled' : 'empty',
      files,
      rows,
      bytes: files.reduce((n, f) => n + f.bytes, 0),
      deleted,
      watermarkMs: next.watermarkMs,
    };
  } finally {
    for (const o of outputs) await rm(o.file, { force: true });
    await stage.close();
  }
}

/**
 * Deletes rollup files of the period that the (durable) manifest does not list: the ones a
 * re-roll replaced, and any a crashed job put before its manifest write.
 */
async function deleteUnlisted(
  ctx: RollContext,
  manifest: Manifest,
  prefix: string,
  startMs: number,
  endMs: number,
): Promise<number> {
  const { store } = ctx;
  if (!store.deleteKeys) return 0;
  const listed = new Set(manifestFiles(manifest));
  const inDir = await store.listKeys(partitionPrefix(prefix, startMs), { limit: 100_000 });
  const stale = inDir.filter((k) => {
    const first = rollupFileFirstId(k);
    return first !== null && idInRange(first, startMs, endMs) && !listed.has(k);
  });
  const go = await deletable(ctx, stale);
  if (go.length > 0) await store.deleteKeys(go);
  return go.length;
}

export interface PruneOutcome {
  /** Batch files deleted. */
  deleted: number;
  /** Periods whose batch files are all gone now. */
  periods: number;
  /** Periods skipped because Redis' list index still lists their ids (tried again on a later pass). */
  waiting: number;
}

/** Rolled periods whose batch files raw retention may delete now (see pruneRawBatches). */
export function rawPeriodsDue(manifest: Manifest, cutoffMs: number, graceMs: number, nowMs: number): RollupPeriod[] {
  return manifest.periods.filter(
    (p) =>
      p.rawDeletedThrough === '' &&
      p.endMs <= Math.min(cutoffMs, manifest.watermarkMs) &&
      p.rolledAt <= nowMs - graceMs,
  );
}

/** Rolled periods that whole-period retention drops (see dropOldPeriods). */
export function periodsPastRetention(manifest: Manifest, cutoffMs: number): RollupPeriod[] {
  return manifest.periods.filter((p) => p.endMs <= Math.min(cutoffMs, manifest.watermarkMs));
}

/**
 * Raw retention: deletes the batch files of rolled periods that ended before `cutoffMs` (and
 * before the watermark), once the rollup has been durable for `graceMs` (so a query that read
 * the previous manifest has finished). Only batch ids the period's rollup files hold are deleted,
 * so a batch replayed into the period and not yet re-rolled is kept. A period is skipped while
 * `stillIndexed` says the list route's Redis index may still name its ids, so `list` never shows a
 * deleted batch. The manifest records each pruned period (`rawDeletedThrough`). At most
 * `maxPeriods` periods per call. The caller holds the prefix lock.
 */
export async function pruneRawBatches(
  ctx: RollContext,
  prefix: string,
  o: {
    cutoffMs: number;
    graceMs: number;
    maxPeriods: number;
    stillIndexed: (startMs: number, endMs: number) => Promise<boolean>;
  },
): Promise<PruneOutcome> {
  const out: PruneOutcome = { deleted: 0, periods: 0, waiting: 0 };
  if (!ctx.store.deleteKeys) return out;
  const manifest = await readManifest(ctx.store, prefix);
  if (!manifest) return out;
  const now = (ctx.now ?? Date.now)();
  const due = rawPeriodsDue(manifest, o.cutoffMs, o.graceMs, now).slice(0, o.maxPeriods);
  const done = new Map<number, string>();
  for (const p of due) {
    if (await o.stillIndexed(p.startMs, p.endMs)) {
      out.waiting++;
      continue;
    }
    const stage = new Stage(ctx);
    let reader;
    try {
      reader = await ctx.duck.runAndReadAll(
        `SELECT DISTINCT "batch_id" FROM read_parquet(${urlList(await stage.paths(p.files.map((f) => f.key)))})`,
      );
    } finally {
      await stage.close();
    }
    const covered = new Set(reader.getRows().map((r) => String(r[0])));
    const keys = (await batchKeysInPeriod(ctx.store, prefix, p.startMs, p.endMs)).filter((k) =>
      covered.has(batchIdOfKey(prefix, k) ?? ''),
    );
    let gone: readonly string[] = [];
    if (keys.length > 0) {
      // The mark first: a list call that misses one of these files then answers 410 to a cursor below it.
      await ctx.assertLocked();
      await raiseRetentionMark(ctx.store, prefix, batchIdOfKey(prefix, keys[keys.length - 1] as string) as string, now);
      // With an Iceberg table, files a retained snapshot still names stay until expiry frees them (the committer deletes them then).
      gone = await deletable(ctx, keys);
      if (gone.length > 0) await ctx.store.deleteKeys(gone);
    }
    out.deleted += gone.length;
    out.periods++;
    done.set(
      p.startMs,
      p.files.reduce((m, f) => (f.lastId > m ? f.lastId : m), ''),
    );
  }
  if (done.size > 0) {
    // Re-read under the lock: only this job writes, but keep every other field as it is now.
    const latest = (await readManifest(ctx.store, prefix)) ?? manifest;
    await ctx.assertLocked();
    await writeManifest(ctx.store, {
      ...latest,
      periods: latest.periods.map((p) =>
        done.has(p.startMs) ? { ...p, rawDeletedThrough: done.get(p.startMs) ?? '' } : p,
      ),
      updatedAt: now,
    });
  }
  return out;
}

/**
 * Whole-period retention (RETENTION_DAYS): drops rolled periods that ended before `cutoffMs` from
 * the manifest, then deletes their rollup files and any batch files of theirs still there.
 */
export async function dropOldPeriods(ctx: RollContext, prefix: string, cutoffMs: number): Promise<number> {
  if (!ctx.store.deleteKeys) return 0;
  const manifest = await readManifest(ctx.store, prefix);
  if (!manifest) return 0;
  const old = periodsPastRetention(manifest, cutoffMs);
  if (old.length === 0) return 0;
  const now = (ctx.now ?? Date.now)();
  const batchKeys = new Map<number, string[]>();
  for (const p of old) batchKeys.set(p.startMs, await batchKeysInPeriod(ctx.store, prefix, p.startMs, p.endMs));
  const last = [...batchKeys.values()].flat().reduce((m, k) => (k > m ? k : m), '');
  await ctx.assertLocked();
  // The mark before any batch file goes (see ./retention.ts); the manifest before any rollup file goes (the view reads what it lists).
  if (last !== '') await raiseRetentionMark(ctx.store, prefix, batchIdOfKey(prefix, last) as string, now);
  await writeManifest(ctx.store, {
    ...manifest,
    periods: manifest.periods.filter((p) => !old.includes(p)),
    updatedAt: now,
  });
  for (const p of old) {
    const go = await deletable(ctx, [...p.files.map((f) => f.key), ...(batchKeys.get(p.startMs) ?? [])]);
    if (go.length > 0) await ctx.store.deleteKeys(go);
  }
  return old.length;
}

/** The keys that may leave the store now (RollContext.mayDelete). */
async function deletable(ctx: RollContext, keys: readonly string[]): Promise<readonly string[]> {
  if (keys.length === 0 || !ctx.mayDelete) return keys;
  return ctx.mayDelete(keys);
}
