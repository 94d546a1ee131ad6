/**
 * Rollup acceptance 1 and 6 (issue 12): real processes (`start:api`, `start:encoder`,
 * `start:rollup`, the `events-ingest` CLI), the test's redis-server, a filesystem store or
 * s3rver, DuckDB through the CLI's own query code. Acceptance 2 and 4 (kill -9, raw retention)
 * are in rollup-acceptance-faults.test.ts; 3 (replay) in rollup.test.ts.
 *
 * 1. Continuous pushes to 3 apps for ROLLUP_ACCEPTANCE_SECONDS: every closed period is rolled;
 *    the `query --store` count sampled every second never exceeds what was pushed and never goes
 *    backwards; after the drain it equals the acknowledged events; GROUP BY over the view = over
 *    the batch files. The form (40 s, ROLLUP_PERIOD_SECONDS=10, ROLLUP_DELAY_SECONDS=2) is
 *    `npm run rollup-acceptance`; `npm test` runs the same assertions over 12 s with 4 s periods
 *    and a 1 s delay (ROLLUP_ACCEPTANCE_SECONDS, _PERIOD_SECONDS, _DELAY_SECONDS).
 * 6. Acceptance 1 with STORE=s3 against s3rver. DuckDB's httpfs cannot be installed here (no
 *    internet), so each sample runs the CLI's query code with `--copy` (cli/query.ts,
 *    shared/rollup/view-copy.ts): the objects the view needs are fetched with the product's S3
 *    client into one reused folder, in the view's order, and the same view SQL runs on it; the
 *    final `query --store` run (no --copy) falls back to that copy by itself. The final audit
 *    (view = batch files, manifest = store) reads a full mirror of the bucket. Where httpfs is
 *    installed, the samples read S3 directly, as in 1.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sleep } from '../../scripts/chaos-kit.js';
import { batchIdMs } from '../../shared/ids.js';
import { periodStart } from '../../shared/rollup/layout.js';
import { manifestFiles, readManifest } from '../../shared/rollup/manifest.js';
import { storeRootUrl } from '../../shared/duckdb.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { duckQuery } from '../helpers/duckdb.js';
import { expectManifestMatchesStore, expectViewEqualsBatches, mirrorStore } from '../helpers/rollup.js';
import {
  type Deployment,
  cleanupAll,
  deploy,
  onCleanup,
  push,
  rolledThrough,
  runCli,
  storeCount,
} from '../helpers/rollup-deploy.js';
import { S3RVER_CREDENTIALS, type S3TestServer, s3StoreFor, startS3Server } from '../helpers/s3.js';

const SECONDS = Number(process.env.ROLLUP_ACCEPTANCE_SECONDS ?? 12);
const PERIOD = Number(process.env.ROLLUP_ACCEPTANCE_PERIOD_SECONDS ?? 4);
const DELAY = Number(process.env.ROLLUP_ACCEPTANCE_DELAY_SECONDS ?? 1);

afterAll(cleanupAll);

async function acceptance1(d: Deployment, periodSeconds: number, mode: 'store' | 'copy'): Promise<void> {
  const apps = ['alpha', 'beta', 'gamma'];
  const periodMs = periodSeconds * 1000;
  await d.startRollup();
  let acked = 0;
  let inFlight = 0;
  // Without httpfs: the CLI's own copy path (`query --store --copy`), one copy folder reused by every sample.
  let copy: { cacheDir: string } | undefined;
  if (mode === 'copy') {
    copy = { cacheDir: mkdtempSync(join(tmpdir(), 'rollup-view-copy-')) };
    const { cacheDir } = copy;
    onCleanup(() => rmSync(cacheDir, { recursive: true, force: true }));
  }
  const countOnce = (): Promise<number> => storeCount(d.common, copy);
  // A loaded machine can reset a connection to s3rver: a read is retried (a few times, bounded), never skipped.
  const count = async (): Promise<number> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await countOnce();
      } catch (err) {
        if (attempt >= 4) throw err;
        await sleep(200);
      }
    }
  };
  const ids = new Map<string, string[]>(apps.map((a) => [a, []]));
  const until = Date.now() + SECONDS * 1000;
  // The view must be read several times while it grows. One read takes 0.4-0.9 s alone but 3-8 s,
  // and once over 12 s, next to other test files (S3 through the local copy, with s3rver serving
  // the services from this process), so pushes go on past `until` until that many reads were
  // taken (bounded: twice SECONDS more at most), at a trickle that keeps the view growing without
  // piling more files on the reads it waits for. Two reads in the short form, 11 in the long one.
  const minSamplesWhilePushing = Math.max(2, Math.floor((SECONDS - 5) / 3));
  const hardUntil = until + 2 * SECONDS * 1000;
  let samplesWhilePushing = 0;
  const pushers = apps.map(async (app, k) => {
    for (
      let i = 0;
      (Date.now() < until || samplesWhilePushing < minSamplesWhilePushing) && Date.now() < hardUntil && i < 100_000;
      i++
    ) {
      const n = 10 + ((i * 7 + k) % 31);
      inFlight += n;
      const id = await push(d.url, app, n);
      inFlight -= n;
      if (id) {
        acked += n;
        ids.get(app)?.push(id);
      }
      await sleep(Date.now() < until ? 30 + ((i * 13) % 50) : 250);
    }
  });
  let pushing = true;
  void Promise.all(pushers).then(() => (pushing = false));

  const samples: { n: number; upper: number }[] = [];
  let watermarkMoves = 0;
  let movesWhilePushing = 0;
  let lastW = 0;
  const lastEnd = (app: string): number =>
    periodStart(batchIdMs(ids.get(app)?.at(-1) ?? '0000000000000'), periodMs) + periodMs;
  const deadline = until + 90_000;
  for (let s = 0; Date.now() < deadline && s < 1000; s++) {
    const t0 = Date.now();
    const n = await count();
    // A file can be written before its push's 200 reaches the client: pushes in flight count as an upper bound too.
    const upper = acked + inFlight;
    samples.push({ n, upper });
    if (pushing) samplesWhilePushing++;
    expect(n, `sample ${s}`).toBeLessThanOrEqual(upper);
    if (samples.length > 1)
      expect(n, `sample ${s} went backwards`).toBeGreaterThanOrEqual(samples[samples.length - 2]!.n);
    const w = (await readManifest(d.store, 'events/alpha/'))?.watermarkMs ?? 0;
    if (w > lastW) {
      // A sample before and one after: the view was read while a period was being rolled.
      if (lastW > 0 || samples.length > 1) watermarkMoves++;
      if (pushing) movesWhilePushing++;
      lastW = w;
    }
    if (!pushing && n === acked && (await rolledThrough(d.store, apps, lastEnd))) break;
    await sleep(Math.max(0, 1000 - (Date.now() - t0)));
  }
  expect(pushing).toBe(false);
  expect(samplesWhilePushing).toBeGreaterThanOrEqual(minSamplesWhilePushing);
  expect(samples.length).toBeGreaterThan(samplesWhilePushing);
  // Rollups happened between samples, not before the first or after the last. In the long form
  // (npm run rollup-acceptance, 40 s) at least one also lands while pushes run; the short form's
  // 12 s can end before a loaded machine's first pass.
  expect(watermarkMoves).toBeGreaterThanOrEqual(1);
  if (SECONDS >= 30) expect(movesWhilePushing).toBeGreaterThanOrEqual(1);
  expect(await count()).toBe(acked);
  expect(await rolledThrough(d.store, apps, lastEnd)).toBe(true);

  // Final checks on the store itself (S3: a full copy, made after everything settled).
  let check = d.store;
  if (copy) {
    const root = mkdtempSync(join(tmpdir(), 'rollup-mirror-'));
    onCleanup(() => rmSync(root, { recursive: true, force: true }));
    check = await mirrorStore(d.store, root);
    // Nothing in the store that the manifests do not list, and nothing listed missing.
    for (const app of apps) {
      const m = (await readManifest(d.store, `events/${app}/`))!;
      const inStore = (await d.store.listKeys(`rollups/events/${app}/`)).filter((k) => k.endsWith('.parquet'));
      expect(inStore.sort()).toEqual(manifestFiles(m).sort());
    }
  }
  const { rootUrl } = storeRootUrl(check, { ...process.env, ...d.common });
  let viewTotal = 0;
  for (const app of apps) {
    viewTotal += await expectViewEqualsBatches(check, app, d.common);
    const m = (await readManifest(check, `events/${app}/`))!;
    await expectManifestMatchesStore(check, m, rootUrl);
    // Every period from the first push to the last is rolled (pushes were continuous).
    const first = periodStart(batchIdMs(ids.get(app)![0]!), periodMs);
    const expected = [];
    for (let t = first; t < lastEnd(app); t += periodMs) expected.push(t);
    expect(m.periods.map((p) => p.startMs)).toEqual(expected);
  }
  expect(viewTotal).toBe(acked);
  // The CLI itself, as an analyst runs it: on S3 without httpfs it chooses the copy by itself and says why.
  const cli = await runCli(
    ['query', 'SELECT count(*) AS n FROM events', '--store', '--csv', ...(copy ? ['--cache-dir', copy.cacheDir] : [])],
    d.common,
  );
  expect(cli.code, cli.stderr).toBe(0);
  expect(cli.stdout.trim().split(/\r?\n/)).toEqual(['n', String(acked)]);
  if (copy) expect(cli.stderr).toMatch(/httpfs extension is not available/);
}

describe('rollup acceptance', () => {
  it(
    `1: ${SECONDS} s of pushes to 3 apps, ${PERIOD} s periods, ${DELAY} s delay: counts never exceed what was pushed nor go backwards; final = acknowledged; GROUP BY = batch files`,
    { timeout: (SECONDS + 150) * 1000 },
    async () => {
      const dataDir = mkdtempSync(join(tmpdir(), 'rollup-acc-'));
      onCleanup(() => rmSync(dataDir, { recursive: true, force: true }));
      const d = await deploy(
        { STORE: 'fs', DATA_DIR: dataDir },
        new FilesystemObjectStore({ root: dataDir }),
        PERIOD,
        DELAY,
      );
      await acceptance1(d, PERIOD, 'store');
    },
  );
  it(
    `6: acceptance 1 with STORE=s3 against s3rver (${SECONDS} s, ${PERIOD} s periods)`,
    { timeout: (SECONDS + 180) * 1000 },
    async () => {
      const s3: S3TestServer = await startS3Server();
      onCleanup(() => s3.close());
      const creds = {
        AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
        AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
      };
      Object.assign(process.env, creds);
      const d = await deploy(
        {
          STORE: 's3',
          S3_BUCKET: s3.bucket,
          S3_ENDPOINT: s3.endpoint,
          S3_FORCE_PATH_STYLE: 'true',
          S3_REGION: 'us-east-1',
          ...creds,
        },
        s3StoreFor(s3),
        PERIOD,
        DELAY,
      );
      const httpfs = await duckQuery('SET autoinstall_known_extensions = false')
        .then(() => duckQuery('LOAD httpfs'))
        .then(
          () => true,
          () => false,
        );
      await acceptance1(d, PERIOD, httpfs ? 'store' : 'copy');
    },
  );
});
