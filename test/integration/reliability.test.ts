/**
 * Reliability: bad input never crashes the API nor enqueues anything; overload is shed with
 * 503 + Retry-After before Redis runs out of memory; retried pushes are written once; SIGTERM
 * finishes in-flight work; Redis or the store going away loses nothing; dead letters replay.
 * Real processes, real redis-server, BullMQ, s3rver and DuckDB.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it, onTestFinished } from 'vitest';
import { type Service, FaultProxy, sleep, spawnService, waitHttpOk } from '../../scripts/chaos-kit.js';
import { SERVER_LIMITS, listen } from '../../shared/http.js';
import { BATCH_ID_RE, batchIdMs } from '../../shared/ids.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import type { BatchJob } from '../../shared/redis/jobs/push.js';
import { S3ObjectStore } from '../../shared/store/s3/index.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { holdsFor, waitFor } from '../helpers/wait.js';
import { type RedisServer, freePort, startRedisServer } from '../helpers/redis-server.js';
import { S3RVER_CREDENTIALS, type S3TestServer, startS3Server } from '../helpers/s3.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
const JSON_CT = { 'Content-Type': 'application/json' };

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/**
 * One request on its own connection, body written in chunks (`delayMs` apart: a slow client).
 * Resolves with the answer as soon as it arrives, even while the body is still being sent.
 */
function send(
  port: number,
  path: string,
  opts: {
    method?: string;
    headers?: Record<string, string>;
    chunks?: (Buffer | string)[];
    delayMs?: number;
    onChunkSent?: (n: number) => void;
  } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port,
      path,
      method: opts.method ?? 'POST',
      headers: opts.headers,
      agent: false,
    });
    let answered = false;
    req.on('response', (res) => {
      answered = true;
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.on('error', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', (err) => {
      if (!answered) reject(err);
    });
    req.setTimeout(30_000, () => req.destroy(new Error('client timeout')));
    void (async () => {
      let sent = 0;
      for (const c of opts.chunks ?? []) {
        if (answered || req.destroyed) return;
        if (!req.write(c)) await new Promise((r) => req.once('drain', r));
        opts.onChunkSent?.(++sent);
        if (opts.delayMs) await sleep(opts.delayMs);
      }
      if (!req.destroyed) req.end();
    })();
  });
}

const push = (
  port: number,
  app: string,
  body: string | Buffer,
  headers: Record<string, string> = {},
): Promise<Answer> =>
  send(port, `/push/events/${app}/x`, {
    headers: { ...JSON_CT, 'Content-Length': String(Buffer.byteLength(body)), ...headers },
    chunks: [body],
  });

function parquetFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter(
    (f) => f.endsWith('.parquet') && statSync(join(dir, f)).isFile(),
  );
}

/** Every key of a queue's namespace plus its job counts: proof that nothing was enqueued or minted. */
async function traces(redis: Redis, queue: Queue, ns: string): Promise<{ ledgerKeys: string[]; jobs: number }> {
  // `{ns}:shards` (the QUEUE_SHARDS layout marker) is written when a process starts, never by a push.
  const ledgerKeys = (await redis.keys(`{${ns}}:*`)).filter((k) => k !== `{${ns}}:shards`);
  const c = await queue.getJobCounts(
    'waiting',
    'active',
    'delayed',
    'completed',
    'failed',
    'prioritized',
    'waiting-children',
  );
  return { ledgerKeys, jobs: Object.values(c).reduce((a, b) => a + b, 0) };
}

function apiEnv(
  port: number,
  redisUrl: string,
  dataDir: string,
  queueName: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    PORT: String(port),
    HOST: '127.0.0.1',
    REDIS_URL: redisUrl,
    DATA_DIR: dataDir,
    QUEUE_NAME: queueName,
    ADMIN_TOKEN,
    LOG_LEVEL: 'warn',
    ...extra,
  };
}

