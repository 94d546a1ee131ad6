/**
 * RETENTION_DAYS: whole rolled periods older than the limit go (rollup files, batch files,
 * manifest entries); newer ones stay and the view stays exact over them. Days are not too coarse
 * to test: the batch files are written with ids dated days in the past (the product's own encoder
 * makes them), then the product's stack (rollup service + API) runs on them with real time.
 * On the filesystem and on S3 (s3rver; deletes are DeleteObjects). DuckDB cannot open S3 here (no
 * httpfs), so on S3 the view is checked on a copy of the bucket made once everything settled.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { msKey, periodStart } from '../../shared/rollup/layout.js';
import { manifestFiles, readManifest } from '../../shared/rollup/manifest.js';
import { readRetentionMark } from '../../shared/rollup/retention.js';
import { encodeBatch } from '../../shared/parquet/encode.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { expectManifestMatchesStore, expectViewEqualsBatches, mirrorStore, viewCount } from '../helpers/rollup.js';
import { S3RVER_CREDENTIALS, type S3TestServer, s3StoreFor, startS3Server } from '../helpers/s3.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

const DAY = 86_400_000;
const HOUR = 3_600_000;

interface StoreUnderTest {
  store: ObjectStore;
  env: Record<string, string>;
  close(): Promise<void>;
}

const stores: [string, () => Promise<StoreUnderTest>][] = [
  [
    'filesystem',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'rollup-days-'));
      return {
        store: new FilesystemObjectStore({ root: dir }),
        env: { STORE: 'fs', DATA_DIR: dir },
        close: async () => rmSync(dir, { recursive: true, force: true }),
      };
    },
  ],
  [
    's3 (s3rver)',
    async () => {
      const s3: S3TestServer = await startS3Server();
      Object.assign(process.env, {
        AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
        AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
      });
      return {
        store: s3StoreFor(s3),
        env: {
          STORE: 's3',
          S3_BUCKET: s3.bucket,
          S3_ENDPOINT: s3.endpoint,
          S3_FORCE_PATH_STYLE: 'true',
          S3_REGION: 'us-east-1',
        },
        close: () => s3.close(),
      };
    },
  ],
];

describe.each(stores)(
  'RETENTION_DAYS=5 on %s (1 h periods; batch files dated 10, 6, 4 and 1 days ago)',
  (_name, open) => {
    const prefix = 'events/old/';
    const now = Date.now();
    // Two batches in each of four hour-long periods, well clear of the 5-day cutoff.
    const ages = [10, 6, 4, 1];
    const batches = ages.flatMap((days, k) => {
      const start = periodStart(now - days * DAY, HOUR);
      return [0, 1].map((j) => ({
        days,
        start,
        id: `${msKey(start + 60_000 + j * 1000)}-000${j}-${(0xa00000 + k).toString(16)}`,
        rows: 3 + k + j,
      }));
    });
    let sut: StoreUnderTest;
    let stack: TestStack;
    let scratch = '';

    beforeAll(async () => {
      scratch = mkdtempSync(join(tmpdir(), 'rollup-days-copy-'));
      sut = await open();
      for (const b of batches) {
        const encoded = encodeBatch(
          batchBody(b.rows, (i) => sampleEvent(i)),
          Number(b.id.slice(0, 13)),
        );
        if (!encoded.ok) throw new Error(encoded.reason);
        await sut.store.putBytes(`${prefix}${b.id}.parquet`, encoded.bytes);
      }
      stack = await startTestStack(
        {
          ...sut.env,
          ROLLUP_PERIOD_SECONDS: '3600',
          ROLLUP_DELAY_SECONDS: '0',
          RAW_RETENTION_SECONDS: '0',
          RETENTION_DAYS: '5',
        },
        { api: true, encoder: false, rollup: true },
      );
    });
    afterAll(async () => {
      await stack?.shutdown();
      await sut?.close();
      if (scratch) rmSync(scratch, { recursive: true, force: true });
    });

    it('drops the periods older than 5 days and their manifest entries; keeps the newer ones; the view is exact for what is kept', async () => {
      const { store } = sut;
      const kept = batches.filter((b) => b.days < 5);
      const dropped = batches.filter((b) => b.days >= 5);
      const lastStart = Math.max(...batches.map((b) => b.start));
      // Every period is rolled (watermark past the newest), and the old ones are gone from the manifest.
      // With 1 h periods the planner runs every 30 s: the test asks for passes (rolling and retention) itself.
      const m = await waitFor(
        async () => {
          await stack.rollup?.planOnce();
          const got = await readManifest(store, prefix);
          return got && got.watermarkMs >= lastStart + HOUR && got.periods.every((p) => p.startMs > now - 5 * DAY)
            ? got
            : null;
        },
        60_000,
        'periods rolled and old ones dropped',
      );
      expect(m.periods.map((p) => p.startMs)).toEqual([...new Set(kept.map((b) => b.start))]);
      expect(manifestFiles(m).length).toBe(2);
      // Retention writes the manifest before it deletes the dropped periods' files; a pass the
      // planner's own timer started can be between the two when the manifest above was read.
      const rollupFiles = async (): Promise<string[]> =>
        (await store.listKeys(`rollups/${prefix}`)).filter((k) => k.endsWith('.parquet')).sort();
      const batchIds = async (): Promise<string[]> =>
        (await store.listKeys(prefix)).map((k) => k.slice(prefix.length, -'.parquet'.length));
      const want = { rollups: manifestFiles(m).sort(), batches: kept.map((b) => b.id) };
      await waitFor(
        async () =>
          JSON.stringify({ rollups: await rollupFiles(), batches: await batchIds() }) === JSON.stringify(want),
        15_000,
        'the dropped periods deleted',
      ).catch(() => undefined);
      // Rollup files in the store are exactly the listed ones (the dropped periods' files are deleted).
      expect(await rollupFiles()).toEqual(manifestFiles(m).sort());
      // Batch files: the dropped periods' are deleted, the kept ones' stay (raw retention is off).
      const left = await batchIds();
      expect(left).toEqual(kept.map((b) => b.id));
      // The view: exactly the kept rows, equal to the batch files left (GROUP BY and row hashes).
      const local = store instanceof FilesystemObjectStore ? store : await mirrorStore(store, scratch);
      await expectManifestMatchesStore(local, m, `${local.root}/`);
      expect(await expectViewEqualsBatches(local, 'old')).toBe(kept.reduce((n, b) => n + b.rows, 0));
      expect(await viewCount(local, 'old')).toBe(kept.reduce((n, b) => n + b.rows, 0));
      // The retention mark names the newest deleted batch, so list tells a cursor in the dropped range.
      expect((await readRetentionMark(store, prefix))?.deletedThrough).toBe(dropped[dropped.length - 1]?.id);
      const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
      const old = await fetch(`${stack.url}/list/events/old?after=${dropped[0]?.id}`, { headers: auth });
      expect(old.status).toBe(410);
      const all = await fetch(`${stack.url}/list/events/old`, { headers: auth });
      expect(((await all.json()) as { items: string[] }).items).toEqual(kept.map((b) => `${b.id}.parquet`));
    });
  },
);
