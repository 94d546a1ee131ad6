/**
 * Issue 46, acceptance 2: Segment's browser SDK, `@segment/analytics-next`, in headless Chromium,
 * bundled for the page with esbuild and served from a loopback origin, loaded without Segment's
 * CDN (its settings given in code), sends track, identify and page through CORS to the product's
 * Segment door; every event is stored once (DuckDB read-back), and the page made no request
 * beyond loopback.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningChromium, launchChromium } from '../helpers/chromium.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';

const WRITE_KEY = 'browser-write-key-0123456789';

/** analytics-next as one browser script: `window.SegmentNext.AnalyticsBrowser`, its lazy chunks inlined. */
async function bundleSdk(): Promise<string> {
  const out = await build({
    stdin: { contents: "export { AnalyticsBrowser } from '@segment/analytics-next';", resolveDir: process.cwd() },
    bundle: true,
    format: 'iife',
    globalName: 'SegmentNext',
    platform: 'browser',
    target: 'es2020',
    write: false,
    logLevel: 'silent',
  });
  const [file] = out.outputFiles;
  if (!file) throw new Error('esbuild produced no output');
  return file.text;
}

/** A loopback origin serving an empty page and the bundled SDK. */
async function pageOrigin(sdk: string): Promise<{ origin: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    if (req.url === '/sdk.js') res.writeHead(200, { 'Content-Type': 'text/javascript' }).end(sdk);
    else
      res
        .writeHead(200, { 'Content-Type': 'text/html' })
        .end('<!doctype html><title>segment</title><script src="/sdk.js"></script>');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

interface SentIds {
  ok: boolean;
  ids?: string[];
  error?: string;
}

describe('@segment/analytics-next in Chromium sends through CORS to the Segment door (issue 46)', () => {
  let chromium: RunningChromium;
  let stack: TestStack;
  let page: Awaited<ReturnType<typeof pageOrigin>>;
  let dir: string;
  beforeAll(async () => {
    page = await pageOrigin(await bundleSdk());
    dir = mkdtempSync(join(tmpdir(), 'segment-browser-'));
    const keys = join(dir, 'keys.json');
    writeFileSync(keys, JSON.stringify({ [WRITE_KEY]: { app: 'seg-web' } }));
    stack = await startTestStack({ ROLLUP: 'off', SEGMENT_WRITE_KEYS_FILE: keys, CORS_ORIGINS: page.origin });
    chromium = await launchChromium();
  }, 90_000);
  afterAll(async () => {
    await chromium?.close();
    await stack?.shutdown();
    await page?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('track, identify and page are stored, one row each, and nothing left loopback', async () => {
    const tab = await chromium.browser.newPage();
    const requested: string[] = [];
    tab.on('request', (r) => requested.push(r.url()));
    await tab.goto(`${page.origin}/`, { waitUntil: 'load' });
    const apiHost = `${new URL(stack.url).host}/v1`;
    const sent = await tab.evaluate(
      async (writeKey: string, host: string): Promise<SentIds> => {
        try {
          const lib = (window as unknown as { SegmentNext: typeof import('@segment/analytics-next') }).SegmentNext;
          const [analytics] = await lib.AnalyticsBrowser.load({
            writeKey,
            cdnSettings: { integrations: { 'Segment.io': { apiKey: writeKey, apiHost: host, protocol: 'http' } } },
          });
          const ctxs = [
            await analytics.track('Button Clicked', { color: 'red', n: 3 }),
            await analytics.identify('web-user-1', { plan: 'free' }),
            await analytics.page('Docs', 'Pricing', { path: '/pricing' }),
          ];
          const failed = ctxs.flatMap((c) => (c.failedDelivery() ? [String(c.failedDelivery()?.reason)] : []));
          if (failed.length > 0) return { ok: false, error: failed.join('; ') };
          return { ok: true, ids: ctxs.map((c) => c.event.messageId ?? '') };
        } catch (err) {
          return { ok: false, error: String(err) };
        }
      },
      WRITE_KEY,
      apiHost,
    );
    await tab.close();
    expect(sent).toMatchObject({ ok: true });
    const ids = sent.ids ?? [];
    expect(ids).toHaveLength(3);

    const glob = sqlString(join(stack.dataDir, 'events', 'seg-web', '*.parquet'));
    const rows = await waitFor(
      async () => {
        const r = await duckQuery(
          `SELECT event_type, event, distinct_id, message_id, properties FROM read_parquet(${glob}) ORDER BY event_type`,
        ).catch(() => []);
        return r.length >= 3 ? r : undefined;
      },
      30_000,
      '3 rows of seg-web',
    );
    expect(rows.map((r) => r.message_id).sort()).toEqual([...ids].sort());
    expect(rows.map((r) => r.event_type)).toEqual(['identify', 'page', 'track']);
    const [identify, pageRow, track] = rows;
    expect(track).toMatchObject({ event: 'Button Clicked' });
    expect(JSON.parse(String(track?.properties))).toMatchObject({ color: 'red', n: 3 });
    expect(identify).toMatchObject({ distinct_id: 'web-user-1', properties: '{"plan":"free"}' });
    expect(pageRow).toMatchObject({ event: 'Pricing', distinct_id: 'web-user-1' });
    // Loaded without Segment's CDN: every request the page made went to a loopback origin.
    const away = requested.filter((u) => !/^http:\/\/127\.0\.0\.1:\d+\//.test(u));
    expect(away).toEqual([]);
    expect(requested.some((u) => u.startsWith(`${stack.url}/v1/`))).toBe(true);
  }, 120_000);
});
