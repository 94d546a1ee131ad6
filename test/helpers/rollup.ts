/**
 * Rollup checks shared by the rollup tests: the exact view vs the batch files alone, and the
 * manifest vs what the store holds. Everything is read with DuckDB and the store, as an analyst
 * (or an auditor) would.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { expect } from 'vitest';
import { LEGACY_QUEUE_PREFIX, rollupQueuePrefix } from '../../shared/redis/keyspace.js';
import { duckdbReadParquetSql } from '../../shared/duckdb.js';
import { rollupQueueName } from '../../shared/redis/keyspace.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { parseStoragePath, listPrefix } from '../../shared/paths.js';
import { ROLLUP_ROOT } from '../../shared/rollup/layout.js';
import { type Manifest, manifestFiles, readManifest } from '../../shared/rollup/manifest.js';
import { readRetentionMark } from '../../shared/rollup/retention.js';
import { rollupViewSql } from '../../shared/rollup/view.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { duckQuery } from './duckdb.js';
import { waitFor } from './proc.js';

export const STORAGE_PATH = 'events/{app}/{batchId}';

/**
 * Waits (up to 30 s) until raw retention's mark for `prefix` (the largest deleted id) is past
 * `id`. A cursor equal to the mark skips nothing and rightly gets 200; 410 needs one below it.
 */
export async function waitForRetentionPast(store: ObjectStore, prefix: string, id: string): Promise<void> {
  await waitFor(
    async () => ((await readRetentionMark(store, prefix))?.deletedThrough ?? '') > id,
    30_000,
    `retention of ${prefix} past ${id}`,
  );
}

/** Runs `sql` over the exact view (`events`) of `app` ('*' = every app). */
export async function viewQuery(
  store: ObjectStore,
  app: string,
  sql: (from: string) => string,
  env?: Record<string, string | undefined>,
): Promise<Record<string, unknown>[]> {
  const view = await rollupViewSql({ store, collection: STORAGE_PATH, params: { app }, env });
  for (const s of view.setup) await duckQuery(s);
  return duckQuery(sql(`(${view.select})`));
}

/** Runs `sql` over the batch files alone. */
export async function batchQuery(
  store: ObjectStore,
  app: string,
  sql: (from: string) => string,
  env?: Record<string, string | undefined>,
): Promise<Record<string, unknown>[]> {
  const raw = duckdbReadParquetSql({ store, collection: STORAGE_PATH, params: { app }, env });
  for (const s of raw.setup) await duckQuery(s);
  return duckQuery(sql(raw.from));
}

/** Number of rows the view shows. */
export async function viewCount(
  store: ObjectStore,
  app: string,
  env?: Record<string, string | undefined>,
): Promise<number> {
  const [row] = await viewQuery(store, app, (from) => `SELECT count(*)::BIGINT AS n FROM ${from}`, env);
  return Number(row?.n ?? 0);
}

const GROUP_BY = (from: string): string =>
  `SELECT event_type, event, count(*)::BIGINT AS n, count(DISTINCT message_id)::BIGINT AS m, min(received_at)::VARCHAR AS lo, max(received_at)::VARCHAR AS hi FROM ${from} GROUP BY 1, 2 ORDER BY 1, 2`;

/**
 * The view equals the batch files: same GROUP BY, and the same multiset of full rows (every
 * column, compared as one hash per row so nothing can differ unseen).
 */
export async function expectViewEqualsBatches(
  store: ObjectStore,
  app: string,
  env?: Record<string, string | undefined>,
): Promise<number> {
  expect(await viewQuery(store, app, GROUP_BY, env)).toEqual(await batchQuery(store, app, GROUP_BY, env));
  const rowHashes = (from: string): string =>
    `SELECT hash(event_type, event, distinct_id, anonymous_id, ts, message_id, properties, context, dt, epoch_ms(received_at), extra) AS h, count(*)::BIGINT AS n FROM ${from} GROUP BY 1 ORDER BY 1`;
  const a = await viewQuery(store, app, rowHashes, env);
  const b = await batchQuery(store, app, rowHashes, env);
  expect(a.length).toBe(b.length);
  expect(a).toEqual(b);
  return viewCount(store, app, env);
}

/** Manifests of every app under the collection. */
export async function manifestsOf(store: ObjectStore, apps: readonly string[]): Promise<Manifest[]> {
  const out: Manifest[] = [];
  const t = parseStoragePath(STORAGE_PATH);
  for (const app of apps) {
    const m = await readManifest(store, listPrefix(t, { app }));
    if (m) out.push(m);
  }
  return out;
}

/**
 * Manifest and store agree: the rollup files in the store are exactly the listed ones, and each
 * file's row count, batch count and first/last batch id are what the manifest says; every period
 * ends at or before the watermark and appears once.
 */
