/**
 * The product against its own OpenAPI document (issue 44): requests for every route and method
 * the document lists, good and bad, against the running product (API and encoder, own Redis),
 * every answer checked against the document (status listed, headers and body valid); then
 * credentials in every wrong shape, none of whose bytes may come back in an answer or a log line.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OpenApiDocument } from '../../services/api/contract/document.js';
import { createLogger } from '../../shared/logger.js';
import { answerChecker } from '../helpers/openapi-check.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';

const logLines: string[] = [];
let stack: TestStack;
let doc: OpenApiDocument;
let checker: ReturnType<typeof answerChecker>;
const problems: string[] = [];
const jwtKeys = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const otherKeys = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const WRITE_KEY = 'contract-write-key-0123456789';
const keysDir = mkdtempSync(join(tmpdir(), 'openapi-keys-'));

beforeAll(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      logLines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  const logger = createLogger({ level: 'debug', name: 'openapi-test', destination: sink });
  const keysFile = join(keysDir, 'write-keys.json');
  writeFileSync(keysFile, JSON.stringify({ [WRITE_KEY]: { app: 'segment-app', collection: 'events' } }));
  stack = await startTestStack(
    {
      ROLLUP: 'off',
      // The Segment door (/v1/*) is in the document when write keys are configured.
      SEGMENT_WRITE_KEYS_FILE: keysFile,
      JWT_PUBLIC_KEY: jwtKeys.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
      JWT_ISSUER: 'test',
      JWT_AUDIENCE: 'ingest',
    },
    { api: true, encoder: true },
    logger,
  );
  doc = (await (await fetch(`${stack.url}/openapi.json`)).json()) as OpenApiDocument;
  checker = answerChecker(doc);
}, 60_000);
afterAll(async () => {
  await stack?.shutdown();
  rmSync(keysDir, { recursive: true, force: true });
});

const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

/** One request to the product; its answer is checked against the document. */
async function call(
  method: string,
  path: string,
  init: { headers?: Record<string, string>; body?: string | Buffer } = {},
): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(`${stack.url}${path}`, {
    method,
    headers: init.headers,
    body: typeof init.body === 'string' || init.body === undefined ? init.body : new Uint8Array(init.body),
  });
  const text = await res.text();
  problems.push(...checker.check({ method, path, status: res.status, headers: res.headers, body: text }));
  return { status: res.status, headers: res.headers, text };
}

const envelope = (events: object[]): string => JSON.stringify({ data: { events }, baseHash: null });
const json = { 'content-type': 'application/json' };

