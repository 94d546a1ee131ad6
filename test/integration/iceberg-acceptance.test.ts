/**
 * Iceberg acceptance (issue 35, acceptance 1-4): the product's real processes (`start:api`,
 * `start:encoder`, `start:rollup` from the sources, test/helpers/rollup-deploy.ts), the test's
 * redis-server, and a filesystem store or a real Ceph RGW (test/helpers/rgw.ts). The tables are
 * read by icebird (npm: an independent Iceberg reader, no code shared with us) as a third party
 * would: it finds the current version through `version-hint.text` itself. Its HTTP requests are
 * answered from the store (a fetch shim: `file://` and `s3://` locations become store keys), so
 * the same reader runs against both stores.
 *
 * 1. Clients push to three apps for ICEBERG_ACCEPTANCE_SECONDS with ICEBERG_COMMIT_SECONDS=2 and
 *    ROLLUP_PERIOD_SECONDS=ICEBERG_ACCEPTANCE_PERIOD_SECONDS. Every second icebird reads each app's
 *    current snapshot: never more events than acknowledged (plus pushes in flight), never an event
 *    nobody sent, never fewer than the previous sample, never an event twice. Once each table's
 *    through-batch-id reaches the app's last acknowledged batch, it holds exactly the acknowledged
 *    events, value for value (a hash of each event's fields, by message_id).
 * 2. Every metadata version v<k> read by icebird holds exactly the acknowledged batches (and the
 *    store's batch files) up to its summary's `events-ingest.through-batch-id`.
 * 3. The rollup process (the committer) is `kill -9`ed three times while clients push and
 *    restarted; at least two kills land during a commit: ICEBERG_TEST_COMMIT_DELAY_MS (a test-only
 *    hook, 0 by default) makes each commit log that its manifests are written and wait before it
 *    creates the metadata version; the kill follows that line, and the version it was about to
 *    create is checked to be absent afterwards. 1 and 2 still hold; metadata versions are
 *    v1..vN with no gap and version-hint.text says N.
 * 4. The same on Ceph RGW; and which S3 servers honour `If-None-Match: *` on PutObject (the
 *    conditional put S3ObjectStore.createIfAbsent relies on): RGW does (412), s3rver does not.
 *
 * `npm run iceberg-acceptance` (scripts/iceberg-acceptance.ts) runs the issue's form: 40 s of
 * pushes, 10 s periods, three kills, on both stores. `npm test` runs the same assertions in a short
 * form (4 s periods; 12 s of pushes and three kills on the filesystem store, 8 s and one mid-commit
 * kill on RGW). A kill waits until the restarted committer has committed something, and pushes go
 * on past the given seconds until every table committed after the last restart: a killed
 * holder's prefix lock (shared/redis/rollup-keys.ts) blocks its table for its 10 s TTL.
 */
import { createHash } from 'node:crypto';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { icebergRead } from 'icebird';
import { afterAll, describe, expect, it } from 'vitest';
import { type Service, sleep } from '../../scripts/chaos-kit.js';
import { IcebergTable, THROUGH_BATCH_ID, currentSnapshot, storeRootUri } from '../../shared/iceberg/table.js';
import { batchIdOfKey } from '../../shared/rollup/layout.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { S3_COMPATIBLE_CLIENT_SETTINGS } from '../../shared/store/s3/index.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { sampleEvent } from '../helpers/events.js';
import { type Deployment, cleanupAll, deploy, onCleanup } from '../helpers/rollup-deploy.js';
import { type RgwServer, rgwEnv, rgwStoreFor, startRgw } from '../helpers/rgw.js';
import { S3RVER_CREDENTIALS, startS3Server } from '../helpers/s3.js';
import { canonical, serveStoreToIcebird } from '../helpers/icebird-store.js';