export async function expectManifestMatchesStore(
  store: ObjectStore,
  manifest: Manifest,
  rootUrl: string,
): Promise<void> {
  // A roll writes the manifest first and deletes the rollup files no manifest lists any more
  // (the one a re-roll replaced, a killed job's leftovers) after: a test that waited for the
  // manifest (or the view built from it) can list the store a moment before that clean-up ends.
  const listed = manifestFiles(manifest).sort();
  const rollupFiles = async (): Promise<string[]> =>
    (await store.listKeys(`${ROLLUP_ROOT}${manifest.prefix}`)).filter((k) => k.endsWith('.parquet')).sort();
  await waitFor(
    async () => {
      const now = await rollupFiles();
      return now.length === listed.length && now.every((k, i) => k === listed[i]);
    },
    15_000,
    `the rollup files of ${manifest.prefix} to be the manifest's`,
  ).catch(() => undefined);
  expect(await rollupFiles()).toEqual(listed);
  const starts = manifest.periods.map((p) => p.startMs);
  expect(new Set(starts).size).toBe(starts.length);
  for (const p of manifest.periods) {
    expect(p.endMs).toBeLessThanOrEqual(manifest.watermarkMs);
    for (const f of p.files) {
      const [facts] = await duckQuery(
        `SELECT count(*)::BIGINT AS rows, count(DISTINCT batch_id)::BIGINT AS batches, min(batch_id) AS first, max(batch_id) AS last, min(epoch_ms(received_at))::BIGINT AS lo, max(epoch_ms(received_at))::BIGINT AS hi FROM read_parquet('${rootUrl}${f.key}')`,
      );
      expect({
        rows: Number(facts?.rows),
        batches: Number(facts?.batches),
        first: facts?.first,
        last: facts?.last,
      }).toEqual({ rows: f.rows, batches: f.batches, first: f.firstId, last: f.lastId });
      expect(Number(facts?.lo)).toBeGreaterThanOrEqual(p.startMs);
      expect(Number(facts?.hi)).toBeLessThan(p.endMs);
    }
  }
}

/**
 * Copies every object of `store` into `root` (a fresh local folder), so DuckDB can check a store
 * it cannot open here (S3 without the httpfs extension). Call it once the store is quiet.
 */
export async function mirrorStore(store: ObjectStore, root: string): Promise<FilesystemObjectStore> {
  const keys = await store.listKeys('');
  let next = 0;
  // 16 reads at a time; a scratch copy needs no fsync.
  const worker = async (): Promise<void> => {
    for (let i = next++; i < keys.length; i = next++) {
      const key = keys[i] as string;
      const got = await store.getBytes(key);
      if (!got) continue;
      const file = join(root, ...key.split('/'));
      await mkdir(dirname(file), { recursive: true });
      await writeFile(file, got.body);
    }
  };
  await Promise.all(Array.from({ length: Math.min(16, keys.length) }, worker));
  return new FilesystemObjectStore({ root });
}

/**
 * What a rollup that did not arrive in time was waiting on, for a failure message: each prefix's
 * manifest watermark and ledger bound (an in-flight id holds its period back), the encoder and
 * rollup queues' counts, and the rollup jobs not yet done with their attempts and last error.
 * Keys, ids and counts only.
 */
export async function rollupStallReport(
  redis: Redis,
  queueName: string,
  store: ObjectStore,
  prefixes: readonly string[],
): Promise<string> {
  const lines: string[] = [];
  const ledger = new BatchLedger(redis, queueName);
  for (const prefix of prefixes) {
    const m = await readManifest(store, prefix);
    const { bound, nowMs } = await ledger.listBoundAt(prefix);
    lines.push(
      `${prefix}: watermark ${m?.watermarkMs ?? 'none'}, ledger bound ${bound.kind} ${bound.id} at Redis time ${nowMs}`,
    );
  }
  const encoder = new Queue(queueName, { connection: redis, prefix: LEGACY_QUEUE_PREFIX });
  const rollup = new Queue(rollupQueueName(queueName), {
    connection: redis,
    prefix: rollupQueuePrefix(queueName, false),
  });
  try {
    const kinds = ['waiting', 'active', 'delayed', 'failed', 'completed'] as const;
    lines.push(`encoder queue: ${JSON.stringify(await encoder.getJobCounts(...kinds))}`);
    lines.push(`rollup queue: ${JSON.stringify(await rollup.getJobCounts(...kinds))}`);
    for (const job of await rollup.getJobs(['waiting', 'active', 'delayed', 'failed'], 0, 19)) {
      lines.push(
        `rollup job ${String(job.id)}: ${await job.getState()}, attempts ${job.attemptsMade}, delay ${job.delay}${job.failedReason ? `, last error ${job.failedReason.slice(0, 200)}` : ''}`,
      );
    }
  } finally {
    await encoder.close();
    await rollup.close();
  }
  return lines.join('\n');
}
