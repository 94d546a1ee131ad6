/**
 * Erasure acceptance (issue 36, acceptance 1-3), checked as a user would: the product's real
 * processes (`start:api`, `start:encoder`, `start:rollup` from the sources,
 * test/helpers/rollup-deploy.ts), the test's redis-server, a filesystem store, ICEBERG=on with 2 s
 * commits and 2 s rollup periods, and the `events-ingest` CLI run as its own process.
 *
 * 1. An app gets ERASURE_ACCEPTANCE_EVENTS events in ERASURE_ACCEPTANCE_BATCHES batches from
 *    twelve users (short form 10,000 in 200; `npm run erasure-acceptance`: 100,000 in 1,000), then
 *    rollups and an Iceberg table of them; a folder is kept with `events-ingest sync`. While a
 *    client keeps pushing (events of the erased ids too), `events-ingest erase --wait` erases two
 *    distinct ids and one anonymous id.
 * 2. The rule (docs/operations.md, "Erasing a person"): events of those ids in batches
 *    acknowledged before the request (batch id instant < the request's, the `er-<ms>` of its id)
 *    are gone; those acknowledged after the erasure completed are kept; those in between may be
 *    either, but whole (never altered). `query --store`, `query --table`, the Iceberg table read
 *    by icebird (an independent reader, through a fetch shim serving the store), every batch
 *    listed and pulled over HTTP (read by hyparquet), and the synced folder (`sync` again at least
 *    30 s after completion: REWRITTEN_SETTLE_MS, then `query --dir`) hold none of the covered
 *    events and every other acknowledged event exactly (a hash of its fields, by message_id).
 * 3. The rollup process (which runs the erasure) is `kill -9`ed twice, at different steps: in
 *    `scan` once files were rewritten, and in `iceberg` after its overwrite snapshot, before the
 *    expiry (ERASURE_TEST_STEP_DELAY_MS, a test-only hook: the step logs a line and waits); a third
 *    process completes it. 2 holds.
 * 4. Time travel: every snapshot named by a metadata version still in the store either cannot be
 *    read (its files were deleted) or shows none of the covered events; `query --table --as-of`
 *    of every snapshot the current metadata retains shows none.
 *
 * Failures print hashes and counts, never event contents; the processes' logs are checked to
 * name none of the ids.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parquetReadObjects } from 'hyparquet';
import { compressors } from 'hyparquet-compressors';
import { icebergRead } from 'icebird';
import { afterAll, describe, expect, it } from 'vitest';
import { type Service, sleep } from '../../scripts/chaos-kit.js';
import { REWRITTEN_SETTLE_MS } from '../../shared/erasure/rewritten.js';
import { IcebergTable, THROUGH_BATCH_ID, currentSnapshot, storeRootUri } from '../../shared/iceberg/table.js';
import { batchIdMs } from '../../shared/ids.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { type Deployment, TOKEN, cleanupAll, deploy, onCleanup, runCli } from '../helpers/rollup-deploy.js';
import { waitFor } from '../helpers/wait.js';
import { canonical, serveStoreToIcebird } from '../helpers/icebird-store.js';

const EVENTS = Number(process.env.ERASURE_ACCEPTANCE_EVENTS ?? 10_000);
const BATCHES = Number(process.env.ERASURE_ACCEPTANCE_BATCHES ?? 200);
const PERIOD = 2;
const COMMIT_SECONDS = 2;
/** Each erasure step logs and waits this long (test-only hook): the kill in `iceberg` follows its line. */
const STEP_DELAY_MS = 500;
const APP = 'erasure-acc';
const USERS = 12;
const ERASED_DISTINCT = ['user-3-ß"quote', 'user-7'];
const ERASED_ANON = 'anon-5';
const ROOT = resolve(import.meta.dirname, '../..');
const MARKER = 'erasure: test step delay';
const SELECT = 'SELECT message_id, event, distinct_id, anonymous_id, properties, context FROM events';