const SECONDS = Number(process.env.ICEBERG_ACCEPTANCE_SECONDS ?? 12);
const RGW_SECONDS = Number(process.env.ICEBERG_ACCEPTANCE_RGW_SECONDS ?? Math.min(SECONDS, 8));
const PERIOD = Number(process.env.ICEBERG_ACCEPTANCE_PERIOD_SECONDS ?? 4);
const COMMIT_SECONDS = 2;
const KILLS = 3;
/** The short form kills the committer once on RGW (mid-commit); the long form three times there too. */
const RGW_KILLS = Number(process.env.ICEBERG_ACCEPTANCE_RGW_KILLS ?? 1);
/** Long enough for a kill after the log line to land before the metadata create; short next to a 2 s interval. */
const COMMIT_DELAY_MS = 300;
const APPS = ['ice1', 'ice2', 'ice3'];
const MARKER = 'iceberg: test commit delay';

afterAll(cleanupAll);

const icebird = serveStoreToIcebird();

/** The URL prefix icebird uses for keys of `store` (it turns `s3://bucket/` into the AWS host name). */
function readerPrefix(store: ObjectStore): string {
  const root = storeRootUri(store);
  const m = /^s3:\/\/([^/]+)\/(.*)$/.exec(root);
  return m ? `https://${m[1]}.s3.amazonaws.com/${m[2]}` : root;
}

/** One event's values as a hash (failures print hashes, never event contents). */
function fingerprint(e: Record<string, unknown>): string {
  const fields = [
    'event_type',
    'event',
    'distinct_id',
    'anonymous_id',
    'message_id',
    'properties',
    'context',
    'dt',
  ].map((k) => canonical(e[k] ?? null));
  return createHash('sha256').update(fields.join('\u0000')).digest('hex').slice(0, 16);
}

interface AppState {
  /** Acknowledged batches: batch id → message ids. */
  batches: Map<string, string[]>;
  /** message_id → fingerprint of every event sent (acknowledged or in flight). */
  sent: Map<string, string>;
  acked: number;
  inFlight: number;
  /** The last count icebird saw. */
  seen: number;
  samples: number;
  counts: Set<number>;
  table: IcebergTable;
}

export interface AcceptanceFigures {
  store: string;
  seconds: number;
  pushedPerApp: Record<string, number>;
  samples: number;
  kills: number;
  killsDuringCommit: number;
  versions: Record<string, number>;
  operations: string[];
  versionsChecked: number;
  /** Commits by operation as the killed and the last rollup process counted them (ingest_iceberg_commit_duration_seconds), the test delay taken out of the mean. */
  commits: Record<string, { count: number; meanSeconds: number }>;
  commitFailures: number;
  /** Distinct non-zero counts the reader saw, per app (the table growing while clients pushed). */
  distinctCounts: Record<string, number>;
  /** Mean time between the starts of two samples of every app (1 s unless a round of reads takes longer). */
  sampleEveryMs: number;
}

interface CommitStats {
  sum: Record<string, number>;
  count: Record<string, number>;
  failures: number;
}

/** The committer's own figures from its /metrics. */
async function scrapeCommits(url: string): Promise<CommitStats> {
  const text = await (await fetch(url, { signal: AbortSignal.timeout(2000) })).text();
  const out: CommitStats = { sum: {}, count: {}, failures: 0 };
  for (const m of text.matchAll(
    /iceberg_commit_duration_seconds_(sum|count)\{[^}]*operation="(\w+)"[^}]*\} ([\d.e+-]+)/g,
  ))
    out[m[1] as 'sum' | 'count'][m[2] as string] = Number(m[3]);
  for (const m of text.matchAll(/iceberg_commit_failures_total\{[^}]*\} ([\d.e+-]+)/g)) out.failures += Number(m[1]);
  return out;
}

function log(line: string): void {
  console.log(`[iceberg-acceptance] ${line}`);
}

