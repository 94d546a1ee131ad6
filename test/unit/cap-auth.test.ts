import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Request } from 'express';
import {
  buildRevocationList,
  ed25519Suite,
  signCapCert,
  signRequest,
  userIdFromPubHex,
} from '@drakkar.software/starfish-protocol';
import { mintDeviceCap, scopes } from '@drakkar.software/starfish-identities';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthError } from '../../services/api/auth.js';
import { MemoryNonceStore, capOrElse, createCapRoleResolver, scopeRoles } from '../../services/api/edge/cap-auth.js';
import { ConfigError, loadCapRoles, loadTokens, parseEnv } from '../../shared/config.js';

const HOST = 'ingest.test:8787';
const COLLECTIONS = [{ name: 'events', storagePath: 'events/{app}/{batchId}' }];

interface Identity {
  priv: string;
  pub: string;
  kemPub: string;
  userId: string;
}

function identity(): Identity {
  const ed = ed25519Suite.generateSignerKeypair();
  return {
    priv: ed.privHex,
    pub: ed.pubHex,
    kemPub: ed25519Suite.generateKemKeypair().pubHex,
    userId: userIdFromPubHex(ed.pubHex),
  };
}

type Scope = Parameters<typeof mintDeviceCap>[3];
const mint = (who: Identity, scope: Scope = scopes.rootAll(), o: { nbf?: number; ttlSec?: number } = {}) =>
  mintDeviceCap(who.priv, who.pub, { edPubHex: who.pub, kemPubHex: who.kemPub }, scope, o);

/** A signed request as the published client sends it (Authorization: Cap + X-Starfish-*), as Express would hand it over. */
async function signed(
  who: Identity,
  cap: unknown,
  url: string,
  o: { method?: string; host?: string } = {},
): Promise<Request> {
  const { sig, ts, nonce } = await signRequest({ method: 'GET', pathAndQuery: url, host: HOST }, who.priv);
  const headers: Record<string, string> = {
    host: o.host ?? HOST,
    authorization: `Cap ${Buffer.from(JSON.stringify(cap)).toString('base64')}`,
    'x-starfish-sig': sig,
    'x-starfish-ts': String(ts),
    'x-starfish-nonce': nonce,
  };
  return { method: o.method ?? 'GET', url, path: url.split('?')[0], headers } as unknown as Request;
}

async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(AuthError);
    return (err as Error).message;
  }
  throw new Error('not refused');
}

describe('scopeRoles', () => {
  it('gives cap:<op>:<collection> per scope entry; "*" gives the literal cap:<op>:* and every served collection', () => {
    expect(scopeRoles({ scope: { ops: ['read'], collections: ['events'] } }, ['events', 'audit'])).toEqual([
      'cap:read:events',
    ]);
    expect(scopeRoles({ scope: { ops: ['read', 'list'], collections: ['*'] } }, ['events', 'audit']).sort()).toEqual(
      ['cap:list:*', 'cap:list:audit', 'cap:list:events', 'cap:read:*', 'cap:read:audit', 'cap:read:events'].sort(),
    );
  });
});

