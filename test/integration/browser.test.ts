import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { duckQuery } from '../helpers/duckdb.js';
import { type RunningChromium, launchChromium } from '../helpers/chromium.js';
import { waitFor } from '../helpers/proc.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

/** A page server: one more local origin (its own port) that serves an empty HTML page. */
async function pageOrigin(): Promise<{ origin: string; close(): Promise<void> }> {
  const server = http.createServer((_req, res) =>
    res.writeHead(200, { 'Content-Type': 'text/html' }).end('<!doctype html><title>sdk</title><p>browser SDK page</p>'),
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

interface PageResult {
  ok: boolean;
  status?: number;
  body?: { batchId?: string; hash?: string; error?: string };
  error?: string;
}

describe('a browser SDK pushes from another origin (headless Debian chromium via puppeteer-core)', () => {
  let chromium: RunningChromium;
  let s: TestStack;
  let allowed: Awaited<ReturnType<typeof pageOrigin>>;
  let other: Awaited<ReturnType<typeof pageOrigin>>;

  beforeAll(async () => {
    allowed = await pageOrigin();
    other = await pageOrigin();
    s = await startTestStack({ CORS_ORIGINS: allowed.origin });
    chromium = await launchChromium();
  }, 90_000);
  afterAll(async () => {
    await chromium?.close();
    await s?.shutdown();
    await allowed?.close();
    await other?.close();
  });

  /** Opens `origin` in a fresh tab and runs a JSON push (a preflighted fetch) to the API from it. */
  async function pushFrom(origin: string, app: string, events: number): Promise<PageResult> {
    const page = await chromium.browser.newPage();
    try {
      await page.goto(`${origin}/`, { waitUntil: 'load' });
      return await page.evaluate(
        async (api: string, path: string, n: number): Promise<PageResult> => {
          const body = JSON.stringify({
            data: { events: Array.from({ length: n }, (_, i) => ({ event_type: 'track', event: 'page_view', i })) },
            baseHash: null,
          });
          try {
            const r = await fetch(`${api}${path}`, {
              method: 'POST',
              headers: { 'Content-Type': 'application/json', 'Idempotency-Key': `browser-${path}` },
              body,
            });
            return { ok: true, status: r.status, body: (await r.json()) as PageResult['body'] };
          } catch (err) {
            return { ok: false, error: String(err) };
          }
        },
        s.url,
        `/push/events/${app}/x`,
        events,
      );
    } finally {
      await page.close();
    }
  }

  it('with CORS_ORIGINS set to the page origin the push succeeds, the file is written, and the page can read the pull ETag', async () => {
    const r = await pushFrom(allowed.origin, 'browserapp', 7);
    expect(r).toMatchObject({ ok: true, status: 200 });
    const batchId = r.body?.batchId as string;
    expect(batchId).toMatch(/^\d{13}-\d{4}-[0-9a-f]{6}$/);
    const file = `${s.dataDir}/events/browserapp/${batchId}.parquet`;
    await waitFor(
      async () => (await duckQuery(`SELECT count(*)::INTEGER AS n FROM read_parquet('${file}')`))[0]?.n === 7,
      20_000,
      'the Parquet file with 7 rows',
    );

    // The ETag is exposed to scripts of the allowed origin (a bearer token makes this a preflighted GET too).
    const page = await chromium.browser.newPage();
    try {
      await page.goto(`${allowed.origin}/`);
      const etag = await page.evaluate(
        async (url: string, token: string) => {
          const res = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
          return { status: res.status, etag: res.headers.get('ETag') };
        },
        `${s.url}/pull/events/browserapp/${batchId}`,
        ADMIN_TOKEN,
      );
      expect(etag.status).toBe(200);
      expect(etag.etag).toMatch(/^"[0-9a-f]{64}"$/);
    } finally {
      await page.close();
    }
  });

  it('from an origin not in CORS_ORIGINS the browser blocks the push and nothing is stored', async () => {
    const r = await pushFrom(other.origin, 'blockedapp', 3);
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/TypeError|Failed to fetch/);
    const listed = await fetch(`${s.url}/list/events/blockedapp`, {
      headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(((await listed.json()) as { items: string[] }).items).toEqual([]);
    const jobs = await s.api!.app.metrics.pushes.get();
    // Only the allowed page's push reached the handler.
    expect(jobs.values.find((v) => v.labels.outcome === 'accepted')?.value).toBe(1);
  });

  it('a gzip body (CompressionStream, Content-Encoding: gzip) passes the preflight and is stored as its plain JSON; hash = sha256 of the bytes sent', async () => {
    const page = await chromium.browser.newPage();
    try {
      await page.goto(`${allowed.origin}/`, { waitUntil: 'load' });
      const r = await page.evaluate(async (url: string) => {
        const json = JSON.stringify({
          data: { events: Array.from({ length: 5 }, (_, i) => ({ event_type: 'track', event: 'gz_view', i })) },
          baseHash: null,
        });
        const gz = new Uint8Array(
          await new Response(new Blob([json]).stream().pipeThrough(new CompressionStream('gzip'))).arrayBuffer(),
        );
        const digest = Array.from(new Uint8Array(await crypto.subtle.digest('SHA-256', gz)), (b) =>
          b.toString(16).padStart(2, '0'),
        ).join('');
        try {
          const res = await fetch(url, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' },
            body: gz,
          });
          return {
            ok: true,
            status: res.status,
            body: (await res.json()) as { batchId?: string; hash?: string },
            digest,
            sent: gz.length,
            plain: json.length,
          };
        } catch (err) {
          return { ok: false, error: String(err), digest, sent: gz.length, plain: json.length };
        }
      }, `${s.url}/push/events/gzapp/x`);
      expect(r).toMatchObject({ ok: true, status: 200 });
      expect(r.sent).toBeLessThan(r.plain);
      expect(r.body?.hash).toBe(r.digest);
      const file = `${s.dataDir}/events/gzapp/${r.body?.batchId as string}.parquet`;
      await waitFor(
        async () =>
          (
            await duckQuery(`SELECT count(*)::INTEGER AS n FROM read_parquet('${file}') WHERE event = 'gz_view'`).catch(
              () => [{ n: 0 }],
            )
          )[0]?.n === 5,
        20_000,
        'the gzip batch as 5 rows',
      );
    } finally {
      await page.close();
    }
  });
});
