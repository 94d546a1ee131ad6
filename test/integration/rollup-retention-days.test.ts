/**
 * RETENTION_DAYS: whole rolled periods older than the limit go (rollup files, batch files,
 * manifest entries); newer ones stay and the view stays exact over them. Days are not too coarse
 * to test: the batch files are written with ids dated days in the past (the product's own encoder
 * makes them), then the product's stack (rollup service + API) runs on them with real time.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { msKey, periodStart } from '../../shared/rollup/layout.js';
import { manifestFiles, readManifest } from '../../shared/rollup/manifest.js';
import { readRetentionMark } from '../../shared/rollup/retention.js';
import { encodeBatch } from '../../shared/parquet/encode.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { expectManifestMatchesStore, expectViewEqualsBatches, viewCount } from '../helpers/rollup.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

const DAY = 86_400_000;
const HOUR = 3_600_000;

describe('RETENTION_DAYS=5 (1 h periods; batch files dated 10, 6, 4 and 1 days ago)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rollup-days-'));
  const store = new FilesystemObjectStore({ root: dir });
  const prefix = 'events/old/';
  const now = Date.now();
  // Two batches in each of four hour-long periods, well clear of the 5-day cutoff.
  const ages = [10, 6, 4, 1];
  const batches = ages.flatMap((days, k) => {
    const start = periodStart(now - days * DAY, HOUR);
    return [0, 1].map((j) => ({ days, start, id: `${msKey(start + 60_000 + j * 1000)}-000${j}-${(0xa00000 + k).toString(16)}`, rows: 3 + k + j }));
  });
  let stack: TestStack;

  beforeAll(async () => {
    for (const b of batches) {
      const encoded = encodeBatch(batchBody(b.rows, (i) => sampleEvent(i)), Number(b.id.slice(0, 13)));
      if (!encoded.ok) throw new Error(encoded.reason);
      await store.putBytes(`${prefix}${b.id}.parquet`, encoded.bytes);
    }
    stack = await startTestStack(
      { DATA_DIR: dir, ROLLUP_PERIOD_SECONDS: '3600', ROLLUP_DELAY_SECONDS: '0', RAW_RETENTION_SECONDS: '0', RETENTION_DAYS: '5' },
      { api: true, encoder: false, rollup: true },
    );
  });
  afterAll(async () => {
    await stack?.shutdown();
    rmSync(dir, { recursive: true, force: true });
  });

  it('drops the periods older than 5 days and their manifest entries; keeps the newer ones; the view is exact for what is kept', async () => {
    const kept = batches.filter((b) => b.days < 5);
    const dropped = batches.filter((b) => b.days >= 5);
    const lastStart = Math.max(...batches.map((b) => b.start));
    // Every period is rolled (watermark past the newest), and the old ones are gone from the manifest.
    // With 1 h periods the planner runs every 30 s: the test asks for passes (rolling and retention) itself.
    const m = await waitFor(
      async () => {
        await stack.rollup?.planOnce();
        const got = await readManifest(store, prefix);
        return got && got.watermarkMs >= lastStart + HOUR && got.periods.every((p) => p.startMs > now - 5 * DAY) ? got : null;
      },
      30_000,
      'periods rolled and old ones dropped',
    );
    expect(m.periods.map((p) => p.startMs)).toEqual([...new Set(kept.map((b) => b.start))]);
    // Rollup files in the store are exactly the listed ones (the dropped periods' files are deleted).
    await expectManifestMatchesStore(store, m, `${dir}/`);
    expect(manifestFiles(m).length).toBe(2);
    // Batch files: the dropped periods' are deleted, the kept ones' stay (raw retention is off).
    const left = (await store.listKeys(prefix)).map((k) => k.slice(prefix.length, -'.parquet'.length));
    expect(left).toEqual(kept.map((b) => b.id));
    // The view: exactly the kept rows, equal to the batch files left (GROUP BY and row hashes).
    expect(await expectViewEqualsBatches(store, 'old')).toBe(kept.reduce((n, b) => n + b.rows, 0));
    expect(await viewCount(store, 'old')).toBe(kept.reduce((n, b) => n + b.rows, 0));
    // The retention mark names the newest deleted batch, so list tells a cursor in the dropped range.
    expect((await readRetentionMark(store, prefix))?.deletedThrough).toBe(dropped[dropped.length - 1]?.id);
    const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
    const old = await fetch(`${stack.url}/list/events/old?after=${dropped[0]?.id}`, { headers: auth });
    expect(old.status).toBe(410);
    const all = await fetch(`${stack.url}/list/events/old`, { headers: auth });
    expect(((await all.json()) as { items: string[] }).items).toEqual(kept.map((b) => `${b.id}.parquet`));
  });
});
