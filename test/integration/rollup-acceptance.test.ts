/**
 * Rollup acceptance (issue 12): real processes (`start:api`, `start:encoder`, `start:rollup`, the
 * `events-ingest` CLI), the test's redis-server, a filesystem store or s3rver, DuckDB through the
 * CLI's own query code.
 *
 * 1. Continuous pushes to 3 apps for ROLLUP_ACCEPTANCE_SECONDS: every closed period is rolled;
 *    the `query --store` count sampled every second never exceeds what was pushed and never goes
 *    backwards; after the drain it equals the acknowledged events; GROUP BY over the view = over
 *    the batch files. The issue's form (40 s, ROLLUP_PERIOD_SECONDS=10, ROLLUP_DELAY_SECONDS=2) is
 *    `npm run rollup-acceptance`; `npm test` runs the same assertions over 12 s with 4 s periods
 *    and a 1 s delay (ROLLUP_ACCEPTANCE_SECONDS, _PERIOD_SECONDS, _DELAY_SECONDS).
 * 2. kill -9 of the rollup process while DuckDB is writing a rollup, three times: no partial file
 *    under a final name, the view stays exact, and after a restart every period is rolled once.
 * 4. Raw retention: batch files go only once a listed rollup holds them; a `sync` whose cursor is
 *    older than what retention deleted exits 4 pointing at the rollups; a first sync starts after
 *    the deleted batches and says so; list answers 410 to the old cursor.
 * 6. Acceptance 1 with STORE=s3 against s3rver. DuckDB's httpfs cannot be installed here (no
 *    internet), so the view is read from a local copy made the way the view reads the store
 *    (manifests first, then the files they list and the batch files after the watermark), with the
 *    product's query code (`runQuery`, `query --store`) over that copy.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { runQuery } from '../../cli/query.js';
import { type Service, sleep, spawnService, waitHttpOk } from '../../scripts/chaos-kit.js';
import { parseEnv } from '../../shared/config.js';
import { batchIdMs } from '../../shared/ids.js';
import { msKey, periodStart } from '../../shared/rollup/layout.js';
import { manifestFiles, readManifest, writeManifest } from '../../shared/rollup/manifest.js';
import { RAW_DELETED_HEADER, readRetentionMark } from '../../shared/rollup/retention.js';
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
const SECONDS = Number(process.env.ROLLUP_ACCEPTANCE_SECONDS ?? 12);
const PERIOD = Number(process.env.ROLLUP_ACCEPTANCE_PERIOD_SECONDS ?? 4);
const DELAY = Number(process.env.ROLLUP_ACCEPTANCE_DELAY_SECONDS ?? 1);
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

async function deploy(storeEnv: Record<string, string>, store: ObjectStore, periodSeconds: number, delaySeconds: number, extra: Record<string, string> = {}): Promise<Deployment> {
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
    ...extra,
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

/** Runs the `events-ingest` CLI as a user would (one node process, the checkout's sources). */
function runCli(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['bin/events-ingest.mjs', ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const kill = setTimeout(() => child.kill('SIGKILL'), 90_000);
    child.on('close', (code) => {
      clearTimeout(kill);
      done({ code, stdout, stderr });
    });
  });
}

