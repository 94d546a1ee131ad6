import http from 'node:http';
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import express from 'express';
import request from 'supertest';
import { afterAll, describe, expect, inject, it } from 'vitest';
// The seed's setup snippet, with our package's import names.
import { S3ObjectStore } from 'events-ingest/s3';
import {
  MemoryObjectStore,
  createEventsServerPlugin,
  createSyncRouter,
  parseEnv,
  parseSyncConfig,
} from 'events-ingest';
import type { AuditEntry } from '../../services/api/edge/audit.js';
import { cors } from '../../services/api/edge/cors.js';
import { startStack } from '../../services/stack.js';
import { createLogger } from '../../shared/logger.js';
import { createRedis } from '../../shared/redis/connection.js';
import { freePort } from '../helpers/redis-server.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { S3RVER_CREDENTIALS, type S3TestServer, startS3Server } from '../helpers/s3.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';
import { uniqueName } from '../helpers/names.js';

const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
const ORIGIN = 'http://sdk.example.test:5173';

const collection = {
  name: 'events',
  storagePath: 'events/{app}/{batchId}',
  readRoles: ['admin'],
  writeRoles: ['public'],
  encryption: 'none',
  allowedMimeTypes: ['application/json'],
  maxBodyBytes: 8_000_000,
};