describe('cap-cert role resolver', () => {
  let admin: Identity;
  let stranger: Identity;
  let rootCap: Awaited<ReturnType<typeof mint>>;
  beforeAll(async () => {
    admin = identity();
    stranger = identity();
    rootCap = await mint(admin);
  });
  const resolver = (extra: Partial<Parameters<typeof createCapRoleResolver>[0]> = {}) =>
    createCapRoleResolver({
      nonceStore: new MemoryNonceStore(),
      identityRoles: new Map([[admin.userId, ['admin']]]),
      collections: COLLECTIONS,
      ...extra,
    });

  it('names the identity by its user id (never the cert), with scope roles and the listed identity roles; a replay is refused', async () => {
    const r = resolver();
    const req = await signed(admin, rootCap, '/pull/events/app1/1782933157690-0000-735223');
    const who = await r(req);
    expect(who).not.toBeNull();
    expect(who?.identity).toBe(`cap:${admin.userId}`);
    expect(who?.roles).toEqual(expect.arrayContaining(['cap:read:*', 'cap:read:events', 'cap:write:events', 'admin']));
    expect(await refusal(r(req))).toBe('nonce replay: this signed request was already used');
  });

  it('grants listed roles only when the scope covers the route: read for pull, list for list, the collection, scope.paths', async () => {
    const r = resolver();
    const listOnly = await mint(admin, { ops: ['list'], collections: ['events'] });
    expect((await r(await signed(admin, listOnly, '/pull/events/app1/x')))?.roles).toEqual(['cap:list:events']);
    expect((await r(await signed(admin, listOnly, '/list/events/app1?after=x')))?.roles).toEqual([
      'cap:list:events',
      'admin',
    ]);
    const otherCollection = await mint(admin, { ops: ['read', 'list'], collections: ['audit'] });
    expect((await r(await signed(admin, otherCollection, '/list/events/app1')))?.roles).not.toContain('admin');
    const oneApp = await mint(admin, { ops: ['read', 'list'], collections: ['events'], paths: ['events/app2/**'] });
    expect((await r(await signed(admin, oneApp, '/pull/events/app1/x')))?.roles).toEqual([]);
    expect((await r(await signed(admin, oneApp, '/pull/events/app2/x')))?.roles).toContain('admin');
    // Not a sync route (the admin API): only a full-scope cap carries admin there.
    expect((await r(await signed(admin, rootCap, '/admin/failed')))?.roles).toContain('admin');
    expect((await r(await signed(admin, listOnly, '/admin/failed')))?.roles).not.toContain('admin');
    // An identity nobody listed: authenticated, no admin.
    const theirs = await mint(stranger);
    expect((await r(await signed(stranger, theirs, '/pull/events/app1/x')))?.roles).not.toContain('admin');
  });

  it('refuses with a reason: expired cap, wrong host, wrong path, oversized or malformed header, missing signature headers, a write, skew', async () => {
    const r = resolver();
    const now = Math.floor(Date.now() / 1000);
    expect(
      await refusal(
        r(await signed(admin, await mint(admin, scopes.rootAll(), { nbf: now - 7200, ttlSec: 600 }), '/list/events/a')),
      ),
    ).toBe('cap-cert expired');
    expect(await refusal(r(await signed(admin, rootCap, '/list/events/a', { host: 'other.test' })))).toMatch(
      /^bad request signature/,
    );
    const moved = await signed(admin, rootCap, '/list/events/a');
    Object.assign(moved, { url: '/list/events/b', path: '/list/events/b' });
    expect(await refusal(r(moved))).toMatch(/^bad request signature/);
    const forged = await signed(stranger, rootCap, '/list/events/a');
    expect(await refusal(r(forged))).toMatch(/^bad request signature/);
    const big = await signed(admin, rootCap, '/list/events/a');
    big.headers.authorization = `Cap ${'A'.repeat(9000)}`;
    expect(await refusal(r(big))).toBe('Cap header is 9004 bytes; at most 8192');
    const junk = await signed(admin, rootCap, '/list/events/a');
    junk.headers.authorization = 'Cap bm90IGpzb24=';
    expect(await refusal(r(junk))).toMatch(/^malformed cap-cert/);
    const bare = await signed(admin, rootCap, '/list/events/a');
    delete bare.headers['x-starfish-sig'];
    expect(await refusal(r(bare))).toMatch(/^missing request signature headers/);
    expect(await refusal(r(await signed(admin, rootCap, '/push/events/a/x', { method: 'POST' })))).toMatch(
      /^cap-signed POST requests are not supported/,
    );
    const late = await signed(admin, rootCap, '/list/events/a');
    late.headers['x-starfish-ts'] = String(Date.now() - 400_000);
    expect(await refusal(r(late))).toMatch(/^request timestamp outside the allowed clock skew/);
    const now2 = Math.floor(Date.now() / 1000);
    const member = signCapCert(
      {
        v: 1,
        kind: 'member',
        iss: admin.pub,
        issUserId: admin.userId,
        sub: stranger.pub,
        subKem: stranger.kemPub,
        subUserId: stranger.userId,
        scope: { ops: ['read'], collections: ['events'], paths: ['events/**'] },
        nbf: now2 - 60,
        exp: now2 + 3600,
        nonce: Buffer.alloc(16, 1).toString('base64'),
      },
      admin.priv,
    );
    expect(await refusal(r(await signed(stranger, member, '/list/events/a')))).toBe(
      'cap-cert kind is not accepted (device caps only)',
    );
    const tampered = { ...rootCap, scope: { ...rootCap.scope, collections: ['events'] } };
    expect(await refusal(r(await signed(admin, tampered, '/list/events/a')))).toBe('cap-cert bad-signature');
  });

  it('a cap named by a signed revocation list is refused; a list whose signature does not verify fails every cap request', async () => {
    const list = buildRevocationList({
      issEdPubHex: admin.pub,
      issEdPrivHex: admin.priv,
      generation: 1,
      revoked: [{ sub: admin.pub, nonce: rootCap.nonce, exp: rootCap.exp }],
    });
    const r = resolver({ revocations: [list] });
    expect(await refusal(r(await signed(admin, rootCap, '/list/events/a')))).toBe('cap-cert revoked');
    const fresh = await mint(admin);
    expect((await r(await signed(admin, fresh, '/list/events/a')))?.identity).toBe(`cap:${admin.userId}`);
    const bySubject = buildRevocationList({
      issEdPubHex: admin.pub,
      issEdPrivHex: admin.priv,
      generation: 2,
      revoked: [],
      revokedSubjects: [{ sub: admin.pub, exp: fresh.exp }],
    });
    expect(await refusal(resolver({ revocations: [bySubject] })(await signed(admin, fresh, '/list/events/a')))).toBe(
      'cap-cert revoked',
    );
    const bad = resolver({ revocations: [{ ...list, generation: 2 }] });
    await expect(bad(await signed(admin, fresh, '/list/events/a'))).rejects.toThrow(
      /revocation list 0: its signature does not verify/,
    );
  });

  it('capOrElse: a Cap credential goes to the cap resolver only, anything else to the others', async () => {
    const others = async () => ({ identity: 'token:x', roles: ['admin'] });
    const chained = capOrElse(resolver(), others);
    expect((await chained({ headers: { authorization: 'Bearer abc' } } as unknown as Request))?.identity).toBe(
      'token:x',
    );
    expect((await chained({ headers: {} } as unknown as Request))?.identity).toBe('token:x');
    expect((await chained(await signed(admin, rootCap, '/list/events/a')))?.identity).toBe(`cap:${admin.userId}`);
    expect(
      await refusal(
        chained({
          method: 'GET',
          url: '/list/events/a',
          path: '/list/events/a',
          headers: { authorization: 'Cap x' },
        } as unknown as Request),
      ),
    ).toMatch(/^malformed cap-cert/);
  });
});

