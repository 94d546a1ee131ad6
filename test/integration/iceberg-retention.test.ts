/**
 * RETENTION_DAYS with ICEBERG=on, end to end: the product's stack (rollup service + API, real
 * Redis, filesystem store) on batch files dated 10, 6, 4 and 1 days ago (written with old ids by
 * the product's encoder, as test/integration/rollup-retention-days.test.ts does), 1 s commits and
 * 10 s snapshot retention. First without RETENTION_DAYS: the table takes every batch and every
 * period is replaced by its rollup, then the app stays idle until its current snapshot is older
 * than the snapshot retention (as an app whose last commit was hours before the day's retention).
 * Then the rollup service restarts with RETENTION_DAYS=5: the table gets a `delete` snapshot
 * whose state holds exactly the kept events (icebird and our DuckDB read it); the snapshot before
 * it still reads every event, from files still in the store, until the retention has passed
 * since the delete; the dropped periods' files leave the store only once no retained snapshot
 * names them (checked all along by a sampler), and then they are gone.
 */
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { icebergRead } from 'icebird';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runQuery } from '../../cli/query.js';
import { parseEnv } from '../../shared/config.js';
import {
  IcebergTable,
  THROUGH_BATCH_ID,
  type Snapshot,
  currentSnapshot,
  storeRootUri,
} from '../../shared/iceberg/table.js';
import { encodeBatch } from '../../shared/parquet/encode.js';
import { msKey, periodStart } from '../../shared/rollup/layout.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { serveFolder } from '../helpers/serve-folder.js';
import { uniqueName } from '../helpers/names.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

const DAY = 86_400_000;
const HOUR = 3_600_000;
const SNAPSHOT_RETENTION_S = 10;
const realFetch = globalThis.fetch;

