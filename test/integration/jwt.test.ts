import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import express from 'express';
import { SignJWT, exportJWK, exportSPKI, generateKeyPair } from 'jose';
import request from 'supertest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { uniqueName } from '../helpers/names.js';
import { MemoryObjectStore, createEventsServerPlugin, createSyncRouter } from 'events-ingest';
import { TokenRoles } from '../../services/api/auth.js';
import { createJwtRoleResolver } from '../../services/api/edge/jwt.js';
import { resolverFromEnv } from '../../services/api/edge-from-env.js';
import { startStack } from '../../services/stack.js';
import { parseEnv } from '../../shared/config.js';
import { createLogger } from '../../shared/logger.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

const ISSUER = 'https://issuer.test';
const AUDIENCE = 'events-ingest';

type Keys = Awaited<ReturnType<typeof generateKeyPair>>;

async function token(
  keys: Keys,
  claims: Record<string, unknown>,
  o: { iss?: string; aud?: string; exp?: string | number | null; sub?: string; kid?: string } = {},
): Promise<string> {
  let jwt = new SignJWT(claims)
    .setProtectedHeader({ alg: 'ES256', ...(o.kid ? { kid: o.kid } : {}) })
    .setIssuer(o.iss ?? ISSUER)
    .setAudience(o.aud ?? AUDIENCE)
    .setIssuedAt();
  // exp: null signs a token without `exp`.
  if (o.exp !== null) jwt = jwt.setExpirationTime(o.exp ?? '5m');
  if (o.sub !== '') jwt = jwt.setSubject(o.sub ?? 'analyst-1');
  return jwt.sign(keys.privateKey);
}

/** The sync router alone (memory store, admin read) with `resolver` as its auth: enough to see what auth answers. */
function routerApp(resolver: ReturnType<typeof createJwtRoleResolver>): express.Express {
  const store = new MemoryObjectStore();
  const collection = {
    name: 'events',
    storagePath: 'events/{app}/{batchId}',
    readRoles: ['admin'],
    writeRoles: ['public'],
    listable: true,
  };
  const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
  return express().use(
    createSyncRouter({
      store,
      config: { version: 1, collections: [collection] },
      plugins: [plugin],
      roleResolver: resolver,
    }),
  );
}

