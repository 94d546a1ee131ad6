/**
 * `query --store` with STORE=s3 through the local copy (shared/rollup/view-copy.ts): the real API
 * and encoder write to s3rver, the real rollup service rolls some periods, and the real CLI
 * answers the exact count: rollup files of rolled periods + batch files after the watermark,
 * fetched with the product's S3 client. A second run fetches nothing; a batch pushed after the
 * watermark is fetched alone by the next run; once it is rolled, the batch files below the new
 * watermark leave the copy and the count stays exact.
 *
 * Where DuckDB's httpfs cannot be loaded (no internet here), the first run has no --copy: the
 * CLI must fall back to the copy by itself and say why. Where httpfs loads, every run passes --copy.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EXIT } from '../../cli/errors.js';
import { acquireLock } from '../../cli/lock.js';
import { runQuery } from '../../cli/query.js';
import { sleep } from '../../scripts/chaos-kit.js';
import { parseEnv } from '../../shared/config.js';
import { batchIdMs } from '../../shared/ids.js';
import { periodStart } from '../../shared/rollup/layout.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { duckQuery } from '../helpers/duckdb.js';
import { cleanupAll, deploy, onCleanup, push, rolledThrough, runCli } from '../helpers/rollup-deploy.js';
import { S3RVER_CREDENTIALS, s3StoreFor, startS3Server } from '../helpers/s3.js';

const PERIOD = 2;
const DELAY = 1;
const APPS = ['alpha', 'beta'];

afterAll(cleanupAll);

/** Waits (bounded) until every id's batch file is in the store. */
async function written(store: ObjectStore, app: string, ids: readonly string[]): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const keys = new Set(await store.listKeys(`events/${app}/`));
    if (ids.every((id) => keys.has(`events/${app}/${id}.parquet`))) return;
    await sleep(100);
  }
  throw new Error(`batch files of ${app} not written within 20 s`);
}

/** The numbers of the copy's summary line (`copy: N objects in the view (…): F fetched (…), C already in …, R … removed`). */
function summary(stderr: string): { needed: number; fetched: number; cached: number; removed: number } {
  const line = stderr.split('\n').find((l) => /^copy: \d+ objects in the view/.test(l));
  expect(line, stderr).toBeDefined();
  const num = (re: RegExp): number => Number(re.exec(line ?? '')?.[1] ?? 0);
  return {
    needed: num(/^copy: (\d+) objects/),
    fetched: num(/: (\d+) fetched/),
    cached: num(/, (\d+) already in/),
    removed: num(/, (\d+) no longer needed removed/),
  };
}