describe('RETENTION_DAYS=5 with ICEBERG=on (1 h periods; batch files dated 10, 6, 4 and 1 days ago; snapshots kept 10 s)', () => {
  const prefix = 'events/old/';
  const now = Date.now();
  const ages = [10, 6, 4, 1];
  const batches = ages.flatMap((days, k) => {
    const start = periodStart(now - days * DAY, HOUR);
    return [0, 1].map((j) => {
      const events = Array.from({ length: 3 + k + j }, (_, i) => sampleEvent(i));
      return {
        days,
        start,
        id: `${msKey(start + 60_000 + j * 1000)}-000${j}-${(0xb00000 + k).toString(16)}`,
        events,
        messageIds: events.map((e) => String(e.message_id)),
      };
    });
  });
  const kept = batches.filter((b) => b.days < 5);
  const dropped = batches.filter((b) => b.days >= 5);
  const idsOf = (bs: typeof batches): string[] => bs.flatMap((b) => b.messageIds).sort();
  const droppedStarts = new Set(dropped.map((b) => b.start));
  let dir = '';
  let store: FilesystemObjectStore;
  let table: IcebergTable;
  let stack: TestStack | undefined;
  const stackEnv = (retentionDays: Record<string, string>): Record<string, string> => ({
    STORE: 'fs',
    DATA_DIR: dir,
    QUEUE_NAME: queueName,
    ICEBERG: 'on',
    ICEBERG_COMMIT_SECONDS: '1',
    ICEBERG_SNAPSHOT_RETENTION_SECONDS: String(SNAPSHOT_RETENTION_S),
    ROLLUP_PERIOD_SECONDS: '3600',
    ROLLUP_DELAY_SECONDS: '0',
    RAW_RETENTION_SECONDS: '0',
    ...retentionDays,
  });
  const queueName = uniqueName('iceret');
  let server: http.Server;
  let httpBase = '';
  let env: ReturnType<typeof parseEnv>;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'iceberg-retention-'));
    store = new FilesystemObjectStore({ root: dir });
    for (const b of batches) {
      const encoded = encodeBatch(
        batchBody(b.events.length, (i) => b.events[i] as Record<string, unknown>),
        Number(b.id.slice(0, 13)),
      );
      if (!encoded.ok) throw new Error(encoded.reason);
      await store.putBytes(`${prefix}${b.id}.parquet`, encoded.bytes);
    }
    const rootUri = storeRootUri(store);
    table = new IcebergTable({
      store,
      collection: 'events',
      app: 'old',
      rootUri,
      createIfAbsent: () => Promise.reject(new Error('read only')),
    });
    server = await serveFolder(dir);
    httpBase = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    // icebird fetches the file:// locations the metadata names: the loopback server serves the same paths.
    globalThis.fetch = ((input: string | URL | Request, init?: RequestInit) => {
      const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
      return realFetch(url.startsWith(rootUri) ? httpBase + url.slice(rootUri.length) : url, init);
    }) as typeof fetch;
    env = parseEnv({ STORE: 'fs', DATA_DIR: dir, LOG_LEVEL: 'silent' });
  });

  afterAll(async () => {
    globalThis.fetch = realFetch;
    await new Promise((r) => server?.close(r));
    await stack?.shutdown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** The message ids of snapshot `id` through our CLI's DuckDB (`query --table --as-of <id>`), sorted, and whether any repeats. */
  async function viaDuckDb(asOf: string): Promise<string[]> {
    const r = await runQuery('SELECT message_id FROM events ORDER BY message_id', {
      kind: 'table',
      env,
      app: 'old',
      asOf,
    });
    return r.rows.map((row) => String(row[0]));
  }

  /** The message ids icebird reads from metadata version `v` (default: the one version-hint.text names), sorted. */
  async function viaIcebird(v?: number): Promise<string[]> {
    const rows = await icebergRead({
      tableUrl: `${httpBase}${table.prefix.slice(0, -1)}`,
      ...(v === undefined ? {} : { metadataFileName: `v${v}.metadata.json` }),
    });
    return rows.map((r) => String(r.message_id)).sort();
  }

  /** The metadata version in which snapshot `id` became current. */
  async function versionOf(id: number): Promise<number> {
    const last = await table.currentVersion();
    for (let v = 1; v <= last; v++) if ((await table.readVersion(v))['current-snapshot-id'] === id) return v;
    throw new Error(`no version has snapshot ${id} current`);
  }

  it(
    'a delete snapshot holds exactly the kept events; the snapshot before it (current for longer than the retention) reads every event until the retention has passed since the delete; only then do the dropped files leave the store',
    { timeout: 120_000 },
    async () => {
      // The sampler: a data file a snapshot names that is retained both before and after a listing of the store must be in that listing.
      let sampling = true;
      let samples = 0;
      let failure: unknown;
      const rethrow = (): void => {
        if (failure !== undefined) throw failure;
      };
      const sampler = (async () => {
        for (let i = 0; sampling && i < 2000; i++) {
          const before = await table.load();
          const listed = new Set([
            ...(await store.listKeys(prefix, { limit: 10_000 })),
            ...(await store.listKeys(`rollups/${prefix}`, { limit: 10_000 })),
          ]);
          const after = await table.load();
          const still = new Set(after?.metadata.snapshots.map((s) => s['snapshot-id']));
          for (const s of before?.metadata.snapshots ?? []) {
            if (!still.has(s['snapshot-id'])) continue;
            for (const k of await table.dataKeys(s))
              expect(
                listed.has(k),
                `${k} missing while snapshot ${s['snapshot-id']} (${s.summary.operation}) is retained`,
              ).toBe(true);
          }
          samples++;
          await new Promise((r) => setTimeout(r, 150));
        }
      })().catch((err: unknown) => {
        failure = err;
      });

      // Phase 1, no RETENTION_DAYS: every batch in the table, every period replaced by its rollup.
      // The planner's timer runs every 30 s with 1 h periods: the test asks for passes (rolling and retention) itself.
      stack = await startTestStack(stackEnv({}), { api: true, encoder: false, rollup: true });
      const first = stack;
      const settled = await waitFor(
        async () => {
          rethrow();
          await first.rollup?.planOnce();
          const loaded = await table.load();
          const cur = loaded ? currentSnapshot(loaded.metadata) : undefined;
          const keys = await table.dataKeys(cur);
          return cur?.summary[THROUGH_BATCH_ID] === batches.at(-1)?.id &&
            keys.length > 0 &&
            keys.every((k) => k.startsWith('rollups/'))
            ? cur
            : null;
        },
        60_000,
        'every batch in the table and every period replaced',
      );
      await first.shutdown();
      stack = undefined;
      expect(await viaIcebird()).toEqual(idsOf(batches));
      // Idle until the current snapshot is older than the snapshot retention.
      await new Promise((r) =>
        setTimeout(r, Math.max(0, settled['timestamp-ms'] + SNAPSHOT_RETENTION_S * 1000 + 1000 - Date.now())),
      );
      expect(currentSnapshot((await table.load())!.metadata)?.['snapshot-id']).toBe(settled['snapshot-id']);

      // Phase 2: the rollup service restarts with RETENTION_DAYS=5.
      stack = await startTestStack(stackEnv({ RETENTION_DAYS: '5' }), { api: true, encoder: false, rollup: true });
      const second = stack;
      const del = await waitFor(
        async () => {
          rethrow();
          await second.rollup?.planOnce();
          const loaded = await table.load();
          return loaded?.metadata.snapshots.find((s) => s.summary.operation === 'delete') ?? null;
        },
        60_000,
        'a delete snapshot in the table',
      );
      const seenAt = Date.now();
      const meta = (await table.load())!.metadata;
      const parent = meta.snapshots.find((s) => s['snapshot-id'] === del['parent-snapshot-id']) as Snapshot;
      expect(parent, 'the snapshot before the delete is still retained, though older than the retention').toBeDefined();
      expect(parent['snapshot-id']).toBe(settled['snapshot-id']);
      expect(del['timestamp-ms'] - parent['timestamp-ms']).toBeGreaterThan(SNAPSHOT_RETENTION_S * 1000);
      // The delete removes exactly the dropped periods' files (whatever form the table held them in: batch or rollup files).
      const parentKeys = await table.dataKeys(parent);
      const deleteKeys = await table.dataKeys(del);
      const removed = parentKeys.filter((k) => !deleteKeys.includes(k));
      expect(deleteKeys.filter((k) => !parentKeys.includes(k))).toEqual([]);
      expect(removed.length).toBeGreaterThan(0);
      const periodOf = (k: string): number => {
        const m = /(\d{13})-/.exec(k.slice(k.lastIndexOf('/') + 1));
        return periodStart(Number(m?.[1]), HOUR);
      };
      expect(new Set(removed.map(periodOf))).toEqual(droppedStarts);
      expect(deleteKeys.some((k) => droppedStarts.has(periodOf(k)))).toBe(false);
      expect(Number(del.summary['deleted-records'])).toBe(idsOf(dropped).length);
      expect(Number(del.summary['total-records'])).toBe(idsOf(kept).length);
      expect(del.summary[THROUGH_BATCH_ID]).toBe(batches.at(-1)?.id);

      // The delete snapshot: exactly the kept events, by DuckDB and by icebird.
      expect(await viaDuckDb(String(del['snapshot-id']))).toEqual(idsOf(kept));
      expect(await viaIcebird(await versionOf(del['snapshot-id']))).toEqual(idsOf(kept));
      // The snapshot before it (retained: replaced less than 10 s ago): every event, from files still in the store.
      for (const k of removed)
        expect(await store.getBytes(k), `${k} of the retained snapshot before the delete`).not.toBeNull();
      expect(await viaDuckDb(String(parent['snapshot-id']))).toEqual(idsOf(batches));
      expect(await viaIcebird(await versionOf(parent['snapshot-id']))).toEqual(idsOf(batches));
      const readWithin = Date.now() - del['timestamp-ms'];
      expect(
        readWithin,
        'the old snapshot was read before its retention ran out (else the test proves nothing)',
      ).toBeLessThan(SNAPSHOT_RETENTION_S * 1000);

      // Expiry: once no retained snapshot names them, the dropped files leave the store.
      const listedAll = async (): Promise<string[]> => [
        ...(await store.listKeys(prefix, { limit: 10_000 })),
        ...(await store.listKeys(`rollups/${prefix}`, { limit: 10_000 })),
      ];
      await waitFor(
        async () => {
          rethrow();
          const keys = await listedAll();
          return (
            removed.every((k) => !keys.includes(k)) &&
            keys.every((k) => !k.endsWith('.parquet') || !droppedStarts.has(periodOf(k)))
          );
        },
        40_000,
        'the dropped periods files deleted from the store',
      );
      const goneAfter = Date.now() - del['timestamp-ms'];
      const after = (await table.load())!.metadata;
      expect(after.snapshots.map((s) => s['snapshot-id'])).not.toContain(parent['snapshot-id']);
      for (const s of after.snapshots) expect((await table.dataKeys(s)).filter((k) => removed.includes(k))).toEqual([]);
      // Files went no sooner than the retention after the delete replaced the snapshot that named them.
      expect(goneAfter).toBeGreaterThanOrEqual(SNAPSHOT_RETENTION_S * 1000);
      // The kept periods' batch files stay (raw retention is off); the dropped ones are gone.
      const batchIds = (await store.listKeys(prefix, { limit: 10_000 })).map((k) =>
        k.slice(prefix.length, -'.parquet'.length),
      );
      expect(batchIds).toEqual(kept.map((b) => b.id));
      await expect(viaDuckDb(String(parent['snapshot-id']))).rejects.toThrow(/no such snapshot/);

      // The current state, as any reader finds it (version-hint.text): exactly the kept events.
      const cur = currentSnapshot(after)!;
      expect(await viaDuckDb(String(cur['snapshot-id']))).toEqual(idsOf(kept));
      expect(await viaIcebird()).toEqual(idsOf(kept));

      sampling = false;
      await sampler;
      rethrow();
      expect(samples).toBeGreaterThan(10);
      const operations = [...new Set(after.snapshots.map((s) => s.summary.operation))];
      console.log(
        `iceberg retention: delete snapshot seen ${seenAt - del['timestamp-ms']} ms after its commit, old snapshot read ${readWithin} ms after it, dropped files gone ${goneAfter} ms after it; ${samples} invariant samples; retained operations now ${operations.join(',')}`,
      );
    },
  );
});
