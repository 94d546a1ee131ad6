/**
 * Idempotency that never drops a body, end to end (API + encoder in this process, real Redis,
 * filesystem store): a retried Idempotency-Key with the same body gets the first answer; with
 * another body it gets 422 and nothing is stored; a keyless byte-identical body is a retry only
 * inside BODY_DEDUP_WINDOW_SECONDS.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DEFAULT_SYNC_CONFIG } from '../../shared/config.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

const BODY_WINDOW = 2;

describe('idempotency (Idempotency-Key and the short body-dedup window)', () => {
  let stack: TestStack;
  let redis: Redis;
  let queue: Queue;
  let ledger: BatchLedger;
  beforeAll(async () => {
    stack = await startTestStack({ IDEMPOTENCY_WINDOW_SECONDS: '60', BODY_DEDUP_WINDOW_SECONDS: String(BODY_WINDOW) });
    redis = new Redis(inject('redisUrl'));
    queue = new Queue(stack.queueName, { connection: redis });
    ledger = new BatchLedger(redis, stack.queueName);
  });
  afterAll(async () => {
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    redis.disconnect();
    await stack.shutdown();
  });

  async function push(
    app: string,
    body: string,
    key?: string,
  ): Promise<{ status: number; body: { batchId?: string; hash?: string; error?: string } }> {
    const r = await fetch(`${stack.url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
      body,
    });
    return { status: r.status, body: (await r.json()) as { batchId?: string; error?: string } };
  }
  const files = (app: string): string[] => {
    const dir = join(stack.dataDir, 'events', app);
    return existsSync(dir)
      ? readdirSync(dir)
          .filter((f) => f.endsWith('.parquet'))
          .sort()
      : [];
  };
  const drained = async (): Promise<boolean> => {
    const c = await queue.getJobCounts('waiting', 'active', 'delayed');
    return (c.waiting ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) === 0;
  };

  it('same key + same body: one id, one file, before and after the file is written', async () => {
    const body = batchBody(3);
    const answers = [await push('k-same', body, 'key-same-1'), await push('k-same', body, 'key-same-1')];
    for (const a of answers) expect(a.status).toBe(200);
    const id = answers[0]?.body.batchId as string;
    expect(answers[1]?.body.batchId).toBe(id);
    await waitFor(async () => files('k-same').length === 1, 30_000, 'file written');
    const late = await push('k-same', body, 'key-same-1');
    expect(late).toMatchObject({ status: 200, body: { batchId: id } });
    await waitFor(drained, 10_000, 'queue drained');
    expect(files('k-same')).toEqual([`${id}.parquet`]);
  });

  it('same key + another body: 422 naming the key, and nothing is stored for it', async () => {
    const first = await push('k-other', batchBody(2), 'key-other-1');
    expect(first.status).toBe(200);
    const id = first.body.batchId as string;
    const jobsBefore = await queue.getJobCounts('waiting', 'active', 'delayed', 'completed', 'failed');
    const other = await push('k-other', batchBody(5), 'key-other-1');
    expect(other.status).toBe(422);
    expect(other.body.error).toContain('"key-other-1"');
    expect(other.body.error).toMatch(/different body/);
    // Nothing minted for it: the prefix's only in-flight id (if any) is the first push's.
    expect((await ledger.oldestPending('events/k-other/', 10)).filter((x) => x !== id)).toEqual([]);
    await waitFor(async () => files('k-other').length === 1 && (await drained()), 30_000, 'first file written');
    expect(files('k-other')).toEqual([`${id}.parquet`]);
    // Still refused after the first body is written (the window, not the queue, decides).
    expect((await push('k-other', batchBody(5), 'key-other-1')).status).toBe(422);
    const jobsAfter = await queue.getJobCounts('waiting', 'active', 'delayed', 'completed', 'failed');
    expect(jobsAfter.failed).toBe(jobsBefore.failed);
    // Both refusals are counted as rejected pushes, by their reason.
    const rejections = await stack.api!.app.metrics.rejections.get();
    expect(rejections.values.find((v) => v.labels.reason === 'idempotency_conflict')?.value).toBe(2);
    await new Promise((r) => setTimeout(r, 300));
    expect(files('k-other')).toEqual([`${id}.parquet`]);
  });

  it('no key: an identical body inside the short window is the same batch; after it, a second batch', async () => {
    const body = batchBody(4);
    const a = await push('nokey', body);
    const b = await push('nokey', body);
    expect(a.status).toBe(200);
    expect(b.body.batchId).toBe(a.body.batchId);
    // BODY_DEDUP_WINDOW_SECONDS=2: recognised for at least 2 s and at most 3 s (window + one 1 s bucket).
    await new Promise((r) => setTimeout(r, (BODY_WINDOW + 1) * 1000 + 300));
    const c = await push('nokey', body);
    expect(c.status).toBe(200);
    expect(c.body.batchId).not.toBe(a.body.batchId);
    expect((c.body.batchId as string) > (a.body.batchId as string)).toBe(true);
    await waitFor(async () => files('nokey').length === 2, 30_000, 'two files written');
    expect(files('nokey')).toEqual([`${a.body.batchId}.parquet`, `${c.body.batchId}.parquet`]);
  });

  it('a key is not a body: a keyed push and a keyless push of the same body are two batches', async () => {
    const body = batchBody(2);
    const keyed = await push('mix', body, 'key-mix-1');
    const plain = await push('mix', body);
    expect(keyed.status).toBe(200);
    expect(plain.status).toBe(200);
    expect(plain.body.batchId).not.toBe(keyed.body.batchId);
  });
});

describe('idempotency compares the decoded body; a keyed retry is answered before the per-app events budget', () => {
  const APP_EVENTS_MAX = 10;
  const dir = mkdtempSync(join(tmpdir(), 'ingest-idem-budget-'));
  let stack: TestStack;
  beforeAll(async () => {
    const configFile = join(dir, 'config.json');
    // A long window, so the budget spent below is still spent when the retry comes.
    const events = {
      ...DEFAULT_SYNC_CONFIG.collections[0],
      rateLimit: { appEvents: { windowMs: 120_000, maxEvents: APP_EVENTS_MAX } },
    };
    writeFileSync(configFile, JSON.stringify({ version: 1, collections: [events] }));
    stack = await startTestStack({ IDEMPOTENCY_WINDOW_SECONDS: '60', CONFIG_FILE: configFile });
  });
  afterAll(async () => {
    await stack?.shutdown();
    rmSync(dir, { recursive: true, force: true });
  });

  interface Answer {
    status: number;
    body: { batchId?: string; hash?: string; error?: string };
    remaining: string | null;
  }
  async function push(app: string, body: Buffer, headers: Record<string, string> = {}): Promise<Answer> {
    const r = await fetch(`${stack.url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: new Uint8Array(body),
    });
    return {
      status: r.status,
      body: (await r.json()) as Answer['body'],
      remaining: r.headers.get('ratelimit-remaining'),
    };
  }
  const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

  it('the same JSON gzipped at level 1 and level 9 with one Idempotency-Key is one batch; each hash is of its own bytes; another JSON is 422', async () => {
    const json = Buffer.from(batchBody(2));
    const fast = gzipSync(json, { level: 1 });
    const small = gzipSync(json, { level: 9 });
    expect(fast.equals(small)).toBe(false);
    const a = await push('idem-gz', fast, { 'content-encoding': 'gzip', 'idempotency-key': 'gz-levels-1' });
    const b = await push('idem-gz', small, { 'content-encoding': 'gzip', 'idempotency-key': 'gz-levels-1' });
    const plain = await push('idem-gz', json, { 'idempotency-key': 'gz-levels-1' });
    expect(a.status, JSON.stringify(a.body)).toBe(200);
    expect(b.status, JSON.stringify(b.body)).toBe(200);
    expect(plain.status, JSON.stringify(plain.body)).toBe(200);
    expect(b.body.batchId).toBe(a.body.batchId);
    expect(plain.body.batchId).toBe(a.body.batchId);
    expect(a.body.hash).toBe(sha256(fast));
    expect(b.body.hash).toBe(sha256(small));
    expect(plain.body.hash).toBe(sha256(json));
    const other = await push('idem-gz', gzipSync(Buffer.from(batchBody(2)), { level: 9 }), {
      'content-encoding': 'gzip',
      'idempotency-key': 'gz-levels-1',
    });
    expect(other.status).toBe(422);
    expect(other.body.error).toContain('"gz-levels-1"');
  });

  it('a keyed retry of an accepted push gets its first answer while the app is over its budget, and charges nothing', async () => {
    const app = 'idem-budget';
    const first = Buffer.from(batchBody(4));
    const accepted = await push(app, first, { 'idempotency-key': 'budget-1' });
    expect(accepted.status, JSON.stringify(accepted.body)).toBe(200);
    // Other pushes spend the rest: 4 + 4 = 8 of 10 events; 4 more do not fit.
    expect((await push(app, Buffer.from(batchBody(4)))).status).toBe(200);
    const over = await push(app, Buffer.from(batchBody(4)));
    expect(over.status).toBe(429);
    expect(over.remaining).toBe(String(APP_EVENTS_MAX - 8));

    const retry = await push(app, first, { 'idempotency-key': 'budget-1' });
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body.batchId).toBe(accepted.body.batchId);
    // The same key with another body: its 422, not a 429, and nothing charged either.
    const conflict = await push(app, Buffer.from(batchBody(4)), { 'idempotency-key': 'budget-1' });
    expect(conflict.status).toBe(422);
    // The budget is where it was: the next new push is refused with the same remainder.
    const after = await push(app, Buffer.from(batchBody(4)));
    expect(after.status).toBe(429);
    expect(after.remaining).toBe(String(APP_EVENTS_MAX - 8));
    // A new key is a new push: it is charged, and refused.
    expect((await push(app, Buffer.from(batchBody(4)), { 'idempotency-key': 'budget-2' })).status).toBe(429);
  });
});