describe('every route and method of the document, good and bad, answers as the document says', () => {
  it('health, config, openapi.json', async () => {
    for (const p of ['/healthz', '/health', '/readyz', '/metrics']) {
      expect((await call('GET', p)).status).toBe(200);
      await call('HEAD', p);
      expect((await call('POST', p)).status).toBe(405);
    }
    for (const p of ['/config', '/openapi.json']) {
      const first = await call('GET', p);
      expect(first.status).toBe(200);
      await call('HEAD', p);
      expect((await call('GET', p, { headers: { 'if-none-match': first.headers.get('etag') ?? '' } })).status).toBe(
        304,
      );
      expect((await call('DELETE', p)).status).toBe(405);
    }
  });

  it('push, list, the rewritten log, pull', async () => {
    const push = '/push/events/contract-app/b1';
    expect(
      (await call('POST', push, { headers: json, body: envelope([{ event: 'a', message_id: 'm1' }]) })).status,
    ).toBe(200);
    expect((await call('POST', push, { headers: json, body: envelope([]) })).status).toBe(200);
    expect((await call('POST', push, { headers: json, body: '{"data":' })).status).toBe(400);
    expect((await call('POST', push, { headers: json, body: '[{"event":"a"}]' })).status).toBe(400);
    expect((await call('POST', push, { headers: { 'content-type': 'text/plain' }, body: envelope([{}]) })).status).toBe(
      415,
    );
    expect(
      (await call('POST', push, { headers: { ...json, 'content-encoding': 'zstd' }, body: envelope([{}]) })).status,
    ).toBe(415);
    expect(
      (await call('POST', push, { headers: { ...json, 'content-encoding': 'gzip' }, body: Buffer.from('not gzip') }))
        .status,
    ).toBe(400);
    expect(
      (
        await call('POST', push, {
          headers: { ...json, 'content-encoding': 'gzip' },
          body: gzipSync(envelope([{ event: 'gz' }])),
        })
      ).status,
    ).toBe(200);
    expect(
      (await call('POST', push, { headers: { ...json, 'idempotency-key': 'k'.repeat(300) }, body: envelope([{}]) }))
        .status,
    ).toBe(400);
    expect(
      (await call('POST', push, { headers: { ...json, 'idempotency-key': 'key-1' }, body: envelope([{ n: 1 }]) }))
        .status,
    ).toBe(200);
    expect(
      (await call('POST', push, { headers: { ...json, 'idempotency-key': 'key-1' }, body: envelope([{ n: 2 }]) }))
        .status,
    ).toBe(422);
    expect((await call('POST', '/push/events/bad..!app/b1', { headers: json, body: envelope([{}]) })).status).toBe(400);
    expect((await call('GET', push)).status).toBe(405);

    const list = '/list/events/contract-app';
    expect((await call('GET', list)).status).toBe(401);
    expect((await call('GET', list, { headers: { authorization: 'Bearer nope' } })).status).toBe(401);
    expect((await call('GET', `${list}?limit=0`, { headers: admin })).status).toBe(400);
    expect((await call('GET', `${list}?after=nope`, { headers: admin })).status).toBe(400);
    expect((await call('POST', list, { headers: admin })).status).toBe(405);
    await call('HEAD', list, { headers: admin });
    let ids: string[] = [];
    await waitFor(
      async () => {
        ids = (JSON.parse((await call('GET', `${list}?limit=10`, { headers: admin })).text) as { items: string[] })
          .items;
        return ids.length > 0;
      },
      20_000,
      'a written batch',
    );
    const rewritten = `${list}/rewritten`;
    expect((await call('GET', rewritten, { headers: admin })).status).toBe(200);
    expect((await call('GET', rewritten)).status).toBe(401);
    expect((await call('GET', `${rewritten}?limit=x`, { headers: admin })).status).toBe(400);
    expect((await call('PUT', rewritten, { headers: admin })).status).toBe(405);
    await call('HEAD', rewritten, { headers: admin });

    const pull = `/pull/events/contract-app/${ids[0]}`;
    const full = await call('GET', pull, { headers: admin });
    expect(full.status).toBe(200);
    await call('HEAD', pull, { headers: admin });
    expect(
      (await call('GET', pull, { headers: { ...admin, 'if-none-match': full.headers.get('etag') ?? '' } })).status,
    ).toBe(304);
    expect((await call('GET', pull, { headers: { ...admin, range: 'bytes=0-3' } })).status).toBe(206);
    expect((await call('GET', pull, { headers: { ...admin, range: 'bytes=99999999-' } })).status).toBe(416);
    expect((await call('GET', '/pull/events/contract-app/1700000000000-0000-abcdef', { headers: admin })).status).toBe(
      200,
    );
    expect((await call('GET', '/pull/events/contract-app/not-an-id', { headers: admin })).status).toBe(200);
    expect((await call('GET', '/pull/events/contract-app/%21', { headers: admin })).status).toBe(400);
    expect((await call('GET', pull)).status).toBe(401);
    expect((await call('POST', pull, { headers: admin })).status).toBe(405);
  }, 60_000);

  it('admin and erasure', async () => {
    expect((await call('GET', '/admin/failed', { headers: admin })).status).toBe(200);
    await call('HEAD', '/admin/failed', { headers: admin });
    expect((await call('GET', '/admin/failed')).status).toBe(401);
    expect((await call('GET', '/admin/failed?limit=-1', { headers: admin })).status).toBe(400);
    expect((await call('DELETE', '/admin/failed', { headers: admin })).status).toBe(405);
    expect((await call('POST', '/admin/replay', { headers: admin })).status).toBe(200);
    expect((await call('GET', '/admin/replay', { headers: admin })).status).toBe(405);
    expect((await call('POST', '/admin/replay/nope', { headers: admin })).status).toBe(400);
    expect((await call('POST', '/admin/replay/1700000000000-0000-abcdef', { headers: admin })).status).toBe(404);
    expect((await call('POST', '/admin/replay/1700000000000-0000-abcdef')).status).toBe(401);
    const erase = '/admin/erase/events/contract-app';
    expect((await call('POST', erase, { headers: { ...admin, ...json }, body: '{' })).status).toBe(400);
    expect((await call('POST', erase, { headers: { ...admin, ...json }, body: '{"distinct_ids":[1]}' })).status).toBe(
      400,
    );
    expect(
      (
        await call('POST', '/admin/erase/nope/contract-app', {
          headers: { ...admin, ...json },
          body: '{"distinct_ids":["u"]}',
        })
      ).status,
    ).toBe(404);
    expect((await call('POST', erase, { headers: json, body: '{"distinct_ids":["u"]}' })).status).toBe(401);
    expect((await call('GET', erase, { headers: admin })).status).toBe(405);
    const queued = await call('POST', erase, {
      headers: { ...admin, ...json },
      body: '{"distinct_ids":["u"],"dry_run":true}',
    });
    expect(queued.status).toBe(202);
    const id = (JSON.parse(queued.text) as { id: string }).id;
    expect((await call('GET', `/admin/erase/${id}`, { headers: admin })).status).toBe(200);
    await call('HEAD', `/admin/erase/${id}`, { headers: admin });
    expect((await call('GET', '/admin/erase/er-1700000000000-0123456789abcdef', { headers: admin })).status).toBe(404);
    expect((await call('GET', '/admin/erase/nope', { headers: admin })).status).toBe(400);
    expect((await call('GET', '/no/such/route')).status).toBe(404);
  });

  it('the Segment door: every call and short form, good and bad', async () => {
    const basic = (key: string) => ({ authorization: `Basic ${Buffer.from(`${key}:`).toString('base64')}` });
    const call1 = (type: string, n: number) => ({
      type,
      event: 'e',
      name: 'n',
      userId: 'u',
      messageId: `m-${type}-${n}`,
    });
    const paths = Object.keys(doc.paths).filter((p) => p.startsWith('/v1/'));
    expect(paths).toHaveLength(14);
    let n = 0;
    for (const p of paths) {
      const route = p.slice('/v1/'.length);
      const type =
        { b: 'batch', t: 'track', i: 'identify', p: 'page', s: 'screen', g: 'group', a: 'alias' }[route] ?? route;
      const one = type === 'batch' ? { batch: [call1('track', ++n)] } : call1(type, ++n);
      const body = JSON.stringify(one);
      expect((await call('POST', p, { headers: { ...basic(WRITE_KEY), ...json }, body })).status, p).toBe(200);
      // The key in the body, no header (analytics.js in a browser).
      const inBody = JSON.stringify({
        ...(type === 'batch' ? { batch: [call1('track', ++n)] } : call1(type, ++n)),
        writeKey: WRITE_KEY,
      });
      expect((await call('POST', p, { headers: json, body: inBody })).status, p).toBe(200);
      expect((await call('POST', p, { headers: json, body })).status, p).toBe(401);
      expect((await call('POST', p, { headers: { ...basic('not-a-key'), ...json }, body })).status, p).toBe(401);
      expect((await call('POST', p, { headers: { ...basic(WRITE_KEY), ...json }, body: '{' })).status, p).toBe(400);
      expect(
        (await call('POST', p, { headers: { ...basic(WRITE_KEY), ...json, 'content-encoding': 'bogus' }, body }))
          .status,
        p,
      ).toBe(415);
      expect((await call('GET', p, { headers: basic(WRITE_KEY) })).status, p).toBe(405);
    }
  });

  it('no answer was outside the document, and every path and method of it was tried', () => {
    expect(problems).toEqual([]);
    const tried = new Set([...checker.seen].map((s) => s.split(' ').slice(0, 2).join(' ')));
    for (const [path, item] of Object.entries(doc.paths))
      for (const method of Object.keys(item)) expect(tried, `${method} ${path}`).toContain(`${path} ${method}`);
  });
});

