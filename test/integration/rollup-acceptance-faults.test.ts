/**
 * Rollup acceptance 2 and 4 (issue 12), with real processes (`start:api`, `start:encoder`,
 * `start:rollup`, the `events-ingest` CLI), the test's redis-server and a filesystem store:
 *
 * 2. kill -9 of the rollup process while DuckDB is writing a rollup, three times: no partial file
 *    under a final name, the view stays exact, and after a restart every period is rolled once.
 * 4. Raw retention: batch files go only once a listed rollup holds them; a `sync` whose cursor is
 *    older than what retention deleted exits 4 pointing at the rollups; a first sync starts after
 *    the deleted batches and says so; list answers 410 to the old cursor.
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sleep } from '../../scripts/chaos-kit.js';
import { batchIdMs } from '../../shared/ids.js';
import { periodStart } from '../../shared/rollup/layout.js';
import { manifestFiles, readManifest } from '../../shared/rollup/manifest.js';
import { RAW_DELETED_HEADER, readRetentionMark } from '../../shared/rollup/retention.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { duckQuery } from '../helpers/duckdb.js';
import { waitFor } from '../helpers/proc.js';
import { expectManifestMatchesStore, expectViewEqualsBatches } from '../helpers/rollup.js';
import {
  TOKEN,
  cleanupAll,
  deploy,
  onCleanup,
  push,
  rolledThrough,
  runCli,
  storeCount,
} from '../helpers/rollup-deploy.js';

afterAll(cleanupAll);

describe('rollup acceptance (faults)', () => {
  it(
    '2: kill -9 of the rollup process mid-write, three times: no partial file under a final name; exact after restart; each period rolled once',
    { timeout: 240_000 },
    async () => {
      const dataDir = mkdtempSync(join(tmpdir(), 'rollup-kill-'));
      onCleanup(() => rmSync(dataDir, { recursive: true, force: true }));
      const store = new FilesystemObjectStore({ root: dataDir });
      const d = await deploy({ STORE: 'fs', DATA_DIR: dataDir }, store, 2, 0);
      // Three apps: each kill leaves one app's job to BullMQ's stalled check (lock 10 s), the next round writes another app's.
      const apps = ['k1', 'k2', 'k3'];
      let total = 0;
      const last = new Map<string, string>();
      const until = Date.now() + 6000;
      for (let i = 0; Date.now() < until; i++) {
        const app = apps[i % apps.length]!;
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
      const killed: number[] = [];
      for (let round = 0; round < 3; round++) {
        const rollup = await d.startRollup();
        killed.push(rollup.pid);
        // Kill while DuckDB is writing a rollup file (its local temp file exists), at most 60 s of waiting.
        const prefix = `events-ingest-rollup-${rollup.pid}-`;
        const seen = await waitFor(
          async () =>
            readdirSync(tmp).some((n) => n.startsWith(prefix)) ||
            ((await rolledThrough(store, apps, lastEnd)) ? 'done' : false),
          60_000,
          'a rollup write in progress',
        ).catch(() => false);
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
      expect(
        readdirSync(tmp).filter((n) => killed.some((pid) => n.startsWith(`events-ingest-rollup-${pid}-`))),
      ).toEqual([]);
    },
  );

  it(
    '4: raw retention: batch files go only once a listed rollup holds them; sync with an old cursor exits 4 pointing at the rollups; a first sync starts after the deleted batches',
    { timeout: 180_000 },
    async () => {
      const dataDir = mkdtempSync(join(tmpdir(), 'rollup-ret-'));
      onCleanup(() => rmSync(dataDir, { recursive: true, force: true }));
      const store = new FilesystemObjectStore({ root: dataDir });
      // 2 s periods, deleted 3 s after they end (and 2 s after Redis' list index forgets them).
      const d = await deploy({ STORE: 'fs', DATA_DIR: dataDir }, store, 2, 0, {
        RAW_RETENTION_SECONDS: '3',
        LIST_INDEX_SECONDS: '2',
      });
      const app = 'ret';
      const prefix = `events/${app}/`;
      const cliEnv = { EVENTS_INGEST_TOKEN: TOKEN };
      const auth = { Authorization: `Bearer ${TOKEN}` };
      const dirA = mkdtempSync(join(tmpdir(), 'rollup-sync-a-'));
      const dirB = mkdtempSync(join(tmpdir(), 'rollup-sync-b-'));
      onCleanup(() => rmSync(dirA, { recursive: true, force: true }));
      onCleanup(() => rmSync(dirB, { recursive: true, force: true }));
      const sync = (dir: string): ReturnType<typeof runCli> =>
        runCli(['sync', '--url', d.url, '--app', app, '--out', dir], cliEnv);
      const cursorOf = (dir: string): string =>
        (JSON.parse(readFileSync(join(dir, '.cursor'), 'utf8')) as { lastId: string }).lastId;
      const parquetIn = (dir: string): string[] =>
        readdirSync(dir)
          .filter((n) => n.endsWith('.parquet'))
          .map((n) => n.slice(0, -'.parquet'.length));

      const acked = new Map<string, number>();
      const until = Date.now() + 10_000;
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
        const rows = await duckQuery(
          `SELECT DISTINCT batch_id FROM read_parquet([${files.map((k) => `'${dataDir}/${k}'`).join(', ')}])`,
        );
        return new Set(rows.map((r) => String(r.batch_id)));
      };

      // A first sync while every batch file is still there: the rollup process (and with it raw
      // retention) starts only once it is done. Started before, on a loaded machine a slow sync lost a
      // listed batch to retention midway and rightly exited 1.
      await waitFor(async () => (await store.listKeys(prefix, { limit: 3 })).length >= 3, 30_000, 'first batch files');
      const first = await sync(dirA);
      expect(first.code, first.stderr).toBe(0);
      const rollup = await d.startRollup();
      const c0 = cursorOf(dirA);
      const firstFiles = parquetIn(dirA);
      expect(firstFiles.length).toBeGreaterThan(0);

      // Every second: a batch file seen before and gone now is held by a rollup file the manifest
      // lists (store listed first, manifest read after: a rollup is listed before its batches go).
      const seen = new Set<string>();
      let gone = 0;
      let mark = '';
      for (let s = 0; s < 60 && (Date.now() < until || mark <= c0); s++) {
        const present = new Set(
          (await store.listKeys(prefix)).flatMap((k) =>
            k.endsWith('.parquet') ? [k.slice(prefix.length, -'.parquet'.length)] : [],
          ),
        );
        const rolled = await rolledIds();
        for (const id of seen)
          if (!present.has(id)) expect(rolled.has(id), `${id} deleted before a listed rollup held it`).toBe(true);
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
      const fromMark = await fetch(`${d.url}/list/events/${app}?after=${old.headers.get(RAW_DELETED_HEADER)}`, {
        headers: auth,
      });
      expect(fromMark.status).toBe(200);
      const fresh = await fetch(`${d.url}/list/events/${app}`, { headers: auth });
      expect(fresh.status).toBe(200);
      expect(fresh.headers.get(RAW_DELETED_HEADER)).not.toBeNull();
      // pull of a deleted batch answers like any unknown batch (docs/analysts.md, "Retention").
      const deletedId = [...acked.keys()]
        .sort()
        .find((id) => id > c0 && id <= mark && !existsSync(join(dataDir, prefix, `${id}.parquet`)));
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
      await waitFor(
        async () => (await storeCount({ ...d.common })) === [...acked.values()].reduce((a, b) => a + b, 0),
        60_000,
        'every batch in the view',
      );
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
    },
  );
});
