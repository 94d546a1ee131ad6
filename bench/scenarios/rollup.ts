/**
 * Scenario `rollup` — rollups against the batch files they compact: 1,000,000 events as 10,000
 * batch files of 100 (the encoder's own `encodeBatch`, spread evenly over 4 hours of received_at),
 * rolled into hourly files by `rollPeriod` (DuckDB, one thread), then queried with DuckDB:
 * - `SELECT event_type, count(*) … GROUP BY 1` over the exact view vs over the batch files
 *   (target ≤ 0.1×; the view's time includes reading the manifest and listing the store);
 * - a one-hour range count out of the four (target ≤ 0.05×);
 * - bytes per event of rollups vs batch files;
 * - rollup throughput in events per CPU-second of the process (DuckDB's thread included);
 * - the sort choice: one hour's rows sorted event-first (ours) vs received_at-first, bytes and two
 *   filtered counts (one event; ten minutes).
 * `--smoke` uses 200 batches and asserts nothing.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { duckdbReadParquetSql } from '../../shared/duckdb.js';
import { encodeBatch } from '../../shared/parquet/encode.js';
import { msKey } from '../../shared/rollup/layout.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { storeRootUrl } from '../../shared/duckdb.js';
import { ROLLUP_ROW_GROUP_ROWS, ROLLUP_SORT, rollPeriod } from '../../services/rollup/roll.js';
import { rollupViewSql } from '../../shared/rollup/view.js';
import { createStore } from '../../shared/store/create.js';
import { bodyFactory, median, row } from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';

const HOURS = 4;
const HOUR_MS = 3_600_000;
const EVENTS_PER_BATCH = 100;

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const batches = ctx.smoke ? 200 : 10_000;
  const dir = mkdtempSync(join(tmpdir(), 'bench-rollup-'));
  const store = createStore({ kind: 'filesystem', root: dir });
  const prefix = 'events/bench/';
  const t0 = Math.floor(Date.now() / HOUR_MS) * HOUR_MS - (HOURS + 1) * HOUR_MS;
  try {
    const body = bodyFactory(EVENTS_PER_BATCH);
    let batchBytes = 0;
    for (let i = 0; i < batches; i++) {
      const ms = t0 + Math.floor((i * HOURS * HOUR_MS) / batches);
      const id = `${msKey(ms)}-0000-${randomBytes(3).toString('hex')}`;
      const r = encodeBatch(body(), ms);
      if (!r.ok) throw new Error(r.reason);
      await store.putBytes(`${prefix}${id}.parquet`, r.bytes);
      batchBytes += r.bytes.byteLength;
      if (i % 500 === 0) ctx.progress(`rollup: writing batch files ${i}/${batches}`);
    }
    const events = batches * EVENTS_PER_BATCH;

    // Roll the four hours, one DuckDB thread, measuring this process's CPU (DuckDB's threads included).
    const rollDb = await DuckDBInstance.create(':memory:', {
      threads: '1',
      memory_limit: '1GB',
      preserve_insertion_order: 'false',
    });
    const duck = await rollDb.connect();
    const cpu0 = process.cpuUsage();
    const wall0 = performance.now();
    let rolledBytes = 0;
    for (let h = 0; h < HOURS; h++) {
      ctx.progress(`rollup: rolling hour ${h + 1}/${HOURS}`);
      const r = await rollPeriod(
        { store, duck, periodSeconds: 3600, rootUrl: storeRootUrl(store).rootUrl, assertLocked: async () => undefined },
        prefix,
        t0 + h * HOUR_MS,
        'roll',
      );
      rolledBytes += r.bytes;
    }
    const rollWall = (performance.now() - wall0) / 1000;
    const used = process.cpuUsage(cpu0);
    const rollCpu = (used.user + used.system) / 1e6;
    duck.closeSync();
    rollDb.closeSync();
    const manifest = await readManifest(store, prefix);
    const rolledRows = manifest?.periods.reduce((n, p) => n + p.files.reduce((m, f) => m + f.rows, 0), 0) ?? 0;
    if (rolledRows !== events) throw new Error(`rolled ${rolledRows} rows of ${events}`);

    // Queries: a fresh DuckDB (default threads) per measurement set; median of 3 runs each.
    const db = await DuckDBInstance.create(':memory:');
    const conn = await db.connect();
    const raw = duckdbReadParquetSql({ store, collection: 'events/{app}/{batchId}', params: { app: 'bench' } }).from;
    const timeIt = async (sqlOf: () => Promise<string>): Promise<{ s: number; rows: unknown[] }> => {
      const times: number[] = [];
      let rows: unknown[] = [];
      for (let i = 0; i < 3; i++) {
        const start = performance.now();
        rows = (await conn.runAndReadAll(await sqlOf())).getRowsJson();
        times.push((performance.now() - start) / 1000);
      }
      return { s: median(times), rows };
    };
    const viewFrom = async (): Promise<string> =>
      `(${(await rollupViewSql({ store, collection: 'events/{app}/{batchId}', params: { app: 'bench' } })).select})`;
    const groupBy = (from: string): string => `SELECT event_type, count(*) AS n FROM ${from} GROUP BY 1 ORDER BY 1`;
    const hour = (from: string): string =>
      `SELECT count(*) AS n FROM ${from} WHERE received_at >= make_timestamptz(${(t0 + HOUR_MS) * 1000}) AND received_at < make_timestamptz(${(t0 + 2 * HOUR_MS) * 1000})`;
    ctx.progress('rollup: GROUP BY over batch files');
    const gRaw = await timeIt(async () => groupBy(raw));
    ctx.progress('rollup: GROUP BY over the view');
    const gView = await timeIt(async () => groupBy(await viewFrom()));
    if (JSON.stringify(gRaw.rows) !== JSON.stringify(gView.rows))
      throw new Error('GROUP BY over the view differs from the batch files');
    ctx.progress('rollup: one-hour range');
    const hRaw = await timeIt(async () => hour(raw));
    const hView = await timeIt(async () => hour(await viewFrom()));
    if (JSON.stringify(hRaw.rows) !== JSON.stringify(hView.rows))
      throw new Error('range count over the view differs from the batch files');

    // The sort choice (ROLLUP_SORT: event, received_at, batch_id) against received_at first: the
    // second hour's rows written both ways by the same DuckDB settings as the rollup service.
    ctx.progress('rollup: sort order event-first vs received_at-first');
    const hourFiles =
      manifest?.periods
        .find((p) => p.startMs === t0 + HOUR_MS)
        ?.files.map((f) => `'${storeRootUrl(store).rootUrl}${f.key}'`) ?? [];
    const sorted = { event: join(dir, 'sort-event-first.parquet'), time: join(dir, 'sort-time-first.parquet') };
    for (const [name, order] of [
      ['event', ROLLUP_SORT.join(', ')],
      ['time', 'received_at, event, batch_id'],
    ] as const) {
      await conn.run(
        `COPY (SELECT * FROM read_parquet([${hourFiles.join(', ')}]) ORDER BY ${order}) TO '${sorted[name]}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE ${ROLLUP_ROW_GROUP_ROWS})`,
      );
    }
    const hourRows = Number(
      (await conn.runAndReadAll(`SELECT count(*) FROM read_parquet('${sorted.event}')`)).getRows()[0]?.[0] ?? 0,
    );
    const tenMinutes = (file: string): string =>
      `SELECT count(*) AS n FROM read_parquet('${file}') WHERE received_at >= make_timestamptz(${(t0 + HOUR_MS + 20 * 60_000) * 1000}) AND received_at < make_timestamptz(${(t0 + HOUR_MS + 30 * 60_000) * 1000})`;
    const oneEvent = (file: string): string =>
      `SELECT count(*) AS n FROM read_parquet('${file}') WHERE event = 'purchase'`;
    const eEvent = await timeIt(async () => oneEvent(sorted.event));
    const tEvent = await timeIt(async () => oneEvent(sorted.time));
    const eRange = await timeIt(async () => tenMinutes(sorted.event));
    const tRange = await timeIt(async () => tenMinutes(sorted.time));
    if (
      JSON.stringify(eEvent.rows) !== JSON.stringify(tEvent.rows) ||
      JSON.stringify(eRange.rows) !== JSON.stringify(tRange.rows)
    )
      throw new Error('the two sort orders hold different rows');
    conn.closeSync();
    db.closeSync();

    const scenario = 'rollup';
    return [
      row({
        scenario,
        metric: `GROUP BY event_type, ${events.toLocaleString('en')} events: view vs ${batches.toLocaleString('en')} batch files`,
        unit: 's',
        ours: gView.s,
        reference: gRaw.s,
        ratioTarget: ctx.smoke ? undefined : { op: '<=', value: 0.1 },
      }),
      row({
        scenario,
        metric: `count of one hour out of ${HOURS}: view vs batch files`,
        unit: 's',
        ours: hView.s,
        reference: hRaw.s,
        ratioTarget: ctx.smoke ? undefined : { op: '<=', value: 0.05 },
      }),
      row({
        scenario,
        metric: 'bytes per event: rollups vs batch files',
        unit: 'B',
        ours: rolledBytes / events,
        reference: batchBytes / events,
      }),
      row({ scenario, metric: 'rollup throughput (DuckDB, 1 thread)', unit: 'events/CPU-s', ours: events / rollCpu }),
      row({ scenario, metric: 'rollup wall time for all periods', unit: 's', ours: rollWall }),
      row({
        scenario,
        metric: `sort choice, one hour (${hourRows.toLocaleString('en')} rows): bytes per event, event-first (ours) vs received_at-first`,
        unit: 'B',
        ours: statSync(sorted.event).size / hourRows,
        reference: statSync(sorted.time).size / hourRows,
      }),
      row({
        scenario,
        metric: "sort choice: count WHERE event = 'purchase', event-first vs received_at-first",
        unit: 's',
        ours: eEvent.s,
        reference: tEvent.s,
      }),
      row({
        scenario,
        metric: 'sort choice: count of 10 minutes of the hour, event-first vs received_at-first',
        unit: 's',
        ours: eRange.s,
        reference: tRange.s,
      }),
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
