/**
 * A path under a sync prefix that no route serves (a push without its last segment, say) answers
 * 404 JSON saying what the routes look like, for every configured collection and under BASE_PATH;
 * every error answer carries a stable code from the one list (services/api/error-map.ts).
 */
import express from 'express';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryObjectStore, createEventsServerPlugin, createSyncRouter } from 'events-ingest';
import { ERROR_CODE_LIST } from '../../services/api/error-map.js';
import { batchBody } from '../helpers/events.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

describe('unmatched sync paths, the API under BASE_PATH', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack({ BASE_PATH: '/ingest' }, { api: true, encoder: false });
  });
  afterAll(async () => {
    await stack.shutdown();
  });

  const call = async (method: string, path: string, body?: string) => {
    const r = await fetch(`${stack.url}${path}`, { method, headers: { 'content-type': 'application/json' }, body });
    return {
      status: r.status,
      type: r.headers.get('content-type'),
      body: (await r.json()) as { error?: string; code?: string },
    };
  };

  it('a push missing its last segment says what push routes look like', async () => {
    const r = await call('POST', '/ingest/push/events/myapp', batchBody(1));
    expect(r.status).toBe(404);
    expect(r.type).toMatch(/^application\/json/);
    expect(r.body).toEqual({
      error: 'no route POST /ingest/push/events/myapp; push routes look like POST /ingest/push/events/{app}/{batchId}',
      code: 'not_found',
    });
  });

  it('pull and list paths that no route serves say what theirs look like', async () => {
    expect((await call('GET', '/ingest/pull/events/myapp')).body).toEqual({
      error: 'no route GET /ingest/pull/events/myapp; pull routes look like GET /ingest/pull/events/{app}/{batchId}',
      code: 'not_found',
    });
    expect((await call('GET', '/ingest/list/events')).body).toEqual({
      error: 'no route GET /ingest/list/events; list routes look like GET /ingest/list/events/{app}',
      code: 'not_found',
    });
    expect((await call('POST', '/ingest/push')).body.error).toBe(
      'no route POST /ingest/push; push routes look like POST /ingest/push/events/{app}/{batchId}',
    );
  });

  it('the route itself still works, other paths keep the plain 404, and every error has a listed code', async () => {
    expect((await call('POST', '/ingest/push/events/myapp/x', batchBody(1))).status).toBe(200);
    expect(await call('GET', '/elsewhere')).toMatchObject({
      status: 404,
      body: { error: 'no route for GET /elsewhere', code: 'not_found' },
    });
    const bad = await call('POST', '/ingest/push/events/myapp/x', '{"data":');
    expect(bad).toMatchObject({ status: 400, body: { code: 'bad_json' } });
    const wrongMethod = await call('PUT', '/ingest/push/events/myapp/x', batchBody(1));
    expect(wrongMethod).toMatchObject({ status: 405, body: { code: 'method_not_allowed' } });
    for (const r of [bad, wrongMethod]) expect(ERROR_CODE_LIST).toContain(r.body.code);
  });
});

describe('unmatched sync paths, the library router with two collections', () => {
  const store = new MemoryObjectStore();
  const config = {
    version: 1 as const,
    collections: [
      {
        name: 'events',
        storagePath: 'events/{app}/{batchId}',
        readRoles: ['public'],
        writeRoles: ['public'],
        encryption: 'none' as const,
        allowedMimeTypes: ['application/json'],
        maxBodyBytes: 1_000_000,
        listable: true,
      },
      {
        name: 'logs',
        storagePath: 'logs/{tenant}/{stream}/{batchId}',
        readRoles: ['public'],
        writeRoles: ['public'],
        encryption: 'none' as const,
        allowedMimeTypes: ['application/json'],
        maxBodyBytes: 1_000_000,
        listable: false,
      },
    ],
  };
  const app = express();
  app.use(
    createSyncRouter({
      store,
      config,
      plugins: config.collections.map((c) =>
        createEventsServerPlugin({ store, collection: c.name, storagePath: c.storagePath }),
      ),
    }),
  );

  it('names every collection’s route, and only listable ones for list', async () => {
    const push = await request(app).post('/push/logs/acme').set('content-type', 'application/json').send(batchBody(1));
    expect(push.status).toBe(404);
    expect(push.body).toEqual({
      error:
        'no route POST /push/logs/acme; push routes look like POST /push/events/{app}/{batchId} or POST /push/logs/{tenant}/{stream}/{batchId}',
      code: 'not_found',
    });
    const list = await request(app).get('/list/logs/acme');
    expect(list.body).toEqual({
      error: 'no route GET /list/logs/acme; list routes look like GET /list/events/{app}',
      code: 'not_found',
    });
    expect(
      (await request(app).post('/push/logs/acme/web/x').set('content-type', 'application/json').send(batchBody(1)))
        .status,
    ).toBe(200);
  });

  it('leaves a path under no collection of ours to the host app’s next handler', async () => {
    const host = express();
    host.use(
      createSyncRouter({
        store,
        config,
        plugins: config.collections.map((c) =>
          createEventsServerPlugin({ store, collection: c.name, storagePath: c.storagePath }),
        ),
      }),
    );
    host.post('/push/docs/:id', (_req, res) => void res.status(201).json({ host: true }));
    const r = await request(host).post('/push/docs/d1').set('content-type', 'application/json').send('{}');
    expect(r.status).toBe(201);
    expect(r.body).toEqual({ host: true });
    // A path under one of ours is still answered with the hint, never passed on.
    expect(
      (await request(host).post('/push/events/myapp').set('content-type', 'application/json').send('{}')).body.code,
    ).toBe('not_found');
  });
});