describe('no answer or log line echoes a credential sent in a wrong shape', () => {
  const secret = 'sEcReT-ingest-credential-7f3a9c2e51d84b06';
  const long = `L0ng${'x9'.repeat(3000)}EndOfSecret`;
  it('shapes × routes: none of the bytes come back', async () => {
    const badJwt = await new SignJWT({ roles: ['admin'] })
      .setProtectedHeader({ alg: 'ES256' })
      .setSubject(secret)
      .setIssuer('test')
      .setAudience('ingest')
      .setExpirationTime('5m')
      .sign(otherKeys.privateKey);
    const shapes: Record<string, { header: string; needles: string[] }> = {
      'no scheme': { header: secret, needles: [secret] },
      'the admin token without its scheme': { header: ADMIN_TOKEN, needles: [ADMIN_TOKEN] },
      'wrong scheme': { header: `Token ${secret}`, needles: [secret] },
      Basic: {
        header: `Basic ${Buffer.from(`u:${secret}`).toString('base64')}`,
        needles: [Buffer.from(`u:${secret}`).toString('base64'), secret],
      },
      'extra parts': { header: `Bearer ${secret} extra`, needles: [secret, 'extra'] },
      'scheme twice': { header: `Bearer Bearer ${secret}`, needles: [secret] },
      'lower case': { header: `bearer ${secret}`, needles: [secret] },
      'upper case': { header: `BEARER ${secret}`, needles: [secret] },
      'a cap header in a bearer slot': { header: `Bearer Cap ${secret}`, needles: [secret] },
      'a cap credential with cap auth off': { header: `Cap ${secret}`, needles: [secret] },
      'a JWT with a bad signature': {
        header: `Bearer ${badJwt}`,
        needles: [badJwt, badJwt.split('.')[2] ?? '', secret],
      },
      'a very long token': { header: long, needles: [long, 'x9x9x9x9x9x9x9x9'] },
      'a very long bearer token': { header: `Bearer ${long}`, needles: [long, 'x9x9x9x9x9x9x9x9'] },
    };
    const routes: [string, string, string?][] = [
      ['POST', '/push/events/secret-app/b1', envelope([{ event: 'x' }])],
      ['GET', '/list/events/secret-app'],
      ['GET', '/list/events/secret-app/rewritten'],
      ['GET', '/pull/events/secret-app/1700000000000-0000-abcdef'],
      ['GET', '/admin/failed'],
      ['POST', '/admin/erase/events/secret-app', '{"distinct_ids":["u"]}'],
      ['GET', '/config'],
      ['POST', '/v1/batch', '{"batch":[{"type":"track","event":"e","userId":"u"}]}'],
    ];
    const leaks: string[] = [];
    const distinct = (n: string): string[] => [n, n.slice(Math.floor(n.length / 3), Math.floor(n.length / 3) + 12)];
    for (const [shape, { header, needles }] of Object.entries(shapes)) {
      for (const [method, path, body] of routes) {
        const res = await fetch(`${stack.url}${path}`, {
          method,
          headers: { authorization: header, ...(body ? json : {}) },
          body,
        });
        const text = await res.text();
        problems.push(...checker.check({ method, path, status: res.status, headers: res.headers, body: text }));
        const seen = `${[...res.headers].map(([k, v]) => `${k}: ${v}`).join('\n')}\n${text}`;
        for (const n of needles.filter((x) => x !== 'extra' || shape !== 'extra parts').flatMap(distinct))
          if (n && seen.includes(n))
            leaks.push(`${shape} → ${method} ${path} ${res.status}: answer holds ${n.slice(0, 20)}…`);
        if (shape === 'extra parts' && text.includes(secret)) leaks.push(`${shape} → ${method} ${path}`);
      }
    }
    const metrics = await (await fetch(`${stack.url}/metrics`)).text();
    const logs = logLines.join('\n');
    for (const { needles } of Object.values(shapes)) {
      for (const n of needles.filter((x) => x !== 'extra').flatMap(distinct)) {
        if (logs.includes(n)) leaks.push(`a log line holds ${n.slice(0, 20)}…`);
        if (metrics.includes(n)) leaks.push(`/metrics holds ${n.slice(0, 20)}…`);
      }
    }
    expect(logLines.length).toBeGreaterThan(10);
    expect(leaks).toEqual([]);
    expect(problems).toEqual([]);
  }, 60_000);
});