describe('bad input, accepted edge input and idempotency (spawned API)', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-rel-'));
  const queueName = uniqueName('rel');
  let port = 0;
  let api: Service;
  let pid = 0;
  let redis: Redis;
  let queue: Queue;
  let encoder: TestStack | undefined;

  beforeAll(async () => {
    port = await freePort();
    api = spawnService('services/api/main.ts', apiEnv(port, inject('redisUrl'), dataDir, queueName));
    redis = new Redis(inject('redisUrl'));
    queue = new Queue(queueName, { connection: redis });
    await waitHttpOk(`http://127.0.0.1:${port}/readyz`, 40_000, api);
    pid = api.pid;
  });
  afterAll(async () => {
    await encoder?.shutdown();
    await api?.stop('SIGKILL');
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    redis.disconnect();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const deep = (n: number): string => `{"data":{"events":[{"a":${'['.repeat(n)}${']'.repeat(n)}}]},"baseHash":null}`;
  const cases: { name: string; status: number; run: () => Promise<Answer>; error?: RegExp }[] = [
    {
      name: 'malformed JSON',
      status: 400,
      error: /malformed JSON/,
      run: () => push(port, 'a', '{"data":{"events":[{"a":1}'),
    },
    {
      name: 'wrong Content-Type',
      status: 415,
      run: () => send(port, '/push/events/a/x', { headers: { 'Content-Type': 'text/plain' }, chunks: [batchBody(1)] }),
    },
    {
      name: 'non-UTF-8 charset',
      status: 415,
      run: () =>
        send(port, '/push/events/a/x', {
          headers: { 'Content-Type': 'application/json; charset=latin1' },
          chunks: [batchBody(1)],
        }),
    },
    {
      name: 'body over the limit, Content-Length declared',
      status: 413,
      run: () =>
        send(port, '/push/events/a/x', {
          headers: { ...JSON_CT, 'Content-Length': '8000001' },
          chunks: Array.from({ length: 8 }, () => Buffer.alloc(1_000_000, 0x20)).concat([Buffer.from(' ')]),
        }),
    },
    {
      name: 'body over the limit, chunked (no Content-Length)',
      status: 413,
      run: () =>
        send(port, '/push/events/a/x', {
          headers: JSON_CT,
          chunks: [Buffer.from('{"data":{"events":[')].concat(
            Array.from({ length: 9 }, () => Buffer.alloc(1_000_000, 0x20)),
          ),
        }),
    },
    { name: 'nesting depth 5,000', status: 400, error: /nesting deeper/, run: () => push(port, 'a', deep(5000)) },
    {
      name: '__proto__ at the envelope level does not supply data',
      status: 400,
      run: () => push(port, 'a', '{"__proto__":{"data":{"events":[{"a":1}]}},"baseHash":null}'),
    },
    {
      name: 'invalid UTF-8',
      status: 400,
      error: /UTF-8/,
      run: () =>
        push(
          port,
          'a',
          Buffer.concat([
            Buffer.from('{"data":{"events":[{"a":"'),
            Buffer.from([0xc3, 0x28, 0xff]),
            Buffer.from('"}]}}'),
          ]),
        ),
    },
    { name: 'empty body', status: 400, error: /empty body/, run: () => push(port, 'a', '') },
    { name: 'events not an array', status: 400, run: () => push(port, 'a', '{"data":{"events":{"0":{}}}}') },
    {
      name: 'non-object event (number)',
      status: 400,
      error: /data\.events\[1\]/,
      run: () => push(port, 'a', '{"data":{"events":[{},1]}}'),
    },
    {
      name: 'non-object event (array)',
      status: 400,
      error: /data\.events\[0\]/,
      run: () => push(port, 'a', '{"data":{"events":[[]]}}'),
    },
    { name: 'non-object event (null)', status: 400, run: () => push(port, 'a', '{"data":{"events":[null]}}') },
    { name: 'top-level array', status: 400, run: () => push(port, 'a', '[{"a":1}]') },
    {
      name: 'bad path param (space)',
      status: 400,
      run: () => send(port, '/push/events/bad%20app/x', { headers: JSON_CT, chunks: [batchBody(1)] }),
    },
    {
      name: 'bad path param (129 chars)',
      status: 400,
      run: () => send(port, `/push/events/${'a'.repeat(129)}/x`, { headers: JSON_CT, chunks: [batchBody(1)] }),
    },
    {
      name: 'bad path param (..)',
      status: 400,
      run: () => send(port, '/push/events/%2E%2E/x', { headers: JSON_CT, chunks: [batchBody(1)] }),
    },
    {
      name: 'unknown collection',
      status: 404,
      run: () => send(port, '/push/nope/a/x', { headers: JSON_CT, chunks: [batchBody(1)] }),
    },
    {
      name: 'bad Idempotency-Key',
      status: 400,
      run: () => push(port, 'a', batchBody(1), { 'Idempotency-Key': 'k'.repeat(300) }),
    },
  ];

  it.each(cases)('$name → $status, nothing enqueued, API still the same process', async (c) => {
    const r = await c.run();
    expect(r.status).toBe(c.status);
    expect(JSON.parse(r.body)).toHaveProperty('error');
    if (c.error) expect(JSON.parse(r.body).error).toMatch(c.error);
    expect(api.child.exitCode).toBeNull();
    expect(api.pid).toBe(pid);
    expect(await traces(redis, queue, queueName)).toEqual({ ledgerKeys: [], jobs: 0 });
    expect(parquetFiles(dataDir)).toEqual([]);
  });

  it('an oversized header block gets 431; the server limits are set deliberately', async () => {
    const status = await new Promise<string>((resolve, reject) => {
      const sock = net.connect(port, '127.0.0.1', () =>
        sock.write(
          `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(SERVER_LIMITS.maxHeaderSize + 1024)}\r\n\r\n`,
        ),
      );
      let got = '';
      sock.on('data', (d) => (got += d.toString()));
      sock.on('close', () => resolve(got.split('\r\n')[0] ?? ''));
      sock.on('error', reject);
      sock.setTimeout(10_000, () => sock.destroy());
    });
    expect(status).toMatch(/^HTTP\/1\.1 431/);
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);

    const s = await listen((_req, res) => res.end(), 0, '127.0.0.1');
    try {
      expect(s.server.headersTimeout).toBe(SERVER_LIMITS.headersTimeoutMs);
      expect(s.server.requestTimeout).toBe(SERVER_LIMITS.requestTimeoutMs);
      expect(s.server.keepAliveTimeout).toBe(SERVER_LIMITS.keepAliveTimeoutMs);
      expect(
        (s.server as unknown as { maxHeaderSize?: number }).maxHeaderSize ?? http.maxHeaderSize,
      ).toBeLessThanOrEqual(SERVER_LIMITS.maxHeaderSize);
      // Headers must time out before the whole request may, or a slowloris holds the socket.
      expect(SERVER_LIMITS.headersTimeoutMs).toBeLessThan(SERVER_LIMITS.requestTimeoutMs);
    } finally {
      await s.close(100);
    }
  });

  it('accepted edge input: __proto__/constructor keys land in `extra`, 100,000 tiny events encode to one file', async () => {
    encoder = await startTestStack(
      { QUEUE_NAME: queueName, DATA_DIR: dataDir, LOG_LEVEL: 'silent' },
      { api: false, encoder: true },
    );
    const proto =
      '{"data":{"events":[{"event":"p","__proto__":{"polluted":"yes"},"constructor":{"prototype":{"polluted":"yes"}}}]},"baseHash":null}';
    const r1 = await push(port, 'edge', proto);
    expect(r1.status).toBe(200);
    // 100,000 `{}` events: 300 KB, far under maxBodyBytes, so accepted as one batch.
    const tiny = `{"data":{"events":[${Array.from({ length: 100_000 }, () => '{}').join(',')}]},"baseHash":null}`;
    const r2 = await push(port, 'edge', tiny);
    expect(r2.status).toBe(200);
    const [id1, id2] = [JSON.parse(r1.body).batchId as string, JSON.parse(r2.body).batchId as string];
    await waitFor(async () => parquetFiles(join(dataDir, 'events/edge')).length === 2, 60_000, 'two edge files');
    const [row] = await duckQuery(
      `SELECT extra FROM read_parquet(${sqlString(join(dataDir, `events/edge/${id1}.parquet`))})`,
    );
    expect(JSON.parse(String(row?.extra))).toEqual(
      JSON.parse('{"__proto__":{"polluted":"yes"},"constructor":{"prototype":{"polluted":"yes"}}}'),
    );
    expect(Object.keys(JSON.parse(String(row?.extra)) as object)).toContain('__proto__');
    // The encoder ran in this process: the prototype of every object is untouched.
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.prototype).not.toHaveProperty('polluted');
    const [n] = await duckQuery(
      `SELECT count(*)::INTEGER AS n FROM read_parquet(${sqlString(join(dataDir, `events/edge/${id2}.parquet`))})`,
    );
    expect(n?.n).toBe(100_000);
    expect(api.pid).toBe(pid);
  });

  it('the same push three times (Idempotency-Key, and body only) gives one batch id and one file each', async () => {
    const keyed = batchBody(20);
    const withKey = [
      await push(port, 'idem', keyed, { 'Idempotency-Key': 'retry-me-1' }),
      await push(port, 'idem', keyed, { 'Idempotency-Key': 'retry-me-1' }),
      await push(port, 'idem', keyed, { 'Idempotency-Key': 'retry-me-1' }),
    ];
    const bodyOnly = batchBody(30);
    const sameBody = [
      await push(port, 'idem', bodyOnly),
      await push(port, 'idem', bodyOnly),
      await push(port, 'idem', bodyOnly),
    ];
    for (const r of [...withKey, ...sameBody]) expect(r.status).toBe(200);
    const a = new Set(withKey.map((r) => JSON.parse(r.body).batchId as string));
    const b = new Set(sameBody.map((r) => JSON.parse(r.body).batchId as string));
    expect(a.size).toBe(1);
    expect(b.size).toBe(1);
    expect([...a][0]).toMatch(BATCH_ID_RE);
    expect([...a][0]).not.toBe([...b][0]);
    const files = await waitFor(
      async () => {
        const f = parquetFiles(join(dataDir, 'events/idem'));
        return f.length >= 2 ? f : null;
      },
      30_000,
      'idempotent files',
    );
    expect(files.sort()).toEqual([`${[...a][0]}.parquet`, `${[...b][0]}.parquet`].sort());
    // Nothing more comes (a retry written twice would show up as a third file).
    await holdsFor(() => parquetFiles(join(dataDir, 'events/idem')).length === 2, 500, 'two idempotent files');
    // A retry after the batch was written still answers the first id, and writes nothing new.
    const late = await push(port, 'idem', keyed, { 'Idempotency-Key': 'retry-me-1' });
    expect(JSON.parse(late.body).batchId).toBe([...a][0]);
    await holdsFor(
      () => parquetFiles(join(dataDir, 'events/idem')).length === 2,
      300,
      'two idempotent files after a late retry',
    );
  });
});