describe('edge: library use', () => {
  const cleanups: (() => Promise<unknown> | void)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('the seed snippet with cors: true and a rateLimit block runs unchanged: CORS on, push limited with 429 + Retry-After + RateLimit-*', async () => {
    const s3: S3TestServer = await startS3Server();
    cleanups.push(() => s3.close());
    const store = new S3ObjectStore({
      bucket: s3.bucket,
      endpoint: s3.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: S3RVER_CREDENTIALS,
    });
    const eventsPlugin = createEventsServerPlugin({
      store,
      collection: 'events',
      storagePath: 'events/{app}/{batchId}',
    });
    const syncRouter = createSyncRouter({
      store,
      config: {
        version: 1,
        rateLimit: { windowMs: 60_000, maxRequests: 100 },
        collections: [
          {
            ...collection,
            rateLimit: {
              push: { maxRequests: 3, bucket: 'ip' },
              pull: { windowMs: 60_000, maxRequests: 1000 },
              list: { maxRequests: 50 },
            },
          },
        ],
      },
      plugins: [eventsPlugin],
      cors: true,
    });
    const app = express();
    app.use(syncRouter);

    const pre = await request(app)
      .options('/push/events/myapp/x')
      .set('Origin', ORIGIN)
      .set('Access-Control-Request-Method', 'POST')
      .set('Access-Control-Request-Headers', 'content-type');
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe('*');
    const codes: number[] = [];
    let last: request.Response | undefined;
    for (let i = 0; i < 5; i++) {
      last = await request(app)
        .post('/push/events/myapp/x')
        .set('Origin', ORIGIN)
        .set('Content-Type', 'application/json')
        .send(batchBody(2));
      codes.push(last.status);
      expect(last.headers['access-control-allow-origin']).toBe('*');
    }
    expect(codes).toEqual([200, 200, 200, 429, 429]);
    expect(last!.body.error).toMatch(/rate limit exceeded for push/);
    const retry = Number(last!.headers['retry-after']);
    expect(retry).toBeGreaterThanOrEqual(1);
    expect(retry).toBeLessThanOrEqual(60);
    expect(last!.headers['ratelimit-limit']).toBe('3');
    expect(last!.headers['ratelimit-remaining']).toBe('0');
    expect(last!.headers['cache-control']).toBe('no-store');
    // Three pushes, three files: the refused ones stored nothing.
    expect(await store.listKeys('events/myapp/')).toHaveLength(3);
    // The host app did not disable X-Powered-By; the sync routes still do not send it.
    expect(last!.headers['x-powered-by']).toBeUndefined();
  });

  it('refuses CORS credentials with "*" at start-up, a config with namespaces, and a rule mixing bucket with sub-limits', () => {
    expect(() => cors({ origin: '*', credentials: true })).toThrow(/credentials cannot be used with wildcard origin/);
    const store = new MemoryObjectStore();
    const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
    expect(() =>
      createSyncRouter({
        store,
        config: { version: 1, collections: [collection] },
        plugins: [plugin],
        cors: { origin: '*', credentials: true },
      }),
    ).toThrow(/credentials/);
    expect(() =>
      parseSyncConfig({ version: 1, collections: [collection], namespaces: { team: { collections: [collection] } } }),
    ).toThrow(/namespaces are not supported/);
    expect(() =>
      parseSyncConfig({
        version: 1,
        collections: [
          {
            ...collection,
            rateLimit: { push: { maxRequests: 1, windowMs: 1000, bucket: 'ip', identity: { maxRequests: 2 } } },
          },
        ],
      }),
    ).toThrow(/collections\.0\.rateLimit\.push.*cannot set both "bucket"/);
    expect(() =>
      parseSyncConfig({ version: 1, collections: [{ ...collection, rateLimit: { list: { maxRequests: 5 } } }] }),
    ).toThrow(/rateLimit\.list: must resolve both windowMs and maxRequests/);
    expect(() =>
      parseSyncConfig({ version: 1, collections: [{ ...collection, rateLimit: { push: { bucket: 'device' } } }] }),
    ).toThrow(/rateLimit\.push\.bucket/);
    expect(() => parseEnv({ CORS_ORIGINS: '*,https://a.example' })).toThrow(/CORS_ORIGINS: is either \*/);
    expect(() => parseEnv({ CORS_ORIGINS: 'a.example' })).toThrow(/CORS_ORIGINS/);
    expect(() => parseEnv({ TRUSTED_PROXY_HOPS: '-1' })).toThrow(/TRUSTED_PROXY_HOPS/);
    // A Starfish config using every rate-limit form (and fields we ignore) is accepted.
    const cfg = parseSyncConfig({
      version: 1,
      rateLimit: { windowMs: 60_000, maxRequests: 100 },
      collections: [
        {
          ...collection,
          cacheDurationMs: 0,
          rateLimit: {
            windowMs: 1000,
            maxRequests: 10,
            bucket: 'identity+ip',
            pull: { identity: { maxRequests: 5 }, ip: { maxRequests: 50 } },
            appEvents: { maxEvents: 1000 },
          },
        },
      ],
    });
    expect(cfg.collections[0]?.rateLimit?.appEvents).toEqual({ windowMs: 1000, maxEvents: 1000 });
  });

  it('rate limiter with Redis unreachable: reads fail open, push follows rateLimitPushOnError', async () => {
    const deadPort = await freePort();
    const dead = createRedis(`redis://127.0.0.1:${deadPort}`, 'producer');
    cleanups.push(() => dead.disconnect());
    const store = new MemoryObjectStore();
    const config = {
      version: 1 as const,
      collections: [
        {
          ...collection,
          readRoles: ['public'],
          listable: true,
          rateLimit: { windowMs: 1000, maxRequests: 5, pull: {}, list: {} },
        },
      ],
    };
    const build = (pushOnError: 'open' | 'closed') => {
      const failures: string[] = [];
      const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
      const app = express().use(
        createSyncRouter({
          store,
          config,
          plugins: [plugin],
          rateLimitStore: dead,
          rateLimitPushOnError: pushOnError,
          observer: { rateLimitStoreFailed: (a, o) => failures.push(`${a}:${o}`) },
        }),
      );
      return { app, failures };
    };
    const closed = build('closed');
    const p = await request(closed.app)
      .post('/push/events/down/x')
      .set('Content-Type', 'application/json')
      .send(batchBody(1));
    expect(p.status).toBe(503);
    expect(p.headers['retry-after']).toBe('1');
    expect(p.body.error).toMatch(/rate limiter unavailable/);
    expect((await request(closed.app).get('/list/events/down')).status).toBe(200);
    expect((await request(closed.app).get('/pull/events/down/1782933157690-0000-735223')).status).toBe(200);
    expect(closed.failures).toEqual(['push:closed', 'list:open', 'pull:open']);
    const open = build('open');
    expect(
      (await request(open.app).post('/push/events/down/x').set('Content-Type', 'application/json').send(batchBody(1)))
        .status,
    ).toBe(200);
    expect(open.failures).toEqual(['push:open']);
  });

  it('audit: one entry per list and pull with identity, route, app and status, pushes only with auditPush, never event contents', async () => {
    const store = new MemoryObjectStore();
    const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
    const entries: AuditEntry[] = [];
    const tokens = new Map([['audit-admin-token-0123456789', ['admin']]]);
    const mk = (auditPush: boolean) =>
      express().use(
        createSyncRouter({
          store,
          config: { version: 1, collections: [{ ...collection, listable: true }] },
          plugins: [plugin],
          auth: tokens,
          auditLogger: { record: (e) => entries.push(e) },
          auditPush,
        }),
      );
    const app = mk(false);
    const secret = 'very-private-distinct-id-4711';
    const p = await request(app)
      .post('/push/events/audited/x')
      .set('Content-Type', 'application/json')
      .send(batchBody(3, () => ({ event: 'e', distinct_id: secret })));
    expect(p.status).toBe(200);
    expect(entries).toHaveLength(0);
    const bearer = { Authorization: 'Bearer audit-admin-token-0123456789' };
    expect((await request(app).get('/list/events/audited').set(bearer)).status).toBe(200);
    expect((await request(app).get(`/pull/events/audited/${p.body.batchId}`).set(bearer)).status).toBe(200);
    expect((await request(app).get('/list/events/audited')).status).toBe(401);
    expect(entries.map((e) => [e.action, e.route, e.params.app, e.status])).toEqual([
      ['list', '/list/events/:app', 'audited', 200],
      ['pull', '/pull/events/:app/:batchId', 'audited', 200],
      ['list', '/list/events/:app', 'audited', 401],
    ]);
    expect(entries[0]?.identity).toMatch(/^token:[0-9a-f]{12}$/);
    expect(entries[1]?.params.batchId).toBe(p.body.batchId);
    expect(entries[2]?.identity).toBeNull();
    const withPush = mk(true);
    await request(withPush)
      .post('/push/events/audited/x')
      .set('Content-Type', 'application/json')
      .send(batchBody(1, () => ({ event: 'e', distinct_id: secret })));
    expect(entries.at(-1)).toMatchObject({
      action: 'push',
      status: 200,
      collection: 'events',
      params: { app: 'audited' },
    });
    expect(JSON.stringify(entries)).not.toContain(secret);
    expect(JSON.stringify(entries)).not.toContain('audit-admin-token');
  });
});

