/**
 * Issue 46, the Segment door at the edge like the sync routes: a refused write key counts against
 * the collection's push rate limit (an anonymous request, bucketed by its address), so past the
 * limit guessing keys gets 429 + Retry-After, not 401; REQUEST_TIMEOUT_MS ends a stalled /v1 body
 * with 408.
 */
import http from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SYNC_CONFIG } from '../../shared/config.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

const KEY = 'edge-write-key-0123456789';
const PUSH_MAX = 3;

describe('Segment door: failed keys are rate limited, REQUEST_TIMEOUT_MS applies (issue 46)', () => {
  let stack: TestStack;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'segment-edge-'));
    const keys = join(dir, 'keys.json');
    writeFileSync(keys, JSON.stringify({ [KEY]: { app: 'edge' } }));
    const config = join(dir, 'config.json');
    const events = DEFAULT_SYNC_CONFIG.collections[0];
    writeFileSync(
      config,
      JSON.stringify({
        version: 1,
        collections: [{ ...events, rateLimit: { push: { windowMs: 60_000, maxRequests: PUSH_MAX, bucket: 'ip' } } }],
      }),
    );
    stack = await startTestStack({
      ROLLUP: 'off',
      SEGMENT_WRITE_KEYS_FILE: keys,
      CONFIG_FILE: config,
      TRUSTED_PROXY_HOPS: '1',
      REQUEST_TIMEOUT_MS: '400',
    });
  });
  afterAll(async () => {
    await stack?.shutdown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const post = async (
    headers: Record<string, string>,
    body: string,
  ): Promise<{ status: number; retry: string | null }> => {
    const r = await fetch(`${stack.url}/v1/batch`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body,
      signal: AbortSignal.timeout(10_000),
    });
    await r.text();
    return { status: r.status, retry: r.headers.get('retry-after') };
  };
  const basic = (key: string): string => `Basic ${Buffer.from(`${key}:`).toString('base64')}`;
  const batch = JSON.stringify({ batch: [{ type: 'track', event: 'E', userId: 'u', messageId: 'e-1' }] });

  it('wrong keys (header or body) from one address: 401 up to the limit, then 429 + Retry-After; another address is not held', async () => {
    const from = { 'x-forwarded-for': '203.0.113.50' };
    const answers = [];
    for (let i = 0; i < PUSH_MAX + 2; i++) {
      const wrong = `wrong-key-${i}-0123456789`;
      answers.push(
        i % 2 === 0
          ? await post({ ...from, authorization: basic(wrong) }, batch)
          : await post(from, JSON.stringify({ batch: [], writeKey: wrong })),
      );
    }
    expect(answers.map((a) => a.status)).toEqual([...Array<number>(PUSH_MAX).fill(401), 429, 429]);
    for (const a of answers.slice(PUSH_MAX)) expect(Number(a.retry)).toBeGreaterThanOrEqual(1);
    expect((await post({ 'x-forwarded-for': '203.0.113.51', authorization: basic(KEY) }, batch)).status).toBe(200);
  });

  it('a /v1/batch body that stalls gets 408 after REQUEST_TIMEOUT_MS', async () => {
    const url = new URL(stack.url);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(
        {
          host: url.hostname,
          port: url.port,
          method: 'POST',
          path: '/v1/batch',
          headers: {
            'content-type': 'application/json',
            'content-length': '1000',
            authorization: basic(KEY),
            'x-forwarded-for': '203.0.113.52',
          },
        },
        (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.write('{"batch":[');
      setTimeout(() => reject(new Error('no answer within 10 s')), 10_000).unref();
    });
    expect(answer.status).toBe(408);
    expect(JSON.parse(answer.body).error).toMatch(/not completed within 400 ms/);
  });
});
