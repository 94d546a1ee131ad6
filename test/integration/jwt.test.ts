import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { SignJWT, exportJWK, exportSPKI, generateKeyPair } from 'jose';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEnv } from '../../shared/config.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

const ISSUER = 'https://issuer.test';
const AUDIENCE = 'events-ingest';

type Keys = Awaited<ReturnType<typeof generateKeyPair>>;

async function token(keys: Keys, claims: Record<string, unknown>, o: { iss?: string; aud?: string; exp?: string | number; sub?: string; kid?: string } = {}): Promise<string> {
  let jwt = new SignJWT(claims)
    .setProtectedHeader({ alg: 'ES256', ...(o.kid ? { kid: o.kid } : {}) })
    .setIssuer(o.iss ?? ISSUER)
    .setAudience(o.aud ?? AUDIENCE)
    .setIssuedAt()
    .setExpirationTime(o.exp ?? '5m');
  if (o.sub !== '') jwt = jwt.setSubject(o.sub ?? 'analyst-1');
  return jwt.sign(keys.privateKey);
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
    s = await startTestStack({ JWT_PUBLIC_KEY: await exportSPKI(keys.publicKey), JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE, JWT_ROLES_CLAIM: 'realm.roles' });
    const r = await request(app()).post('/push/events/jwtapp/x').set('Content-Type', 'application/json').send(batchBody(5));
    expect(r.status).toBe(200);
    batchId = r.body.batchId as string;
  });
  afterAll(async () => {
    await s?.shutdown();
  });

  it('a valid token with the admin role lists and pulls', async () => {
    const t = await token(keys, { realm: { roles: ['admin'] } });
    const listed = await waitFor(async () => {
      const l = await request(app()).get('/list/events/jwtapp').set('Authorization', `Bearer ${t}`);
      expect(l.status).toBe(200);
      return (l.body.items as string[]).length === 1 ? (l.body.items as string[]) : null;
    }, 20_000, 'the batch to be listed');
    expect(listed).toEqual([`${batchId}.parquet`]);
    const pulled = await request(app()).get(`/pull/events/jwtapp/${batchId}`).set('Authorization', `Bearer ${t}`);
    expect(pulled.status).toBe(200);
    expect(pulled.headers['content-type']).toBe('application/vnd.apache.parquet');
    // The static token table still works beside JWTs.
    expect((await request(app()).get('/list/events/jwtapp').set('Authorization', 'Bearer test-admin-token-0123456789')).status).toBe(200);
  });

  it('expired, wrong issuer, wrong audience, bad signature, alg none, no sub -> 401 with a reason; no role -> 403', async () => {
    const cases: [string, string, RegExp][] = [
      ['expired', await token(keys, { realm: { roles: ['admin'] } }, { exp: Math.floor(Date.now() / 1000) - 120 }), /token expired/],
      ['wrong issuer', await token(keys, { realm: { roles: ['admin'] } }, { iss: 'https://evil.test' }), /claim "iss"/],
      ['wrong audience', await token(keys, { realm: { roles: ['admin'] } }, { aud: 'someone-else' }), /claim "aud"/],
      ['bad signature', await token(other, { realm: { roles: ['admin'] } }), /signature verification failed/],
      ['alg none', unsigned({ realm: { roles: ['admin'] } }), /algorithm not allowed|malformed token/],
      ['no sub', await token(keys, { realm: { roles: ['admin'] } }, { sub: '' }), /no "sub" claim/],
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
    expect(metrics.text).toMatch(/^ingest_auth_failures_total\{[^}]*status="401"[^}]*\} 12$/m);
  });

  it('JWT_JWKS_URL: keys from a JWKS endpoint (loopback), picked by kid', async () => {
    const jwk = { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
    const jwks = http.createServer((_req, res) => res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ keys: [jwk] })));
    await new Promise<void>((r) => jwks.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/jwks.json`;
    const s2 = await startTestStack({ JWT_JWKS_URL: url, JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE }, { api: true, encoder: false });
    try {
      const good = await token(keys, { roles: ['admin'] }, { kid: 'k1' });
      expect((await request(s2.api!.app.app).get('/list/events/jwks').set('Authorization', `Bearer ${good}`)).status).toBe(200);
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
    const s3 = await startTestStack({ JWT_JWKS_URL: `http://127.0.0.1:${await freePort()}/jwks.json` }, { api: true, encoder: false });
    try {
      const r = await request(s3.api!.app.app).get('/list/events/jwks').set('Authorization', `Bearer ${await token(keys, { roles: ['admin'] }, { kid: 'k1' })}`);
      expect(r.status).toBe(503);
      expect(r.headers['retry-after']).toBe('5');
      expect(r.body.error).toMatch(/cannot fetch the JWT signing keys/);
    } finally {
      await s3.shutdown();
    }
  });

  it('the environment is checked at start', () => {
    expect(() => parseEnv({ JWT_ISSUER: ISSUER })).toThrow(/JWT_ISSUER.*need JWT_JWKS_URL or JWT_PUBLIC_KEY/);
    expect(() => parseEnv({ JWT_JWKS_URL: 'http://127.0.0.1:1/jwks', JWT_PUBLIC_KEY: 'x' })).toThrow(/not both/);
  });
});
