/**
 * `GET /config` (the Starfish collection manifest) and `GET /health`: the router option in
 * process (supertest), and the service under BASE_PATH over a real port with the published
 * client's fetchServerConfig.
 */
import express from 'express';
import request from 'supertest';
import { fetchServerConfig } from '@drakkar.software/starfish-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryObjectStore, createEventsServerPlugin, createSyncRouter } from 'events-ingest';
import type { SyncRouterOptions } from '../../services/api/router.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

const COLLECTIONS = [
  {
    name: 'events',
    storagePath: 'events/{app}/{batchId}',
    readRoles: ['admin'],
    writeRoles: ['public'],
    listable: true,
  },
  {
    name: 'audit',
    storagePath: 'audit/{app}/{batchId}',
    readRoles: ['auditor'],
    writeRoles: ['writer'],
    maxBodyBytes: 1000,
    listable: true,
  },
];

function routerApp(extra: Partial<SyncRouterOptions>): express.Express {
  const store = new MemoryObjectStore();
  const plugins = COLLECTIONS.map((c) =>
    createEventsServerPlugin({ store, collection: c.name, storagePath: c.storagePath }),
  );
  const auth = new Map([
    ['auditor-token-0123456789', ['auditor']],
    [ADMIN_TOKEN, ['admin']],
  ]);
  return express().use(
    createSyncRouter({
      store,
      config: { version: 1, collections: COLLECTIONS, rateLimit: { windowMs: 1000, maxRequests: 5 } },
      plugins,
      auth,
      ...extra,
    }),
  );
}

describe('GET /config from the router', () => {
  it('is off unless configEndpoint is set, as in the reference', async () => {
    expect((await request(routerApp({})).get('/config')).status).toBe(404);
  });

  it('public: every collection in the protocol shape, no roles or limits, cacheable with an ETag and 304', async () => {
    const app = routerApp({ configEndpoint: { auth: 'public' } });
    const r = await request(app).get('/config');
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(r.body).toEqual({
      collections: [
        {
          name: 'events',
          maxBodyBytes: 8_000_000,
          encryption: 'none',
          allowedMimeTypes: ['application/json'],
          maxEventsPerBatch: 100_000,
        },
        {
          name: 'audit',
          maxBodyBytes: 1000,
          encryption: 'none',
          allowedMimeTypes: ['application/json'],
          maxEventsPerBatch: 100_000,
        },
      ],
    });
    // No secrets, no roles, no rate-limit internals, no storage layout.
    expect(r.text).not.toMatch(/Roles|rateLimit|storagePath|maxRequests|auditor|admin/);
    expect(r.headers['cache-control']).toBe('public, max-age=60');
    const etag = r.headers.etag as string;
    expect(etag).toMatch(/^"[A-Za-z0-9_-]+"$/);
    const again = await request(app).get('/config').set('If-None-Match', etag);
    expect(again.status).toBe(304);
    expect(again.text).toBe('');
    expect((await request(app).get('/config').set('If-None-Match', `W/${etag}`)).status).toBe(304);
    expect((await request(app).get('/config').set('If-None-Match', '*')).status).toBe(304);
    expect((await request(app).get('/config').set('If-None-Match', '"other"')).status).toBe(200);
    const post = await request(app).post('/config');
    expect(post.status).toBe(405);
    expect(post.headers.allow).toMatch(/GET/);
  });

  it('role-filtered: only the collections whose read or write roles the caller has; bad credentials get 401', async () => {
    const app = routerApp({ configEndpoint: { auth: 'role-filtered' } });
    const anonymous = await request(app).get('/config');
    expect(anonymous.status).toBe(200);
    expect((anonymous.body as { collections: { name: string }[] }).collections.map((c) => c.name)).toEqual(['events']);
    expect(anonymous.headers['cache-control']).toBe('private, max-age=60');
    expect(anonymous.headers.vary).toBe('Authorization');
    const auditor = await request(app).get('/config').set('Authorization', 'Bearer auditor-token-0123456789');
    expect((auditor.body as { collections: { name: string }[] }).collections.map((c) => c.name)).toEqual([
      'events',
      'audit',
    ]);
    expect(auditor.headers.etag).not.toBe(anonymous.headers.etag);
    const bad = await request(app).get('/config').set('Authorization', 'Bearer not-a-known-token-at-all');
    expect(bad.status).toBe(401);
    expect(bad.body).toEqual({ error: 'invalid credentials: unknown token', code: 'unauthorized' });
  });

  it('with cors on, /config answers browsers too, and preflights allow the X-Starfish-* signing headers', async () => {
    const app = routerApp({ configEndpoint: { auth: 'public' }, cors: true });
    const r = await request(app).get('/config').set('Origin', 'https://app.example.com');
    expect(r.headers['access-control-allow-origin']).toBe('*');
    const pre = await request(app)
      .options('/list/events/web')
      .set('Origin', 'https://app.example.com')
      .set('Access-Control-Request-Method', 'GET')
      .set('Access-Control-Request-Headers', 'authorization,x-starfish-sig,x-starfish-ts,x-starfish-nonce');
    expect(pre.status).toBe(204);
    const allowed = String(pre.headers['access-control-allow-headers']).toLowerCase();
    for (const h of ['authorization', 'x-starfish-sig', 'x-starfish-ts', 'x-starfish-nonce'])
      expect(allowed).toContain(h);
  });
});

describe('GET /config and /health of the service under BASE_PATH', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack({ BASE_PATH: '/ingest', ROLLUP: 'off' }, { api: true, encoder: false });
  });
  afterAll(async () => {
    await stack?.shutdown();
  });

  it('fetchServerConfig reads the manifest at <baseUrl>/config; /health answers like /healthz', async () => {
    const config = await fetchServerConfig(`${stack.url}/ingest`);
    expect(config.collections.map((c) => c.name)).toEqual(['events']);
    expect(config.collections[0]).toMatchObject({
      maxBodyBytes: 8_000_000,
      encryption: 'none',
      allowedMimeTypes: ['application/json'],
    });
    expect((await fetch(`${stack.url}/config`)).status).toBe(404);
    const first = await fetch(`${stack.url}/ingest/config`);
    const etag = first.headers.get('etag') ?? '';
    expect(etag).not.toBe('');
    expect((await fetch(`${stack.url}/ingest/config`, { headers: { 'If-None-Match': etag } })).status).toBe(304);
    for (const path of ['/health', '/ingest/health', '/healthz']) {
      const r = await fetch(`${stack.url}${path}`);
      expect(r.status, path).toBe(200);
      expect(await r.json(), path).toEqual({ ok: true });
    }
    for (const path of ['/health', '/ingest/health', '/ingest/config'])
      expect((await fetch(`${stack.url}${path}`, { method: 'POST' })).status, path).toBe(405);
  });
});
