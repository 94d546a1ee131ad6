/**
 * icebird (the independent Iceberg reader in the acceptance tests) fetches `file://` and `s3://`
 * data through `fetch`: this answers those URLs from a store, so one reader works on every store.
 * `serveStoreToIcebird()` patches `globalThis.fetch` once per test file and restores it afterwards;
 * `route(prefix, store)` adds a URL prefix.
 */
import { afterAll } from 'vitest';
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
