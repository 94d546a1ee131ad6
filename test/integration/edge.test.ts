import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import express from 'express';
import request from 'supertest';
import { afterAll, describe, expect, inject, it } from 'vitest';
// The seed's setup snippet, with our package's import names.
import { S3ObjectStore } from 'events-ingest/s3';
import { MemoryObjectStore, createEventsServerPlugin, createSyncRouter, parseEnv, parseSyncConfig } from 'events-ingest';
import type { AuditEntry } from '../../services/api/edge/audit.js';
import { cors } from '../../services/api/edge/cors.js';
import { startStack } from '../../services/stack.js';
import { createLogger } from '../../shared/logger.js';
import { createRedis } from '../../shared/redis.js';
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
    const store = new S3ObjectStore({ bucket: s3.bucket, endpoint: s3.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: S3RVER_CREDENTIALS });
    const eventsPlugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
    const syncRouter = createSyncRouter({
      store,
      config: {
        version: 1,
        rateLimit: { windowMs: 60_000, maxRequests: 100 },
        collections: [{ ...collection, rateLimit: { push: { maxRequests: 3, bucket: 'ip' }, pull: { windowMs: 60_000, maxRequests: 1000 }, list: { maxRequests: 50 } } }],
      },
      plugins: [eventsPlugin],
      cors: true,
    });
    const app = express();
    app.use(syncRouter);

    const pre = await request(app).options('/push/events/myapp/x').set('Origin', ORIGIN).set('Access-Control-Request-Method', 'POST').set('Access-Control-Request-Headers', 'content-type');
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe('*');
    const codes: number[] = [];
    let last: request.Response | undefined;
    for (let i = 0; i < 5; i++) {
      last = await request(app).post('/push/events/myapp/x').set('Origin', ORIGIN).set('Content-Type', 'application/json').send(batchBody(2));
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
    expect(() => createSyncRouter({ store, config: { version: 1, collections: [collection] }, plugins: [plugin], cors: { origin: '*', credentials: true } })).toThrow(/credentials/);
    expect(() => parseSyncConfig({ version: 1, collections: [collection], namespaces: { team: { collections: [collection] } } })).toThrow(/namespaces are not supported/);
    expect(() => parseSyncConfig({ version: 1, collections: [{ ...collection, rateLimit: { push: { maxRequests: 1, windowMs: 1000, bucket: 'ip', identity: { maxRequests: 2 } } } }] })).toThrow(
      /collections\.0\.rateLimit\.push.*cannot set both "bucket"/,
    );
    expect(() => parseSyncConfig({ version: 1, collections: [{ ...collection, rateLimit: { list: { maxRequests: 5 } } }] })).toThrow(/rateLimit\.list: must resolve both windowMs and maxRequests/);
    expect(() => parseSyncConfig({ version: 1, collections: [{ ...collection, rateLimit: { push: { bucket: 'device' } } }] })).toThrow(/rateLimit\.push\.bucket/);
    expect(() => parseEnv({ CORS_ORIGINS: '*,https://a.example' })).toThrow(/CORS_ORIGINS: is either \*/);
    expect(() => parseEnv({ CORS_ORIGINS: 'a.example' })).toThrow(/CORS_ORIGINS/);
    expect(() => parseEnv({ TRUSTED_PROXY_HOPS: '-1' })).toThrow(/TRUSTED_PROXY_HOPS/);
    // A Starfish config using every rate-limit form (and fields we ignore) is accepted.
    const cfg = parseSyncConfig({
      version: 1,
      rateLimit: { windowMs: 60_000, maxRequests: 100 },
      collections: [{ ...collection, cacheDurationMs: 0, rateLimit: { windowMs: 1000, maxRequests: 10, bucket: 'identity+ip', pull: { identity: { maxRequests: 5 }, ip: { maxRequests: 50 } }, appEvents: { maxEvents: 1000 } } }],
    });
    expect(cfg.collections[0]?.rateLimit?.appEvents).toEqual({ windowMs: 1000, maxEvents: 1000 });
  });

  it('rate limiter with Redis unreachable: reads fail open, push follows rateLimitPushOnError', async () => {
    const deadPort = await freePort();
    const dead = createRedis(`redis://127.0.0.1:${deadPort}`, 'producer');
    cleanups.push(() => dead.disconnect());
    const store = new MemoryObjectStore();
    const config = { version: 1 as const, collections: [{ ...collection, readRoles: ['public'], listable: true, rateLimit: { windowMs: 1000, maxRequests: 5, pull: {}, list: {} } }] };
    const build = (pushOnError: 'open' | 'closed') => {
      const failures: string[] = [];
      const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
      const app = express().use(
        createSyncRouter({ store, config, plugins: [plugin], rateLimitStore: dead, rateLimitPushOnError: pushOnError, observer: { rateLimitStoreFailed: (a, o) => failures.push(`${a}:${o}`) } }),
      );
      return { app, failures };
    };
    const closed = build('closed');
    const p = await request(closed.app).post('/push/events/down/x').set('Content-Type', 'application/json').send(batchBody(1));
    expect(p.status).toBe(503);
    expect(p.headers['retry-after']).toBe('1');
    expect(p.body.error).toMatch(/rate limiter unavailable/);
    expect((await request(closed.app).get('/list/events/down')).status).toBe(200);
    expect((await request(closed.app).get('/pull/events/down/1782933157690-0000-735223')).status).toBe(200);
    expect(closed.failures).toEqual(['push:closed', 'list:open', 'pull:open']);
    const open = build('open');
    expect((await request(open.app).post('/push/events/down/x').set('Content-Type', 'application/json').send(batchBody(1))).status).toBe(200);
    expect(open.failures).toEqual(['push:open']);
  });

  it('audit: one entry per list and pull with identity, route, app and status, pushes only with auditPush, never event contents', async () => {
    const store = new MemoryObjectStore();
    const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
    const entries: AuditEntry[] = [];
    const tokens = new Map([['audit-admin-token-0123456789', ['admin']]]);
    const mk = (auditPush: boolean) =>
      express().use(createSyncRouter({ store, config: { version: 1, collections: [{ ...collection, listable: true }] }, plugins: [plugin], auth: tokens, auditLogger: { record: (e) => entries.push(e) }, auditPush }));
    const app = mk(false);
    const secret = 'very-private-distinct-id-4711';
    const p = await request(app).post('/push/events/audited/x').set('Content-Type', 'application/json').send(batchBody(3, () => ({ event: 'e', distinct_id: secret })));
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
    await request(withPush).post('/push/events/audited/x').set('Content-Type', 'application/json').send(batchBody(1, () => ({ event: 'e', distinct_id: secret })));
    expect(entries.at(-1)).toMatchObject({ action: 'push', status: 200, collection: 'events', params: { app: 'audited' } });
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
    const pre = await request(app).options('/push/events/web/x').set('Origin', ORIGIN).set('Access-Control-Request-Method', 'POST').set('Access-Control-Request-Headers', 'content-type,idempotency-key');
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(pre.headers['access-control-allow-methods']).toMatch(/POST/);
    const allowHeaders = String(pre.headers['access-control-allow-headers']).toLowerCase();
    for (const h of ['content-type', 'content-encoding', 'idempotency-key', 'authorization']) expect(allowHeaders).toContain(h);
    expect(pre.headers.vary).toMatch(/Origin/);

    const other = await request(app).options('/push/events/web/x').set('Origin', 'https://evil.example').set('Access-Control-Request-Method', 'POST');
    expect(Object.keys(other.headers).filter((h) => h.startsWith('access-control-'))).toEqual([]);

    const push = await request(app).post('/push/events/web/x').set('Origin', ORIGIN).set('Content-Type', 'application/json').send(batchBody(4));
    expect(push.status).toBe(200);
    expect(push.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(push.headers['access-control-expose-headers']).toMatch(/ETag/);
    // A browser sync client can read the raw-retention mark the list route sends.
    expect(push.headers['access-control-expose-headers']).toMatch(/Raw-Deleted-Through/);
    expect(push.headers['x-content-type-options']).toBe('nosniff');
    expect(push.headers['x-powered-by']).toBeUndefined();
    const bad = await request(app).post('/push/events/web/x').set('Origin', ORIGIN).set('Content-Type', 'text/plain').send('x');
    expect(bad.status).toBe(415);
    expect(bad.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(bad.headers['cache-control']).toBe('no-store');
    const evil = await request(app).post('/push/events/web/x').set('Origin', 'https://evil.example').set('Content-Type', 'application/json').send(batchBody(1));
    expect(evil.headers['access-control-allow-origin']).toBeUndefined();

    const pulled = await waitFor(async () => {
      const r = await request(app).get(`/pull/events/web/${push.body.batchId}`).set(auth).set('Origin', ORIGIN);
      return r.headers.etag ? r : null;
    }, 20_000, 'the batch file');
    expect(pulled.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(pulled.headers['cache-control']).toMatch(/immutable/);
    const list = await request(app).get('/list/events/web').set(auth);
    expect(list.headers['cache-control']).toBe('no-store');
    expect(list.headers['x-content-type-options']).toBe('nosniff');
  });

  it('REQUEST_TIMEOUT_MS: a push whose body stalls gets 408 JSON and the connection is closed', async () => {
    const url = new URL(s.url);
    const answer = await new Promise<{ status: number; body: string; ms: number }>((resolve, reject) => {
      const t0 = Date.now();
      const req = http.request({ host: url.hostname, port: url.port, method: 'POST', path: '/push/events/slow/x', headers: { 'Content-Type': 'application/json', 'Content-Length': '1000' } }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, ms: Date.now() - t0 }));
      });
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
    const sink = new Writable({ write: (chunk: Buffer, _enc, cb) => (lines.push(...chunk.toString().split('\n').filter(Boolean)), cb()) });
    const dataDir = mkdtempSync(join(tmpdir(), 'ingest-edge-'));
    const stack = await startStack(
      parseEnv({ PORT: '0', HOST: '127.0.0.1', REDIS_URL: inject('redisUrl'), DATA_DIR: dataDir, ADMIN_TOKEN, QUEUE_NAME: uniqueName('audit'), LOG_LEVEL: 'info', AUDIT_PUSH: 'on' }),
      { api: true, encoder: false },
      createLogger({ level: 'info', name: 'audit-test', destination: sink }),
    );
    try {
      const app = stack.api!.app.app;
      expect((await request(app).get('/list/events/aud').set(auth)).status).toBe(200);
      expect((await request(app).post('/push/events/aud/x').set('Content-Type', 'application/json').send(batchBody(2, () => ({ event: 'e', distinct_id: 'do-not-log-me-9931' })))).status).toBe(200);
      expect((await request(app).get('/admin/failed').set(auth)).status).toBe(200);
      expect((await request(app).get('/admin/failed')).status).toBe(401);
      const audits = await waitFor(async () => {
        const got = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.audit === true);
        return got.length >= 4 ? got : null;
      }, 5000, 'four audit lines');
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
