/**
 * Issue 46, acceptance 1 (the retry half): the product's Redis goes away for a few seconds under
 * the Segment door; @segment/analytics-node 3 and @rudderstack/rudder-sdk-node 3, with their
 * default retry settings, get 503 + Retry-After, retry by themselves once Redis is back (restarted
 * from its AOF on the same port), and every event is stored exactly once (DuckDB read-back: one
 * row per messageId, none missing).
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Analytics as SegmentAnalytics } from '@segment/analytics-node';
import RudderAnalytics from '@rudderstack/rudder-sdk-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { type RedisServer, startRedisServer } from '../helpers/redis-server.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';

const SEGMENT_KEY = 'seg-retry-key-0123456789';
const RUDDER_KEY = 'rudder-retry-key-0123456789';
const AOF = ['--appendonly', 'yes', '--appendfsync', 'always'];
/** How long Redis stays away once both SDKs have seen a 503: "a few seconds". */
const DOWN_MS = 3000;

interface Seen {
  status: number;
  retryAfter: string | null;
}

/** Resolves within `ms` or throws, so a stuck SDK flush cannot hold the file. */
function bounded<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

describe('Segment SDKs retry a 503 by themselves while Redis is away (issue 46)', () => {
  let redis: RedisServer;
  let stack: TestStack;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'segment-retry-'));
    const keys = join(dir, 'keys.json');
    writeFileSync(keys, JSON.stringify({ [SEGMENT_KEY]: { app: 'seg-retry' }, [RUDDER_KEY]: { app: 'rudder-retry' } }));
    mkdirSync(join(dir, 'redis'));
    redis = await startRedisServer({ dir: join(dir, 'redis'), args: AOF });
    stack = await startTestStack({ ROLLUP: 'off', SEGMENT_WRITE_KEYS_FILE: keys, REDIS_URL: redis.url });
  }, 60_000);
  afterAll(async () => {
    await stack?.shutdown();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const countsOf = async (app: string): Promise<Map<string, number>> => {
    const d = join(stack.dataDir, 'events', app);
    if (!existsSync(d) || !readdirSync(d).some((f) => f.endsWith('.parquet'))) return new Map();
    const rows = await duckQuery(
      `SELECT message_id, count(*) AS n FROM read_parquet(${sqlString(join(d, '*.parquet'))}) GROUP BY message_id`,
    );
    return new Map(rows.map((r) => [String(r.message_id), Number(r.n)]));
  };

  it('analytics-node and rudder-sdk-node: 503 + Retry-After, their own retries, every event stored once', async () => {
    const segSeen: Seen[] = [];
    const seg = new SegmentAnalytics({ writeKey: SEGMENT_KEY, host: stack.url, flushAt: 10, flushInterval: 60_000 });
    seg.on('http_response', (r) => segSeen.push({ status: r.status, retryAfter: r.headers['retry-after'] ?? null }));
    const rudderSeen: Seen[] = [];
    const rudder = new RudderAnalytics(RUDDER_KEY, {
      dataPlaneUrl: stack.url,
      flushAt: 50,
      flushInterval: 60_000,
      logLevel: 'error',
      // Only watches: the retry policy (count, delay honouring Retry-After) stays the SDK's default.
      axiosRetryConfig: {
        onRetry: (_n: number, err: { response?: { status: number; headers: Record<string, string> } }) => {
          if (err.response)
            rudderSeen.push({ status: err.response.status, retryAfter: err.response.headers['retry-after'] ?? null });
        },
      },
    });

    // Redis away (SIGKILL: nothing flushed on the way out beyond the AOF, fsynced on every write).
    const exited = new Promise((r) => redis.process.once('exit', r));
    redis.process.kill('SIGKILL');
    await exited;

    const segIds = Array.from({ length: 25 }, (_, i) => `seg-r-${String(i).padStart(2, '0')}`);
    for (const [i, messageId] of segIds.entries())
      seg.track({ userId: `u-${i}`, event: 'Retried', properties: { i }, messageId });
    const segDone = seg.closeAndFlush({ timeout: 90_000 });
    const rudderIds = Array.from({ length: 15 }, (_, i) => `rudder-r-${String(i).padStart(2, '0')}`);
    for (const [i, messageId] of rudderIds.entries()) {
      // messageId is honoured by the SDK though its typings leave it out (hence not a literal here).
      const message = { userId: `r-${i}`, event: 'Retried', properties: { i }, messageId };
      rudder.track(message);
    }
    const rudderDone = rudder.flush();

    await waitFor(async () => segSeen.length > 0 && rudderSeen.length > 0, 20_000, 'a refused attempt from each SDK');
    await new Promise((r) => setTimeout(r, DOWN_MS));
    // Nothing got through while Redis was away.
    expect(segSeen.every((s) => s.status === 503)).toBe(true);
    redis = await startRedisServer({ port: redis.port, dir: redis.dir, args: AOF });

    await bounded(Promise.all([segDone, rudderDone]), 90_000, 'both SDKs flushed');
    // The door asks for 5 s when Redis is away, so RudderStack's 3 default retries span the outage.
    for (const s of [...segSeen, ...rudderSeen].filter((x) => x.status === 503)) expect(s.retryAfter).toBe('5');
    expect(segSeen.some((s) => s.status === 503)).toBe(true);
    expect(rudderSeen.some((s) => s.status === 503)).toBe(true);
    expect(segSeen.at(-1)?.status).toBe(200);

    for (const [app, ids] of [
      ['seg-retry', segIds],
      ['rudder-retry', rudderIds],
    ] as const) {
      const counts = await waitFor(
        async () => {
          const c = await countsOf(app);
          return c.size >= ids.length ? c : undefined;
        },
        60_000,
        `${ids.length} messageIds of ${app} stored`,
      );
      expect([...counts.keys()].sort()).toEqual([...ids].sort());
      expect([...counts.values()].every((n) => n === 1)).toBe(true);
    }
  }, 240_000);
});