describe('overload: small Redis maxmemory, no encoder', () => {
  let redisServer: RedisServer;
  let api: Service | undefined;
  let encoder: TestStack | undefined;
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-rel-'));
  afterAll(async () => {
    await encoder?.shutdown();
    await api?.stop('SIGKILL');
    await redisServer?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it(
    'sustained pushes get 200 or 503 + Retry-After, Redis never OOMs, then every acknowledged batch is written once',
    { timeout: 150_000 },
    async () => {
      redisServer = await startRedisServer({ args: ['--maxmemory', '10mb', '--maxmemory-policy', 'noeviction'] });
      const port = await freePort();
      const queueName = uniqueName('overload');
      api = spawnService('services/api/main.ts', apiEnv(port, redisServer.url, dataDir, queueName));
      await waitHttpOk(`http://127.0.0.1:${port}/readyz`, 40_000, api);
      const pid = api.pid;

      const statuses = new Map<number, number>();
      const acked: string[] = [];
      let missingRetryAfter = 0;
      let shed = 0;
      const deadline = Date.now() + 40_000;
      // Four clients; each body ~600 KB (~130 KB in Redis after deflate), made distinct by its
      // first event so the body-hash idempotency does not fold them into one batch.
      const events = JSON.stringify(Array.from({ length: 1000 }, (_, k) => sampleEvent(k))).slice(1, -1);
      let seq = 0;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          for (let i = 0; i < 400 && Date.now() < deadline && shed < 8; i++) {
            const r = await push(
              port,
              'load',
              `{"data":{"events":[{"event":"load","message_id":"m${seq++}"},${events}]},"baseHash":null}`,
            );
            statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
            if (r.status === 200) acked.push(JSON.parse(r.body).batchId as string);
            else if (r.status === 503) {
              shed++;
              if (!r.headers['retry-after']) missingRetryAfter++;
              await sleep(100);
            }
          }
        }),
      );
      expect([...statuses.keys()].every((s) => s === 200 || s === 503)).toBe(true);
      expect(statuses.get(503) ?? 0).toBeGreaterThan(0);
      expect(missingRetryAfter).toBe(0);
      expect(acked.length).toBeGreaterThan(10);
      const probe = new Redis(redisServer.url);
      try {
        const errors = await probe.info('errorstats');
        expect(errors).not.toMatch(/errorstat_OOM/);
        const mem = await probe.info('memory');
        const used = Number(/^used_memory:(\d+)/m.exec(mem)?.[1]);
        const max = Number(/^maxmemory:(\d+)/m.exec(mem)?.[1]);
        expect(used).toBeLessThan(max);
      } finally {
        probe.disconnect();
      }
      expect(api.pid).toBe(pid);
      expect(api.child.exitCode).toBeNull();

      encoder = await startTestStack(
        { QUEUE_NAME: queueName, DATA_DIR: dataDir, REDIS_URL: redisServer.url, ENCODER_CONCURRENCY: '2' },
        { api: false, encoder: true },
      );
      const files = await waitFor(
        async () => {
          const f = parquetFiles(join(dataDir, 'events/load'));
          return f.length >= acked.length ? f : null;
        },
        100_000,
        'every acknowledged batch written',
      );
      expect(files.map((f) => f.replace('.parquet', '')).sort()).toEqual([...acked].sort());
      expect(new Set(acked).size).toBe(acked.length);
    },
  );
});

