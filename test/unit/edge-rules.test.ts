import type { IncomingMessage } from 'node:http';
import type { Request } from 'express';
import { describe, expect, it } from 'vitest';
import { clientIp, resolveCounters } from '../../services/api/edge/rate-limit.js';
import { MemoryCounterStore } from '../../services/api/edge/counters.js';
import { pushLengthCheck } from '../../services/api/edge/expect-continue.js';
import { jwtWarnings } from '../../services/api/edge-from-env.js';
import { parseEnv } from '../../shared/config.js';

const req = (peer: string, xff?: string): Request =>
  ({
    socket: { remoteAddress: peer },
    headers: xff === undefined ? {} : { 'x-forwarded-for': xff },
  }) as unknown as Request;

describe('rate-limit rules resolve as the reference does', () => {
  it('inherits windowMs/maxRequests from the rule, then the collection, then the global block', () => {
    const r = resolveCounters(
      {
        rateLimit: {
          windowMs: 1000,
          push: { maxRequests: 5, bucket: 'ip' },
          pull: {},
          list: { identity: { maxRequests: 2 }, ip: { windowMs: 50 } },
        },
      },
      { windowMs: 9000, maxRequests: 7 },
    );
    expect(r.push).toEqual([{ action: 'push', mode: 'ip', kind: 's', windowMs: 1000, maxRequests: 5 }]);
    expect(r.pull).toEqual([{ action: 'pull', mode: 'identity', kind: 's', windowMs: 1000, maxRequests: 7 }]);
    expect(r.list).toEqual([
      { action: 'list', mode: 'identity', kind: 'i', windowMs: 1000, maxRequests: 2 },
      { action: 'list', mode: 'ip', kind: 'p', windowMs: 50, maxRequests: 7 },
    ]);
  });

  it('flat collection fields or a global block make an implicit push rule; nothing else is metered', () => {
    expect(
      resolveCounters({ rateLimit: { windowMs: 10, maxRequests: 3, bucket: 'identity+ip' } }, undefined).push,
    ).toEqual([{ action: 'push', mode: 'identity+ip', kind: 's', windowMs: 10, maxRequests: 3 }]);
    expect(
      resolveCounters({ rateLimit: { list: { windowMs: 5, maxRequests: 1 } } }, { windowMs: 60, maxRequests: 9 }).push,
    ).toEqual([{ action: 'push', mode: 'identity', kind: 's', windowMs: 60, maxRequests: 9 }]);
    const none = resolveCounters({ rateLimit: { appEvents: { windowMs: 1000, maxEvents: 10 } } }, undefined);
    expect(none).toEqual({ push: [], pull: [], list: [] });
    expect(resolveCounters({ rateLimit: null }, { windowMs: 1, maxRequests: 1 })).toEqual({
      push: [],
      pull: [],
      list: [],
    });
  });
});

describe('client address for ip buckets', () => {
  it('ignores X-Forwarded-For with 0 hops, takes the Nth from the right with N, falls back to the peer when shorter', () => {
    expect(clientIp(req('::ffff:10.0.0.1', '1.1.1.1'), 0)).toBe('10.0.0.1');
    expect(clientIp(req('10.0.0.1', 'spoofed, 2.2.2.2'), 1)).toBe('2.2.2.2');
    expect(clientIp(req('10.0.0.1', 'spoofed, 3.3.3.3, 10.0.0.9'), 2)).toBe('3.3.3.3');
    expect(clientIp(req('10.0.0.1', '4.4.4.4'), 2)).toBe('10.0.0.1');
    expect(clientIp(req('10.0.0.1'), 1)).toBe('10.0.0.1');
  });
});