describe('query --store on S3 through the local copy', () => {
  it(
    'answers the exact count, reuses the copy, picks up a new batch after the watermark, drops what the view no longer reads',
    { timeout: 150_000 },
    async () => {
      const s3 = await startS3Server();
      onCleanup(() => s3.close());
      const cacheDir = mkdtempSync(join(tmpdir(), 'query-copy-'));
      onCleanup(() => rmSync(cacheDir, { recursive: true, force: true }));
      const creds = {
        AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
        AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
      };
      const store = s3StoreFor(s3);
      const d = await deploy(
        {
          STORE: 's3',
          S3_BUCKET: s3.bucket,
          S3_ENDPOINT: s3.endpoint,
          S3_FORCE_PATH_STYLE: 'true',
          S3_REGION: 'us-east-1',
          ...creds,
        },
        store,
        PERIOD,
        DELAY,
      );
      const httpfs = await duckQuery('SET autoinstall_known_extensions = false')
        .then(() => duckQuery('LOAD httpfs'))
        .then(
          () => true,
          () => false,
        );
      const query = (extra: string[] = ['--copy']): ReturnType<typeof runCli> =>
        runCli(
          ['query', 'SELECT count(*) AS n FROM events', '--store', '--csv', '--cache-dir', cacheDir, ...extra],
          d.common,
        );

      // Pushes over two periods and more, then a rollup of what closed.
      let acked = 0;
      const ackedBy = new Map<string, number>(APPS.map((a) => [a, 0]));
      const ids = new Map<string, string[]>(APPS.map((a) => [a, []]));
      const pushSome = async (app: string, n: number): Promise<string> => {
        const id = await push(d.url, app, n);
        if (id === null) throw new Error(`push to ${app} failed`);
        acked += n;
        ackedBy.set(app, (ackedBy.get(app) ?? 0) + n);
        ids.get(app)?.push(id);
        return id;
      };
      const until = Date.now() + 2 * PERIOD * 1000 + 500;
      for (let i = 0; Date.now() < until && i < 200; i++) {
        for (const app of APPS) await pushSome(app, 5 + (i % 7));
        await sleep(100);
      }
      for (const app of APPS) await written(store, app, ids.get(app) ?? []);
      const firstEnd = (app: string): number =>
        periodStart(batchIdMs(ids.get(app)?.[0] ?? ''), PERIOD * 1000) + PERIOD * 1000;
      const rollup = await d.startRollup();
      for (let i = 0; i < 300 && !(await rolledThrough(store, APPS, firstEnd)); i++) await sleep(100);
      expect(await rolledThrough(store, APPS, firstEnd)).toBe(true);
      // No more rolling until the end: what is pushed from here on stays after the watermark.
      await rollup.stop('SIGKILL');
      for (const app of APPS) await written(store, app, [await pushSome(app, 9)]);
      const watermarks = await Promise.all(
        APPS.map(async (app) => (await readManifest(store, `events/${app}/`))?.watermarkMs ?? 0),
      );
      // The view mixes both parts: rollup files below each watermark, batch files after it.
      for (const [k, app] of APPS.entries())
        expect(ids.get(app)?.some((id) => batchIdMs(id) >= (watermarks[k] ?? 0))).toBe(true);

      // 1. The exact count. Without httpfs the CLI chooses the copy by itself and says why.
      const first = await query(httpfs ? ['--copy'] : []);
      expect(first.code, first.stderr).toBe(0);
      expect(first.stdout.trim().split(/\r?\n/)).toEqual(['n', String(acked)]);
      if (!httpfs) expect(first.stderr).toMatch(/httpfs extension is not available .*reads S3 through a local copy/);
      const s1 = summary(first.stderr);
      expect(s1.fetched).toBeGreaterThan(0);
      expect(s1.fetched).toBe(s1.needed);
      // Counts and sizes only: nothing of the events themselves.
      expect(first.stderr).not.toMatch(/button_click|Pixel 8|screen_\d/);

      // 2. Nothing new: nothing fetched, same answer.
      const second = await query();
      expect(second.code, second.stderr).toBe(0);
      expect(second.stdout.trim().split(/\r?\n/)).toEqual(['n', String(acked)]);
      expect(summary(second.stderr)).toEqual({ needed: s1.needed, fetched: 0, cached: s1.needed, removed: 0 });

      // 3. One new batch after the watermark: fetched alone, counted.
      await written(store, 'alpha', [await pushSome('alpha', 13)]);
      const third = await query();
      expect(third.code, third.stderr).toBe(0);
      expect(third.stdout.trim().split(/\r?\n/)).toEqual(['n', String(acked)]);
      expect(summary(third.stderr)).toEqual({ needed: s1.needed + 1, fetched: 1, cached: s1.needed, removed: 0 });

      // 4. Everything rolled: the new rollup files are fetched, the batch files now below the watermark leave the copy.
      const lastEnd = (app: string): number =>
        periodStart(batchIdMs(ids.get(app)?.at(-1) ?? ''), PERIOD * 1000) + PERIOD * 1000;
      await d.startRollup();
      for (let i = 0; i < 300 && !(await rolledThrough(store, APPS, lastEnd)); i++) await sleep(100);
      expect(await rolledThrough(store, APPS, lastEnd)).toBe(true);
      const fourth = await query();
      expect(fourth.code, fourth.stderr).toBe(0);
      expect(fourth.stdout.trim().split(/\r?\n/)).toEqual(['n', String(acked)]);
      const s4 = summary(fourth.stderr);
      expect(s4.fetched).toBeGreaterThan(0);
      expect(s4.removed).toBeGreaterThan(0);
      // The same copy read by --app: one app's count.
      const alpha = await runCli(
        [
          'query',
          'SELECT count(*) AS n FROM events',
          '--store',
          '--csv',
          '--copy',
          '--app',
          'alpha',
          '--cache-dir',
          cacheDir,
        ],
        d.common,
      );
      expect(alpha.code, alpha.stderr).toBe(0);
      expect(alpha.stdout.trim().split(/\r?\n/)).toEqual(['n', String(ackedBy.get('alpha'))]);
      expect(summary(alpha.stderr).fetched).toBe(0);
    },
  );
});

describe('query --store copy flags', () => {
  const s3Env = {
    STORE: 's3',
    S3_BUCKET: 'b',
    S3_ENDPOINT: 'http://127.0.0.1:9',
    S3_FORCE_PATH_STYLE: 'true',
    AWS_ACCESS_KEY_ID: 'k',
    AWS_SECRET_ACCESS_KEY: 's',
  };

  it(
    '--copy/--cache-dir are usage errors off S3; --no-copy without httpfs exits 1 saying how to get it',
    { timeout: 60_000 },
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'query-copy-flags-'));
      onCleanup(() => rmSync(dir, { recursive: true, force: true }));
      const fsRun = await runCli(['query', 'SELECT 1', '--store', '--copy'], { STORE: 'fs', DATA_DIR: dir });
      expect(fsRun.code).toBe(2);
      expect(fsRun.stderr).toContain('are for STORE=s3 (STORE=fs is read in place)');
      const both = await runCli(['query', 'SELECT 1', '--store', '--no-copy', '--cache-dir', dir], s3Env);
      expect(both.code).toBe(2);
      const dirRun = await runCli(['query', 'SELECT 1', '--dir', dir, '--copy'], s3Env);
      expect(dirRun.code).toBe(2);
      const httpfs = await duckQuery('SET autoinstall_known_extensions = false')
        .then(() => duckQuery('LOAD httpfs'))
        .then(
          () => true,
          () => false,
        );
      if (!httpfs) {
        const noCopy = await runCli(['query', 'SELECT 1', '--store', '--no-copy'], s3Env);
        expect(noCopy.code).toBe(1);
        expect(noCopy.stderr).toMatch(
          /--no-copy: DuckDB's httpfs extension is not available .*INSTALL httpfs.*~\/\.duckdb\/extensions\//,
        );
      }
    },
  );

  it('a query waits (bounded) for another one refreshing the same copy folder, then exits 3', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'query-copy-lock-'));
    onCleanup(() => rmSync(dir, { recursive: true, force: true }));
    const held = await acquireLock(dir, 'query');
    try {
      const t0 = Date.now();
      await expect(
        runQuery('SELECT 1', { kind: 'store', env: parseEnv(s3Env), copy: true, cacheDir: dir }, { lockWaitMs: 600 }),
      ).rejects.toMatchObject({
        exitCode: EXIT.locked,
        message: expect.stringMatching(/another query holds/),
      });
      expect(Date.now() - t0).toBeGreaterThanOrEqual(600);
    } finally {
      await held.release();
    }
  });
});