describe('SIGTERM', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-rel-'));
  const queueName = uniqueName('term');
  const procs: Service[] = [];
  let redis: Redis;
  let queue: Queue;
  beforeAll(() => {
    redis = new Redis(inject('redisUrl'));
    queue = new Queue(queueName, { connection: redis });
  });
  afterAll(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    redis.disconnect();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('the API finishes in-flight pushes and exits 0; the encoder returns or finishes its jobs and exits 0; nothing is lost', async () => {
    const port = await freePort();
    const api = spawnService('services/api/main.ts', apiEnv(port, inject('redisUrl'), dataDir, queueName));
    procs.push(api);
    await waitHttpOk(`http://127.0.0.1:${port}/readyz`, 40_000, api);

    // Six slow clients, ~1.1 MB each in 10 chunks 150 ms apart: all in flight when SIGTERM lands.
    const bodies = Array.from({ length: 6 }, () => batchBody(2000));
    // Chunks each client has sent: SIGTERM lands once every request is under way (two chunks sent,
    // so its connection was up for a chunk's delay), not after a fixed time.
    const chunksSent = bodies.map(() => 0);
    const inFlight = bodies.map((b, k) => {
      const buf = Buffer.from(b);
      const size = Math.ceil(buf.length / 10);
      const chunks = Array.from({ length: 10 }, (_, i) => buf.subarray(i * size, (i + 1) * size));
      return send(port, '/push/events/term/x', {
        headers: { ...JSON_CT, 'Content-Length': String(buf.length) },
        chunks,
        delayMs: 150,
        onChunkSent: (n) => (chunksSent[k] = n),
      });
    });
    await waitFor(async () => chunksSent.every((n) => n >= 2), 20_000, 'six pushes under way');
    api.child.kill('SIGTERM');
    const answers = await Promise.all(inFlight);
    expect(answers.map((a) => a.status)).toEqual(bodies.map(() => 200));
    expect(await api.exited()).toBe(0);
    const acked = answers.map((a) => JSON.parse(a.body).batchId as string);

    // The encoder: SIGTERM while a job is active; it exits 0 and no job is left active or failed.
    const metricsPort = await freePort();
    const enc = spawnService('services/encoder/main.ts', {
      ...apiEnv(0, inject('redisUrl'), dataDir, queueName),
      METRICS_PORT: String(metricsPort),
      ENCODER_CONCURRENCY: '1',
    });
    procs.push(enc);
    await waitFor(
      async () => (await queue.getActiveCount()) > 0 || parquetFiles(dataDir).length === acked.length,
      40_000,
      'a job active',
    );
    enc.child.kill('SIGTERM');
    expect(await enc.exited()).toBe(0);
    const counts = await queue.getJobCounts('active', 'failed');
    expect(counts).toEqual({ active: 0, failed: 0 });

    // Whatever it handed back, a second encoder writes: every acknowledged batch, once.
    const enc2 = await startTestStack({ QUEUE_NAME: queueName, DATA_DIR: dataDir }, { api: false, encoder: true });
    onTestFinished(() => enc2.shutdown());
    const files = await waitFor(
      async () => {
        const f = parquetFiles(join(dataDir, 'events/term'));
        return f.length >= acked.length ? f : null;
      },
      60_000,
      'all acknowledged batches written',
    );
    expect(files.map((f) => f.replace('.parquet', '')).sort()).toEqual([...acked].sort());
  });
});