describe('edge: the service (CORS_ORIGINS, security headers, REQUEST_TIMEOUT_MS, audit lines)', () => {
  let s: TestStack;
  afterAll(async () => {
    await s?.shutdown();
  });

  it('CORS: preflight 204 with methods and headers for the allowed origin, none for another; answers carry Allow-Origin and expose ETag', async () => {
    s = await startTestStack({ CORS_ORIGINS: `${ORIGIN},https://other-allowed.example`, REQUEST_TIMEOUT_MS: '400' });
    const app = s.api!.app.app;
    const pre = await request(app)
      .options('/push/events/web/x')
      .set('Origin', ORIGIN)
      .set('Access-Control-Request-Method', 'POST')
      .set('Access-Control-Request-Headers', 'content-type,idempotency-key');
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(pre.headers['access-control-allow-methods']).toMatch(/POST/);
    const allowHeaders = String(pre.headers['access-control-allow-headers']).toLowerCase();
    for (const h of ['content-type', 'content-encoding', 'idempotency-key', 'authorization'])
      expect(allowHeaders).toContain(h);
    expect(pre.headers.vary).toMatch(/Origin/);

    const other = await request(app)
      .options('/push/events/web/x')
      .set('Origin', 'https://evil.example')
      .set('Access-Control-Request-Method', 'POST');
    expect(Object.keys(other.headers).filter((h) => h.startsWith('access-control-'))).toEqual([]);

    const push = await request(app)
      .post('/push/events/web/x')
      .set('Origin', ORIGIN)
      .set('Content-Type', 'application/json')
      .send(batchBody(4));
    expect(push.status).toBe(200);
    expect(push.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(push.headers['access-control-expose-headers']).toMatch(/ETag/);
    // A browser sync client can read the raw-retention mark the list route sends.
    expect(push.headers['access-control-expose-headers']).toMatch(/Raw-Deleted-Through/);
    expect(push.headers['x-content-type-options']).toBe('nosniff');
    expect(push.headers['x-powered-by']).toBeUndefined();
    const bad = await request(app)
      .post('/push/events/web/x')
      .set('Origin', ORIGIN)
      .set('Content-Type', 'text/plain')
      .send('x');
    expect(bad.status).toBe(415);
    expect(bad.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(bad.headers['cache-control']).toBe('no-store');
    const evil = await request(app)
      .post('/push/events/web/x')
      .set('Origin', 'https://evil.example')
      .set('Content-Type', 'application/json')
      .send(batchBody(1));
    expect(evil.headers['access-control-allow-origin']).toBeUndefined();

    const pulled = await waitFor(
      async () => {
        const r = await request(app).get(`/pull/events/web/${push.body.batchId}`).set(auth).set('Origin', ORIGIN);
        return r.headers.etag ? r : null;
      },
      20_000,
      'the batch file',
    );
    expect(pulled.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(pulled.headers['cache-control']).toBe('private, no-cache');
    const list = await request(app).get('/list/events/web').set(auth);
    expect(list.headers['cache-control']).toBe('no-store');
    expect(list.headers['x-content-type-options']).toBe('nosniff');
  });

  it('REQUEST_TIMEOUT_MS: a push whose body stalls gets 408 JSON and the connection is closed', async () => {
    const url = new URL(s.url);
    const answer = await new Promise<{ status: number; body: string; ms: number }>((resolve, reject) => {
      const t0 = Date.now();
      const req = http.request(
        {
          host: url.hostname,
          port: url.port,
          method: 'POST',
          path: '/push/events/slow/x',
          headers: { 'Content-Type': 'application/json', 'Content-Length': '1000' },
        },
        (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body, ms: Date.now() - t0 }));
        },
      );
      req.on('error', reject);
      req.write('{"data":{"events":[');
      setTimeout(() => reject(new Error('no answer within 10 s')), 10_000).unref();
    });
    expect(answer.status).toBe(408);
    expect(JSON.parse(answer.body).error).toMatch(/not completed within 400 ms/);
    expect(answer.ms).toBeGreaterThanOrEqual(350);
    const metrics = await request(s.api!.app.app).get('/metrics');
    expect(metrics.text).toMatch(/^ingest_request_timeouts_total\{[^}]*\} 1$/m);
  });

  it('audit lines in the service log: list and admin actions with identity, route, app and status; pushes with AUDIT_PUSH=on', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write: (chunk: Buffer, _enc, cb) => (lines.push(...chunk.toString().split('\n').filter(Boolean)), cb()),
    });
    const dataDir = mkdtempSync(join(tmpdir(), 'ingest-edge-'));
    const stack = await startStack(
      parseEnv({
        PORT: '0',
        HOST: '127.0.0.1',
        REDIS_URL: inject('redisUrl'),
        DATA_DIR: dataDir,
        ADMIN_TOKEN,
        QUEUE_NAME: uniqueName('audit'),
        LOG_LEVEL: 'info',
        AUDIT_PUSH: 'on',
      }),
      { api: true, encoder: false },
      createLogger({ level: 'info', name: 'audit-test', destination: sink }),
    );
    try {
      const app = stack.api!.app.app;
      expect((await request(app).get('/list/events/aud').set(auth)).status).toBe(200);
      expect(
        (
          await request(app)
            .post('/push/events/aud/x')
            .set('Content-Type', 'application/json')
            .send(batchBody(2, () => ({ event: 'e', distinct_id: 'do-not-log-me-9931' })))
        ).status,
      ).toBe(200);
      expect((await request(app).get('/admin/failed').set(auth)).status).toBe(200);
      expect((await request(app).get('/admin/failed')).status).toBe(401);
      const audits = await waitFor(
        async () => {
          const got = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.audit === true);
          return got.length >= 4 ? got : null;
        },
        5000,
        'four audit lines',
      );
      expect(audits.map((a) => [a.action, a.route, a.status])).toEqual([
        ['list', '/list/events/:app', 200],
        ['push', '/push/events/:app/:batchId', 200],
        ['admin', '/admin/failed', 200],
        ['admin', '/admin/failed', 401],
      ]);
      expect(audits[0]?.identity).toMatch(/^token:/);
      expect((audits[0]?.params as Record<string, string>).app).toBe('aud');
      expect(lines.join('\n')).not.toContain(ADMIN_TOKEN);
      expect(lines.join('\n')).not.toContain('do-not-log-me-9931');
    } finally {
      await stack.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

/** What a raw socket got: the bytes (latin1) and when the server closed it (ms after connecting), or null if it did not within `ms`. */
interface RawAnswer {
  text: string;
  closedAfterMs: number | null;
}

/**
 * Opens a raw connection, writes `head`, then keeps writing `trickle` every second (a slow client)
 * while the connection is open; resolves when the server closes it, when `until(text)` holds, or
 * after `ms`.
 */
function rawExchange(
  url: string,
  head: string,
  o: { ms: number; trickle?: string; until?: (text: string) => boolean },
): Promise<RawAnswer & { socket: net.Socket }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const t0 = Date.now();
    const socket = net.connect(Number(port), hostname);
    let text = '';
    let done = false;
    const finish = (closed: boolean): void => {
      if (done) return;
      done = true;
      clearInterval(ticker);
      clearTimeout(deadline);
      resolve({ text, closedAfterMs: closed ? Date.now() - t0 : null, socket });
    };
    socket.on('data', (b: Buffer) => {
      text += b.toString('latin1');
      if (o.until?.(text)) finish(false);
    });
    socket.on('close', () => finish(true));
    socket.on('error', () => undefined);
    socket.write(head);
    let ticks = 0;
    const ticker = setInterval(() => {
      if (o.trickle && !socket.destroyed && ticks++ < 120) socket.write(o.trickle);
    }, 1000);
    const deadline = setTimeout(() => finish(false), o.ms);
  });
}

