import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DEFAULT_SYNC_CONFIG } from '../../shared/config.js';
import { batchBody } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

/** The built-in `events` collection (public push, admin read, listable); the rules below add limits to it. */
const DEFAULT_COLLECTION = DEFAULT_SYNC_CONFIG.collections[0];

const TOKEN_A = 'limits-token-a-0123456789';
const TOKEN_B = 'limits-token-b-0123456789';
const TOKEN_C = 'limits-token-c-0123456789';
const PUSH_WINDOW_MS = 8000;
const PUSH_MAX = 10;
const LIST_MAX = 5;
const APP_EVENTS_MAX = 60;

const config = {
  version: 1,
  collections: [
    {
      ...DEFAULT_COLLECTION,
      name: 'limited',
      storagePath: 'limited/{app}/{batchId}',
      rateLimit: {
        push: { windowMs: PUSH_WINDOW_MS, maxRequests: PUSH_MAX, bucket: 'ip' },
        list: { windowMs: PUSH_WINDOW_MS, maxRequests: LIST_MAX },
      },
    },
    {
      ...DEFAULT_COLLECTION,
      rateLimit: { appEvents: { windowMs: 1000, maxEvents: APP_EVENTS_MAX } },
    },
  ],
};

interface Answer {
  status: number;
  retryAfter: string | null;
  limit: string | null;
  error?: string;
}

async function push(base: string, path: string, events: number, headers: Record<string, string> = {}): Promise<Answer> {
  const r = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: batchBody(events, (i) => ({ event: 'e', i })),
    signal: AbortSignal.timeout(10_000),
  });
  const body = (await r.json()) as { error?: string };
  return {
    status: r.status,
    retryAfter: r.headers.get('retry-after'),
    limit: r.headers.get('ratelimit-limit'),
    error: body.error,
  };
}