describe('Redis down and back', () => {
  let redisServer: RedisServer;
  const redisDir = mkdtempSync(join(tmpdir(), 'ingest-rel-redis-'));
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-rel-'));
  let api: Service | undefined;
  let encoder: TestStack | undefined;
  afterAll(async () => {
    await encoder?.shutdown();
    await api?.stop('SIGKILL');
    await redisServer?.stop();
    rmSync(redisDir, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('push answers 503 quickly, list and pull still serve, and everything resumes without a restart', async () => {
    const aof = ['--appendonly', 'yes', '--appendfsync', 'always'];
    redisServer = await startRedisServer({ dir: redisDir, args: aof });
    const port = await freePort();
    const queueName = uniqueName('down');
    api = spawnService('services/api/main.ts', apiEnv(port, redisServer.url, dataDir, queueName));
    encoder = await startTestStack(
      { QUEUE_NAME: queueName, DATA_DIR: dataDir, REDIS_URL: redisServer.url },
      { api: false, encoder: true },
    );
    await waitHttpOk(`http://127.0.0.1:${port}/readyz`, 40_000, api);
    const pid = api.pid;
    const first = await push(port, 'down', batchBody(10));
    expect(first.status).toBe(200);
    const firstId = JSON.parse(first.body).batchId as string;
    const listUrl = `http://127.0.0.1:${port}/list/events/down`;
    await waitFor(
      async () => ((await (await fetch(listUrl, { headers: auth })).json()) as { items: string[] }).items.length === 1,
      30_000,
      'first batch listed',
    );

    const exited = new Promise((r) => redisServer.process.once('exit', r));
    redisServer.process.kill('SIGKILL');
    await exited;

    const t = Date.now();
    const refused = await push(port, 'down', batchBody(10));
    const elapsed = Date.now() - t;
    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBeDefined();
    expect(elapsed).toBeLessThan(5000);
    const listed = await fetch(listUrl, { headers: auth });
    expect(listed.status).toBe(200);
    expect(((await listed.json()) as { items: string[] }).items).toEqual([`${firstId}.parquet`]);
    const pulled = await fetch(`http://127.0.0.1:${port}/pull/events/down/${firstId}`, { headers: auth });
    expect(pulled.status).toBe(200);
    expect(pulled.headers.get('content-type')).toBe('application/vnd.apache.parquet');
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(503);
    const metricsText = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metricsText).toMatch(/ingest_pushes_total\{outcome="unavailable",service="api"\} [1-9]/);

    redisServer = await startRedisServer({ port: redisServer.port, dir: redisDir, args: aof });
    const again = await waitFor(
      async () => {
        const r = await push(port, 'down', batchBody(10));
        return r.status === 200 ? r : null;
      },
      20_000,
      'pushes accepted again',
    );
    const againId = JSON.parse(again.body).batchId as string;
    await waitFor(
      async () => parquetFiles(join(dataDir, 'events/down')).includes(`${againId}.parquet`),
      40_000,
      'encoder reconnected and wrote',
    );
    expect(api.pid).toBe(pid);
    expect(api.child.exitCode).toBeNull();
  });
});

describe('store down and back (S3 behind a fault proxy)', () => {
  let s3: S3TestServer;
  let proxy: FaultProxy;
  let stack: TestStack | undefined;
  afterAll(async () => {
    await stack?.shutdown();
    await proxy?.close();
    await s3?.close();
  });

  it('jobs back off and retry during the outage; the backlog drains after; nothing lost, nothing dead', async () => {
    s3 = await startS3Server();
    proxy = await FaultProxy.start(Number(new URL(s3.endpoint).port));
    // The in-process S3 client takes credentials from the SDK's default chain (the environment).
    const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };
    process.env.AWS_ACCESS_KEY_ID = S3RVER_CREDENTIALS.accessKeyId;
    process.env.AWS_SECRET_ACCESS_KEY = S3RVER_CREDENTIALS.secretAccessKey;
    onTestFinished(() => {
      if (saved.id === undefined) delete process.env.AWS_ACCESS_KEY_ID;
      else process.env.AWS_ACCESS_KEY_ID = saved.id;
      if (saved.secret === undefined) delete process.env.AWS_SECRET_ACCESS_KEY;
      else process.env.AWS_SECRET_ACCESS_KEY = saved.secret;
    });
    stack = await startTestStack({
      STORE: 's3',
      S3_BUCKET: s3.bucket,
      S3_ENDPOINT: proxy.url,
      S3_FORCE_PATH_STYLE: 'true',
    });
    const direct = new S3ObjectStore({
      bucket: s3.bucket,
      endpoint: s3.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { ...S3RVER_CREDENTIALS },
    });
    try {
      proxy.setMode('http503');
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        const r = await push(stack.api!.server.port, 'st', batchBody(50));
        expect(r.status).toBe(200);
        ids.push(JSON.parse(r.body).batchId as string);
      }
      // The encoder meets both kinds of outage (503s, then reset connections) and writes nothing.
      await waitFor(async () => proxy.faults >= 3, 30_000, 'writes answered 503');
      const after503 = proxy.faults;
      proxy.setMode('reset');
      await waitFor(async () => proxy.faults >= after503 + 3, 30_000, 'writes met by reset connections');
      expect(await direct.listKeys('events/st/')).toEqual([]);
      const q = new Queue(stack.queueName, { connection: new Redis(inject('redisUrl')) });
      try {
        const retried = await q.getJobs(['delayed', 'waiting', 'active']);
        expect(retried.length).toBeGreaterThan(0);
        proxy.setMode('pass');
        const keys = await waitFor(
          async () => {
            const k = await direct.listKeys('events/st/');
            return k.length === 5 ? k : null;
          },
          60_000,
          'backlog drained',
        );
        expect(keys).toEqual(ids.map((id) => `events/st/${id}.parquet`));
        expect(await q.getFailedCount()).toBe(0);
      } finally {
        await q.obliterate({ force: true }).catch(() => undefined);
        await q.close();
      }
    } finally {
      direct.destroy();
    }
  });
});