describe('edge: HTTP semantics of the service', () => {
  let s: TestStack;
  const MAX_BODY = 8_000_000;
  afterAll(async () => {
    await s?.shutdown();
  });

  it('If-None-Match: * (or any validator) is answered normally everywhere but pull of an existing batch (304)', async () => {
    s = await startTestStack();
    const app = s.api!.app.app;
    const push = await request(app)
      .post('/push/events/cond/x')
      .set('Content-Type', 'application/json')
      .send(batchBody(2));
    expect(push.status).toBe(200);
    const id = push.body.batchId as string;
    await waitFor(
      async () => ((await request(app).get(`/pull/events/cond/${id}`).set(auth)).headers.etag ? true : null),
      20_000,
      'the batch file',
    );
    const star = { 'If-None-Match': '*', 'If-Modified-Since': new Date(Date.now() + 86_400_000).toUTCString() };
    const answers: [string, request.Response][] = [];
    for (const path of [
      '/list/events/cond',
      '/admin/failed',
      '/healthz',
      '/readyz',
      '/pull/events/cond/1782933157690-0000-735223',
      '/metrics',
    ]) {
      answers.push([path, await request(app).get(path).set(auth).set(star)]);
    }
    for (const [path, r] of answers) {
      expect(r.status, path).toBe(200);
      expect(r.text.length, path).toBeGreaterThan(0);
    }
    expect(answers[0]?.[1].body.items).toEqual([`${id}.parquet`]);
    expect(answers[4]?.[1].body).toMatchObject({ data: {}, hash: '' });
    const existing = await request(app).get(`/pull/events/cond/${id}`).set(auth).set('If-None-Match', '*');
    expect(existing.status).toBe(304);
  });

  it('a wrong method gets 405 JSON with Allow, an unknown path still 404', async () => {
    const app = s.api!.app.app;
    const cases: [string, string, string][] = [
      ['get', '/push/events/app/x', 'POST'],
      ['put', '/push/events/app/x', 'POST'],
      ['delete', '/pull/events/app/1782933157690-0000-735223', 'GET, HEAD'],
      ['post', '/list/events/app', 'GET, HEAD'],
      ['post', '/healthz', 'GET, HEAD'],
      ['delete', '/metrics', 'GET, HEAD'],
      ['get', '/admin/replay', 'POST'],
      ['get', '/admin/replay/1782933157690-0000-735223', 'POST'],
      ['post', '/admin/failed', 'GET, HEAD'],
    ];
    for (const [method, path, allow] of cases) {
      const r = await request(app)[method as 'get'](path).set(auth);
      expect(r.status, `${method} ${path}`).toBe(405);
      expect(r.headers.allow, `${method} ${path}`).toBe(allow);
      expect(r.body.error, `${method} ${path}`).toMatch(new RegExp(`^method ${method.toUpperCase()} not allowed on `));
    }
    expect((await request(app).get('/nope/events/app')).status).toBe(404);
    expect((await request(app).get('/push/nope/app/x')).status).toBe(404);
  });

  it('limit is parsed by one strict rule on list and admin: 1e3, 1.0, +5 -> 400', async () => {
    const app = s.api!.app.app;
    for (const bad of ['1e3', '1.0', '+5', '0x10', '0', '1001']) {
      for (const path of [
        `/admin/failed?limit=${encodeURIComponent(bad)}`,
        `/list/events/app?limit=${encodeURIComponent(bad)}`,
      ]) {
        const r = await request(app).get(path).set(auth);
        expect(r.status, path).toBe(400);
        expect(r.body.error, path).toBe('limit must be an integer from 1 to 1000');
      }
    }
    expect((await request(app).get('/admin/failed?limit=1000').set(auth)).status).toBe(200);
    expect((await request(app).get('/list/events/app?limit=1000').set(auth)).status).toBe(200);
  });

  it('Expect: 100-continue with a Content-Length over maxBodyBytes: 413 at once, no 100 Continue; within it: 100 Continue, then 200', async () => {
    const head = (length: number) =>
      `POST /push/events/expect/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;
    const over = await rawExchange(s.url, head(MAX_BODY + 1), { ms: 5000 });
    over.socket.destroy();
    expect(over.text.startsWith('HTTP/1.1 413 '), over.text.slice(0, 40)).toBe(true);
    expect(over.text).not.toContain('100 Continue');
    expect(JSON.parse(over.text.slice(over.text.indexOf('\r\n\r\n') + 4)).error).toBe(
      `body of ${MAX_BODY + 1} bytes is over this collection's limit of ${MAX_BODY} bytes`,
    );
    // The server closed the connection: the client is not expected to send the body.
    expect(over.closedAfterMs).not.toBeNull();

    const body = batchBody(1);
    const within = await rawExchange(s.url, head(Buffer.byteLength(body)), {
      ms: 5000,
      until: (t) => t.includes('\r\n\r\n'),
    });
    expect(within.text).toBe('HTTP/1.1 100 Continue\r\n\r\n');
    const answer = await new Promise<string>((resolve) => {
      let text = '';
      within.socket.on('data', (b: Buffer) => {
        text += b.toString('latin1');
        if (/\r\n\r\n\{.*\}$/s.test(text)) resolve(text);
      });
      within.socket.write(body);
      setTimeout(() => resolve(text), 5000).unref();
    });
    within.socket.destroy();
    expect(answer.startsWith('HTTP/1.1 200 '), answer.slice(0, 40)).toBe(true);
    const metrics = await request(s.api!.app.app).get('/metrics');
    expect(metrics.text).toMatch(/^ingest_push_rejections_total\{[^}]*reason="too_large"[^}]*\} 1$/m);
  });

  it('a client trickling its header block is cut off within the documented 15 s (not 30-40 s)', async () => {
    const r = await rawExchange(s.url, 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n', {
      ms: 50_000,
      trickle: 'X-Slow: a\r\n',
    });
    r.socket.destroy();
    expect(r.closedAfterMs, 'the server closed the connection').not.toBeNull();
    // 15 s (SERVER_LIMITS.headersTimeoutMs) plus the 1 s check interval and a little slack.
    expect(r.closedAfterMs).toBeLessThanOrEqual(17_500);
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(14_000);
    expect(r.text === '' || r.text.startsWith('HTTP/1.1 408')).toBe(true);
  }, 60_000);

  it("library use: a host app with Express' default ETag setting gets no empty 304 from list or a missing pull", async () => {
    const store = new MemoryObjectStore();
    const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
    const host = express();
    host.use(
      createSyncRouter({
        store,
        config: { version: 1, collections: [{ ...collection, readRoles: ['public'], listable: true }] },
        plugins: [plugin],
      }),
    );
    for (const path of ['/list/events/lib', '/pull/events/lib/1782933157690-0000-735223']) {
      const first = await request(host).get(path);
      expect(first.status, path).toBe(200);
      const again = await request(host)
        .get(path)
        .set('If-None-Match', first.headers.etag ?? '*');
      expect(again.status, path).toBe(200);
      expect(again.text, path).toBe(path.startsWith('/list') ? first.text : again.text);
      expect((await request(host).get(path).set('If-None-Match', '*')).status, path).toBe(200);
    }
  });
});