describe('MemoryNonceStore', () => {
  it('claims a nonce once per signer, again after its TTL, and refuses new ones when full', async () => {
    const s = new MemoryNonceStore(2);
    expect(await s.claim('a', 'n1', 60_000)).toBe(true);
    expect(await s.claim('a', 'n1', 60_000)).toBe(false);
    expect(await s.claim('b', 'n1', 60_000)).toBe(true);
    expect(await s.claim('c', 'n1', 60_000)).toBe(false);
    const t = new MemoryNonceStore();
    expect(await t.claim('a', 'n', -1)).toBe(true);
    expect(await t.claim('a', 'n', 60_000)).toBe(true);
  });
});

describe('CAP_* environment and TOKENS_FILE capUserId entries', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cap-env-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const id = '3a2587855944c8ebee1ad9e796d44149';

  it('validates CAP_AUTH and CAP_ADMINS, naming the variable', () => {
    expect(parseEnv({ CAP_AUTH: 'on', CAP_ADMINS: `${id}, ${id.replace('3', '4')}` }).CAP_ADMINS).toEqual([
      id,
      id.replace('3', '4'),
    ]);
    expect(() => parseEnv({ CAP_AUTH: 'yes' })).toThrow(/CAP_AUTH/);
    expect(() => parseEnv({ CAP_AUTH: 'on', CAP_ADMINS: 'alice' })).toThrow(
      /CAP_ADMINS\.0: must be a comma list of Starfish user ids/,
    );
    expect(() => parseEnv({ CAP_ADMINS: id })).toThrow(/CAP_ADMINS: needs CAP_AUTH=on/);
    expect(() => parseEnv({ CAP_ADMINS: id })).toThrow(ConfigError);
  });

  it('TOKENS_FILE may list Starfish identities ({ capUserId, roles }) beside tokens; CAP_ADMINS gives admin', () => {
    const file = join(dir, 'tokens.json');
    writeFileSync(
      file,
      JSON.stringify([
        { token: 'a-token-of-16-chars-or-more', roles: ['admin'] },
        { capUserId: id, roles: ['auditor'] },
      ]),
    );
    expect([...loadTokens({ TOKENS_FILE: file })]).toEqual([['a-token-of-16-chars-or-more', ['admin']]]);
    const other = id.replace('3', '5');
    expect([...loadCapRoles({ CAP_AUTH: 'on', CAP_ADMINS: [other, id], TOKENS_FILE: file })]).toEqual([
      [other, ['admin']],
      [id, ['admin', 'auditor']],
    ]);
    expect(loadCapRoles({ CAP_AUTH: 'off', CAP_ADMINS: [id], TOKENS_FILE: file }).size).toBe(0);
    writeFileSync(file, JSON.stringify([{ capUserId: 'bob', roles: ['admin'] }]));
    expect(() => loadTokens({ TOKENS_FILE: file })).toThrow(/TOKENS_FILE/);
  });
});

describe('where the Starfish packages are loaded (they declare no licence)', () => {
  it('only services/api/edge/cap-auth.ts names one in the product, through a dynamic import(), never a static one', async () => {
    const { readdirSync, readFileSync, statSync } = await import('node:fs');
    const root = join(import.meta.dirname, '../..');
    const files: string[] = [];
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        if (statSync(p).isDirectory()) walk(p);
        else if (p.endsWith('.ts')) files.push(p);
      }
    };
    for (const dir of ['services', 'shared', 'cli']) walk(join(root, dir));
    files.push(join(root, 'index.ts'));
    const naming = files
      .filter((f) => readFileSync(f, 'utf8').includes('@drakkar.software/starfish'))
      .map((f) => f.slice(root.length + 1));
    expect(naming).toEqual(['services/api/edge/cap-auth.ts']);
    const text = readFileSync(join(root, 'services/api/edge/cap-auth.ts'), 'utf8');
    expect(text).not.toMatch(/^import [^;]*from '@drakkar\.software/m);
    expect(text).toMatch(/import\('@drakkar\.software\/starfish-protocol'\)\.then/);
  });
});
