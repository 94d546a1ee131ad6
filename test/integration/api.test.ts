import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createApiApp } from '../../services/api/app.js';
import { loadSyncConfig, loadTokens, parseEnv } from '../../shared/config.js';
import { BATCH_ID_RE, batchIdMs } from '../../shared/ids.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { createLogger } from '../../shared/logger.js';
import { createRegistry } from '../../shared/metrics.js';
import { createRedis } from '../../shared/redis/connection.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { uniqueName } from '../helpers/names.js';
import { freePort } from '../helpers/redis-server.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';
import { duckQuery } from '../helpers/duckdb.js';

const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
const sha256 = (b: string | Buffer): string => createHash('sha256').update(b).digest('hex');

describe('API + encoder in one process (real Redis, filesystem store)', () => {
  let s: TestStack;
  let redis: Redis;
  let queue: Queue;
  const app = () => s.api!.app.app;

  beforeAll(async () => {
    s = await startTestStack();
    redis = new Redis(inject('redisUrl'));
    queue = new Queue(s.queueName, { connection: redis });
  });
  afterAll(async () => {
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    redis.disconnect();
    await s.shutdown();
  });

  async function jobCount(): Promise<number> {
    const c = await queue.getJobCounts('waiting', 'active', 'delayed', 'completed', 'failed', 'prioritized');
    return Object.values(c).reduce((a, b) => a + b, 0);
  }

  async function listAll(appName: string): Promise<string[]> {
    const r = await request(app()).get(`/list/events/${appName}?limit=1000`).set(auth);
    expect(r.status).toBe(200);
    return r.body.items as string[];
  }

  it('push → list → pull: three batches become three Parquet files with the right rows', async () => {
    const bodies = [
      batchBody(100),
      JSON.stringify({
        data: {
          events: [
            {
              event: 'odd',
              distinct_id: 42,
              properties: { nested: [1, { a: true }] },
              context: null,
              surprise: { x: 1 },
              flag: false,
            },
          ],
        },
        baseHash: null,
      }),
      batchBody(1000),
    ];
    const ids: string[] = [];
    for (const body of bodies) {
      const r = await request(app())
        .post('/push/events/app1/client-id-ignored')
        .set('Content-Type', 'application/json')
        .send(body);
      expect(r.status).toBe(200);
      expect(r.body.hash).toBe(sha256(body));
      expect(r.body.batchId).toMatch(BATCH_ID_RE);
      ids.push(r.body.batchId as string);
    }
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(3);

    const items = await waitFor(
      async () => {
        const l = await listAll('app1');
        return l.length === 3 ? l : null;
      },
      30_000,
      'three listed batches',
    );
    expect(items).toEqual(ids.map((id) => `${id}.parquet`));

    // after= with and without .parquet, limit
    const a1 = await request(app()).get(`/list/events/app1?after=${ids[0]}`).set(auth);
    expect(a1.body).toEqual({ items: [`${ids[1]}.parquet`, `${ids[2]}.parquet`], hasMore: false });
    const a2 = await request(app()).get(`/list/events/app1?after=${ids[0]}.parquet&limit=1`).set(auth);
    expect(a2.body).toEqual({ items: [`${ids[1]}.parquet`], hasMore: true });
    for (const bad of ['0', '1001', 'abc', '-1', '1.5']) {
      const r = await request(app()).get(`/list/events/app1?limit=${bad}`).set(auth);
      expect(r.status, `limit=${bad}`).toBe(400);
      expect(r.body.error).toMatch(/limit/);
    }

    // pull with ETag and 304
    const p = await request(app())
      .get(`/pull/events/app1/${ids[1]}`)
      .set(auth)
      .buffer(true)
      .parse((res, cb) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => cb(null, Buffer.concat(chunks)));
      });
    expect(p.status).toBe(200);
    expect(p.headers['content-type']).toBe('application/vnd.apache.parquet');
    const bytes = p.body as Buffer;
    expect(bytes.subarray(0, 4).toString()).toBe('PAR1');
    expect(p.headers.etag).toBe(`"${sha256(bytes)}"`);
    const p304 = await request(app())
      .get(`/pull/events/app1/${ids[1]}.parquet`)
      .set(auth)
      .set('If-None-Match', p.headers.etag as string);
    expect(p304.status).toBe(304);
    const missing = await request(app()).get('/pull/events/app1/1700000000000-0000-abcdef').set(auth);
    expect(missing.status).toBe(200);
    expect(missing.body).toMatchObject({ data: {}, hash: '' });
    expect(typeof missing.body.timestamp).toBe('number');

    // the store: exactly one parquet file per batch, nothing else; DuckDB reads every row
    const root = `${s.dataDir}/events/app1`;
    const files = await s.store.listKeys('events/');
    expect(files.sort()).toEqual(ids.map((id) => `events/app1/${id}.parquet`));
    const [count] = await duckQuery(`SELECT count(*)::INTEGER AS n FROM read_parquet('${root}/*.parquet')`);
    expect(count?.n).toBe(1101);
    const odd = await duckQuery(
      `SELECT event, distinct_id, properties, context, extra, epoch_ms(received_at)::BIGINT AS ms FROM read_parquet('${root}/${ids[1]}.parquet')`,
    );
    expect(odd).toEqual([
      {
        event: 'odd',
        distinct_id: '42',
        properties: '{"nested":[1,{"a":true}]}',
        context: '',
        extra: '{"surprise":{"x":1},"flag":false}',
        ms: String(batchIdMs(ids[1] as string)),
      },
    ]);
  });

  it('refuses bad input with a JSON error naming the problem, and enqueues nothing', async () => {
    const before = await jobCount();
    const post = (path: string) => request(app()).post(path);
    const cases: [string, () => request.Test, number, RegExp][] = [
      [
        'wrong content type',
        () => post('/push/events/app2/x').set('Content-Type', 'text/plain').send('{"data":{"events":[]}}'),
        415,
        /Content-Type/,
      ],
      [
        'malformed JSON',
        () => post('/push/events/app2/x').set('Content-Type', 'application/json').send('{"data":'),
        400,
        /malformed JSON/,
      ],
      [
        'events not an array',
        () => post('/push/events/app2/x').set('Content-Type', 'application/json').send('{"data":{"events":{}}}'),
        400,
        /data\.events/,
      ],
      [
        'event not an object',
        () => post('/push/events/app2/x').set('Content-Type', 'application/json').send('{"data":{"events":[{},{},3]}}'),
        400,
        /data\.events\[2\]/,
      ],
      [
        'too deep',
        () =>
          post('/push/events/app2/x')
            .set('Content-Type', 'application/json')
            .send(`{"data":{"events":[{"a":${'['.repeat(5000)}${']'.repeat(5000)}}]}}`),
        400,
        /nesting/,
      ],
      [
        'bad app param',
        () => post('/push/events/bad%20app/x').set('Content-Type', 'application/json').send('{"data":{"events":[{}]}}'),
        400,
        /app/,
      ],
      [
        'dot-dot param',
        () => post('/push/events/../x').set('Content-Type', 'application/json').send('{"data":{"events":[{}]}}'),
        400,
        /app/,
      ],
      [
        'dotdot encoded',
        () => post('/push/events/%2E%2E/x').set('Content-Type', 'application/json').send('{"data":{"events":[{}]}}'),
        400,
        /app/,
      ],
      [
        'unknown collection',
        () => post('/push/nope/app2/x').set('Content-Type', 'application/json').send('{"data":{"events":[{}]}}'),
        404,
        /no route/,
      ],
      [
        'empty body',
        () => post('/push/events/app2/x').set('Content-Type', 'application/json').send(''),
        400,
        /empty body/,
      ],
      [
        'too large',
        () => post('/push/events/app2/x').set('Content-Type', 'application/json').send('x'.repeat(8_000_001)),
        413,
        /limit/,
      ],
    ];
    for (const [name, send, status, msg] of cases) {
      const r = await send();
      expect(r.status, name).toBe(status);
      expect(r.body.error, name).toMatch(msg);
    }
    // supertest would re-serialise a Buffer as JSON; send the raw bytes over the real port instead.
    const badUtf8 = await fetch(`${s.url}/push/events/app2/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: Buffer.from('{"data":{"events":[{"event":"\xff"}]}}'.replace('\xff', '\u0000'), 'utf8').map((b) =>
        b === 0 ? 0xff : b,
      ),
    });
    expect(badUtf8.status).toBe(400);
    expect(((await badUtf8.json()) as { error: string }).error).toMatch(/UTF-8/);
    const empty = await post('/push/events/app2/x')
      .set('Content-Type', 'application/json')
      .send('{"data":{"events":[]},"baseHash":null}');
    expect(empty.status).toBe(200);
    expect(empty.body.batchId).toBeNull();
    expect(await jobCount()).toBe(before);
    expect(await s.store.listKeys('events/app2/')).toEqual([]);
  });

  it('needs a token with the read role for list and pull', async () => {
    expect((await request(app()).get('/list/events/app1')).status).toBe(401);
    expect(
      (await request(app()).get('/list/events/app1').set('Authorization', 'Bearer wrong-token-000000000')).status,
    ).toBe(401);
    expect((await request(app()).get('/pull/events/app1/1700000000000-0000-abcdef')).status).toBe(401);
  });

  it('serves health, readiness and metrics', async () => {
    expect((await request(app()).get('/healthz')).body).toEqual({ ok: true });
    const ready = await request(app()).get('/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body.checks).toEqual({ redis: 'ok', store: 'ok' });
    const m = await request(app()).get('/metrics');
    expect(m.text).toMatch(/ingest_pushes_total\{outcome="accepted",service="ingest"\} [1-9]/);
    expect(m.text).toMatch(/ingest_encoder_batches_total\{outcome="written",service="ingest"\} [1-9]/);
  });
});

describe('API whose Redis is unreachable (nothing listens on its port)', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-noredis-'));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('upkeep failures are counted every time and logged once per 30 s with a count; /readyz names the Redis and reports the lag as unknown', async () => {
    const port = await freePort();
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger({
      level: 'info',
      name: 'test',
      destination: { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) },
    });
    const env = parseEnv({ ADMIN_TOKEN, DATA_DIR: dataDir, QUEUE_NAME: uniqueName('noredis') });
    const redis = createRedis(`redis://127.0.0.1:${port}`, 'producer', {}, logger);
    const queue = new Queue(env.QUEUE_NAME, { connection: redis });
    queue.on('error', () => undefined);
    const registry = createRegistry('api', false);
    const api = createApiApp({
      env,
      config: loadSyncConfig(env),
      store: new FilesystemObjectStore({ root: dataDir }),
      redis,
      queue,
      ledger: new BatchLedger(redis, env.QUEUE_NAME),
      tokens: loadTokens(env),
      registry,
      logger,
    });
    try {
      for (let i = 0; i < 3; i++) await expect(api.upkeep()).rejects.toThrow();
      const counted = await registry.getSingleMetricAsString('ingest_upkeep_failures_total');
      expect(counted).toMatch(/ingest_upkeep_failures_total\{step="reap",service="api"\} 3/);
      expect(counted).toMatch(/ingest_upkeep_failures_total\{step="gauges",service="api"\} 0/);
      const logged = lines.filter((l) => l.msg === 'upkeep failed');
      expect(logged).toHaveLength(1);
      expect(logged[0]).toMatchObject({ step: 'reap', count: 1, redis: `127.0.0.1:${port}` });

      const ready = await request(api.app).get('/readyz');
      expect(ready.status).toBe(503);
      expect(ready.headers['retry-after']).toMatch(/^\d+$/);
      expect(ready.body).toMatchObject({
        ok: false,
        checks: { redis: `redis 127.0.0.1:${port} unreachable`, store: 'ok' },
        watermarkLagSeconds: null,
      });
      const listed = await request(api.app).get('/list/events/app1').set(auth);
      expect(listed.status).toBe(503);
      expect(listed.headers['retry-after']).toMatch(/^\d+$/);
    } finally {
      api.stop();
      redis.disconnect();
    }
  });
});
