/**
 * Scenario `erase` — erasing one person (issue 36, acceptance 4): 1,000,000 events as 10,000
 * batch files of 100 (the encoder's own `encodeBatch`, over 4 hours), rolled into hourly files by
 * `rollPeriod`, then one distinct id (one event in every 833rd batch file: 13 events) erased by the erasure job's own
 * passes (services/rollup/erasure/erase.ts: find with DuckDB, rewrite the batch files in place and
 * the rollup files under new keys, manifest), the first pass and the rescan, one DuckDB thread.
 * Target: under 60 s. `--smoke` uses 200 batches and asserts nothing.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { storeRootUrl } from '../../shared/duckdb.js';
import { encodeBatch } from '../../shared/parquet/encode.js';
import { msKey } from '../../shared/rollup/layout.js';
import { rollPeriod } from '../../services/rollup/roll.js';
import { erasePass } from '../../services/rollup/erasure/erase.js';
import { createStore } from '../../shared/store/create.js';
import { bodyFactory } from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';

const HOURS = 4;
const HOUR_MS = 3_600_000;
const EVENTS_PER_BATCH = 100;
const TARGET_S = 60;
const PERSON = 'bench-person-to-erase';

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const batches = ctx.smoke ? 200 : 10_000;
  const dir = mkdtempSync(join(tmpdir(), 'bench-erase-'));
  const store = createStore({ kind: 'filesystem', root: dir });
  const prefix = 'events/bench/';
  const t0 = Math.floor(Date.now() / HOUR_MS) * HOUR_MS - (HOURS + 1) * HOUR_MS;
  const every = Math.floor(batches / 12);
  try {
    const body = bodyFactory(EVENTS_PER_BATCH);
    for (let i = 0; i < batches; i++) {
      const ms = t0 + Math.floor((i * HOURS * HOUR_MS) / batches);
      const id = `${msKey(ms)}-0000-${randomBytes(3).toString('hex')}`;
      let text = body();
      // One event of every `every`-th batch is the person's.
      if (i % every === 0) text = text.replace(/"distinct_id":"[^"]*"/, `"distinct_id":"${PERSON}"`);
      const r = encodeBatch(text, ms);
      if (!r.ok) throw new Error(r.reason);
      await store.putBytes(`${prefix}${id}.parquet`, r.bytes);
      if (i % 500 === 0) ctx.progress(`erase: writing batch files ${i}/${batches}`);
    }
    const db = await DuckDBInstance.create(':memory:', {
      threads: '1',
      memory_limit: '1GB',
      preserve_insertion_order: 'false',
    });
    const duck = await db.connect();
    const rootUrl = storeRootUrl(store).rootUrl;
    for (let h = 0; h < HOURS; h++) {
      ctx.progress(`erase: rolling hour ${h + 1}/${HOURS}`);
      await rollPeriod(
        { store, duck, periodSeconds: 3600, rootUrl, assertLocked: async () => undefined },
        prefix,
        t0 + h * HOUR_MS,
        'roll',
      );
    }
    ctx.progress('erase: erasing one distinct id');
    const ectx = {
      store,
      duck,
      rootUrl,
      withPrefixLock: <T>(fn: (a: () => Promise<void>) => Promise<T>): Promise<T> => fn(async () => undefined),
    };
    const ids = { distinctIds: [PERSON], anonymousIds: [] };
    const wall0 = performance.now();
    const first = await erasePass(ectx, prefix, ids);
    const rescan = await erasePass(ectx, prefix, ids, { skip: new Set(first.scanned), counts: first.counts });
    const seconds = (performance.now() - wall0) / 1000;
    duck.closeSync();
    db.closeSync();
    const c = rescan.counts;
    if (!ctx.smoke && c.rowsErased < 24)
      throw new Error(`erased ${c.rowsErased} row removals, expected 12 batch rows + 12 rollup rows`);
    ctx.progress(
      `erase: ${c.filesScanned} files scanned, ${c.filesRewritten} rewritten, ${c.rowsErased} rows in ${seconds.toFixed(1)} s`,
      { keep: true },
    );
    return [
      {
        scenario: 'erase',
        metric: `erase one id: ${batches * EVENTS_PER_BATCH} events, ${batches} batch files + rollups (find, rewrite, rescan)`,
        unit: 's',
        ours: seconds,
        target: `< ${TARGET_S} s`,
        ...(ctx.smoke ? {} : { pass: seconds < TARGET_S }),
      },
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