afterAll(cleanupAll);

function log(line: string): void {
  console.log(`[erasure-acceptance] ${line}`);
}

// icebird reads `file://` URLs through fetch: answered from the store.
const icebird = serveStoreToIcebird();

/** One event's values as a hash. */
function fingerprint(e: Record<string, unknown>): string {
  const fields = ['event', 'distinct_id', 'anonymous_id', 'message_id', 'properties', 'context'].map((k) =>
    canonical(e[k] ?? null),
  );
  return createHash('sha256').update(fields.join('\u0000')).digest('hex').slice(0, 16);
}

/** Event `i` of batch `b` (`tag`: p preload, l live): users and anonymous ids cycle independently. */
function makeEvent(tag: string, b: number, i: number): Record<string, unknown> {
  const u = (b * 7 + i) % USERS;
  return {
    event_type: 'track',
    event: ['open', 'click', 'buy'][(b + i) % 3],
    distinct_id: u === 3 ? ERASED_DISTINCT[0] : `user-${u}`,
    anonymous_id: `anon-${(b * 3 + i * 5) % 9}`,
    message_id: `${tag}-${b}-${i}`,
    properties: { n: b * 1000 + i, s: `é ${tag}${b}/${i} "q"`, arr: [i, null, { x: 'y' }], flag: i % 2 === 0 },
    context: { lib: 'acceptance', i },
  };
}
/** The event a message id was made as. */
function makeEventOf(mid: string): Record<string, unknown> {
  const [tag, b, i] = mid.split('-');
  return makeEvent(tag as string, Number(b), Number(i));
}
const isErased = (e: Record<string, unknown>): boolean =>
  ERASED_DISTINCT.includes(String(e.distinct_id)) || e.anonymous_id === ERASED_ANON;

interface Sent {
  fp: string;
  erased: boolean;
}

