/**
 * Issue 46: the Segment tracking API, driven by the published SDKs (@segment/analytics-node 3,
 * @rudderstack/rudder-sdk-node 3) against the product's own stack (API + encoder in this process,
 * the test Redis, a filesystem store, a write keys file). Every call is one row in the app's batch
 * files, read back with DuckDB, with the documented mapping; a missing or unknown key is 401 and
 * stores nothing; a malformed body is 400 naming the problem; a body over the limit is 413.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { Analytics as SegmentAnalytics } from '@segment/analytics-node';
import RudderAnalytics from '@rudderstack/rudder-sdk-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';
import { holdsFor, waitFor } from '../helpers/wait.js';

const SEGMENT_KEY = 'seg-write-key-0123456789';
const RUDDER_KEY = 'rudder-write-key-0123456789';
const OTHER_KEY = 'other-write-key-0123456789';

describe('Segment tracking API (issue 46)', () => {
  let stack: TestStack;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'segment-keys-'));
    const file = join(dir, 'keys.json');
    writeFileSync(
      file,
      JSON.stringify({
        [SEGMENT_KEY]: { app: 'seg-node' },
        [RUDDER_KEY]: { app: 'rudder-node', collection: 'events' },
        [OTHER_KEY]: { app: 'raw' },
      }),
    );
    const config = join(dir, 'config.json');
    writeFileSync(
      config,
      JSON.stringify({
        version: 1,
        collections: [
          {
            name: 'events',
            storagePath: 'events/{app}/{batchId}',
            readRoles: ['admin'],
            writeRoles: ['public'],
            encryption: 'none',
            allowedMimeTypes: ['application/json'],
            maxBodyBytes: 200_000,
            listable: true,
          },
        ],
      }),
    );
    stack = await startTestStack({ ROLLUP: 'off', SEGMENT_WRITE_KEYS_FILE: file, CONFIG_FILE: config });
  });
  afterAll(async () => {
    await stack?.shutdown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const files = (app: string): string[] => {
    const d = join(stack.dataDir, 'events', app);
    return existsSync(d) ? readdirSync(d).filter((f) => f.endsWith('.parquet')) : [];
  };
  const rowsOf = (app: string): Promise<Record<string, unknown>[]> =>
    duckQuery(
      `SELECT event_type, event, distinct_id, anonymous_id, ts, message_id, properties, context, extra, received_at FROM read_parquet(${sqlString(join(stack.dataDir, 'events', app, '*.parquet'))}) ORDER BY message_id`,
    );
  const waitRows = (app: string, n: number): Promise<Record<string, unknown>[]> =>
    waitFor(
      async () => {
        if (files(app).length === 0) return undefined;
        const rows = await rowsOf(app);
        return rows.length >= n ? rows : undefined;
      },
      30_000,
      `${n} rows of ${app}`,
    );

  it('analytics-node: track, identify, page, screen, group and alias, one row each, mapped exactly', async () => {
    const client = new SegmentAnalytics({ writeKey: SEGMENT_KEY, host: stack.url, flushAt: 50, flushInterval: 60_000 });
    const ts = new Date('2024-05-01T12:00:00.000Z');
    client.track({
      userId: 'u-1',
      event: 'Order Completed',
      properties: { revenue: 12.5, big: 12345678901234567890 },
      timestamp: ts,
      messageId: 'm-1',
    });
    client.identify({ userId: 'u-1', traits: { plan: 'pro' }, timestamp: ts, messageId: 'm-2' });
    client.page({ anonymousId: 'a-1', name: 'Home', properties: { path: '/' }, timestamp: ts, messageId: 'm-3' });
    client.screen({ userId: 'u-1', name: 'Settings', properties: { tab: 2 }, timestamp: ts, messageId: 'm-4' });
    client.group({ userId: 'u-1', groupId: 'g-9', traits: { name: 'Acme' }, timestamp: ts, messageId: 'm-5' });
    client.alias({ userId: 'u-1', previousId: 'a-1', timestamp: ts, messageId: 'm-6' });
    await client.closeAndFlush({ timeout: 20_000 });
    const rows = await waitRows('seg-node', 6);
    expect(rows).toHaveLength(6);
    expect(files('seg-node')).toHaveLength(1);
    const by = Object.fromEntries(rows.map((r) => [r.message_id as string, r]));
    expect(by['m-1']).toMatchObject({
      event_type: 'track',
      event: 'Order Completed',
      distinct_id: 'u-1',
      properties: '{"revenue":12.5,"big":12345678901234567000}',
    });
    expect(by['m-2']).toMatchObject({
      event_type: 'identify',
      event: '',
      distinct_id: 'u-1',
      properties: '{"plan":"pro"}',
    });
    expect(by['m-3']).toMatchObject({
      event_type: 'page',
      event: 'Home',
      anonymous_id: 'a-1',
      properties: '{"path":"/"}',
    });
    expect(by['m-4']).toMatchObject({ event_type: 'screen', event: 'Settings', properties: '{"tab":2}' });
    expect(by['m-5']).toMatchObject({ event_type: 'group', properties: '{"name":"Acme"}' });
    expect(JSON.parse(by['m-5']?.extra as string)).toMatchObject({ groupId: 'g-9' });
    expect(JSON.parse(by['m-6']?.extra as string)).toMatchObject({ previousId: 'a-1' });
    for (const r of rows) {
      expect(r.ts).toBe('2024-05-01T12:00:00.000Z');
      expect(JSON.parse(r.context as string)).toMatchObject({ library: { name: '@segment/analytics-node' } });
      const extra = JSON.parse(r.extra as string) as Record<string, unknown>;
      expect(typeof extra.sentAt).toBe('string');
      expect(extra.writeKey).toBeUndefined();
    }
  });

  it('rudder-sdk-node (gzip): every call is one row', async () => {
    const client = new RudderAnalytics(RUDDER_KEY, {
      dataPlaneUrl: stack.url,
      flushAt: 50,
      flushInterval: 60_000,
      logLevel: 'error',
    });
    client.track({ userId: 'r-1', event: 'Signed Up', properties: { n: 1 } });
    client.identify({ userId: 'r-1', traits: { email: 'x@example.com' } });
    client.page({ anonymousId: 'ra-1', name: 'Pricing', properties: { p: true } });
    client.screen({ userId: 'r-1', name: 'Main', properties: {} });
    client.group({ userId: 'r-1', groupId: 'rg', traits: { size: 3 } });
    client.alias({ userId: 'r-1', previousId: 'ra-1' });
    await client.flush();
    const rows = await waitRows('rudder-node', 6);
    expect(rows.map((r) => r.event_type).sort()).toEqual(['alias', 'group', 'identify', 'page', 'screen', 'track']);
    const track = rows.find((r) => r.event_type === 'track');
    expect(track).toMatchObject({ event: 'Signed Up', distinct_id: 'r-1', properties: '{"n":1}' });
    expect(rows.find((r) => r.event_type === 'identify')).toMatchObject({ properties: '{"email":"x@example.com"}' });
    for (const r of rows) expect(r.message_id).not.toBe('');
  });

  async function post(
    path: string,
    body: string | Uint8Array,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; json: Record<string, unknown> }> {
    const r = await fetch(`${stack.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : new Uint8Array(body),
    });
    return { status: r.status, json: (await r.json()) as Record<string, unknown> };
  }
  const basic = (key: string): Record<string, string> => ({
    authorization: `Basic ${Buffer.from(`${key}:`).toString('base64')}`,
  });

  it('a missing or unknown write key is 401 and stores nothing; the key is never echoed', async () => {
    const body = JSON.stringify({ batch: [{ type: 'track', event: 'E', userId: 'x', messageId: 'k-1' }] });
    const missing = await post('/v1/batch', body);
    expect(missing.status).toBe(401);
    const unknown = await post('/v1/batch', body, basic('not-a-key-0123456789'));
    expect(unknown.status).toBe(401);
    expect(JSON.stringify(unknown.json)).not.toContain('not-a-key');
    const inBody = await post('/v1/batch', JSON.stringify({ batch: [], writeKey: 'wrong-key-0123456789' }));
    expect(inBody.status).toBe(401);
    expect(readdirSync(join(stack.dataDir, 'events'))).not.toContain('x');
  });

  it('the body writeKey works (text/plain, as analytics.js sends it); a retry with the same messageIds is the same batch', async () => {
    const event = (sentAt: string): string =>
      JSON.stringify({
        type: 'track',
        event: 'Clicked',
        anonymousId: 'b-1',
        messageId: 'body-1',
        timestamp: '2024-05-01T12:00:00.000Z',
        writeKey: OTHER_KEY,
        sentAt,
      });
    const a = await post('/v1/t', event('2024-05-01T12:00:01.000Z'), { 'content-type': 'text/plain' });
    expect(a).toEqual({ status: 200, json: { success: true } });
    const b = await post('/v1/track', event('2024-05-01T12:00:09.000Z'), { 'content-type': 'text/plain' });
    expect(b).toEqual({ status: 200, json: { success: true } });
    const gz = await post(
      '/v1/batch',
      gzipSync(JSON.stringify({ batch: [{ type: 'track', event: 'Z', userId: 'z', messageId: 'gz-1' }] })),
      { ...basic(OTHER_KEY), 'content-encoding': 'gzip' },
    );
    expect(gz.status).toBe(200);
    const rows = await waitRows('raw', 2);
    // The retry made no second batch: the app keeps exactly these two rows.
    await holdsFor(async () => (await rowsOf('raw')).length === 2, 1000, 'no third row');
    expect(rows.map((r) => r.message_id).sort()).toEqual(['body-1', 'gz-1']);
    expect(rows.find((r) => r.message_id === 'body-1')).toMatchObject({
      event_type: 'track',
      event: 'Clicked',
      anonymous_id: 'b-1',
    });
  });

  it('malformed bodies are 400 naming the problem; over the limit is 413', async () => {
    const k = basic(OTHER_KEY);
    const bad = await post('/v1/batch', '{"batch":[{"type":"track",}]}', k);
    expect(bad.status).toBe(400);
    expect(bad.json).toMatchObject({ code: 'bad_json' });
    expect(String(bad.json.error)).toContain('byte 26');
    const notBatch = await post('/v1/batch', '{"events":[]}', k);
    expect(notBatch.status).toBe(400);
    expect(String(notBatch.json.error)).toContain('"batch"');
    const badType = await post('/v1/batch', '{"batch":[{"type":"nope"}]}', k);
    expect(badType).toMatchObject({ status: 400, json: { code: 'bad_envelope' } });
    expect(String(badType.json.error)).toContain('batch[0].type');
    const big = await post(
      '/v1/batch',
      JSON.stringify({ batch: [{ type: 'track', event: 'E', userId: 'x', properties: { pad: 'x'.repeat(250_000) } }] }),
      k,
    );
    expect(big.status).toBe(413);
    expect(big.json).toMatchObject({ code: 'too_large' });
  });

  it("Segment's clock-skew correction is one SQL expression over the stored columns", async () => {
    const sql = `SELECT message_id, CAST(ts AS TIMESTAMPTZ) - (CAST(json_extract_string(extra, '$.sentAt') AS TIMESTAMPTZ) - received_at) AS corrected, received_at
      FROM read_parquet(${sqlString(join(stack.dataDir, 'events', 'raw', '*.parquet'))}) WHERE message_id = 'body-1'`;
    const [row] = await duckQuery(sql);
    // The device's clock said sentAt 12:00:01 for an event at 12:00:00: corrected = received_at - 1 s.
    const received = Date.parse(String(row?.received_at));
    expect(Date.parse(String(row?.corrected))).toBe(received - 1000);
  });
});
