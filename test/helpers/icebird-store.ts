/**
 * icebird (the independent Iceberg reader in the acceptance tests) fetches `file://` and `s3://`
 * data through `fetch`: this answers those URLs from a store, so one reader works on every store.
 * `serveStoreToIcebird()` patches `globalThis.fetch` once per test file and restores it afterwards;
 * `route(prefix, store)` adds a URL prefix. Also the Iceberg tests' stack env and a read-only table.
 */
import { afterAll } from 'vitest';
import { IcebergTable, THROUGH_BATCH_ID, currentSnapshot, storeRootUri } from '../../shared/iceberg/table.js';
import type { ObjectStore } from '../../shared/store/types.js';

export function serveStoreToIcebird(): { route: (prefix: string, store: ObjectStore) => void } {
  const realFetch = globalThis.fetch;
  const routes: { prefix: string; store: ObjectStore }[] = [];
  globalThis.fetch = (async (input: string | URL | Request, init?: RequestInit) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const hit = routes.find((r) => url.startsWith(r.prefix));
    if (!hit) return realFetch(input, init);
    const got = await hit.store.getBytes(decodeURIComponent(url.slice(hit.prefix.length)));
    if (!got) return new Response(null, { status: 404 });
    const headers = { 'content-length': String(got.body.byteLength) };
    // The whole object (200) for a ranged GET too: hyparquet slices it itself.
    return new Response((init?.method ?? 'GET') === 'HEAD' ? null : Buffer.from(got.body), { status: 200, headers });
  }) as typeof fetch;
  afterAll(() => {
    globalThis.fetch = realFetch;
  });
  return { route: (prefix, store) => void routes.push({ prefix, store }) };
}

/** Deep JSON with sorted keys (properties and context come back as JSON text from some readers). */
export function canonical(v: unknown): string {
  const parsed = typeof v === 'string' && /^[[{]/.test(v) ? (JSON.parse(v) as unknown) : v;
  const sort = (x: unknown): unknown =>
    Array.isArray(x)
      ? x.map(sort)
      : x !== null && typeof x === 'object'
        ? Object.fromEntries(
            Object.keys(x)
              .sort()
              .map((k) => [k, sort((x as Record<string, unknown>)[k])]),
          )
        : x;
  return JSON.stringify(sort(parsed));
}

/**
 * The stack env of the Iceberg tests: the committer on, commits every second, 2 s rollup periods
 * rolled up with no delay (add a test's own settings after it).
 */
export const FAST_ICEBERG_ENV = {
  ICEBERG: 'on',
  ICEBERG_COMMIT_SECONDS: '1',
  ROLLUP_PERIOD_SECONDS: '2',
  ROLLUP_DELAY_SECONDS: '0',
} as const;

/** A reader's handle on an app's events table: it never creates the table (the committer does). */
export function readOnlyTable(store: ObjectStore, app: string, rootUri = storeRootUri(store)): IcebergTable {
  return new IcebergTable({
    store,
    collection: 'events',
    app,
    rootUri,
    createIfAbsent: () => Promise.reject(new Error('read only')),
  });
}

/**
 * Whether the table's current snapshot holds every batch up to `last` (its through-batch-id) and
 * every data file it references is a rollup (every period replaced): false while the table is absent.
 */
export async function tableThroughRolled(table: IcebergTable, last: string): Promise<boolean> {
  const loaded = await table.load();
  const cur = loaded ? currentSnapshot(loaded.metadata) : undefined;
  return (
    (cur?.summary[THROUGH_BATCH_ID] ?? '') >= last && (await table.dataKeys()).every((k) => k.startsWith('rollups/'))
  );
}
