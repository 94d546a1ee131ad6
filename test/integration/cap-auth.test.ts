/**
 * The cap-cert nonce store on a real Redis: one `SET NX PX` key per signed request, named
 * `<prefix>:<digest>`, living 2 × the skew window; a Redis that cannot answer is a 503, not a 401.
 */
import express, { type Request } from 'express';
import request from 'supertest';
import { MemoryObjectStore, createEventsServerPlugin, createSyncRouter } from 'events-ingest';
import type { AuditEntry } from '../../services/api/edge/audit.js';
import { Redis } from 'ioredis';
import { ed25519Suite, signRequest } from '@drakkar.software/starfish-protocol';
import { mintDeviceCap, scopes } from '@drakkar.software/starfish-identities';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ApiError } from '../../services/api/error-map.js';
import { CAP_MAX_SKEW_MS, RedisNonceStore, createCapRoleResolver } from '../../services/api/edge/cap-auth.js';
import { uniqueName } from '../helpers/names.js';
import { freePort } from '../helpers/redis-server.js';

describe('RedisNonceStore', () => {
  let redis: Redis;
  const prefix = `ingest-cap:${uniqueName('q')}:n`;
  beforeAll(() => {
    redis = new Redis(inject('redisUrl'));
  });
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });

  it('claims each (signer, nonce) once, under one short key that expires after 2 × the skew window', async () => {
    const store = new RedisNonceStore(redis, prefix);
    const signer = 'a'.repeat(64);
    const nonce = Buffer.alloc(16, 7).toString('base64');
    expect(await store.claim(signer, nonce, 2 * CAP_MAX_SKEW_MS)).toBe(true);
    expect(await store.claim(signer, nonce, 2 * CAP_MAX_SKEW_MS)).toBe(false);
    expect(await store.claim('b'.repeat(64), nonce, 2 * CAP_MAX_SKEW_MS)).toBe(true);
    const key = store.key(signer, nonce);
    expect(key).toMatch(new RegExp(`^${prefix}:[A-Za-z0-9_-]{22}$`));
    const ttl = await redis.pttl(key);
    expect(ttl).toBeGreaterThan(2 * CAP_MAX_SKEW_MS - 5000);
    expect(ttl).toBeLessThanOrEqual(2 * CAP_MAX_SKEW_MS);
    // The figure in docs/reliability.md's sizing table: 104 bytes on Redis 7.0 with the default queue name.
    const sized = new RedisNonceStore(redis, 'ingest-cap:events-ingest:n');
    const own = `${uniqueName('signer')}`;
    expect(await sized.claim(own, nonce, 2 * CAP_MAX_SKEW_MS)).toBe(true);
    const bytes = Number(await redis.call('MEMORY', 'USAGE', sized.key(own, nonce)));
    await redis.del(sized.key(own, nonce));
    expect(bytes).toBeGreaterThan(48);
    expect(bytes).toBeLessThanOrEqual(112);
  });

  it('a Redis that does not answer fails the signed request with 503 + Retry-After, never lets it through', async () => {
    const port = await freePort();
    const down = new Redis(port, '127.0.0.1', {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      lazyConnect: true,
      retryStrategy: () => null,
    });
    down.on('error', () => undefined);
    const ed = ed25519Suite.generateSignerKeypair();
    const cap = await mintDeviceCap(
      ed.privHex,
      ed.pubHex,
      { edPubHex: ed.pubHex, kemPubHex: ed25519Suite.generateKemKeypair().pubHex },
      scopes.rootAll(),
    );
    const { sig, ts, nonce } = await signRequest(
      { method: 'GET', pathAndQuery: '/list/events/a', host: 'h' },
      ed.privHex,
    );
    const req = {
      method: 'GET',
      url: '/list/events/a',
      path: '/list/events/a',
      headers: {
        host: 'h',
        authorization: `Cap ${Buffer.from(JSON.stringify(cap)).toString('base64')}`,
        'x-starfish-sig': sig,
        'x-starfish-ts': String(ts),
        'x-starfish-nonce': nonce,
      },
    } as unknown as Request;
    const resolver = createCapRoleResolver({ nonceStore: new RedisNonceStore(down, 'ingest-cap:x:n') });
    const err = await resolver(req).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).code).toBe('unavailable');
    expect((err as ApiError).status).toBe(503);
    expect((err as ApiError).headers['Retry-After']).toBe('1');
    down.disconnect();
  });
});

describe('router option capAuth (library use), with the nonces in Redis', () => {
  let redis: Redis;
  const prefix = `ingest-cap:${uniqueName('lib')}:n`;
  beforeAll(() => {
    redis = new Redis(inject('redisUrl'));
  });
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });

  it('a signed read resolves to cap:<userId> in the audit line; a signed push to a route that needs a role is 401; Bearer still works', async () => {
    const ed = ed25519Suite.generateSignerKeypair();
    const userId = (await import('@drakkar.software/starfish-protocol')).userIdFromPubHex(ed.pubHex);
    const cap = await mintDeviceCap(
      ed.privHex,
      ed.pubHex,
      { edPubHex: ed.pubHex, kemPubHex: ed25519Suite.generateKemKeypair().pubHex },
      scopes.rootAll(),
    );
    const store = new MemoryObjectStore();
    const collections = [
      {
        name: 'events',
        storagePath: 'events/{app}/{batchId}',
        readRoles: ['admin'],
        writeRoles: ['writer'],
        listable: true,
      },
    ];
    const entries: AuditEntry[] = [];
    const app = express().use(
      createSyncRouter({
        store,
        config: { version: 1, collections },
        plugins: [createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' })],
        auth: new Map([['a-bearer-token-0123456789', ['admin']]]),
        capAuth: { nonceStore: redis, nonceKeyPrefix: prefix, identityRoles: new Map([[userId, ['admin']]]) },
        auditLogger: { record: (e) => entries.push(e) },
      }),
    );
    const capHeader = `Cap ${Buffer.from(JSON.stringify(cap)).toString('base64')}`;
    const sign = async (method: 'GET' | 'POST', path: string, body?: string) => {
      const { sig, ts, nonce } = await signRequest(
        { method, pathAndQuery: path, host: 'ingest.test', body },
        ed.privHex,
      );
      return {
        Host: 'ingest.test',
        Authorization: capHeader,
        'X-Starfish-Sig': sig,
        'X-Starfish-Ts': String(ts),
        'X-Starfish-Nonce': nonce,
      };
    };
    const listed = await request(app)
      .get('/list/events/lib')
      .set(await sign('GET', '/list/events/lib'));
    expect(listed.status).toBe(200);
    expect(entries.at(-1)).toMatchObject({ action: 'list', identity: `cap:${userId}`, status: 200 });
    expect(JSON.stringify(entries)).not.toContain(cap.sig);
    expect((await redis.keys(`${prefix}:*`)).length).toBe(1);

    const body = JSON.stringify({ data: { events: [{ event: 'e' }] }, baseHash: null });
    const pushed = await request(app)
      .post('/push/events/lib/x')
      .set(await sign('POST', '/push/events/lib/x', body))
      .set('Content-Type', 'application/json')
      .send(body);
    expect(pushed.status).toBe(401);
    expect(pushed.body.error).toMatch(/cap-signed POST requests are not supported/);
    expect(
      (await request(app).get('/list/events/lib').set('Authorization', 'Bearer a-bearer-token-0123456789')).status,
    ).toBe(200);
  });
});
