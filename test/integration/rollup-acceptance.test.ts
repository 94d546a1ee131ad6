/**
 * Rollup acceptance (issue 12): real processes (`start:api`, `start:encoder`, `start:rollup`),
 * the test's redis-server, a filesystem store or s3rver, DuckDB through the CLI's own query code.
 *
 * 1. ROLLUP_PERIOD_SECONDS=10, ROLLUP_DELAY_SECONDS=2, continuous pushes to 3 apps for
 *    ROLLUP_ACCEPTANCE_SECONDS (default 40): every closed period is rolled; the `query --store`
 *    count sampled every second never exceeds what was pushed and never goes backwards; after
 *    the drain it equals the acknowledged events; GROUP BY over the view = over the batch files.
 * 2. kill -9 of the rollup process while DuckDB is writing a rollup, three times: no partial file
 *    under a final name, the view stays exact, and after a restart every period is rolled once.
 * 6. Acceptance 1 again with STORE=s3 against s3rver.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { runQuery } from '../../cli/query.js';
import { type Service, sleep, spawnService, waitHttpOk } from '../../scripts/chaos-kit.js';
import { parseEnv } from '../../shared/config.js';
import { batchIdMs } from '../../shared/ids.js';
import { periodStart } from '../../shared/rollup/layout.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { storeRootUrl } from '../../shared/rollup/roll.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { duckQuery } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { waitFor } from '../helpers/proc.js';
import { expectManifestMatchesStore, expectViewEqualsBatches } from '../helpers/rollup.js';
import { freePort } from '../helpers/redis-server.js';
import { S3RVER_CREDENTIALS, type S3TestServer, s3StoreFor, startS3Server } from '../helpers/s3.js';

const TOKEN = 'rollup-admin-token-0123456789';
const SECONDS = Number(process.env.ROLLUP_ACCEPTANCE_SECONDS ?? 40);
const ROOT = resolve(import.meta.dirname, '../..');

const procs: Service[] = [];
const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const p of procs) await p.stop('SIGKILL');
  for (const c of cleanups) await c();
});

interface Deployment {
  common: Record<string, string>;
  store: ObjectStore;
  url: string;
  startRollup(): Promise<Service>;
}

async function deploy(storeEnv: Record<string, string>, store: ObjectStore, periodSeconds: number, delaySeconds: number): Promise<Deployment> {
  const [apiPort, encoderMetrics] = [await freePort(), await freePort()];
  const common = {
    HOST: '127.0.0.1',
    REDIS_URL: inject('redisUrl'),
    QUEUE_NAME: uniqueName('roll'),
    ADMIN_TOKEN: TOKEN,
    ROLLUP_PERIOD_SECONDS: String(periodSeconds),
    ROLLUP_DELAY_SECONDS: String(delaySeconds),
    LOG_LEVEL: 'info',
    ...storeEnv,
  };
  const api = spawnService('services/api/main.ts', { ...common, PORT: String(apiPort) });
  const encoder = spawnService('services/encoder/main.ts', { ...common, METRICS_PORT: String(encoderMetrics) });
  procs.push(api, encoder);
  const url = `http://127.0.0.1:${apiPort}`;
  await waitHttpOk(`${url}/readyz`, 60_000, api);
  await waitHttpOk(`http://127.0.0.1:${encoderMetrics}/metrics`, 60_000, encoder);
  return {
    common,
    store,
    url,
    async startRollup() {
      const port = await freePort();
      const rollup = spawnService('services/rollup/main.ts', { ...common, METRICS_PORT: String(port) });
      procs.push(rollup);
      await waitHttpOk(`http://127.0.0.1:${port}/metrics`, 60_000, rollup);
      return rollup;
    },
  };
}

async function push(url: string, app: string, n: number): Promise<string | null> {
  try {
    const r = await fetch(`${url}/push/events/${app}/x`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: batchBody(n, (i) => sampleEvent(i)), signal: AbortSignal.timeout(10_000) });
    if (r.status !== 200) return null;
    return ((await r.json()) as { batchId: string }).batchId;
  } catch {
    return null;
  }
}

/** `query --store` code path (cli/query.ts): the count over the exact view, every app. */
async function storeCount(d: Deployment): Promise<number> {
  const result = await runQuery('SELECT count(*)::BIGINT AS n FROM events', { kind: 'store', env: parseEnv(d.common) });
  return Number(result.rows[0]?.[0] ?? 0);
}

/** Watermark of every app has passed `endMs`. */
async function rolledThrough(store: ObjectStore, apps: readonly string[], endMs: (app: string) => number): Promise<boolean> {
  for (const app of apps) {
    const m = await readManifest(store, `events/${app}/`);
    if (!m || m.watermarkMs < endMs(app)) return false;
  }
  return true;
}