describe('in-process counters (library use without Redis)', () => {
  it('count per fixed window, admit events only while they fit (an empty window takes any batch), and stay bounded', async () => {
    const m = new MemoryCounterStore(3);
    expect((await m.hit('a', 60_000)).count).toBe(1);
    expect((await m.hit('a', 60_000)).count).toBe(2);
    expect(await m.admitEvents('app', 60_000, 10, 25)).toMatchObject({ admitted: true, count: 25 });
    expect(await m.admitEvents('app', 60_000, 10, 1)).toMatchObject({ admitted: false, count: 25 });
    await m.hit('b', 60_000);
    await m.hit('c', 60_000);
    // Over the cap the oldest bucket ('a') was dropped: it starts again at 1.
    expect((await m.hit('a', 60_000)).count).toBe(1);
    const short = await m.hit('s', 1);
    await new Promise((r) => setTimeout(r, 5));
    expect((await m.hit('s', 1)).count).toBe(1);
    expect(short.count).toBe(1);
  });
});

describe('Expect: 100-continue, decided from the declared length', () => {
  const check = pushLengthCheck(
    [
      { name: 'events', storagePath: 'events/{app}/{batchId}', maxBodyBytes: 1000 },
      { name: 'big', storagePath: 'big/{app}/{batchId}', maxBodyBytes: 5000 },
    ],
    '/ingest',
  );
  const msg = (method: string, url: string, length?: string) =>
    ({ method, url, headers: length === undefined ? {} : { 'content-length': length } }) as unknown as IncomingMessage;
  it("refuses a push over its collection's maxBodyBytes, with the normal path's words", () => {
    expect(check(msg('POST', '/ingest/push/events/app/x', '1001'))).toEqual({
      status: 413,
      body: { error: "body of 1001 bytes is over this collection's limit of 1000 bytes", code: 'too_large' },
    });
    expect(check(msg('POST', '/ingest/push/events/app/x/?a=1', '5000'))?.status).toBe(413);
  });
  it("lets through what the normal path decides: within the limit, another collection's limit, no length, other routes", () => {
    expect(check(msg('POST', '/ingest/push/events/app/x', '1000'))).toBeNull();
    expect(check(msg('POST', '/ingest/push/big/app/x', '4000'))).toBeNull();
    expect(check(msg('POST', '/ingest/push/events/app/x'))).toBeNull();
    expect(check(msg('POST', '/push/events/app/x', '999999'))).toBeNull();
    expect(check(msg('POST', '/ingest/push/events/app', '999999'))).toBeNull();
    expect(check(msg('PUT', '/ingest/push/events/app/x', '999999'))).toBeNull();
  });
});

describe('JWT settings at start', () => {
  it('JWT_ALLOW_NO_EXP is on or off (default off) and needs a key', () => {
    expect(parseEnv({}).JWT_ALLOW_NO_EXP).toBe('off');
    expect(parseEnv({ JWT_PUBLIC_KEY: 'k', JWT_ALLOW_NO_EXP: 'on' }).JWT_ALLOW_NO_EXP).toBe('on');
    expect(() => parseEnv({ JWT_PUBLIC_KEY: 'k', JWT_ALLOW_NO_EXP: 'yes' })).toThrow(/JWT_ALLOW_NO_EXP/);
    expect(() => parseEnv({ JWT_ALLOW_NO_EXP: 'on' })).toThrow(
      /JWT_ALLOW_NO_EXP: needs JWT_JWKS_URL or JWT_PUBLIC_KEY/,
    );
  });
  it('warns when JWT auth is on without issuer or audience', () => {
    expect(jwtWarnings({})).toEqual([]);
    expect(jwtWarnings({ JWT_PUBLIC_KEY: 'k' })).toEqual(['JWT_ISSUER', 'JWT_AUDIENCE']);
    expect(jwtWarnings({ JWT_JWKS_URL: 'http://127.0.0.1/j', JWT_ISSUER: 'i' })).toEqual(['JWT_AUDIENCE']);
    expect(jwtWarnings({ JWT_PUBLIC_KEY: 'k', JWT_ISSUER: 'i', JWT_AUDIENCE: 'a' })).toEqual([]);
  });
});