/** `query --store` code path (cli/query.ts): the count over the exact view, every app. */
async function storeCount(env: Record<string, string>): Promise<number> {
  const result = await runQuery('SELECT count(*)::BIGINT AS n FROM events', { kind: 'store', env: parseEnv(env) });
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
 * A local copy of what the exact view reads from a store DuckDB cannot open here (S3 without
 * httpfs), made in the view's order: each app's manifest first, then the rollup files it lists,
 * then the batch files at or after its watermark, listed after the manifest was read. Objects
 * already copied are not fetched again (batch files never change; a rollup file is fetched again
 * when the manifest gives it another size). The view over the copy is then what the view over the
 * store would have read at that moment.
 */
class ViewCopy {
  readonly dir = mkdtempSync(join(tmpdir(), 'rollup-view-copy-'));
  readonly local = new FilesystemObjectStore({ root: this.dir });
  private readonly sizes = new Map<string, number>();
  constructor(private readonly store: ObjectStore) {
    cleanups.push(() => rmSync(this.dir, { recursive: true, force: true }));
  }

  private async copy(key: string, size?: number): Promise<void> {
    if (this.sizes.has(key) && (size === undefined || this.sizes.get(key) === size)) return;
    const got = await this.store.getBytes(key);
    if (!got) throw new Error(`${key} is listed but missing from the store`);
    await this.local.putBytes(key, got.body);
    this.sizes.set(key, got.body.byteLength);
  }

  async refresh(apps: readonly string[]): Promise<void> {
    for (const app of apps) {
      const prefix = `events/${app}/`;
      const m = await readManifest(this.store, prefix);
      if (m) {
        for (const f of m.periods.flatMap((p) => p.files)) await this.copy(f.key, f.bytes);
        // The manifest read above, written last: the copy's view reads it before anything else.
        await writeManifest(this.local, m);
      }
      const after = m && m.watermarkMs > 0 ? `${prefix}${msKey(m.watermarkMs)}` : undefined;
      for (const key of await this.store.listKeys(prefix, { startAfter: after })) if (key.endsWith('.parquet')) await this.copy(key);
    }
  }

  env(): Record<string, string> {
    return { STORE: 'fs', DATA_DIR: this.dir };
  }
}

async function acceptance1(d: Deployment, periodSeconds: number, mode: 'store' | 'copy'): Promise<void> {
  const apps = ['alpha', 'beta', 'gamma'];
  const periodMs = periodSeconds * 1000;
  await d.startRollup();
  let acked = 0;
  let inFlight = 0;
  const copy = mode === 'copy' ? new ViewCopy(d.store) : undefined;
  const countOnce = async (): Promise<number> => {
    if (!copy) return storeCount(d.common);
    await copy.refresh(apps);
    return storeCount(copy.env());
  };
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

  // Final checks on the store itself (S3: a full copy, made after everything settled).
  let check = d.store;
  if (copy) {
    const full = new FilesystemObjectStore({ root: mkdtempSync(join(tmpdir(), 'rollup-mirror-')) });
    cleanups.push(() => rmSync(full.root, { recursive: true, force: true }));
    for (const key of await d.store.listKeys('')) {
      const got = await d.store.getBytes(key);
      if (got) await full.putBytes(key, got.body);
    }
    check = full;
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
  // The CLI itself, as an analyst runs it (on S3: over the full copy, see the file comment).
  const cli = await runCli(['query', 'SELECT count(*) AS n FROM events', '--store', '--csv'], copy ? { ...d.common, STORE: 'fs', DATA_DIR: (check as FilesystemObjectStore).root } : d.common);
  expect(cli.code, cli.stderr).toBe(0);
  expect(cli.stdout.trim().split('\n')).toEqual(['n', String(acked)]);
}

describe('rollup acceptance', () => {
  it(`1: ${SECONDS} s of pushes to 3 apps, ${PERIOD} s periods, ${DELAY} s delay: counts never exceed what was pushed nor go backwards; final = acknowledged; GROUP BY = batch files`, { timeout: (SECONDS + 150) * 1000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'rollup-acc-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const d = await deploy({ STORE: 'fs', DATA_DIR: dataDir }, new FilesystemObjectStore({ root: dataDir }), PERIOD, DELAY);
    await acceptance1(d, PERIOD, 'store');
  });
  it('2: kill -9 of the rollup process mid-write, three times: no partial file under a final name; exact after restart; each period rolled once', { timeout: 240_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'rollup-kill-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const store = new FilesystemObjectStore({ root: dataDir });
    const d = await deploy({ STORE: 'fs', DATA_DIR: dataDir }, store, 2, 0);
    const apps = ['k1', 'k2'];
    let total = 0;
    const last = new Map<string, string>();
    const until = Date.now() + 8000;
    for (let i = 0; Date.now() < until; i++) {
      const app = apps[i % 2]!;
      const id = await push(d.url, app, 100);
      expect(id).not.toBeNull();
      last.set(app, id!);
      total += 100;
    }
    const lastEnd = (app: string): number => periodStart(batchIdMs(last.get(app)!), 2000) + 2000;
    await waitFor(async () => (await storeCount(d.common)) === total, 60_000, 'every batch file written');
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
      const n = await storeCount(d.common);
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
    expect(await storeCount(d.common)).toBe(total);
    // The killed processes' local temp files were removed by the restarted one.
    expect(readdirSync(tmp).filter((n) => n.startsWith('events-ingest-rollup-') && !existsSync(`/proc/${n.split('-')[3]}`))).toEqual([]);
  });


  it('4: raw retention: batch files go only once a listed rollup holds them; sync with an old cursor exits 4 pointing at the rollups; a first sync starts after the deleted batches', { timeout: 180_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'rollup-ret-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const store = new FilesystemObjectStore({ root: dataDir });
    // 2 s periods, deleted 3 s after they end (and 2 s after Redis' list index forgets them).
    const d = await deploy({ STORE: 'fs', DATA_DIR: dataDir }, store, 2, 0, { RAW_RETENTION_SECONDS: '3', LIST_INDEX_SECONDS: '2' });
    const rollup = await d.startRollup();
    const app = 'ret';
    const prefix = `events/${app}/`;
    const cliEnv = { EVENTS_INGEST_TOKEN: TOKEN };
    const auth = { Authorization: `Bearer ${TOKEN}` };
    const dirA = mkdtempSync(join(tmpdir(), 'rollup-sync-a-'));
    const dirB = mkdtempSync(join(tmpdir(), 'rollup-sync-b-'));
    cleanups.push(() => rmSync(dirA, { recursive: true, force: true }), () => rmSync(dirB, { recursive: true, force: true }));
    const sync = (dir: string): ReturnType<typeof runCli> => runCli(['sync', '--url', d.url, '--app', app, '--out', dir], cliEnv);
    const cursorOf = (dir: string): string => (JSON.parse(readFileSync(join(dir, '.cursor'), 'utf8')) as { lastId: string }).lastId;
    const parquetIn = (dir: string): string[] => readdirSync(dir).filter((n) => n.endsWith('.parquet')).map((n) => n.slice(0, -'.parquet'.length));

    const acked = new Map<string, number>();
    const until = Date.now() + 14_000;
    const pusher = (async () => {
      for (let i = 0; Date.now() < until && i < 10_000; i++) {
        const id = await push(d.url, app, 5 + (i % 4));
        if (id) acked.set(id, 5 + (i % 4));
        await sleep(60);
      }
    })();

    /** Batch ids held by the rollup files the manifest lists now. */
    const rolledIds = async (): Promise<Set<string>> => {
      const m = await readManifest(store, prefix);
      const files = m ? manifestFiles(m) : [];
      if (files.length === 0) return new Set();
      const rows = await duckQuery(`SELECT DISTINCT batch_id FROM read_parquet([${files.map((k) => `'${dataDir}/${k}'`).join(', ')}])`);
      return new Set(rows.map((r) => String(r.batch_id)));
    };

    // A first sync while every batch file is still there.
    await waitFor(async () => (await store.listKeys(prefix, { limit: 3 })).length >= 3, 30_000, 'first batch files');
    const first = await sync(dirA);
    expect(first.code, first.stderr).toBe(0);
    const c0 = cursorOf(dirA);
    const firstFiles = parquetIn(dirA);
    expect(firstFiles.length).toBeGreaterThan(0);

    // Every second: a batch file seen before and gone now is held by a rollup file the manifest
    // lists (store listed first, manifest read after: a rollup is listed before its batches go).
    const seen = new Set<string>();
    let gone = 0;
    let mark = '';
    for (let s = 0; s < 60 && (Date.now() < until || mark <= c0); s++) {
      const present = new Set((await store.listKeys(prefix)).flatMap((k) => (k.endsWith('.parquet') ? [k.slice(prefix.length, -'.parquet'.length)] : [])));
      const rolled = await rolledIds();
      for (const id of seen) if (!present.has(id)) expect(rolled.has(id), `${id} deleted before a listed rollup held it`).toBe(true);
      gone = [...seen].filter((id) => !present.has(id)).length;
      for (const id of present) seen.add(id);
      mark = (await readRetentionMark(store, prefix))?.deletedThrough ?? '';
      await sleep(1000);
    }
    await pusher;
    expect(gone).toBeGreaterThan(0);
    expect(mark > c0).toBe(true);

    // The list route: 410 naming the mark and the rollups for the old cursor; 200 from the mark on.
    const old = await fetch(`${d.url}/list/events/${app}?after=${c0}`, { headers: auth });
    expect(old.status).toBe(410);
    expect(old.headers.get('content-type')).toMatch(/^application\/json/);
    const oldBody = (await old.json()) as { error: string };
    expect(oldBody.error).toContain(`cursor ${c0} is older than the raw retention`);
    expect(oldBody.error).toContain('rollups');
    expect(old.headers.get(RAW_DELETED_HEADER)).not.toBeNull();
    const fromMark = await fetch(`${d.url}/list/events/${app}?after=${old.headers.get(RAW_DELETED_HEADER)}`, { headers: auth });
    expect(fromMark.status).toBe(200);
    const fresh = await fetch(`${d.url}/list/events/${app}`, { headers: auth });
    expect(fresh.status).toBe(200);
    expect(fresh.headers.get(RAW_DELETED_HEADER)).not.toBeNull();
    // pull of a deleted batch answers like any unknown batch (docs/analysts.md, "Retention").
    const deletedId = [...acked.keys()].sort().find((id) => id > c0 && id <= mark && !existsSync(join(dataDir, prefix, `${id}.parquet`)));
    expect(deletedId).toBeDefined();
    const pulled = await fetch(`${d.url}/pull/events/${app}/${deletedId}`, { headers: auth });
    expect(pulled.status).toBe(200);
    expect(((await pulled.json()) as { hash: string }).hash).toBe('');

    // The old cursor: exit 4, a message pointing at the rollups, nothing downloaded, cursor kept.
    const stale = await sync(dirA);
    expect(stale.code, stale.stderr).toBe(4);
    expect(stale.stderr).toContain(`cursor ${c0}`);
    expect(stale.stderr).toContain("older than the server's raw retention");
    expect(stale.stderr).toContain('events-ingest query --store');
    expect(cursorOf(dirA)).toBe(c0);
    expect(parquetIn(dirA).sort()).toEqual(firstFiles.sort());

    // Once everything is written and rolled, stop retention, then a first sync into a new folder:
    // it says it starts after the deleted batches, and with the rollups it holds every batch acknowledged.
    await waitFor(async () => (await storeCount({ ...d.common })) === [...acked.values()].reduce((a, b) => a + b, 0), 60_000, 'every batch in the view');
    expect(await rollup.stop('SIGTERM')).toBe(0);
    const markNow = (await readRetentionMark(store, prefix))!.deletedThrough;
    const fresh2 = await sync(dirB);
    expect(fresh2.code, fresh2.stderr).toBe(0);
    expect(fresh2.stderr).toContain(`deleted batch files up to ${markNow}`);
    expect(fresh2.stdout).toContain(`started after ${markNow}`);
    expect(fresh2.stdout).toContain('query --store');
    const inB = parquetIn(dirB);
    for (const id of inB) expect(id > markNow).toBe(true);
    const rolled = await rolledIds();
    const missing = [...acked.keys()].filter((id) => !inB.includes(id) && !rolled.has(id));
    expect(missing).toEqual([]);
    // And a sync with that folder's cursor goes on normally.
    const again = await sync(dirB);
    expect(again.code, again.stderr).toBe(0);
  });

  it(`6: acceptance 1 with STORE=s3 against s3rver (${SECONDS} s, ${PERIOD} s periods)`, { timeout: (SECONDS + 180) * 1000 }, async () => {
    const s3: S3TestServer = await startS3Server();
    cleanups.push(() => s3.close());
    const creds = { AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId, AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey };
    Object.assign(process.env, creds);
    const d = await deploy({ STORE: 's3', S3_BUCKET: s3.bucket, S3_ENDPOINT: s3.endpoint, S3_FORCE_PATH_STYLE: 'true', S3_REGION: 'us-east-1', ...creds }, s3StoreFor(s3), PERIOD, DELAY);
    const httpfs = await duckQuery('SET autoinstall_known_extensions = false').then(() => duckQuery('LOAD httpfs')).then(
      () => true,
      () => false,
    );
    await acceptance1(d, PERIOD, httpfs ? 'store' : 'copy');
  });
});