/** A loopback JWKS server that counts its requests; `mode` says how it answers. */
async function jwksServer(jwk: Record<string, unknown>): Promise<{
  url: string;
  hits: () => number;
  mode: { now: 'ok' | '500' | 'html' | 'not-a-jwks' | 'hang' };
  close(): Promise<void>;
}> {
  let hits = 0;
  const mode: { now: 'ok' | '500' | 'html' | 'not-a-jwks' | 'hang' } = { now: 'ok' };
  const server = http.createServer((_req, res) => {
    hits++;
    if (mode.now === 'ok')
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ keys: [jwk] }));
    else if (mode.now === '500') res.writeHead(500, { 'Content-Type': 'application/json' }).end('{"error":"boom"}');
    else if (mode.now === 'html') res.writeHead(200, { 'Content-Type': 'text/html' }).end('<html>maintenance</html>');
    else if (mode.now === 'not-a-jwks')
      res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"hello":"world"}');
    // 'hang': never answers; the resolver's timeout ends the fetch, close() ends the socket.
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`,
    hits: () => hits,
    mode,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

/** An unsigned token (`alg: none`) with otherwise valid claims. */
function unsigned(claims: Record<string, unknown>): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  return `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ ...claims, iss: ISSUER, aud: AUDIENCE, sub: 'x', iat: now, exp: now + 300 })}.`;
}

describe('JWT bearer tokens (jose), keys generated here', () => {
  let keys: Keys;
  let other: Keys;
  let s: TestStack;
  let batchId: string;
  const app = () => s.api!.app.app;

  beforeAll(async () => {
    keys = await generateKeyPair('ES256', { extractable: true });
    other = await generateKeyPair('ES256', { extractable: true });
    s = await startTestStack({
      JWT_PUBLIC_KEY: await exportSPKI(keys.publicKey),
      JWT_ISSUER: ISSUER,
      JWT_AUDIENCE: AUDIENCE,
      JWT_ROLES_CLAIM: 'realm.roles',
    });
    const r = await request(app())
      .post('/push/events/jwtapp/x')
      .set('Content-Type', 'application/json')
      .send(batchBody(5));
    expect(r.status).toBe(200);
    batchId = r.body.batchId as string;
  });
  afterAll(async () => {
    await s?.shutdown();
  });

  it('a valid token with the admin role lists and pulls', async () => {
    const t = await token(keys, { realm: { roles: ['admin'] } });
    const listed = await waitFor(
      async () => {
        const l = await request(app()).get('/list/events/jwtapp').set('Authorization', `Bearer ${t}`);
        expect(l.status).toBe(200);
        return (l.body.items as string[]).length === 1 ? (l.body.items as string[]) : null;
      },
      20_000,
      'the batch to be listed',
    );
    expect(listed).toEqual([`${batchId}.parquet`]);
    const pulled = await request(app()).get(`/pull/events/jwtapp/${batchId}`).set('Authorization', `Bearer ${t}`);
    expect(pulled.status).toBe(200);
    expect(pulled.headers['content-type']).toBe('application/vnd.apache.parquet');
    // The static token table still works beside JWTs.
    expect(
      (await request(app()).get('/list/events/jwtapp').set('Authorization', 'Bearer test-admin-token-0123456789'))
        .status,
    ).toBe(200);
  });

  it('expired, wrong issuer, wrong audience, bad signature, alg none, no sub -> 401 with a reason; no role -> 403', async () => {
    const cases: [string, string, RegExp][] = [
      [
        'expired',
        await token(keys, { realm: { roles: ['admin'] } }, { exp: Math.floor(Date.now() / 1000) - 120 }),
        /token expired/,
      ],
      ['wrong issuer', await token(keys, { realm: { roles: ['admin'] } }, { iss: 'https://evil.test' }), /claim "iss"/],
      ['wrong audience', await token(keys, { realm: { roles: ['admin'] } }, { aud: 'someone-else' }), /claim "aud"/],
      ['bad signature', await token(other, { realm: { roles: ['admin'] } }), /signature verification failed/],
      ['alg none', unsigned({ realm: { roles: ['admin'] } }), /algorithm not allowed|malformed token/],
      ['no sub', await token(keys, { realm: { roles: ['admin'] } }, { sub: '' }), /no "sub" claim/],
      [
        'numeric sub',
        await token(keys, { realm: { roles: ['admin'] }, sub: 12345 }, { sub: '' }),
        /^invalid token: "sub" claim must be a string$/,
      ],
      [
        'no exp',
        await token(keys, { realm: { roles: ['admin'] } }, { exp: null }),
        /^invalid token: token has no "exp" claim/,
      ],
    ];
    for (const [what, t, reason] of cases) {
      for (const path of ['/list/events/jwtapp', `/pull/events/jwtapp/${batchId}`]) {
        const r = await request(app()).get(path).set('Authorization', `Bearer ${t}`);
        expect(r.status, `${what} on ${path}`).toBe(401);
        expect(r.body.error, what).toMatch(reason);
        expect(r.headers['www-authenticate']).toMatch(/invalid_token/);
      }
    }
    const noRole = await token(keys, { realm: { roles: ['viewer'] } });
    const r = await request(app()).get('/list/events/jwtapp').set('Authorization', `Bearer ${noRole}`);
    expect(r.status).toBe(403);
    expect(r.body.error).toMatch(/lacks a required role/);
    const metrics = await request(app()).get('/metrics');
    expect(metrics.text).toMatch(/^ingest_auth_failures_total\{[^}]*status="401"[^}]*\} 16$/m);
  });

  it('an Authorization header that is not one bearer token gets 401 with the exact reason', async () => {
    const cases: [string, string][] = [
      ['Bearer a b', 'malformed bearer token: one token expected after "Bearer", got 2 parts'],
      ['Bearer', 'malformed bearer token: no token after "Bearer"'],
      ['Basic dXNlcjpwYXNzd29yZA==', 'Authorization scheme Basic is not supported; use Bearer'],
    ];
    for (const [header, reason] of cases) {
      const r = await request(app()).get('/list/events/jwtapp').set('Authorization', header);
      expect(r.status, header).toBe(401);
      expect(r.body.error, header).toBe(reason);
      // The header is never echoed back.
      expect(JSON.stringify(r.body)).not.toContain('dXNlcjpwYXNzd29yZA');
    }
    const none = await request(app()).get('/list/events/jwtapp');
    expect(none.status).toBe(401);
    expect(none.body.error).toBe('missing bearer token');
  });

  it('exp is required unless JWT_ALLOW_NO_EXP=on', async () => {
    const noExp = await token(keys, { roles: ['admin'] }, { exp: null });
    const env = { JWT_PUBLIC_KEY: await exportSPKI(keys.publicKey), JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE };
    const strict = routerApp(resolverFromEnv(parseEnv(env), new TokenRoles()));
    const r = await request(strict).get('/list/events/a').set('Authorization', `Bearer ${noExp}`);
    expect(r.status).toBe(401);
    expect(r.body.error).toBe('invalid token: token has no "exp" claim (tokens must expire)');
    const lenient = routerApp(resolverFromEnv(parseEnv({ ...env, JWT_ALLOW_NO_EXP: 'on' }), new TokenRoles()));
    expect((await request(lenient).get('/list/events/a').set('Authorization', `Bearer ${noExp}`)).status).toBe(200);
    // An expired token stays refused either way.
    const expired = await token(keys, { roles: ['admin'] }, { exp: Math.floor(Date.now() / 1000) - 120 });
    expect((await request(lenient).get('/list/events/a').set('Authorization', `Bearer ${expired}`)).body.error).toMatch(
      /token expired/,
    );
  });

  it('a start-up warning when JWT auth is on without JWT_ISSUER or JWT_AUDIENCE, none when both are set', async () => {
    const start = async (jwtEnv: Record<string, string>): Promise<Record<string, unknown>[]> => {
      const lines: string[] = [];
      const sink = new Writable({
        write: (chunk: Buffer, _enc, cb) => (lines.push(...chunk.toString().split('\n').filter(Boolean)), cb()),
      });
      const s2 = await startTestStackWithLogger({ JWT_PUBLIC_KEY: await exportSPKI(keys.publicKey), ...jwtEnv }, sink);
      await s2.close();
      return lines
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((l) => l.level === 40 && typeof l.msg === 'string' && l.msg.startsWith('JWT auth is on without'));
    };
    const bare = await start({});
    expect(bare).toHaveLength(1);
    expect(bare[0]?.unset).toEqual(['JWT_ISSUER', 'JWT_AUDIENCE']);
    const noAudience = await start({ JWT_ISSUER: ISSUER });
    expect(noAudience[0]?.unset).toEqual(['JWT_AUDIENCE']);
    expect(await start({ JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE })).toEqual([]);
  });

  it('JWT_JWKS_URL: keys from a JWKS endpoint (loopback), picked by kid', async () => {
    const jwk = { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
    const jwks = http.createServer((_req, res) =>
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ keys: [jwk] })),
    );
    await new Promise<void>((r) => jwks.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/jwks.json`;
    const s2 = await startTestStack(
      { JWT_JWKS_URL: url, JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE },
      { api: true, encoder: false },
    );
    try {
      const good = await token(keys, { roles: ['admin'] }, { kid: 'k1' });
      expect(
        (await request(s2.api!.app.app).get('/list/events/jwks').set('Authorization', `Bearer ${good}`)).status,
      ).toBe(200);
      const unknownKid = await token(other, { roles: ['admin'] }, { kid: 'k2' });
      const r = await request(s2.api!.app.app).get('/list/events/jwks').set('Authorization', `Bearer ${unknownKid}`);
      expect(r.status).toBe(401);
      expect(r.body.error).toMatch(/no key in the JWKS/);
    } finally {
      await s2.shutdown();
      await new Promise((r) => jwks.close(r));
    }
  });

  it('a JWKS endpoint that does not answer gives 503 + Retry-After, not a 401', async () => {
    const s3 = await startTestStack(
      { JWT_JWKS_URL: `http://127.0.0.1:${await freePort()}/jwks.json` },
      { api: true, encoder: false },
    );
    try {
      const r = await request(s3.api!.app.app)
        .get('/list/events/jwks')
        .set('Authorization', `Bearer ${await token(keys, { roles: ['admin'] }, { kid: 'k1' })}`);
      expect(r.status).toBe(503);
      expect(r.headers['retry-after']).toBe('5');
      expect(r.body.error).toMatch(/cannot fetch the JWT signing keys/);
    } finally {
      await s3.shutdown();
    }
  });

  it.each(['500', 'html', 'not-a-jwks', 'hang'] as const)(
    'JWKS answering %s: 503 + Retry-After (never 401), one fetch per cooldown, then keys again once it answers',
    async (failure) => {
      const jwk = { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
      const server = await jwksServer(jwk);
      server.mode.now = failure;
      const COOLDOWN_MS = 1500;
      try {
        const app = routerApp(
          createJwtRoleResolver({
            jwksUrl: server.url,
            issuer: ISSUER,
            audience: AUDIENCE,
            jwks: { timeoutMs: 500, failureCooldownMs: COOLDOWN_MS },
          }),
        );
        const good = await token(keys, { roles: ['admin'] }, { kid: 'k1' });
        const t0 = Date.now();
        for (let i = 0; i < 6; i++) {
          const r = await request(app).get('/list/events/a').set('Authorization', `Bearer ${good}`);
          expect(r.status, `request ${i}`).toBe(503);
          expect(r.body.error).toMatch(/^cannot fetch the JWT signing keys \(.+\); retry later$/);
          const retry = Number(r.headers['retry-after']);
          expect(retry).toBeGreaterThanOrEqual(1);
          expect(retry).toBeLessThanOrEqual(Math.ceil(COOLDOWN_MS / 1000));
        }
        // Six requests inside one cooldown (a timed-out fetch takes 500 ms of it): one fetch.
        if (Date.now() - t0 < COOLDOWN_MS) expect(server.hits()).toBe(1);
        expect(server.hits()).toBeLessThanOrEqual(2);
        server.mode.now = 'ok';
        // Once the cooldown is over the next request fetches again and gets the keys.
        await waitFor(
          async () =>
            (await request(app).get('/list/events/a').set('Authorization', `Bearer ${good}`)).status === 200
              ? true
              : null,
          10_000,
          'keys fetched again',
        );
        const hitsAfter = server.hits();
        expect(hitsAfter).toBeLessThanOrEqual(2 + Math.ceil((Date.now() - t0) / COOLDOWN_MS));
        // Held keys are not fetched again for every request.
        for (let i = 0; i < 3; i++)
          expect((await request(app).get('/list/events/a').set('Authorization', `Bearer ${good}`)).status).toBe(200);
        expect(server.hits()).toBe(hitsAfter);
      } finally {
        await server.close();
      }
    },
  );

  it('keys already held keep verifying while the JWKS server is down, without a fetch per request', async () => {
    const jwk = { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
    const server = await jwksServer(jwk);
    try {
      const app = routerApp(
        createJwtRoleResolver({
          jwksUrl: server.url,
          issuer: ISSUER,
          audience: AUDIENCE,
          jwks: { timeoutMs: 500, failureCooldownMs: 60_000 },
        }),
      );
      const good = await token(keys, { roles: ['admin'] }, { kid: 'k1' });
      expect((await request(app).get('/list/events/a').set('Authorization', `Bearer ${good}`)).status).toBe(200);
      server.mode.now = '500';
      expect((await request(app).get('/list/events/a').set('Authorization', `Bearer ${good}`)).status).toBe(200);
      expect(server.hits()).toBe(1);
    } finally {
      await server.close();
    }
  });

  it('the environment is checked at start', () => {
    expect(() => parseEnv({ JWT_ISSUER: ISSUER })).toThrow(/JWT_ISSUER.*need JWT_JWKS_URL or JWT_PUBLIC_KEY/);
    expect(() => parseEnv({ JWT_JWKS_URL: 'http://127.0.0.1:1/jwks', JWT_PUBLIC_KEY: 'x' })).toThrow(/not both/);
    expect(() => parseEnv({ JWT_ALLOW_NO_EXP: 'on' })).toThrow(
      /JWT_ALLOW_NO_EXP: needs JWT_JWKS_URL or JWT_PUBLIC_KEY/,
    );
  });
});

/** The API alone on a free port, logging to `sink` (the test reads the start-up lines). */
async function startTestStackWithLogger(
  env: Record<string, string>,
  sink: Writable,
): Promise<{ close(): Promise<void> }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-jwt-'));
  const stack = await startStack(
    parseEnv({
      PORT: '0',
      HOST: '127.0.0.1',
      REDIS_URL: inject('redisUrl'),
      DATA_DIR: dataDir,
      QUEUE_NAME: uniqueName('jwtwarn'),
      LOG_LEVEL: 'info',
      ...env,
    }),
    { api: true, encoder: false },
    createLogger({ level: 'info', name: 'jwt-test', destination: sink }),
  );
  return {
    async close() {
      await stack.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