describe('dead letters and replay', () => {
  let stack: TestStack;
  let redis: Redis;
  let queue: Queue;
  beforeAll(async () => {
    stack = await startTestStack();
    redis = new Redis(inject('redisUrl'));
    queue = new Queue(stack.queueName, { connection: redis });
  });
  afterAll(async () => {
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    redis.disconnect();
    await stack.shutdown();
  });

  /** Pushes to `app` while a plain file blocks its folder: the write fails for good (ENOTDIR/EEXIST, not retriable). */
  async function deadLetter(app: string, body = batchBody(5)): Promise<string> {
    const blocker = join(stack.dataDir, 'events', app);
    rmSync(blocker, { recursive: true, force: true });
    mkdirSync(join(stack.dataDir, 'events'), { recursive: true });
    writeFileSync(blocker, 'not a folder');
    const r = await push(stack.api!.server.port, app, body);
    expect(r.status).toBe(200);
    const id = JSON.parse(r.body).batchId as string;
    await waitFor(async () => (await queue.getJobState(id)) === 'failed', 30_000, 'job dead-lettered');
    rmSync(blocker);
    return id;
  }

  it('a batch that failed for good is kept, listed for admins, and `npm run replay -- <id>` writes it under its id', async () => {
    const id = await deadLetter('dl1');
    const base = stack.url;
    expect((await fetch(`${base}/admin/failed`)).status).toBe(401);
    const failed = (await (await fetch(`${base}/admin/failed`, { headers: auth })).json()) as {
      total: number;
      items: { batchId: string; failedReason: string }[];
    };
    expect(failed.total).toBe(1);
    expect(failed.items[0]?.batchId).toBe(id);
    expect(failed.items[0]?.failedReason).toMatch(/filesystem put/);
    // Dead-lettering released the id: it no longer holds newer batches back.
    const ledger = new BatchLedger(redis, stack.queueName);
    await waitFor(async () => !(await ledger.isPending('events/dl1/', id)), 20_000, 'dead letter released');

    const run = await runScript(['scripts/replay.ts', id], {
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: stack.queueName,
    });
    expect(run.code).toBe(0);
    expect(run.out).toMatch(new RegExp(`${id}\\treplayed`));
    await waitFor(
      async () => existsSync(join(stack.dataDir, `events/dl1/${id}.parquet`)),
      30_000,
      'replayed batch written',
    );
    // The file is fsync'd before the id is released into the list index, so the listing can lag the file by a moment.
    let listed: string[] = [];
    await waitFor(
      async () => {
        listed = ((await (await fetch(`${base}/list/events/dl1`, { headers: auth })).json()) as { items: string[] })
          .items;
        return listed.length > 0;
      },
      10_000,
      'replayed batch listed',
    );
    expect(listed).toEqual([`${id}.parquet`]);
    expect(await queue.getFailedCount()).toBe(0);
    // Asking again for a batch that is not failed is an error, not a silent success.
    expect(
      (await runScript(['scripts/replay.ts', id], { REDIS_URL: inject('redisUrl'), QUEUE_NAME: stack.queueName })).code,
    ).toBe(1);
  });

  it('the admin route reissues a dead letter under a new id; --all replays the rest', async () => {
    const id = await deadLetter('dl2');
    const r = await fetch(`${stack.url}/admin/replay/${id}?reissue=1`, { method: 'POST', headers: auth });
    expect(r.status).toBe(200);
    const body = (await r.json()) as { outcome: string; newBatchId: string };
    expect(body.outcome).toBe('reissued');
    expect(body.newBatchId > id).toBe(true);
    await waitFor(
      async () => existsSync(join(stack.dataDir, `events/dl2/${body.newBatchId}.parquet`)),
      30_000,
      'reissued batch written',
    );
    expect(parquetFiles(join(stack.dataDir, 'events/dl2'))).toEqual([`${body.newBatchId}.parquet`]);
    expect(await queue.getJob(id)).toBeUndefined();
    expect((await fetch(`${stack.url}/admin/replay/${id}`, { method: 'POST', headers: auth })).status).toBe(404);

    const a = await deadLetter('dl3');
    const run = await runScript(['scripts/replay.ts', '--all'], {
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: stack.queueName,
    });
    expect(run.code, run.out).toBe(0);
    expect(run.out).toMatch(/1 of 1 batch\(es\) back in the queue/);
    await waitFor(
      async () => existsSync(join(stack.dataDir, `events/dl3/${a}.parquet`)),
      30_000,
      'replayed batch written',
    );
  });

  it("reissues a dead letter whose file the API encoded (API_ENCODE_MAX_BYTES) with the new id's instant in every row", async () => {
    const events = 300;
    // The API's encode thread starts on first use (and is retired after a large batch): on a
    // loaded machine its first encode can outlast the 3 s it is given, and that push goes as JSON
    // (the documented fallback). Warm it with pushes of the same size first (at most five).
    for (let i = 0; i < 5; i++) {
      const warm = await push(stack.api!.server.port, 'dl4-warm', batchBody(events));
      expect(warm.status).toBe(200);
      if (
        ((await queue.getJob(JSON.parse(warm.body).batchId as string))?.data as BatchJob | undefined)?.encoding ===
        'parquet'
      )
        break;
    }
    const id = await deadLetter('dl4', batchBody(events));
    expect(((await queue.getJob(id))?.data as BatchJob).encoding).toBe('parquet');
    const r = await fetch(`${stack.url}/admin/replay/${id}?reissue=1`, { method: 'POST', headers: auth });
    const body = (await r.json()) as { outcome: string; newBatchId: string };
    expect(body.outcome).toBe('reissued');
    const file = join(stack.dataDir, `events/dl4/${body.newBatchId}.parquet`);
    await waitFor(async () => existsSync(file), 30_000, 'reissued batch written');
    const rows = await duckQuery(
      `SELECT count(*)::INTEGER AS n, min(epoch_ms(received_at))::BIGINT AS lo, max(epoch_ms(received_at))::BIGINT AS hi FROM read_parquet('${file}')`,
    );
    const at = String(batchIdMs(body.newBatchId));
    expect(rows).toEqual([{ n: events, lo: at, hi: at }]);
  });
});

/** Runs a script to completion as `node --import tsx`, returning its exit code and output. */
async function runScript(args: string[], env: Record<string, string>): Promise<{ code: number | null; out: string }> {
  const [entry, ...rest] = args;
  const { spawn } = await import('node:child_process');
  const child = spawn(process.execPath, ['--import', 'tsx', entry as string, ...rest], {
    cwd: join(import.meta.dirname, '../..'),
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  clearTimeout(timer);
  return { code, out };
}
