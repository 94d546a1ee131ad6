/**
 * Scenario `iceberg` — one Iceberg commit of 1,000 batch files (issue 35, acceptance 5: under a
 * second here). 1,000 real batch files of 100 events (the encoder's own `encodeBatch`) in a
 * filesystem store, onto a table that already holds 5 commits of 1,000 files each (so the commit
 * carries existing manifests). Two rows, medians of 3 commits, each of 1,000 new files:
 * - the whole append as the committer runs it: the listing, every file's Parquet footer read for
 *   its row count (16 at a time, services/rollup/iceberg-committer.ts), the manifest, the
 *   manifest list and the metadata version created exclusively, version-hint.text;
 * - `IcebergTable.append` alone (the metadata work, the footers' facts already known).
 * `--smoke` uses 100 files per commit and asserts nothing.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parquetFacts } from '../../shared/iceberg/parquet-footer.js';
import { IcebergTable, type TableFile, batchTableFile, storeRootUri } from '../../shared/iceberg/table.js';
import { encodeBatch } from '../../shared/parquet/encode.js';
import { batchIdOfKey, msKey } from '../../shared/rollup/layout.js';
import { createStore } from '../../shared/store/create.js';
import { bodyFactory, median, row } from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';

const EVENTS_PER_BATCH = 100;
const PRIOR_COMMITS = 5;
const RUNS = 3;

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const perCommit = ctx.smoke ? 100 : 1000;
  const dir = mkdtempSync(join(tmpdir(), 'bench-iceberg-'));
  const store = createStore({ kind: 'filesystem', root: dir });
  const prefix = 'events/bench/';
  // Every file in one hour (batch ids spread over its first 50 minutes), as a busy app's hour.
  const hour = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;
  const total = perCommit * (PRIOR_COMMITS + 2 * RUNS);
  try {
    const body = bodyFactory(EVENTS_PER_BATCH);
    const keys: string[] = [];
    for (let i = 0; i < total; i++) {
      const ms = hour + Math.floor((i * 3_000_000) / total);
      const key = `${prefix}${msKey(ms)}-0000-${randomBytes(3).toString('hex')}.parquet`;
      const r = encodeBatch(body(), ms);
      if (!r.ok) throw new Error(r.reason);
      await store.putBytes(key, r.bytes);
      keys.push(key);
      if (i % 500 === 0) ctx.progress(`iceberg: writing batch files ${i}/${total}`);
    }
    keys.sort();
    const table = new IcebergTable({ store, collection: 'events', app: 'bench', rootUri: storeRootUri(store) });
    // The committer's way to a table entry: the footer's row count and the file's size, 16 reads at a time.
    const filesOf = async (batch: readonly string[]): Promise<TableFile[]> => {
      const out: TableFile[] = new Array(batch.length);
      let next = 0;
      const worker = async (): Promise<void> => {
        for (let i = next++; i < batch.length; i = next++) {
          const key = batch[i] as string;
          const facts = await parquetFacts(store, key);
          if (!facts) throw new Error(`${key} missing`);
          out[i] = batchTableFile(key, batchIdOfKey(prefix, key) as string, facts.recordCount, facts.fileSizeInBytes);
        }
      };
      await Promise.all(Array.from({ length: 16 }, worker));
      return out;
    };
    let at = 0;
    const take = (): string[] => keys.slice(at, (at += perCommit));
    for (let c = 0; c < PRIOR_COMMITS; c++) {
      const batch = take();
      await table.append(await filesOf(batch), {
        throughBatchId: batchIdOfKey(prefix, batch.at(-1) as string) as string,
      });
      ctx.progress(`iceberg: prior commit ${c + 1}/${PRIOR_COMMITS}`);
    }
    const whole: number[] = [];
    const appendOnly: number[] = [];
    for (let r = 0; r < RUNS; r++) {
      // Whole: the listing of the new keys (pages of 1,000 as the committer reads them), the footers, the commit.
      const batch = take();
      const t0 = performance.now();
      const listed: string[] = [];
      let startAfter: string | undefined = keys[at - perCommit - 1];
      while (listed.length < perCommit) {
        const page = await store.listKeys(prefix, { startAfter, limit: Math.min(1000, perCommit - listed.length) });
        if (page.length === 0) break;
        listed.push(...page);
        startAfter = page.at(-1);
      }
      if (listed.length !== perCommit || listed[0] !== batch[0])
        throw new Error("listing did not return the commit's files");
      await table.append(await filesOf(listed), {
        throughBatchId: batchIdOfKey(prefix, listed.at(-1) as string) as string,
      });
      whole.push((performance.now() - t0) / 1000);
      // Append alone: facts read beforehand.
      const next = take();
      const files = await filesOf(next);
      const t1 = performance.now();
      await table.append(files, { throughBatchId: batchIdOfKey(prefix, next.at(-1) as string) as string });
      appendOnly.push((performance.now() - t1) / 1000);
      ctx.progress(`iceberg: measured commit ${r + 1}/${RUNS}`, { keep: true });
    }
    const w = median(whole);
    return [
      {
        ...row({
          scenario: 'iceberg',
          metric: `commit of ${perCommit} batch files (list + footers + append), median of ${RUNS}`,
          unit: 's',
          ours: w,
        }),
        target: '< 1 s',
        pass: ctx.smoke ? undefined : w < 1,
      },
      row({
        scenario: 'iceberg',
        metric: `IcebergTable.append of ${perCommit} files alone (facts known), median of ${RUNS}`,
        unit: 's',
        ours: median(appendOnly),
      }),
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
