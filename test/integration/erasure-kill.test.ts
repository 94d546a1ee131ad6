/**
 * Erasure (issue 36) survives `kill -9` of the process running it, with real processes
 * (`start:api`, `start:encoder`, `start:rollup`), the test's redis-server and a filesystem store:
 * the rollup process is killed twice while the erasure job runs (first while it rewrites batch
 * files, then at whatever point the resumed job reached), a third process completes it, and the
 * result is what an uninterrupted erasure gives: the view and the batch files hold every other
 * row exactly and none of the person's, the manifest matches the store (no rollup file left
 * behind), and every batch file that held the person is in the rewritten log.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { batchIdMs } from '../../shared/ids.js';
import { listRewritten } from '../../shared/erasure/rewritten.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { ERASE_ANON, ERASE_DISTINCT, ROW, body } from '../helpers/erasure.js';
import { waitFor } from '../helpers/proc.js';
import { batchQuery, expectManifestMatchesStore, viewQuery } from '../helpers/rollup.js';
import { TOKEN, cleanupAll, deploy, onCleanup } from '../helpers/rollup-deploy.js';

afterAll(cleanupAll);

const BATCHES = 400;
const auth = { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' };

describe('erasure under kill -9', () => {
  it(
    'kill -9 of the erasing process twice, at different points: it completes; nothing else is lost or altered',
    { timeout: 240_000 },
    async () => {
      const dataDir = mkdtempSync(join(tmpdir(), 'erasure-kill-'));
      onCleanup(() => rmSync(dataDir, { recursive: true, force: true }));
      const store = new FilesystemObjectStore({ root: dataDir });
      const d = await deploy({ STORE: 'fs', DATA_DIR: dataDir }, store, 2, 0);
      const app = 'ek';
      const prefix = `events/${app}/`;
      let next = 0;
      let last = '';
      const pusher = async (): Promise<void> => {
        for (let b = next++; b < BATCHES; b = next++) {
          const r = await fetch(`${d.url}/push/events/${app}/x`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: body(b, 5 + (b % 11)),
          });
          expect(r.status).toBe(200);
          const id = ((await r.json()) as { batchId: string }).batchId;
          if (id > last) last = id;
        }
      };
      await Promise.all(Array.from({ length: 4 }, pusher));
      await waitFor(async () => (await store.listKeys(prefix)).length === BATCHES, 60_000, 'every batch written');
      let rollup = await d.startRollup();
      const outputs: string[] = [];
      onCleanup(() => void rollup.child.kill('SIGKILL'));
      await waitFor(
        async () => ((await readManifest(store, prefix))?.watermarkMs ?? 0) > batchIdMs(last),
        60_000,
        'every period rolled',
      );

      const allRows = await batchQuery(store, app, (from) => `SELECT ${ROW} FROM ${from} ORDER BY message_id`);
      const isPerson = (r: Record<string, unknown>): boolean =>
        r.distinct_id === ERASE_DISTINCT || r.anonymous_id === ERASE_ANON;
      const keptRows = allRows.filter((r) => !isPerson(r));
      const personBatches = new Set(
        (
          await duckQuery(
            `SELECT DISTINCT regexp_extract(filename, '([^/]+)\\.parquet$', 1) AS b FROM read_parquet(${sqlString(`${dataDir}/${prefix}*.parquet`)}, filename = true) WHERE distinct_id = ${sqlString(ERASE_DISTINCT)} OR anonymous_id = ${sqlString(ERASE_ANON)}`,
          )
        ).map((r) => String(r.b)),
      );
      expect(personBatches.size).toBeGreaterThan(BATCHES / 2);
      const personRows = allRows.length - keptRows.length;
      const rolled = (await readManifest(store, prefix))?.periods.flatMap((p) => p.files.map((f) => f.key)) ?? [];
      const personRollups = (
        await duckQuery(
          `SELECT DISTINCT filename AS f FROM read_parquet([${rolled.map((k) => sqlString(`${dataDir}/${k}`)).join(', ')}], filename = true) WHERE distinct_id = ${sqlString(ERASE_DISTINCT)} OR anonymous_id = ${sqlString(ERASE_ANON)}`,
        )
      ).length;

      const r = await fetch(`${d.url}/admin/erase/events/${app}`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ distinct_ids: [ERASE_DISTINCT], anonymous_ids: [ERASE_ANON] }),
      });
      expect(r.status).toBe(202);
      const id = ((await r.json()) as { id: string }).id;
      const state = async (): Promise<Record<string, unknown>> =>
        (await (await fetch(`${d.url}/admin/erase/${id}`, { headers: auth })).json()) as Record<string, unknown>;

      // Kill 1: while batch files are being rewritten.
      const atKill1 = await waitFor(
        async () => {
          const s = await state();
          return s.step === 'scan' && Number(s.files_rewritten) > 0 ? s : null;
        },
        60_000,
        'the erasure rewriting batch files',
      );
      rollup.child.kill('SIGKILL');
      await rollup.exited();
      outputs.push(rollup.output());
      expect(atKill1.state).toBe('running');

      // Kill 2: the resumed job, 100 files further on (or past the scan, if it got there first).
      rollup = await d.startRollup();
      const atKill2 = await waitFor(
        async () => {
          const s = await state();
          return s.state === 'completed' ||
            Number(s.files_rewritten) >= Number(atKill1.files_rewritten) + 100 ||
            s.step !== 'scan'
            ? s
            : null;
        },
        90_000,
        'the resumed erasure making progress',
      );
      rollup.child.kill('SIGKILL');
      await rollup.exited();
      outputs.push(rollup.output());

      rollup = await d.startRollup();
      const done = await waitFor(
        async () => {
          const s = await state();
          return s.state === 'completed' || s.state === 'failed' ? s : null;
        },
        120_000,
        'the erasure completing',
      );
      expect(done.state, String(done.error)).toBe('completed');
      console.log(
        `kill -9 at ${String(atKill1.files_rewritten)} files (step ${String(atKill1.step)}), then at ${String(atKill2.files_rewritten)} (step ${String(atKill2.step)}); completed after ${String(done.attempts)} attempts: ${String(done.files_rewritten)} files, ${String(done.rows_erased)} row removals`,
      );

      // The counts are exact across the kills: every row was rolled, so each is removed from its batch file and its rollup.
      expect({ files: Number(done.files_rewritten), rows: Number(done.rows_erased) }).toEqual({
        files: personBatches.size + personRollups,
        rows: 2 * personRows,
      });
      expect(await viewQuery(store, app, (from) => `SELECT ${ROW} FROM ${from} ORDER BY message_id`)).toEqual(keptRows);
      expect(await batchQuery(store, app, (from) => `SELECT ${ROW} FROM ${from} ORDER BY message_id`)).toEqual(
        keptRows,
      );
      expect((await store.listKeys(prefix)).length).toBe(BATCHES);
      const manifest = await readManifest(store, prefix);
      await expectManifestMatchesStore(store, manifest as NonNullable<typeof manifest>, `${dataDir}/`);
      // Every batch file that held the person is in the rewritten log, even one whose put landed just before a kill.
      const logged = new Set<string>();
      let after: string | undefined;
      for (let page = 0; page < 100; page++) {
        const p = await listRewritten(store, 'events', app, after, 1000, { settleMs: 0 });
        for (const item of p.items) for (const b of item.batchIds) logged.add(b);
        if (!p.hasMore) break;
        after = p.next ?? undefined;
      }
      for (const b of personBatches) expect(logged.has(b), b).toBe(true);
      expect(await store.getBytes(`erasures/events/${app}/${id}.json`)).not.toBeNull();
      expect(await rollup.stop('SIGTERM')).toBe(0);
      // Logs carry counts, never the ids (each process's output as it printed it).
      expect(rollup.output()).toContain('erasure completed');
      for (const out of outputs.concat(rollup.output())) {
        expect(out).not.toContain('user-3-');
        expect(out).not.toContain(ERASE_ANON + '"');
      }
    },
  );
});