async function runAcceptance(
  label: string,
  d: Deployment,
  seconds: number,
  killCount: number,
): Promise<AcceptanceFigures> {
  /** The first two kills wait for a commit's "manifests written" line; the third is at any moment. */
  const midCommitKills = Math.min(2, killCount);
  const { store } = d;
  icebird.route(readerPrefix(store), store);
  const rootUri = storeRootUri(store);
  const apps = new Map<string, AppState>(
    APPS.map((app) => [
      app,
      {
        batches: new Map(),
        sent: new Map(),
        acked: 0,
        inFlight: 0,
        seen: 0,
        samples: 0,
        counts: new Set(),
        table: new IcebergTable({
          store,
          collection: 'events',
          app,
          rootUri,
          createIfAbsent: () => Promise.reject(new Error('read only')),
        }),
      },
    ]),
  );
  const state = (app: string): AppState => apps.get(app) as AppState;

  // The committer, with the test's watch on its "manifests written" lines.
  let rollup: Service;
  /** Per rollup process started: its metrics URL (from its start line) and the last figures scraped. */
  const processes: { metrics?: string; last?: CommitStats }[] = [];
  let marker: ((m: { prefix: string; version: number }) => void) | undefined;
  const watch = (svc: Service): Service => {
    // Its start line (with the metrics URL) comes once every component started: maybe before startRollup resolved (kept output), maybe after.
    const proc: { metrics?: string; last?: CommitStats } = {
      metrics: /"metrics":"([^"]+)"[^\n]*rollup process started/.exec(svc.output())?.[1],
    };
    processes.push(proc);
    let buf = '';
    svc.child.stdout?.on('data', (b: Buffer) => {
      buf += b.toString();
      const lines = buf.split('\n');
      buf = lines.pop() ?? '';
      for (const l of lines) {
        if (l.includes('rollup process started')) proc.metrics ??= /"metrics":"([^"]+)"/.exec(l)?.[1];
        if (!l.includes(MARKER)) continue;
        try {
          const j = JSON.parse(l) as { prefix: string; version: number };
          marker?.(j);
        } catch {
          /* not a JSON log line */
        }
      }
    });
    return svc;
  };
  rollup = watch(await d.startRollup());

  const t0 = Date.now();
  const until = t0 + seconds * 1000;
  // Pushes go on past `until` until the kills are done and every table advanced after the last restart (bounded).
  const hardUntil = until + 120_000;
  let killsDone = false;
  let failure: unknown;
  const fail = (err: unknown): void => {
    failure ??= err;
  };

  // Pushers: one per app, each batch's events remembered (message_id → fingerprint) before it is sent.
  let pushFailures = 0;
  const pushers = APPS.map(async (app, k) => {
    const s = state(app);
    for (
      let i = 0;
      (Date.now() < until || !killsDone) && Date.now() < hardUntil && i < 100_000 && failure === undefined;
      i++
    ) {
      const events = Array.from({ length: 5 + ((i * 7 + k) % 20) }, (_, j) => sampleEvent(j));
      for (const e of events) s.sent.set(String(e.message_id), fingerprint(e));
      s.inFlight += events.length;
      let batchId: string | null = null;
      try {
        const r = await fetch(`${d.url}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ data: { events }, baseHash: null }),
          signal: AbortSignal.timeout(10_000),
        });
        if (r.status === 200) batchId = ((await r.json()) as { batchId: string }).batchId;
        else await r.arrayBuffer();
      } catch {
        /* counted below */
      }
      s.inFlight -= events.length;
      if (batchId) {
        s.batches.set(
          batchId,
          events.map((e) => String(e.message_id)),
        );
        s.acked += events.length;
      } else {
        pushFailures++;
      }
      await sleep(80 + ((i * 13) % 80));
    }
  });

  // The independent reader: each app's current snapshot through version-hint.text, as icebird finds it.
  const readCurrent = async (app: string): Promise<Record<string, unknown>[] | null> => {
    const s = state(app);
    // No table yet (the hint is written after v1 and never removed). Without a hint icebird would
    // list the bucket instead, which the shim does not serve: so it is only asked once there is one.
    if (!(await store.getBytes(s.table.metadataKey('version-hint.text')))) return null;
    return icebergRead({ tableUrl: s.table.location });
  };
  const sampleApp = async (app: string): Promise<number> => {
    const s = state(app);
    // Bounds taken before the read: a batch acknowledged during it can only add to what it may see.
    const upper = s.acked + s.inFlight;
    const rows = (await readCurrent(app)) ?? [];
    const ids = rows.map((r) => String(r.message_id));
    expect(new Set(ids).size, `${label} ${app}: an event twice in one snapshot`).toBe(ids.length);
    expect(ids.length, `${label} ${app}: more events than acknowledged (+ in flight)`).toBeLessThanOrEqual(upper);
    expect(ids.length, `${label} ${app}: the count went down`).toBeGreaterThanOrEqual(s.seen);
    for (const r of rows)
      expect(fingerprint(r), `${label} ${app}: an event nobody sent, or with other values`).toBe(
        s.sent.get(String(r.message_id)),
      );
    s.seen = ids.length;
    s.samples++;
    if (ids.length > 0) s.counts.add(ids.length);
    return ids.length;
  };
  let kills = 0;
  let killsDuringCommit = 0;
  let sampling = true;
  let ticks = 0;
  let firstTickAt = 0;
  let lastTickAt = 0;
  const sampler = (async () => {
    for (let tick = 0; sampling && tick < 10_000; tick++) {
      const started = Date.now();
      if (tick === 0) firstTickAt = started;
      lastTickAt = started;
      ticks = tick + 1;
      const counts = await Promise.all(APPS.map(sampleApp));
      const proc = processes.at(-1);
      if (proc?.metrics) proc.last = await scrapeCommits(proc.metrics).catch(() => proc.last);
      log(
        `${label} t=${Math.round((Date.now() - t0) / 1000)}s acked ${APPS.map((a) => state(a).acked).join('/')} table ${counts.join('/')} kills ${kills} (${killsDuringCommit} mid-commit)`,
      );
      await sleep(Math.max(0, 1000 - (Date.now() - started)));
    }
  })().catch(fail);

  // Three kill -9 of the committer while clients push: the first two right after a commit wrote its manifests.
  // A killed holder's prefix lock blocks that table for its 10 s TTL; the other tables go on. So a
  // kill waits for the restarted committer to have committed something (the first: every table to exist).
  const versionsNow = (): Promise<number[]> => Promise.all(APPS.map((a) => state(a).table.currentVersion()));
  const waitVersions = async (ok: (v: number[]) => boolean, what: string): Promise<void> => {
    const end = Date.now() + 60_000;
    while (!ok(await versionsNow())) {
      if (Date.now() > end || failure !== undefined) throw new Error(`${label}: ${what} within 60 s`);
      await sleep(100);
    }
  };
  const killer = (async () => {
    let atRestart: number[] = [];
    for (let k = 0; k < killCount && failure === undefined; k++) {
      await sleep(Math.max(0, t0 + ((k + 1) * seconds * 1000) / (killCount + 1) - Date.now()));
      await waitVersions(
        (v) => (k === 0 ? v.every((n) => n >= 1) : v.some((n, i) => n > (atRestart[i] ?? 0))),
        k === 0 ? 'no table of every app' : 'no commit after a restart',
      );
      let pending: { prefix: string; version: number } | undefined;
      if (k < midCommitKills) {
        pending = await new Promise<{ prefix: string; version: number } | undefined>((resolve) => {
          const t = setTimeout(() => resolve(undefined), 20_000);
          marker = (m) => {
            clearTimeout(t);
            marker = undefined;
            resolve(m);
          };
        });
      }
      await rollup.stop('SIGKILL');
      kills++;
      if (pending) {
        // Killed between the manifests and the metadata create: that version must not exist.
        const made = await store.getBytes(
          `iceberg/events/${pending.prefix.split('/')[1]}/metadata/v${pending.version}.metadata.json`,
        );
        if (!made) killsDuringCommit++;
        log(
          `${label} kill ${kills}: during the commit of v${pending.version} of ${pending.prefix} (${made ? 'landed before the kill' : 'not created'})`,
        );
      } else {
        log(`${label} kill ${kills}: at an arbitrary moment`);
      }
      atRestart = await versionsNow();
      rollup = watch(await d.startRollup());
    }
    await waitVersions(
      (v) => v.every((n, i) => n > (atRestart[i] ?? 0)),
      'not every table advanced after the last restart',
    );
  })()
    .catch(fail)
    .finally(() => (killsDone = true));

  await Promise.all(pushers);
  await killer;
  expect(failure).toBeUndefined();
  log(
    `${label} pushes done: ${APPS.map((a) => `${a} ${state(a).acked} events in ${state(a).batches.size} batches`).join(', ')}; ${pushFailures} failed pushes`,
  );
  expect(pushFailures).toBe(0);
  expect(kills).toBe(killCount);
  expect(killsDuringCommit).toBe(midCommitKills);

  // Commits catch up to the list watermark (through-batch-id = each app's last acknowledged batch), bounded.
  const lastOf = (app: string): string => [...state(app).batches.keys()].sort().at(-1) as string;
  const caughtUp = async (): Promise<boolean> => {
    for (const app of APPS) {
      const loaded = await state(app).table.load();
      const through = loaded ? currentSnapshot(loaded.metadata)?.summary[THROUGH_BATCH_ID] : undefined;
      if ((through ?? '') < lastOf(app)) return false;
    }
    return true;
  };
  const deadline = Date.now() + 120_000;
  while (!(await caughtUp()) && failure === undefined) {
    if (Date.now() > deadline)
      throw new Error(`${label}: the tables did not catch up with the last acknowledged batches within 120 s`);
    await sleep(500);
  }
  sampling = false;
  await sampler;
  expect(failure).toBeUndefined();

  // Acceptance 1, the end: exactly the acknowledged events, value for value.
  const last = processes.at(-1);
  if (last?.metrics) last.last = await scrapeCommits(last.metrics);
  const commits: AcceptanceFigures['commits'] = {};
  let commitFailures = 0;
  for (const p of processes) {
    commitFailures += p.last?.failures ?? 0;
    for (const [op, n] of Object.entries(p.last?.count ?? {})) {
      const c = (commits[op] ??= { count: 0, meanSeconds: 0 });
      c.meanSeconds =
        (c.meanSeconds * c.count + ((p.last?.sum[op] ?? 0) - (n * COMMIT_DELAY_MS) / 1000)) / (c.count + n || 1);
      c.count += n;
    }
  }
  const figures: AcceptanceFigures = {
    store: label,
    seconds,
    pushedPerApp: {},
    samples: 0,
    kills,
    killsDuringCommit,
    versions: {},
    operations: [],
    versionsChecked: 0,
    commits,
    commitFailures,
    distinctCounts: {},
    sampleEveryMs: ticks > 1 ? Math.round((lastTickAt - firstTickAt) / (ticks - 1)) : 0,
  };
  const operations = new Set<string>();
  for (const app of APPS) {
    const s = state(app);
    const rows = (await readCurrent(app)) ?? [];
    const got = new Map(rows.map((r) => [String(r.message_id), fingerprint(r)]));
    const want = new Map([...s.batches.values()].flat().map((id) => [id, s.sent.get(id)]));
    expect(got.size, `${label} ${app}: an event twice`).toBe(rows.length);
    expect(rows.length).toBe(s.acked);
    expect(got).toEqual(want);
    figures.pushedPerApp[app] = s.acked;
    figures.samples += s.samples;
    s.counts.add(rows.length);
    figures.distinctCounts[app] = s.counts.size;
    // The reader saw the table grow: a count before the final one (the long form: several).
    expect(s.counts.size, `${label} ${app}: counts the reader saw`).toBeGreaterThanOrEqual(seconds >= 30 ? 3 : 2);

    // Acceptance 3: v1..vN, no gap, the hint says N.
    const versions = (await store.listKeys(s.table.metadataKey('v')))
      .map((k) => /\/v(\d+)\.metadata\.json$/.exec(k))
      .filter((m) => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    const n = versions.length;
    expect(versions, `${label} ${app}: metadata versions`).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    const hint = await store.getBytes(s.table.metadataKey('version-hint.text'));
    expect(new TextDecoder().decode(hint?.body).trim()).toBe(String(n));
    figures.versions[app] = n;

    // Acceptance 2: every version holds exactly the batches up to its through-batch-id (acknowledged, and listed in the store).
    const storeBatches = (await store.listKeys(`events/${app}/`))
      .map((k) => batchIdOfKey(`events/${app}/`, k))
      .filter((id) => id !== null)
      .sort();
    for (let v = 1; v <= n; v++) {
      const meta = await s.table.readVersion(v);
      const snap = currentSnapshot(meta);
      if (!snap) continue;
      operations.add(snap.summary.operation);
      const through = snap.summary[THROUGH_BATCH_ID] as string;
      const vr = await icebergRead({ tableUrl: s.table.location, metadataFileName: `v${v}.metadata.json` });
      const ids = vr.map((r) => String(r.message_id)).sort();
      const ackedUpTo = [...s.batches.keys()].filter((id) => id <= through).sort();
      expect(
        storeBatches.filter((id) => id <= through),
        `${label} ${app} v${v}: the store's batches up to ${through} are the acknowledged ones`,
      ).toEqual(ackedUpTo);
      expect(ids, `${label} ${app} v${v} (${snap.summary.operation}): exactly the batches up to ${through}`).toEqual(
        ackedUpTo.flatMap((id) => s.batches.get(id) ?? []).sort(),
      );
      expect(Number(snap.summary['total-records'])).toBe(ids.length);
      figures.versionsChecked++;
    }
  }
  figures.operations = [...operations].sort();
  expect(operations.has('append')).toBe(true);
  log(`${label} figures: ${JSON.stringify(figures)}`);
  await rollup.stop('SIGKILL');
  return figures;
}

const icebergEnv = {
  ICEBERG: 'on',
  ICEBERG_COMMIT_SECONDS: String(COMMIT_SECONDS),
  ICEBERG_TEST_COMMIT_DELAY_MS: String(COMMIT_DELAY_MS),
};

// The stores' runs are independent (own queue, processes, store): concurrent in the short form, so
// it stays near a minute; one after the other in the long form (ICEBERG_ACCEPTANCE_CONCURRENT=0), so
// each reader's round of reads fits in its second.
describe('Iceberg acceptance (issue 35)', { concurrent: process.env.ICEBERG_ACCEPTANCE_CONCURRENT !== '0' }, () => {
  it(
    `1-3 on the filesystem store: ${SECONDS} s of pushes to 3 apps, ${COMMIT_SECONDS} s commits, ${PERIOD} s periods, ${KILLS} kill -9 of the committer`,
    { timeout: (SECONDS + 240) * 1000 },
    async () => {
      const dataDir = mkdtempSync(join(tmpdir(), 'iceberg-acc-'));
      onCleanup(() => rmSync(dataDir, { recursive: true, force: true }));
      const d = await deploy(
        { STORE: 'fs', DATA_DIR: dataDir },
        new FilesystemObjectStore({ root: dataDir }),
        PERIOD,
        1,
        icebergEnv,
      );
      await runAcceptance('fs', d, SECONDS, KILLS);
    },
  );

  it(
    `4: the same on Ceph RGW (${RGW_SECONDS} s of pushes, ${RGW_KILLS} kill -9), whose PutObject honours If-None-Match: *`,
    { timeout: (RGW_SECONDS + 330) * 1000 },
    async () => {
      const rgw: RgwServer = await startRgw();
      onCleanup(() => rgw.close());
      const store = rgwStoreFor(rgw);
      onCleanup(() => store.destroy());
      expect(
        await conditionalPutHonoured(rgw.endpoint, rgw.bucket, {
          accessKeyId: rgw.accessKeyId,
          secretAccessKey: rgw.secretAccessKey,
        }),
      ).toBe(true);
      const d = await deploy(rgwEnv(rgw), store, PERIOD, 1, icebergEnv);
      await runAcceptance('rgw', d, RGW_SECONDS, RGW_KILLS);
    },
  );

  it('s3rver does not honour If-None-Match: * (the prefix lock alone keeps commits apart there)', async () => {
    const s3 = await startS3Server();
    onCleanup(() => s3.close());
    expect(await conditionalPutHonoured(s3.endpoint, s3.bucket, S3RVER_CREDENTIALS)).toBe(false);
  });
});

/** PutObject with If-None-Match: * twice on one key: true when the second gets 412 and the first body stays. */
async function conditionalPutHonoured(
  endpoint: string,
  bucket: string,
  credentials: { accessKeyId: string; secretAccessKey: string },
): Promise<boolean> {
  const client = new S3Client({
    region: 'us-east-1',
    endpoint,
    forcePathStyle: true,
    credentials,
    ...S3_COMPATIBLE_CLIENT_SETTINGS,
  });
  const key = `conditional-put-probe-${Date.now()}`;
  try {
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'first', IfNoneMatch: '*' }));
    try {
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'second', IfNoneMatch: '*' }));
      return false;
    } catch (err) {
      if ((err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode !== 412) throw err;
      return true;
    }
  } finally {
    client.destroy();
  }
}
