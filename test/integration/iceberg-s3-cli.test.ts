/**
 * `events-ingest table` and `query --table [--as-of]` on S3 (s3rver), through the real CLI
 * (bin/events-ingest.mjs in a child process, configured by STORE=s3 / S3_* / AWS_* as the server
 * is): the product's stack (API, encoder, rollup service with 1 s commits and 2 s periods) commits
 * the table with s3:// data file URIs; the CLI lists its snapshots as the metadata has them and
 * reads exactly the acknowledged rows of the current snapshot, value for value, and of an older
 * one by `--as-of`. Where DuckDB's httpfs cannot be loaded (no internet here) the CLI reads a
 * temporary local copy of the snapshot's files, says so on stderr, and removes it.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { THROUGH_BATCH_ID, currentSnapshot } from '../../shared/iceberg/table.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { FAST_ICEBERG_ENV, readOnlyTable, tableThroughRolled } from '../helpers/icebird-store.js';
import { waitFor } from '../helpers/proc.js';
import { runCli } from '../helpers/rollup-deploy.js';
import { S3RVER_CREDENTIALS, type S3TestServer, s3StoreFor, startS3Server } from '../helpers/s3.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

const APP = 's3cli';

describe('table and query --table on S3 (s3rver), through the real CLI', () => {
  let s3: S3TestServer;
  let stack: TestStack;
  let scratch = '';
  const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };
  const s3Env = (): Record<string, string> => ({
    STORE: 's3',
    S3_BUCKET: s3.bucket,
    S3_ENDPOINT: s3.endpoint,
    S3_FORCE_PATH_STYLE: 'true',
    S3_REGION: 'us-east-1',
  });

  beforeAll(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'iceberg-s3-cli-'));
    s3 = await startS3Server();
    process.env.AWS_ACCESS_KEY_ID = S3RVER_CREDENTIALS.accessKeyId;
    process.env.AWS_SECRET_ACCESS_KEY = S3RVER_CREDENTIALS.secretAccessKey;
    stack = await startTestStack(
      {
        ...s3Env(),
        ...FAST_ICEBERG_ENV,
        ICEBERG_SNAPSHOT_RETENTION_SECONDS: '300',
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
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it(
    'lists the snapshots and reads exactly the acknowledged rows, now and --as-of an older snapshot',
    { timeout: 120_000 },
    async () => {
      const store = s3StoreFor(s3);
      const table = readOnlyTable(store, APP);
      /** Per acknowledged batch: its events' message id → event name. */
      const acked = new Map<string, Map<string, string>>();
      const until = Date.now() + 3000;
      for (let i = 0; Date.now() < until; i++) {
        const events = Array.from({ length: 3 + (i % 5) }, (_, j) => sampleEvent(i + j));
        const r = await fetch(`${stack.url}/push/events/${APP}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: batchBody(events.length, (j) => events[j] as Record<string, unknown>),
        });
        expect(r.status).toBe(200);
        acked.set(
          ((await r.json()) as { batchId: string }).batchId,
          new Map(events.map((e) => [String(e.message_id), String(e.event)])),
        );
        await new Promise((r) => setTimeout(r, 50));
      }
      const last = [...acked.keys()].sort().at(-1) as string;
      await waitFor(
        () => tableThroughRolled(table, last),
        30_000,
        'the S3 table through the last batch, every period replaced by its rollup',
      );
      const upTo = (through: string | undefined): [string, string][] =>
        [...acked]
          .filter(([id]) => through !== undefined && id <= through)
          .flatMap(([, m]) => [...m])
          .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      const meta = (await table.load())!.metadata;
      const current = currentSnapshot(meta)!;
      // An older snapshot (an append before the last batch), with fewer rows than now.
      const older = [...meta.snapshots]
        .reverse()
        .find(
          (s) =>
            s.summary.operation === 'append' &&
            s.summary[THROUGH_BATCH_ID] !== last &&
            Number(s.summary['total-records']) > 0,
        );
      expect(older, 'an append before the last batch is retained').toBeDefined();
      const olderKeys = await table.dataKeys(older);
      store.destroy();

      // The child's temporary folder is the scratch folder, to see the copy go. The AWS SDK's own
      // warning that its 2027 releases need Node 22 (this is Node 20) is turned off: stderr is the CLI's.
      const env = {
        ...s3Env(),
        AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
        AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
        LOG_LEVEL: 'silent',
        TMPDIR: scratch,
      };
      const sql = 'SELECT message_id, event, app FROM events ORDER BY message_id';
      const t0 = Date.now();
      const [listed, now, then] = await Promise.all([
        runCli(['table', '--app', APP, '--json'], env),
        runCli(['query', '--table', '--app', APP, '--json', sql], env),
        runCli(['query', '--table', '--app', APP, '--as-of', String(older!['snapshot-id']), '--json', sql], env),
      ]);
      const cliMs = Date.now() - t0;

      expect(listed.stderr).toBe('');
      expect(listed.code).toBe(0);
      const snaps = listed.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(snaps.map((s) => s.snapshot_id)).toEqual(
        [...meta.snapshots]
          .sort((a, b) => a['sequence-number'] - b['sequence-number'])
          .map((s) => String(s['snapshot-id'])),
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

      for (const [what, r, through, files] of [
        ['current', now, current.summary[THROUGH_BATCH_ID], Number(current.summary['total-data-files'])],
        ['--as-of', then, older!.summary[THROUGH_BATCH_ID], olderKeys.length],
      ] as const) {
        expect(r.code, `${what}: ${r.stderr}`).toBe(0);
        const rows = r.stdout
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as { message_id: string; event: string; app: string });
        const want = upTo(through);
        expect(want.length, what).toBeGreaterThan(0);
        expect(
          rows.map((x) => [x.message_id, x.event]),
          `${what}: exactly the acknowledged rows up to ${through}`,
        ).toEqual(want);
        expect(new Set(rows.map((x) => x.app))).toEqual(new Set([APP]));
        // Without httpfs: the temporary copy, said on stderr (counts, never contents). With it: nothing to say.
        if (r.stderr !== '')
          expect(r.stderr).toMatch(
            new RegExp(
              `httpfs extension is not available .*query --table read the snapshot's ${files} data files .* through a temporary local copy`,
            ),
          );
      }
      expect(upTo(older!.summary[THROUGH_BATCH_ID]).length).toBeLessThan(upTo(last).length);
      expect(upTo(last).length).toBe([...acked.values()].reduce((n, m) => n + m.size, 0));
      // The copies are gone.
      expect(readdirSync(scratch).filter((n) => n.startsWith('events-ingest-table-'))).toEqual([]);

      // An expired or unknown snapshot is an error, on S3 as on the filesystem.
      const bad = await runCli(['query', '--table', '--app', APP, '--as-of', '1', 'SELECT 1'], env);
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(/no such snapshot/);
      console.log(
        `iceberg S3 CLI: ${snaps.length} snapshots listed, ${upTo(last).length} rows now and ${upTo(older!.summary[THROUGH_BATCH_ID]).length} as of ${older!['snapshot-id']} (${olderKeys.length} files); three CLI runs in parallel ${cliMs} ms, ${/temporary local copy/.test(now.stderr) ? 'through the temporary copy (no httpfs)' : 'through httpfs'}`,
      );
    },
  );
});