/** Runs the CLI as its own process with the admin token, streaming its stdout lines to `onLine`. */
function cliProcess(
  args: string[],
  onLine: (l: string) => void,
): { done: Promise<{ code: number | null; stdout: string; stderr: string }>; kill(): void } {
  const child = spawn(process.execPath, [join(ROOT, 'bin/events-ingest.mjs'), ...args], {
    cwd: ROOT,
    env: { ...process.env, EVENTS_INGEST_TOKEN: TOKEN },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  let buf = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (d: string) => {
    stdout += d;
    buf += d;
    const lines = buf.split('\n');
    buf = lines.pop() ?? '';
    for (const l of lines) onLine(l);
  });
  let ebuf = '';
  child.stderr.on('data', (d: string) => {
    stderr += d;
    ebuf += d;
    const lines = ebuf.split('\n');
    ebuf = lines.pop() ?? '';
    // The CLI's progress lines name the erasure, its state and counts, never the ids.
    for (const l of lines) if (l.trim() !== '') log(`erase --wait: ${l}`);
  });
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((r) =>
    child.once('close', (code) => r({ code, stdout, stderr })),
  );
  return { done, kill: () => void child.kill('SIGKILL') };
}

/** JSON lines of a `query … --json` run by the CLI. */
async function cliRows(args: string[], env: Record<string, string>, what: string): Promise<Record<string, unknown>[]> {
  const r = await runCli(['query', SELECT, ...args, '--json'], env);
  expect(r.code, `${what}: ${r.stderr.slice(0, 500)}`).toBe(0);
  return r.stdout
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

export interface ErasureFigures {
  events: number;
  batches: number;
  liveEvents: number;
  liveBatches: number;
  liveBeforeRequest: { batches: number; erasedEvents: number };
  liveAfterCompletion: { batches: number; erasedEvents: number };
  rollupPeriods: number;
  rollupFiles: number;
  filesScanned: number;
  filesRewritten: number;
  rowsErased: number;
  snapshotsExpired: number;
  attempts: number;
  kills: { step: string; filesRewritten: number }[];
  /** Erased-id events acknowledged between the request and completion that each view still holds (whole). */
  inBetweenKept: Record<string, number>;
  metadataVersions: number;
  snapshotsChecked: number;
  snapshotsUnreadable: number;
  seconds: Record<string, number>;
}

describe('erasure acceptance (issue 36)', () => {
  it(
    `1-4: ${EVENTS} events in ${BATCHES} batches, rollups, Iceberg; erase while pushing; kill -9 in scan and in iceberg; store, table, icebird, pulls, synced folder, time travel`,
    { timeout: 300_000 + EVENTS * 3 },
    async () => {
      const t = { start: Date.now() };
      const seconds: Record<string, number> = {};
      const phase = (name: string, since: number): number => {
        seconds[name] = Math.round((Date.now() - since) / 100) / 10;
        log(`${name}: ${seconds[name]} s`);
        return Date.now();
      };
      const dataDir = mkdtempSync(join(tmpdir(), 'erasure-acc-'));
      const syncDir = mkdtempSync(join(tmpdir(), 'erasure-acc-sync-'));
      onCleanup(() => rmSync(dataDir, { recursive: true, force: true }));
      onCleanup(() => rmSync(syncDir, { recursive: true, force: true }));
      const store = new FilesystemObjectStore({ root: dataDir });
      icebird.route(storeRootUri(store), store);
      const d: Deployment = await deploy({ STORE: 'fs', DATA_DIR: dataDir }, store, PERIOD, 1, {
        ICEBERG: 'on',
        ICEBERG_COMMIT_SECONDS: String(COMMIT_SECONDS),
        ERASURE_TEST_STEP_DELAY_MS: String(STEP_DELAY_MS),
      });
      const table = new IcebergTable({
        store,
        collection: 'events',
        app: APP,
        rootUri: storeRootUri(store),
        createIfAbsent: () => Promise.reject(new Error('read only')),
      });
      const prefix = `events/${APP}/`;
      const auth = { Authorization: `Bearer ${TOKEN}` };

      // The rollup process, with a watch on its test-hook lines.
      const outputs: string[] = [];
      let marker: ((step: string) => void) | undefined;
      const watch = (svc: Service): Service => {
        let buf = '';
        svc.child.stdout?.on('data', (b: Buffer) => {
          buf += b.toString();
          const lines = buf.split('\n');
          buf = lines.pop() ?? '';
          for (const l of lines) {
            if (!l.includes(MARKER)) continue;
            try {
              marker?.(String((JSON.parse(l) as { step: string }).step));
            } catch {
              /* not a JSON log line */
            }
          }
        });
        return svc;
      };
      let rollup = watch(await d.startRollup());
      let last = t.start;

      // Phase 1: the app's events, 4 clients in parallel.
      const sent = new Map<string, Sent>();
      const batches = new Map<string, string[]>();
      let pushFailures = 0;
      const pushBatch = async (events: Record<string, unknown>[]): Promise<string | null> => {
        for (const e of events) sent.set(String(e.message_id), { fp: fingerprint(e), erased: isErased(e) });
        try {
          const r = await fetch(`${d.url}/push/events/${APP}/x`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({ data: { events }, baseHash: null }),
            signal: AbortSignal.timeout(15_000),
          });
          if (r.status !== 200) {
            await r.arrayBuffer();
            pushFailures++;
            return null;
          }
          const id = ((await r.json()) as { batchId: string }).batchId;
          batches.set(
            id,
            events.map((e) => String(e.message_id)),
          );
          return id;
        } catch {
          pushFailures++;
          return null;
        }
      };
      const perBatch = Math.floor(EVENTS / BATCHES);
      let next = 0;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          for (let b = next++; b < BATCHES; b = next++)
            await pushBatch(Array.from({ length: perBatch }, (_, i) => makeEvent('p', b, i)));
        }),
      );
      expect(pushFailures).toBe(0);
      const preloadLast = [...batches.keys()].sort().at(-1) as string;
      last = phase('push', last);

      // Every batch written, rolled and in the table; the folder synced.
      const syncArgs = ['sync', '--url', d.url, '--app', APP, '--out', syncDir];
      const throughOf = async (): Promise<string> => {
        const loaded = await table.load();
        return String((loaded ? currentSnapshot(loaded.metadata)?.summary[THROUGH_BATCH_ID] : undefined) ?? '');
      };
      await waitFor(
        async () =>
          ((await readManifest(store, prefix))?.watermarkMs ?? 0) > batchIdMs(preloadLast) &&
          (await throughOf()) >= preloadLast,
        60_000 + EVENTS * 2,
        'every batch rolled and in the Iceberg table',
      );
      const manifest = await readManifest(store, prefix);
      const rollupPeriods = manifest?.periods.length ?? 0;
      const rollupFiles = manifest?.periods.reduce((n, p) => n + p.files.length, 0) ?? 0;
      expect(rollupFiles).toBeGreaterThan(0);
      const sync1 = await runCli(syncArgs, { EVENTS_INGEST_TOKEN: TOKEN });
      expect(sync1.code, sync1.stderr.slice(0, 500)).toBe(0);
      last = phase('rolled, in the table and synced', last);
      log(
        `${sent.size} events in ${batches.size} batches; ${rollupPeriods} rollup periods, ${rollupFiles} rollup files; table v${await table.currentVersion()}`,
      );

      // Phase 2: a client keeps pushing (the erased ids too) while the erasure runs.
      let liveStop = false;
      let liveB = 0;
      const liveIds: string[] = [];
      const live = (async () => {
        for (let k = 0; !liveStop && k < 5000; k++) {
          const b = liveB++;
          const id = await pushBatch(Array.from({ length: 20 }, (_, i) => makeEvent('l', b, i)));
          if (id) liveIds.push(id);
          await sleep(250);
        }
      })();
      await sleep(1500);
      // The folder as a user keeps it: synced again while pushes go on, before the erasure.
      const sync2 = await runCli(syncArgs, { EVENTS_INGEST_TOKEN: TOKEN });
      expect(sync2.code, sync2.stderr.slice(0, 500)).toBe(0);

      let erasureId = '';
      let eraseDone: Promise<{ code: number | null; stdout: string; stderr: string }> | undefined;
      const gotId = new Promise<void>((r) => {
        const erase = cliProcess(
          [
            'erase',
            '--url',
            d.url,
            '--app',
            APP,
            '--distinct-id',
            ERASED_DISTINCT[0] as string,
            '--distinct-id',
            ERASED_DISTINCT[1] as string,
            '--anonymous-id',
            ERASED_ANON,
            '--wait',
            '--poll-interval',
            '500',
            '--wait-timeout',
            '600',
          ],
          (l) => {
            if (!erasureId && /^er-\d+-[0-9a-f]+$/.test(l.trim())) {
              erasureId = l.trim();
              r();
            }
          },
        );
        onCleanup(erase.kill);
        eraseDone = erase.done;
      });
      await Promise.race([gotId, sleep(30_000)]);
      expect(erasureId, 'the erasure id on stdout').toMatch(/^er-/);
      const requestedAt = Number(/^er-(\d+)-/.exec(erasureId)?.[1]);
      const eraseStarted = Date.now();
      const status = async (): Promise<Record<string, unknown>> =>
        (await (await fetch(`${d.url}/admin/erase/${erasureId}`, { headers: auth })).json()) as Record<string, unknown>;

      // Kill 1: in the scan, once batch files were rewritten.
      const kills: ErasureFigures['kills'] = [];
      const atKill1 = await waitFor(
        async () => {
          const s = await status();
          if (s.state === 'completed') throw new Error('the erasure completed before the first kill');
          return s.step === 'scan' && Number(s.files_rewritten) > 0 ? s : null;
        },
        120_000,
        'the erasure rewriting files in its scan',
      );
      await rollup.stop('SIGKILL');
      outputs.push(rollup.output());
      kills.push({ step: String(atKill1.step), filesRewritten: Number(atKill1.files_rewritten) });
      log(`kill 1: step ${String(atKill1.step)}, ${String(atKill1.files_rewritten)} files rewritten`);

      // Kill 2: in the iceberg step of the resumed job, after its overwrite, before the expiry.
      const inIceberg = new Promise<boolean>((r) => {
        const timer = setTimeout(() => r(false), 180_000);
        marker = (step) => {
          if (step !== 'iceberg') return;
          clearTimeout(timer);
          marker = undefined;
          r(true);
        };
      });
      rollup = watch(await d.startRollup());
      expect(await inIceberg, 'the resumed erasure reaching its iceberg step').toBe(true);
      await rollup.stop('SIGKILL');
      outputs.push(rollup.output());
      const atKill2 = await status();
      expect(atKill2.step).toBe('iceberg');
      expect(atKill2.state).toBe('running');
      kills.push({ step: String(atKill2.step), filesRewritten: Number(atKill2.files_rewritten) });
      log(`kill 2: step ${String(atKill2.step)}, ${String(atKill2.files_rewritten)} files rewritten`);

      rollup = watch(await d.startRollup());
      const cli = await Promise.race([eraseDone as NonNullable<typeof eraseDone>, sleep(240_000).then(() => null)]);
      expect(cli, 'erase --wait within 240 s').not.toBeNull();
      const completedBy = Date.now();
      expect(cli?.code, cli?.stderr.slice(-500)).toBe(0);
      expect(cli?.stdout).toMatch(/completed/);
      const done = await status();
      expect(done.state).toBe('completed');
      last = phase('erasure (erase --wait, two kills)', eraseStarted);

      // Pushes go on past completion (these keep the erased ids' events), then stop.
      const liveAtCompletion = liveIds.length;
      await waitFor(async () => liveIds.length >= liveAtCompletion + 10, 30_000, 'pushes after completion');
      liveStop = true;
      await live;
      expect(pushFailures).toBe(0);
      const lastId = [...batches.keys()].sort().at(-1) as string;
      await waitFor(async () => (await throughOf()) >= lastId, 60_000, 'the table through the last batch');
      last = phase('pushes after completion, table caught up', last);

      // The rule: covered (gone), after completion (kept), in between (either, whole).
      const batchOf = new Map<string, string>();
      for (const [id, mids] of batches) for (const m of mids) batchOf.set(m, id);
      type Cat = 'keep' | 'gone' | 'either';
      const category = (mid: string): Cat => {
        const s = sent.get(mid) as Sent;
        if (!s.erased) return 'keep';
        const ms = batchIdMs(batchOf.get(mid) as string);
        if (ms < requestedAt) return 'gone';
        return ms > completedBy ? 'keep' : 'either';
      };
      const cats = new Map([...batchOf.keys()].map((m) => [m, category(m)]));
      const count = (c: Cat, tag?: string): number =>
        [...cats].filter(([m, v]) => v === c && (tag === undefined || m.startsWith(tag))).length;
      expect(count('gone', 'l-'), 'live events of the erased ids acknowledged before the request').toBeGreaterThan(0);
      const keptAfter = [...cats].filter(([m, v]) => v === 'keep' && sent.get(m)?.erased).length;
      expect(keptAfter, 'events of the erased ids acknowledged after completion').toBeGreaterThan(0);

      const inBetweenKept: Record<string, number> = {};
      const check = (view: string, rows: Record<string, unknown>[]): void => {
        const got = new Map<string, string>();
        let twice = 0;
        for (const r of rows) {
          const mid = String(r.message_id);
          if (got.has(mid)) twice++;
          got.set(mid, fingerprint(r));
        }
        const bad = { twice, missing: 0, altered: 0, notErased: 0, unknown: 0 };
        let either = 0;
        for (const [mid, c] of cats) {
          const g = got.get(mid);
          const fp = sent.get(mid)?.fp;
          if (c === 'gone') {
            if (g !== undefined) bad.notErased++;
          } else if (g === undefined) {
            if (c === 'keep') bad.missing++;
          } else {
            if (g !== fp) {
              bad.altered++;
              // Names the event and the fields that differ, never their values.
              if (bad.altered <= 3) {
                const row = rows.find((r) => String(r.message_id) === mid) ?? {};
                const e = makeEventOf(mid);
                const fields = ['event', 'distinct_id', 'anonymous_id', 'properties', 'context'].filter(
                  (k) => canonical(row[k] ?? null) !== canonical(e[k] ?? null),
                );
                log(
                  `${view}: ${mid} (${c}, batch ${batchOf.get(mid) ?? '?'}) differs in ${fields.join(', ') || 'nothing'}`,
                );
              }
            }
            if (c === 'either') either++;
          }
        }
        for (const mid of got.keys()) if (!cats.has(mid)) bad.unknown++;
        inBetweenKept[view] = either;
        log(`${view}: ${rows.length} rows; ${JSON.stringify(bad)}; ${either} in-between events kept`);
        expect(bad, view).toEqual({ twice: 0, missing: 0, altered: 0, notErased: 0, unknown: 0 });
      };

      // 2. query --store, query --table, icebird, every pulled batch.
      check('query --store', await cliRows(['--store', '--app', APP], d.common, 'query --store'));
      check('query --table', await cliRows(['--table', '--app', APP], d.common, 'query --table'));
      check('icebird', await icebergRead({ tableUrl: table.location }));
      const listed: string[] = [];
      for (let after = '', page = 0; page < 1000; page++) {
        const r = await fetch(`${d.url}/list/events/${APP}?limit=1000${after ? `&after=${after}` : ''}`, {
          headers: auth,
        });
        expect(r.status).toBe(200);
        const body = (await r.json()) as { items: string[]; hasMore: boolean };
        listed.push(...body.items.map((i) => i.replace(/\.parquet$/, '')));
        if (!body.hasMore || body.items.length === 0) break;
        after = listed.at(-1) as string;
      }
      expect(listed.sort()).toEqual([...batches.keys()].sort());
      const pulled: Record<string, unknown>[] = [];
      let pi = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (pi < listed.length) {
            const id = listed[pi++] as string;
            const r = await fetch(`${d.url}/pull/events/${APP}/${id}`, { headers: auth });
            expect(r.status, `pull ${id}`).toBe(200);
            pulled.push(...(await parquetReadObjects({ file: await r.arrayBuffer(), compressors })));
          }
        }),
      );
      check(`${listed.length} pulled batches`, pulled);
      last = phase('store, table, icebird and pull checked', last);

      // 4. Time travel: every snapshot of every metadata version still present.
      const versions = (await store.listKeys(table.metadataKey('v')))
        .map((k) => /\/v(\d+)\.metadata\.json$/.exec(k))
        .filter((m) => m !== null)
        .map((m) => Number(m[1]))
        .sort((a, b) => a - b);
      const gone = new Set([...cats].filter(([, c]) => c === 'gone').map(([m]) => m));
      let snapshotsChecked = 0;
      let snapshotsUnreadable = 0;
      let leaked = 0;
      const seenSnapshots = new Set<string>();
      const unreadableWhy = new Set<string>();
      for (const v of versions) {
        const meta = await table.readVersion(v);
        for (const s of meta.snapshots) {
          // A snapshot's rows are its manifest list's, whichever metadata version names it: read once.
          const key = String(s['snapshot-id']);
          if (seenSnapshots.has(key)) continue;
          seenSnapshots.add(key);
          snapshotsChecked++;
          try {
            const rows = await icebergRead({
              tableUrl: table.location,
              metadata: { ...meta, 'current-snapshot-id': s['snapshot-id'] } as unknown as Parameters<
                typeof icebergRead
              >[0]['metadata'],
            });
            leaked += rows.filter((r) => gone.has(String(r.message_id))).length;
          } catch (err) {
            snapshotsUnreadable++;
            unreadableWhy.add(
              String(err instanceof Error ? err.message : err)
                .replace(/[^\s]*\/(events|iceberg)\/[^\s]*/g, '<file>')
                .slice(0, 120),
            );
          }
        }
      }
      const current = await table.load();
      const retained = current?.metadata.snapshots ?? [];
      let ri = 0;
      await Promise.all(
        Array.from({ length: 3 }, async () => {
          while (ri < retained.length) {
            const sid = String((retained[ri++] as (typeof retained)[number])['snapshot-id']);
            const rows = await cliRows(
              ['--table', '--app', APP, '--as-of', sid],
              d.common,
              `query --table --as-of ${sid}`,
            );
            leaked += rows.filter((r) => gone.has(String(r.message_id))).length;
          }
        }),
      );
      log(
        `time travel: ${versions.length} metadata versions, ${snapshotsChecked} snapshots (${snapshotsUnreadable} unreadable: files rewritten in place or deleted), ${retained.length} retained by the current version read with --as-of; ${leaked} erased rows seen; unreadable because: ${[...unreadableWhy].join(' | ')}`,
      );
      expect(leaked).toBe(0);
      expect(snapshotsChecked - snapshotsUnreadable).toBeGreaterThan(0);
      last = phase('time travel checked', last);

      // The synced folder: sync at least REWRITTEN_SETTLE_MS after completion, then query --dir.
      await sleep(Math.max(0, completedBy + REWRITTEN_SETTLE_MS + 1000 - Date.now()));
      const sync3 = await runCli(syncArgs, { EVENTS_INGEST_TOKEN: TOKEN });
      expect(sync3.code, sync3.stderr.slice(0, 500)).toBe(0);
      expect(sync3.stdout + sync3.stderr).toMatch(/rewritten by erasures downloaded again/);
      check('query --dir (synced folder)', await cliRows(['--dir', syncDir], d.common, 'query --dir'));
      phase('sync and query --dir checked', last);

      // Logs carry counts, never the ids.
      await rollup.stop('SIGTERM');
      for (const out of [
        ...outputs,
        rollup.output(),
        cli?.stdout ?? '',
        cli?.stderr ?? '',
        sync3.stdout,
        sync3.stderr,
      ]) {
        expect(out).not.toContain('user-3-');
        expect(out).not.toContain('"user-7"');
        expect(out).not.toContain(`"${ERASED_ANON}"`);
      }

      const liveBatchIds = liveIds;
      const snapshots = done.snapshots as { expired?: unknown[] } | undefined;
      const figures: ErasureFigures = {
        events: BATCHES * perBatch,
        batches: BATCHES,
        liveEvents: liveBatchIds.length * 20,
        liveBatches: liveBatchIds.length,
        liveBeforeRequest: {
          batches: liveBatchIds.filter((id) => batchIdMs(id) < requestedAt).length,
          erasedEvents: count('gone', 'l-'),
        },
        liveAfterCompletion: {
          batches: liveBatchIds.filter((id) => batchIdMs(id) > completedBy).length,
          erasedEvents: keptAfter,
        },
        rollupPeriods,
        rollupFiles,
        filesScanned: Number(done.files_scanned),
        filesRewritten: Number(done.files_rewritten),
        rowsErased: Number(done.rows_erased),
        snapshotsExpired: snapshots?.expired?.length ?? 0,
        attempts: Number(done.attempts),
        kills,
        inBetweenKept,
        metadataVersions: versions.length,
        snapshotsChecked,
        snapshotsUnreadable,
        seconds: { ...seconds, total: Math.round((Date.now() - t.start) / 100) / 10 },
      };
      log(`figures: ${JSON.stringify(figures)}`);
      expect(kills.map((k) => k.step)).toEqual(['scan', 'iceberg']);
    },
  );
});