/**
 * Without DuckDB's httpfs (it cannot be downloaded here) the view cannot read S3: the count is
 * then computed by the view's own rule from the manifests and a store listing, with each batch's
 * event count known from its push: rows of listed rollup files + events of batch files at or
 * after each app's watermark.
 */
async function manifestRuleCount(store: ObjectStore, apps: readonly string[], events: ReadonlyMap<string, number>): Promise<number> {
  let n = 0;
  for (const app of apps) {
    const m = await readManifest(store, `events/${app}/`);
    n += m ? m.periods.reduce((a, p) => a + p.files.reduce((b, f) => b + f.rows, 0), 0) : 0;
    const after = m && m.watermarkMs > 0 ? `events/${app}/${String(m.watermarkMs).padStart(13, '0')}` : undefined;
    for (const key of await store.listKeys(`events/${app}/`, { startAfter: after })) n += events.get(key.slice(`events/${app}/`.length, -'.parquet'.length)) ?? 0;
  }
  return n;
}

/** Copies every object of `store` into a fresh local folder, so DuckDB can check it without httpfs. */
async function mirror(store: ObjectStore): Promise<FilesystemObjectStore> {
  const dir = mkdtempSync(join(tmpdir(), 'rollup-mirror-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const local = new FilesystemObjectStore({ root: dir });
  for (const key of await store.listKeys('')) {
    const got = await store.getBytes(key);
    if (got) await local.putBytes(key, got.body);
  }
  return local;
}

async function acceptance1(d: Deployment, periodSeconds: number, mode: 'duckdb' | 'manifest-rule' = 'duckdb'): Promise<void> {
  const apps = ['alpha', 'beta', 'gamma'];
  const periodMs = periodSeconds * 1000;
  await d.startRollup();
  let acked = 0;
  let inFlight = 0;
  const events = new Map<string, number>();
  const countOnce = (): Promise<number> => (mode === 'duckdb' ? storeCount(d) : manifestRuleCount(d.store, apps, events));
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
  const pushers = apps.map(async (app, k) => {
    for (let i = 0; Date.now() < until && i < 100_000; i++) {
      const n = 10 + ((i * 7 + k) % 31);
      inFlight += n;
      const id = await push(d.url, app, n);
      inFlight -= n;
      if (id) {
        acked += n;
        events.set(id, n);
        ids.get(app)?.push(id);
      }
      await sleep(30 + ((i * 13) % 50));
    }
  });
  let pushing = true;
  void Promise.all(pushers).then(() => (pushing = false));

  const samples: { n: number; upper: number }[] = [];
  let watermarkMoves = 0;
  let lastW = 0;
  const lastEnd = (app: string): number => periodStart(batchIdMs(ids.get(app)?.at(-1) ?? '0000000000000'), periodMs) + periodMs;
  const deadline = until + 90_000;
  for (let s = 0; Date.now() < deadline && s < 1000; s++) {
    const t0 = Date.now();
    const n = await count();
    // A file can be written before its push's 200 reaches the client: pushes in flight count as an upper bound too.
    const upper = acked + inFlight;
    samples.push({ n, upper });
    expect(n, `sample ${s}`).toBeLessThanOrEqual(upper);
    if (samples.length > 1) expect(n, `sample ${s} went backwards`).toBeGreaterThanOrEqual(samples[samples.length - 2]!.n);
    const w = (await readManifest(d.store, 'events/alpha/'))?.watermarkMs ?? 0;
    if (w > lastW) {
      if (pushing) watermarkMoves++;
      lastW = w;
    }
    if (!pushing && n === acked && (await rolledThrough(d.store, apps, lastEnd))) break;
    await sleep(Math.max(0, 1000 - (Date.now() - t0)));
  }
  expect(pushing).toBe(false);
  expect(samples.length).toBeGreaterThanOrEqual(SECONDS - 5);
  // Rollups happened while pushes and samples ran, not only at the end (how many depends on the machine's load).
  expect(watermarkMoves).toBeGreaterThanOrEqual(1);
  expect(await count()).toBe(acked);
  expect(await rolledThrough(d.store, apps, lastEnd)).toBe(true);

  const check = mode === 'duckdb' ? d.store : await mirror(d.store);
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
  if (mode !== 'duckdb') return;
  // The CLI itself, as an analyst runs it.
  const cli = await new Promise<{ code: number | null; out: string }>((done) => {
    const child = spawn(process.execPath, ['bin/events-ingest.mjs', 'query', 'SELECT count(*) AS n FROM events', '--store', '--csv'], { cwd: ROOT, env: { ...process.env, ...d.common } });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    child.on('exit', (code) => done({ code, out }));
  });
  expect(cli.code, cli.out).toBe(0);
  expect(cli.out).toContain(String(acked));
}

describe('rollup acceptance', () => {
  it(`1: ${SECONDS} s of pushes to 3 apps, 10 s periods: counts never exceed what was pushed nor go backwards; final = acknowledged; GROUP BY = batch files`, { timeout: (SECONDS + 150) * 1000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'rollup-acc-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const d = await deploy({ STORE: 'fs', DATA_DIR: dataDir }, new FilesystemObjectStore({ root: dataDir }), 10, 2);
    await acceptance1(d, 10);
  });

  it('2: kill -9 of the rollup process mid-write, three times: no partial file under a final name; exact after restart; each period rolled once', { timeout: 240_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'rollup-kill-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const store = new FilesystemObjectStore({ root: dataDir });
    const d = await deploy({ STORE: 'fs', DATA_DIR: dataDir }, store, 2, 0);
    const apps = ['k1', 'k2'];
    let total = 0;
    const last = new Map<string, string>();
    const until = Date.now() + 10_000;
    for (let i = 0; Date.now() < until; i++) {
      const app = apps[i % 2]!;
      const id = await push(d.url, app, 100);
      expect(id).not.toBeNull();
      last.set(app, id!);
      total += 100;
    }
    const lastEnd = (app: string): number => periodStart(batchIdMs(last.get(app)!), 2000) + 2000;
    await waitFor(async () => (await storeCount(d)) === total, 60_000, 'every batch file written');
    const tmp = tmpdir();
    const rootUrl = `${dataDir}/`;
    let previous = 0;
    let kills = 0;
    for (let round = 0; round < 3; round++) {
      const rollup = await d.startRollup();
      // Kill while DuckDB is writing a rollup file (its local temp file exists), at most 60 s of waiting.
      const prefix = `events-ingest-rollup-${rollup.pid}-`;
      const seen = await waitFor(async () => readdirSync(tmp).some((n) => n.startsWith(prefix)) || (await rolledThrough(store, apps, lastEnd) ? 'done' : false), 60_000, 'a rollup write in progress').catch(() => false);
      rollup.child.kill('SIGKILL');
      await rollup.exited();
      if (seen === true) kills++;
      // Nothing under a final name is partial: every rollup file DuckDB can read whole.
      for (const key of (await store.listKeys('rollups/')).filter((k) => k.endsWith('.parquet'))) {
        const [row] = await duckQuery(`SELECT count(*)::BIGINT AS n FROM read_parquet('${rootUrl}${key}')`);
        expect(Number(row?.n)).toBeGreaterThan(0);
      }
      const n = await storeCount(d);
      expect(n).toBeLessThanOrEqual(total);
      expect(n).toBeGreaterThanOrEqual(previous);
      previous = n;
      expect(n).toBe(total);
    }
    expect(kills).toBeGreaterThanOrEqual(2);
    const rollup = await d.startRollup();
    await waitFor(() => rolledThrough(store, apps, lastEnd), 120_000, 'every period rolled after restart');
    // Let the last job's clean-up finish, then stop it cleanly.
    await sleep(500);
    expect(await rollup.stop('SIGTERM')).toBe(0);
    for (const app of apps) {
      expect(await expectViewEqualsBatches(store, app)).toBeGreaterThan(0);
      await expectManifestMatchesStore(store, (await readManifest(store, `events/${app}/`))!, rootUrl);
    }
    expect(await storeCount(d)).toBe(total);
    // The killed processes' local temp files were removed by the restarted one.
    expect(readdirSync(tmp).filter((n) => n.startsWith('events-ingest-rollup-') && !existsSync(`/proc/${n.split('-')[3]}`))).toEqual([]);
  });

  it(`6: acceptance 1 with STORE=s3 against s3rver`, { timeout: (SECONDS + 180) * 1000 }, async () => {
    const s3: S3TestServer = await startS3Server();
    cleanups.push(() => s3.close());
    const creds = { AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId, AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey };
    Object.assign(process.env, creds);
    const d = await deploy({ STORE: 's3', S3_BUCKET: s3.bucket, S3_ENDPOINT: s3.endpoint, S3_FORCE_PATH_STYLE: 'true', S3_REGION: 'us-east-1', ...creds }, s3StoreFor(s3), 10, 2);
    const httpfs = await duckQuery('SET autoinstall_known_extensions = false').then(() => duckQuery('LOAD httpfs')).then(
      () => true,
      () => false,
    );
    await acceptance1(d, 10, httpfs ? 'duckdb' : 'manifest-rule');
  });
});
