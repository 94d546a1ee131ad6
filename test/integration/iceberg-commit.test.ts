/**
 * The Iceberg committer in the product's stack (API + encoder + rollup service on the test Redis,
 * a filesystem store): 1 s commits, 2 s rollup periods, raw retention after 3 s and snapshots
 * expired after 12 s. While clients push, every metadata version that appears is read by icebird
 * (an independent Iceberg reader, over a loopback HTTP server serving the store's folder) and
 * must hold exactly the acknowledged events of the batches up to its through-batch-id: none
 * missing, none twice (also while rollups replace batch files). Then `events-ingest query --table`
 * and `table` read it as an analyst would, and retention is checked: files leave the store only
 * once no retained snapshot references them. The same committer then runs on S3 (s3rver).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { icebergRead } from 'icebird';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parquetFacts } from '../../shared/iceberg/parquet-footer.js';
import {
  type IcebergTable,
  THROUGH_BATCH_ID,
  type TableMetadata,
  currentSnapshot,
  storeRootUri,
} from '../../shared/iceberg/table.js';
import { batchIdMs } from '../../shared/ids.js';
import { periodStart } from '../../shared/rollup/layout.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { S3RVER_CREDENTIALS, type S3TestServer, s3StoreFor, startS3Server } from '../helpers/s3.js';
import { runCli } from '../helpers/rollup-deploy.js';
import { runQuery } from '../../cli/query.js';
import { parseEnv } from '../../shared/config.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';
import { serveFolder } from '../helpers/serve-folder.js';
import { FAST_ICEBERG_ENV, readOnlyTable, tableThroughRolled } from '../helpers/icebird-store.js';

const APPS = ['ia', 'ib'];
const PERIOD_MS = 2000;
const realFetch = globalThis.fetch;

describe('Iceberg tables committed by the rollup service (1 s commits, 2 s periods)', () => {
  let stack: TestStack;
  let server: http.Server;
  let httpBase: string;
  const tables = new Map<string, IcebergTable>();
  /** message ids of each acknowledged batch, by app. */
  const acked = new Map<string, Map<string, string[]>>(APPS.map((a) => [a, new Map()]));

  beforeAll(async () => {
    stack = await startTestStack(
      {
        ...FAST_ICEBERG_ENV,
        ICEBERG_SNAPSHOT_RETENTION_SECONDS: '12',
        RAW_RETENTION_SECONDS: '3',
        LIST_INDEX_SECONDS: '2',
      },
      { api: true, encoder: true, rollup: true },
    );
    const rootUri = storeRootUri(stack.store);
    server = await serveFolder(path.resolve(stack.dataDir));
    httpBase = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    // icebird fetches the locations the metadata names (file:// URIs of the store): the loopback server serves the same paths.
    globalThis.fetch = ((input: string | URL | Request, init?: RequestInit) => {
      const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
      return realFetch(url.startsWith(rootUri) ? httpBase + url.slice(rootUri.length) : url, init);
    }) as typeof fetch;
    for (const app of APPS) tables.set(app, readOnlyTable(stack.store, app, rootUri));
  });

  afterAll(async () => {
    globalThis.fetch = realFetch;
    await new Promise((r) => server?.close(r));
    await stack?.shutdown();
  });

  /** The message ids the acknowledged batches up to `through` hold, sorted. */
  function expectedUpTo(app: string, through: string | undefined): string[] {
    const out: string[] = [];
    for (const [id, msgs] of acked.get(app) ?? []) if (through !== undefined && id <= through) out.push(...msgs);
    return out.sort();
  }

  /** Reads metadata version `n` with icebird; checks its rows against the acknowledged batches. Null when it was expired before it could be read. */
  async function checkVersion(
    app: string,
    n: number,
  ): Promise<{ meta: TableMetadata; rows: number; operation: string } | null> {
    const table = tables.get(app) as IcebergTable;
    const meta = await table.readVersion(n);
    const snap = currentSnapshot(meta);
    if (!snap) return null;
    let rows: Record<string, unknown>[];
    try {
      rows = await icebergRead({
        tableUrl: `${httpBase}${table.prefix.slice(0, -1)}`,
        metadataFileName: `v${n}.metadata.json`,
      });
    } catch (err) {
      // A version read more than ICEBERG_SNAPSHOT_RETENTION_SECONDS after its snapshot: its files may be gone by design.
      if (Date.now() - snap['timestamp-ms'] > 11_000) return null;
      throw err;
    }
    const ids = rows.map((r) => String(r.message_id)).sort();
    expect(new Set(ids).size, `v${n} of ${app}: an event twice`).toBe(ids.length);
    expect(
      ids,
      `v${n} of ${app} (${snap.summary.operation}) holds exactly the acknowledged batches up to ${snap.summary[THROUGH_BATCH_ID]}`,
    ).toEqual(expectedUpTo(app, snap.summary[THROUGH_BATCH_ID]));
    expect(Number(snap.summary['total-records'])).toBe(ids.length);
    return { meta, rows: ids.length, operation: snap.summary.operation };
  }

  it(
    'every snapshot holds exactly the acknowledged events up to its through-batch-id, through appends, rollup replaces and retention',
    { timeout: 60_000 },
    async () => {
      const seen = new Map<string, number>(APPS.map((a) => [a, 0]));
      const operations = new Set<string>();
      const counts = new Map<string, number[]>(APPS.map((a) => [a, []]));
      let checked = 0;
      // Reads every new metadata version of every app as it appears (the table's own loader finds the latest).
      const sample = async (): Promise<void> => {
        for (const app of APPS) {
          const latest = await (tables.get(app) as IcebergTable).currentVersion();
          for (let n = (seen.get(app) ?? 0) + 1; n <= latest; n++) {
            const r = await checkVersion(app, n);
            seen.set(app, n);
            if (!r) continue;
            checked++;
            operations.add(r.operation);
            counts.get(app)?.push(r.rows);
          }
        }
      };
      let sampling = true;
      // A wrong version fails the waits below at once (not after their timeouts).
      let failure: unknown;
      const rethrow = (): void => {
        if (failure !== undefined) throw failure;
      };
      const sampler = (async () => {
        while (sampling) {
          await sample();
          await new Promise((r) => setTimeout(r, 200));
        }
      })().catch((err: unknown) => {
        failure = err;
      });

      // Push to both apps for 5 s; record what each acknowledged batch holds.
      const until = Date.now() + 5000;
      for (let i = 0; Date.now() < until; i++) {
        const app = APPS[i % APPS.length] as string;
        const events = Array.from({ length: 5 + (i % 9) }, (_, j) => sampleEvent(j));
        const r = await fetch(`${stack.url}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: batchBody(events.length, (j) => events[j] as Record<string, unknown>),
        });
        expect(r.status).toBe(200);
        const { batchId } = (await r.json()) as { batchId: string };
        acked.get(app)?.set(
          batchId,
          events.map((e) => String(e.message_id)),
        );
        await new Promise((r) => setTimeout(r, 60));
      }

      // Every app's table reaches the last batch and its rolled periods are replaced (then raw retention deletes batch files once expiry frees them).
      const caughtUp = async (app: string): Promise<void> => {
        const prefix = `events/${app}/`;
        const table = tables.get(app) as IcebergTable;
        const lastOfApp = [...(acked.get(app)?.keys() ?? [])].sort().at(-1) as string;
        const lastEnd = periodStart(batchIdMs(lastOfApp), PERIOD_MS) + PERIOD_MS;
        await waitFor(
          async () => (rethrow(), ((await readManifest(stack.store, prefix))?.watermarkMs ?? 0) >= lastEnd),
          30_000,
          `rollup of ${app} through ${lastEnd}`,
        );
        await waitFor(
          async () => {
            rethrow();
            return tableThroughRolled(table, lastOfApp);
          },
          30_000,
          `${app}'s table through ${lastOfApp}, every period replaced by its rollup`,
        );
      };
      await caughtUp('ia');
      // The analyst's view. In this process first, at once (an older snapshot is expired 12 s after it
      // was made): `--as-of` the snapshot before the current one, by id and by the current one's time
      // minus 1 ms, reads exactly that snapshot's batches. Then the CLI as a user runs it.
      const env = { STORE: 'fs', DATA_DIR: stack.dataDir, LOG_LEVEL: 'silent' };
      const meta = (await (tables.get('ia') as IcebergTable).load())!.metadata;
      const current = currentSnapshot(meta)!;
      const previous = meta.snapshots.find((x) => x['snapshot-id'] === current['parent-snapshot-id'])!;
      expect(previous).toBeDefined();
      const countSql = 'SELECT count(*)::INT AS n, count(DISTINCT message_id)::INT AS d FROM events';
      const asOf = async (at: string): Promise<unknown> => {
        const r = await runQuery(countSql, { kind: 'table', env: parseEnv(env), app: 'ia', asOf: at });
        return Object.fromEntries(r.columns.map((c, i) => [c, r.rows[0]?.[i]]));
      };
      const previousRows = expectedUpTo('ia', previous.summary[THROUGH_BATCH_ID]).length;
      expect(previousRows).toBe(Number(previous.summary['total-records']));
      expect(await asOf(String(previous['snapshot-id']))).toEqual({ n: previousRows, d: previousRows });
      expect(await asOf(new Date(current['timestamp-ms'] - 1).toISOString())).toEqual({
        n: previousRows,
        d: previousRows,
      });

      const [listed, now, bad] = await Promise.all([
        runCli(['table', '--app', 'ia', '--json'], env),
        runCli(
          ['query', '--table', '--app', 'ia', '--json', 'SELECT message_id, app FROM events ORDER BY message_id'],
          env,
        ),
        runCli(['query', '--table', '--app', 'ia', '--as-of', '1', 'SELECT 1'], env),
      ]);
      expect(listed.stderr).toBe('');
      expect(listed.code).toBe(0);
      const snaps = listed.stdout
        .trim()
        .split('\n')
        .map(
          (l) =>
            JSON.parse(l) as {
              snapshot_id: string;
              time: string;
              operation: string;
              files: number;
              rows: number;
              through_batch_id: string | null;
              current: string;
            },
        );
      expect(snaps.at(-1)).toEqual({
        snapshot_id: String(current['snapshot-id']),
        time: new Date(current['timestamp-ms']).toISOString(),
        operation: current.summary.operation,
        files: Number(current.summary['total-data-files']),
        rows: Number(current.summary['total-records']),
        through_batch_id: current.summary[THROUGH_BATCH_ID],
        current: '*',
      });
      expect(now.stderr).toBe('');
      expect(now.code).toBe(0);
      const viaCli = now.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { message_id: string; app: string });
      expect(viaCli.map((r) => r.message_id)).toEqual(expectedUpTo('ia', current.summary[THROUGH_BATCH_ID]));
      expect(new Set(viaCli.map((r) => r.app))).toEqual(new Set(['ia']));
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(/no such snapshot/);
      await caughtUp('ib');

      await waitFor(
        async () => (await stack.store.listKeys('events/ia/', { limit: 10 })).length === 0,
        30_000,
        'raw retention of ia',
      );
      sampling = false;
      await sampler;
      rethrow();
      await sample();

      expect(operations).toEqual(new Set(['append', 'replace']));
      expect(checked).toBeGreaterThanOrEqual(6);
      for (const [app, c] of counts) {
        // Never down, and the last equals everything acknowledged.
        for (let i = 1; i < c.length; i++)
          expect(c[i], `${app}: count went down`).toBeGreaterThanOrEqual(c[i - 1] as number);
        expect(c.at(-1)).toBe([...(acked.get(app)?.values() ?? [])].flat().length);
      }

      // Retention: every file a retained snapshot references is still in the store; expired snapshots freed the batch files.
      for (const app of APPS) {
        const table = tables.get(app) as IcebergTable;
        const meta = (await table.load())!.metadata;
        for (const s of meta.snapshots)
          for (const k of await table.dataKeys(s))
            expect(await stack.store.getBytes(k), `${k} (snapshot ${s['snapshot-id']})`).not.toBeNull();
        expect(meta.snapshots.length).toBeLessThan(seen.get(app) as number);
      }
      const metrics = await stack.registry.getSingleMetricAsString('ingest_iceberg_commits_total');
      expect(metrics).toMatch(/operation="expire"[^}]*} [1-9]/);
      expect(metrics).toMatch(/operation="replace"[^}]*} [1-9]/);
    },
  );
});