describe('rate limits shared by two API processes on one Redis', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ingest-limits-'));
  const configFile = join(dir, 'config.json');
  const tokensFile = join(dir, 'tokens.json');
  const queueName = uniqueName('limits');
  const procs: ServiceProcess[] = [];
  const urls: string[] = [];
  let inProcess: TestStack | undefined;

  beforeAll(async () => {
    writeFileSync(configFile, JSON.stringify(config));
    writeFileSync(tokensFile, JSON.stringify({ [TOKEN_A]: ['admin'], [TOKEN_B]: ['admin'], [TOKEN_C]: ['admin'] }));
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      const p = startService('services/api/main.ts', {
        PORT: String(port),
        HOST: '127.0.0.1',
        REDIS_URL: inject('redisUrl'),
        QUEUE_NAME: queueName,
        DATA_DIR: join(dir, 'data'),
        CONFIG_FILE: configFile,
        TOKENS_FILE: tokensFile,
        TRUSTED_PROXY_HOPS: '1',
        LOG_LEVEL: 'warn',
      });
      procs.push(p);
      urls.push(`http://127.0.0.1:${port}`);
    }
    await Promise.all(urls.map((u, i) => waitForHttp(`${u}/healthz`, 60_000, procs[i])));
  }, 90_000);

  afterAll(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await inProcess?.shutdown();
    rmSync(dir, { recursive: true, force: true });
  });

  it('one client over maxRequests gets 429 + Retry-After on either instance; 200s stay within the limit', async () => {
    const answers: { instance: number; a: Answer }[] = [];
    for (let i = 0; i < 3 * PUSH_MAX; i++)
      answers.push({ instance: i % 2, a: await push(urls[i % 2]!, '/push/limited/shared/x', 1) });
    const ok = answers.filter((x) => x.a.status === 200).length;
    // One window normally; a burst that straddles a window boundary may get one more window's worth.
    expect(ok).toBeGreaterThanOrEqual(PUSH_MAX);
    expect(ok).toBeLessThanOrEqual(2 * PUSH_MAX);
    expect(answers.slice(0, PUSH_MAX).every((x) => x.a.status === 200)).toBe(true);
    const refused = answers.filter((x) => x.a.status === 429);
    expect(refused.length + ok).toBe(answers.length);
    expect(new Set(refused.map((x) => x.instance))).toEqual(new Set([0, 1]));
    for (const { a } of refused) {
      expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(Number(a.retryAfter)).toBeLessThanOrEqual(PUSH_WINDOW_MS / 1000);
      expect(a.limit).toBe(String(PUSH_MAX));
      expect(a.error).toMatch(/rate limit exceeded for push/);
    }
  });

  it('bucket "ip" with TRUSTED_PROXY_HOPS=1 uses X-Forwarded-For (the address the proxy appended)', async () => {
    const xff = (client: string) => ({ 'X-Forwarded-For': `198.51.100.99, ${client}` });
    const codes: number[] = [];
    for (let i = 0; i < PUSH_MAX + 2; i++)
      codes.push((await push(urls[i % 2]!, '/push/limited/xff/x', 1, xff('203.0.113.7'))).status);
    expect(codes.slice(0, PUSH_MAX).every((c) => c === 200)).toBe(true);
    expect(codes.slice(PUSH_MAX)).toContain(429);
    // Another client address behind the same proxy has its own budget; the left-most (spoofable) entry does not matter.
    expect((await push(urls[0]!, '/push/limited/xff/x', 1, xff('203.0.113.8'))).status).toBe(200);
    expect(
      (await push(urls[1]!, '/push/limited/xff/x', 1, { 'X-Forwarded-For': '192.0.2.1, 203.0.113.8' })).status,
    ).toBe(200);
  });

  it('bucket "ip" with TRUSTED_PROXY_HOPS=0 ignores X-Forwarded-For', async () => {
    inProcess = await startTestStack(
      { CONFIG_FILE: configFile, TRUSTED_PROXY_HOPS: '0' },
      { api: true, encoder: false },
    );
    const codes: number[] = [];
    for (let i = 0; i < PUSH_MAX + 1; i++)
      codes.push(
        (await push(inProcess.url, '/push/limited/noxff/x', 1, { 'X-Forwarded-For': `203.0.113.${i + 1}` })).status,
      );
    expect(codes.slice(0, PUSH_MAX).every((c) => c === 200)).toBe(true);
    expect(codes[PUSH_MAX]).toBe(429);
  });

  it('list is limited per identity: one token over its budget on both instances, another token unaffected', async () => {
    const list = async (base: string, token: string) =>
      (await fetch(`${base}/list/limited/shared`, { headers: { Authorization: `Bearer ${token}` } })).status;
    const codes: number[] = [];
    for (let i = 0; i < LIST_MAX + 2; i++) codes.push(await list(urls[i % 2]!, TOKEN_A));
    expect(codes.slice(0, LIST_MAX).every((c) => c === 200)).toBe(true);
    expect(codes.slice(LIST_MAX)).toEqual([429, 429]);
    expect(await list(urls[0]!, TOKEN_B)).toBe(200);
    expect(await list(urls[1]!, TOKEN_B)).toBe(200);
  });

  it('failed logins count: wrong tokens from one address get 401 up to the limit, then 429 + Retry-After; a valid token is not locked out', async () => {
    // A fresh client address (TRUSTED_PROXY_HOPS=1): its anonymous bucket is its own.
    const from = { 'X-Forwarded-For': '203.0.113.77' };
    const answers: { status: number; retryAfter: string | null; error: string }[] = [];
    for (let i = 0; i < LIST_MAX + 2; i++) {
      const r = await fetch(`${urls[i % 2]}/list/limited/guess`, {
        headers: { ...from, Authorization: `Bearer wrong-token-${i}-0123456789` },
        signal: AbortSignal.timeout(10_000),
      });
      answers.push({
        status: r.status,
        retryAfter: r.headers.get('retry-after'),
        error: ((await r.json()) as { error: string }).error,
      });
    }
    expect(answers.map((a) => a.status)).toEqual([...Array<number>(LIST_MAX).fill(401), 429, 429]);
    expect(answers[0]?.error).toBe('invalid token: unknown token');
    for (const a of answers.slice(LIST_MAX)) {
      expect(a.error).toMatch(/rate limit exceeded for list/);
      expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(Number(a.retryAfter)).toBeLessThanOrEqual(PUSH_WINDOW_MS / 1000);
    }
    // A valid token from the same address counts in its own (identity) bucket.
    expect(
      (await fetch(`${urls[0]}/list/limited/guess`, { headers: { ...from, Authorization: `Bearer ${TOKEN_C}` } }))
        .status,
    ).toBe(200);
  });

  it('per-app push budget: the flooding app is throttled while another app pushes at its pace and never gets a 429', async () => {
    const floodCodes: number[] = [];
    const calmCodes: number[] = [];
    const until = Date.now() + 3000;
    const flooder = async (k: number) => {
      for (let i = 0; Date.now() < until && i < 500; i++)
        floodCodes.push((await push(urls[(i + k) % 2]!, '/push/events/flood/x', 20)).status);
    };
    const calm = async () => {
      for (let i = 0; Date.now() < until && i < 20; i++) {
        calmCodes.push((await push(urls[i % 2]!, '/push/events/calm/x', 20)).status);
        await new Promise((r) => setTimeout(r, 500));
      }
    };
    await Promise.all([flooder(0), flooder(1), flooder(0), flooder(1), calm()]);
    const floodOk = floodCodes.filter((c) => c === 200).length;
    expect(floodCodes.filter((c) => c === 429).length).toBeGreaterThan(0);
    expect(floodCodes.every((c) => c === 200 || c === 429)).toBe(true);
    // 3 s of fixed 1 s windows started by the flood itself: at most 4 windows of 60 events (3 batches of 20).
    expect(floodOk * 20).toBeLessThanOrEqual(4 * APP_EVENTS_MAX);
    expect(calmCodes.length).toBeGreaterThanOrEqual(3);
    expect(calmCodes.every((c) => c === 200)).toBe(true);

    const metrics = await (await fetch(`${urls[0]}/metrics`)).text();
    const count = (rule: string) =>
      Number(
        new RegExp(`^ingest_rate_limited_total\\{[^}]*action="push",rule="${rule}"[^}]*\\} (\\d+)`, 'm').exec(
          metrics,
        )?.[1] ?? 'NaN',
      );
    expect(count('app_events')).toBeGreaterThan(0);
    expect(count('ip')).toBeGreaterThan(0);
    expect(metrics).not.toContain('flood');
  });
});