describe('the same committer on S3 (s3rver: it ignores If-None-Match, so the prefix lock alone keeps commits apart)', () => {
  let s3: S3TestServer;
  let stack: TestStack;
  const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };

  beforeAll(async () => {
    s3 = await startS3Server();
    // The store and the committer's conditional put take credentials from the SDK's chain, as in production.
    process.env.AWS_ACCESS_KEY_ID = S3RVER_CREDENTIALS.accessKeyId;
    process.env.AWS_SECRET_ACCESS_KEY = S3RVER_CREDENTIALS.secretAccessKey;
    stack = await startTestStack(
      {
        STORE: 's3',
        S3_BUCKET: s3.bucket,
        S3_ENDPOINT: s3.endpoint,
        S3_FORCE_PATH_STYLE: 'true',
        S3_REGION: 'us-east-1',
        ...FAST_ICEBERG_ENV,
      },
      { api: true, encoder: true, rollup: true },
    );
  });

  afterAll(async () => {
    await stack?.shutdown();
    await s3?.close();
    process.env.AWS_ACCESS_KEY_ID = saved.id;
    process.env.AWS_SECRET_ACCESS_KEY = saved.secret;
    if (saved.id === undefined) delete process.env.AWS_ACCESS_KEY_ID;
    if (saved.secret === undefined) delete process.env.AWS_SECRET_ACCESS_KEY;
  });

  it(
    'appends and replaces with s3:// data file URIs; every version holds exactly the acknowledged rows up to its through-batch-id',
    { timeout: 60_000 },
    async () => {
      const store = s3StoreFor(s3);
      const table = readOnlyTable(store, 's3a');
      const rows = new Map<string, number>();
      const until = Date.now() + 3000;
      for (let i = 0; Date.now() < until; i++) {
        const n = 3 + (i % 5);
        const r = await fetch(`${stack.url}/push/events/s3a/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: batchBody(n),
        });
        expect(r.status).toBe(200);
        rows.set(((await r.json()) as { batchId: string }).batchId, n);
        await new Promise((r) => setTimeout(r, 50));
      }
      const last = [...rows.keys()].sort().at(-1) as string;
      await waitFor(
        () => tableThroughRolled(table, last),
        30_000,
        'the S3 table through the last batch, every period replaced',
      );
      expect(table.location).toBe(`s3://${s3.bucket}/iceberg/events/s3a`);
      const upTo = (through: string | undefined): number =>
        [...rows].reduce((n, [id, k]) => n + (through !== undefined && id <= through ? k : 0), 0);
      const current = await table.currentVersion();
      const operations = new Set<string>();
      for (let v = 1; v <= current; v++) {
        const snap = currentSnapshot(await table.readVersion(v))!;
        operations.add(snap.summary.operation);
        // Each version's files: their footers' row counts add up to exactly the acknowledged rows up to its through-batch-id.
        let sum = 0;
        for (const k of await table.dataKeys(snap)) sum += (await parquetFacts(store, k))?.recordCount ?? Number.NaN;
        expect({ v, sum }).toEqual({ v, sum: upTo(snap.summary[THROUGH_BATCH_ID]) });
        expect(Number(snap.summary['total-records'])).toBe(sum);
      }
      expect(operations).toEqual(new Set(['append', 'replace']));
      store.destroy();
    },
  );
});
