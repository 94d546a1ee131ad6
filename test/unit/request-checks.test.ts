import { describe, expect, it } from 'vitest';
import { TokenRoles, credentialsOf } from '../../services/api/auth.js';
import { parseIntegerParam } from '../../services/api/params.js';
import { ApiError } from '../../services/api/error-map.js';
import type { Request } from 'express';
import { contentTypeAllowed } from '../../services/api/body.js';
import { EXPECTED_ENVELOPE, MAX_JSON_DEPTH, checkEnvelope } from '../../shared/envelope.js';
import { BATCH_ID_RE, batchIdMs, parseBatchFileName, parseBatchRef } from '../../shared/ids.js';
import { batchKey, checkParamValue, listPrefix, parseStoragePath, routePattern } from '../../shared/paths.js';

const body = (s: string): Buffer => Buffer.from(s, 'utf8');

/** An event whose deepest container is at `levels` (the event object itself is level 1). */
function eventOfDepth(levels: number, open = '[', close = ']'): string {
  const inner =
    open === '['
      ? `${open.repeat(levels - 1)}${close.repeat(levels - 1)}`
      : `${'{"a":'.repeat(levels - 2)}{}${'}'.repeat(levels - 2)}`;
  return levels === 1 ? '{"a":1}' : `{"a":${inner}}`;
}

describe('push envelope checks', () => {
  it('accepts the Starfish envelope and counts events', () => {
    expect(checkEnvelope(body('{"data":{"events":[{"a":1},{}]},"baseHash":null}'))).toMatchObject({
      ok: true,
      events: 2,
    });
    expect(checkEnvelope(body('{"data":{"events":[]}}'))).toMatchObject({ ok: true, events: 0 });
    expect(checkEnvelope(body('\ufeff {"data":{"events":[{}]}} \n'))).toMatchObject({ ok: true, events: 1 });
  });

  it.each([
    ['', /empty body/],
    ['{"data":', /malformed JSON/],
    ['[1]', /must be a JSON object.*got an array/],
    ['{"data":[]}', /"data" must be an object holding "events", got an array/],
    ['{"data":{"events":"x"}}', /"data.events" must be an array, got a string/],
    ['{"data":{}}', /"data" has no "events" array/],
    ['{"data":{"events":[{},null]}}', /data\.events\[1\] must be a JSON object, got null/],
    ['{"data":{"events":[{},{},[1]]}}', /data\.events\[2\] must be a JSON object, got an array/],
    ['{"data":{"events":[]},"data":{"events":[{}]}}', /the body has the key "data" twice/],
    ['{"data":{"events":[],"events":[{}]}}', /"data" has the key "events" twice/],
    ['{"data":{"events":[{}]}} {}', /malformed JSON at byte 25: expected the end of the body/],
  ])('refuses %j', (text, message) => {
    const r = checkEnvelope(body(text));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(message);
  });

  // What SDKs send instead of the envelope: the answer names what came and shows what to send.
  it.each([
    [
      '{"batch":[{"event":"a"}],"sentAt":"2026-01-01"}',
      'body has no "data": got an object with the keys "batch", "sentAt" (the array of events belongs in "data.events")',
    ],
    [
      '{"events":[{"event":"a"}]}',
      'body has no "data": got an object with the keys "events" (the array of events belongs in "data.events")',
    ],
    [
      '[{"event":"a"}]',
      `body must be a JSON object ${EXPECTED_ENVELOPE}, got an array (an array of events belongs in "data.events")`,
    ],
    ['{}', 'body has no "data": got an empty object'],
    ['"hello"', `body must be a JSON object ${EXPECTED_ENVELOPE}, got a string`],
  ])('an SDK-shaped body %s gets a 400 naming it and the envelope', (text, start) => {
    const r = checkEnvelope(body(text));
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.startsWith(start)).toBe(true);
      expect(r.error).toContain(EXPECTED_ENVELOPE);
    }
  });

  it('never echoes body text in a JSON syntax error', () => {
    const r = checkEnvelope(body('{"data":{"events":[{"distinct_id":"secret-value" oops}]}}'));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).not.toContain('secret-value');
  });

  it('refuses invalid UTF-8', () => {
    const bad = Buffer.from([...Buffer.from('{"data":{"events":[{"e":"'), 0xc3, 0x28, ...Buffer.from('"}]}}')]);
    expect(checkEnvelope(bad)).toEqual({ ok: false, error: 'body is not valid UTF-8', code: 'bad_utf8' });
    // An encoded surrogate (CESU-8) is not UTF-8 either.
    const cesu = Buffer.from([...Buffer.from('{"data":{"events":[{"e":"'), 0xed, 0xa0, 0xbd, ...Buffer.from('"}]}}')]);
    expect(checkEnvelope(cesu)).toEqual({ ok: false, error: 'body is not valid UTF-8', code: 'bad_utf8' });
  });

  // Depth: the event object is level 1; an event reaching level 64 is accepted, 65 is refused.
  it.each([
    ['arrays', '[', ']'],
    ['objects', '{', '}'],
  ])('accepts an event exactly %s 64 levels deep and refuses 65', (_name, open, close) => {
    const at64 = eventOfDepth(MAX_JSON_DEPTH, open, close);
    const at65 = eventOfDepth(MAX_JSON_DEPTH + 1, open, close);
    expect(JSON.parse(at64)).toBeTruthy();
    expect(checkEnvelope(body(`{"data":{"events":[{},${at64}]}}`))).toMatchObject({ ok: true, events: 2 });
    expect(checkEnvelope(body(`{"data":{"events":[{},${at65}]}}`))).toEqual({
      ok: false,
      error: `JSON nesting deeper than ${MAX_JSON_DEPTH} levels in data.events[1] (the event object is level 1)`,
      code: 'too_deep',
    });
  });

  it('counts other envelope values from their own level 1, and refuses 100,000 levels without overflowing', () => {
    const nested = (levels: number): string => `${'['.repeat(levels)}${']'.repeat(levels)}`;
    expect(checkEnvelope(body(`{"data":{"events":[]},"baseHash":${nested(MAX_JSON_DEPTH)}}`))).toMatchObject({
      ok: true,
    });
    expect(checkEnvelope(body(`{"data":{"events":[]},"baseHash":${nested(MAX_JSON_DEPTH + 1)}}`))).toMatchObject({
      ok: false,
      error: expect.stringMatching(/nesting deeper than 64 levels in a value of the envelope/),
    });
    const t0 = performance.now();
    expect(checkEnvelope(body(`{"data":{"events":[${nested(100_000)}]}}`))).toMatchObject({ ok: false });
    expect(checkEnvelope(body(`{"data":{"events":[{"a":${nested(100_000)}}]}}`))).toMatchObject({
      ok: false,
      error: expect.stringMatching(/nesting deeper/),
    });
    expect(performance.now() - t0).toBeLessThan(2000);
  });

  it('checks an event of 200,000 keys in linear time', () => {
    const keys = Array.from({ length: 200_000 }, (_, i) => `"${i.toString(36)}":0`).join(',');
    const t0 = performance.now();
    expect(checkEnvelope(body(`{"data":{"events":[{${keys}}]}}`))).toMatchObject({ ok: true, events: 1 });
    // Pairwise comparison would take ~2 * 10^10 steps (minutes); linear takes well under a second.
    expect(performance.now() - t0).toBeLessThan(10_000);
  });

  it('refuses a duplicate top-level key in an event (one of the two values would be dropped), also when escaped', () => {
    for (const event of [
      '{"a":1,"a":1}',
      '{"event":"x","b":2,"event":"y"}',
      String.raw`{"ab":1,"a\u0062":2}`,
      String.raw`{"\u0061":1,"a":2}`,
    ]) {
      const r = checkEnvelope(body(`{"data":{"events":[{},${event}]}}`));
      expect(r, event).toMatchObject({
        ok: false,
        error: expect.stringMatching(/^data\.events\[1\] has the key "(a|event|ab)" twice/),
      });
    }
    // Past the pairwise comparison, a Set finds the duplicate: also at the very end of a big event.
    const many = Array.from({ length: 100 }, (_, i) => `"k${i}":${i}`).join(',');
    expect(checkEnvelope(body(`{"data":{"events":[{${many},"k7":0}]}}`))).toMatchObject({
      ok: false,
      error: expect.stringMatching(/has the key "k7" twice/),
    });
    expect(checkEnvelope(body(`{"data":{"events":[{${many},"k100":0}]}}`))).toMatchObject({ ok: true });
    // Different keys that share a prefix or a length are not duplicates; nested duplicates are kept as sent.
    expect(checkEnvelope(body('{"data":{"events":[{"ab":1,"ba":2,"a":3,"abc":4,"p":{"x":1,"x":2}}]}}'))).toMatchObject({
      ok: true,
    });
  });

  it('checks each event for duplicates on its own: keys of one event never count against the next', () => {
    // The key list is reused from event to event; what one event left in it must not leak.
    const few = '{"a":1,"b":2,"c":3}';
    const many = `{${Array.from({ length: 40 }, (_, i) => `"k${i}":${i}`).join(',')}}`;
    expect(checkEnvelope(body(`{"data":{"events":[${few},${few},${many},${many},${few}]}}`))).toMatchObject({
      ok: true,
      events: 5,
    });
    expect(checkEnvelope(body(`{"data":{"events":[${many},${few},{"c":1,"c":2}]}}`))).toMatchObject({
      ok: false,
      error: expect.stringMatching(/^data\.events\[2\] has the key "c" twice/),
    });
    // Exactly at the switch from pairwise comparison to a Set (32 keys), a duplicate of the first key.
    const at32 = Array.from({ length: 32 }, (_, i) => `"k${i}":${i}`).join(',');
    expect(checkEnvelope(body(`{"data":{"events":[${few},{${at32},"k0":0}]}}`))).toMatchObject({
      ok: false,
      error: expect.stringMatching(/^data\.events\[1\] has the key "k0" twice/),
    });
    expect(checkEnvelope(body(`{"data":{"events":[{${at32}},{${at32},"k32":0}]}}`))).toMatchObject({
      ok: true,
      events: 2,
    });
  });

  it('decodes the body only when asked (an inline encoder needs the text; a queued push does not)', () => {
    const text = '{"data":{"events":[{"name":"é ✓"}]}}';
    const queued = checkEnvelope(body(`\ufeff${text}`));
    expect(queued).toEqual({ ok: true, events: 1, everyEventHasMessageId: false });
    expect(checkEnvelope(body(`\ufeff${text}`), { text: true })).toEqual({
      ok: true,
      events: 1,
      everyEventHasMessageId: false,
      text,
    });
    expect(checkEnvelope(Buffer.from([0x7b, 0xff, 0x7d]), { text: true })).toEqual({
      ok: false,
      error: 'body is not valid UTF-8',
      code: 'bad_utf8',
    });
    expect(checkEnvelope(Buffer.from([0x7b, 0xff, 0x7d]))).toEqual({
      ok: false,
      error: 'body is not valid UTF-8',
      code: 'bad_utf8',
    });
  });
});

describe('storage paths and params', () => {
  const t = parseStoragePath('events/{app}/{batchId}');
  it('derives routes, list prefix and keys', () => {
    expect(t.batchParam).toBe('batchId');
    expect(t.prefixParams).toEqual(['app']);
    expect(routePattern(t.segments)).toBe('events/:app/:batchId');
    expect(listPrefix(t, { app: 'shop' })).toBe('events/shop/');
    expect(batchKey(t, { app: 'shop' }, '1782933157690-0000-735223')).toBe(
      'events/shop/1782933157690-0000-735223.parquet',
    );
  });
  it.each(['', '.', '..', 'a b', 'a/b', 'x'.repeat(129), 'é'])('refuses param %j', (v) => {
    expect(checkParamValue(v)).not.toBeNull();
  });
  it.each(['a', 'my-app_1.2~x', 'x'.repeat(128)])('accepts param %j', (v) => {
    expect(checkParamValue(v)).toBeNull();
  });
});

describe('batch ids', () => {
  it('parses refs with or without .parquet', () => {
    expect(parseBatchRef('1782933157690-0000-735223.parquet')).toBe('1782933157690-0000-735223');
    expect(parseBatchRef('1782933157690-0000-735223')).toBe('1782933157690-0000-735223');
    expect(parseBatchRef('1782933157690-0000-73522')).toBeNull();
    expect(batchIdMs('1782933157690-0000-735223')).toBe(1782933157690);
    expect(BATCH_ID_RE.test('1782933157690-0000-ABCDEF')).toBe(false);
  });
  it.each([
    '',
    '.parquet',
    '1782933157690-0000-735223.parquet.parquet',
    '1782933157690-0000-735223.PARQUET',
    'x/1782933157690-0000-735223',
    ' 1782933157690-0000-735223',
  ])('rejects the ref %j', (ref) => {
    expect(parseBatchRef(ref)).toBeNull();
  });
  it('takes a file name only as <id>.parquet: no bare id, no folder, no other suffix', () => {
    expect(parseBatchFileName('1782933157690-0000-735223.parquet')).toBe('1782933157690-0000-735223');
    expect(parseBatchFileName('1782933157690-0000-735223')).toBeNull();
    expect(parseBatchFileName('sub/1782933157690-0000-735223.parquet')).toBeNull();
    expect(parseBatchFileName('1782933157690-0000-735223.parquet.part-12')).toBeNull();
    expect(parseBatchFileName('.parquet')).toBeNull();
  });
});

describe('auth and content type', () => {
  it('maps tokens to roles and rejects unknown ones', () => {
    const roles = new TokenRoles(new Map([['token-a-0123456789abcdef', ['admin']]]));
    expect(roles.rolesOf('token-a-0123456789abcdef')).toEqual(['admin']);
    expect(roles.rolesOf('token-a-0123456789abcdeX')).toBeNull();
    expect(roles.rolesOf('')).toBeNull();
  });
  it('accepts JSON with an optional UTF-8 charset only', () => {
    expect(contentTypeAllowed('application/json', ['application/json'])).toBe(true);
    expect(contentTypeAllowed('Application/JSON; charset=utf-8', ['application/json'])).toBe(true);
    expect(contentTypeAllowed('application/json; charset=latin1', ['application/json'])).toBe(false);
    expect(contentTypeAllowed('text/plain', ['application/json'])).toBe(false);
    expect(contentTypeAllowed(undefined, ['application/json'])).toBe(false);
  });
});

describe('the Authorization header, read once', () => {
  const of = (authorization?: string) =>
    credentialsOf({ headers: authorization === undefined ? {} : { authorization } } as unknown as Request);
  it('one bearer token, or the exact reason it is not one (never the credentials)', () => {
    expect(of()).toEqual({ kind: 'none' });
    expect(of('')).toEqual({ kind: 'none' });
    expect(of('Bearer abc.def.ghi')).toEqual({ kind: 'bearer', token: 'abc.def.ghi' });
    expect(of('bearer   tok  ')).toEqual({ kind: 'bearer', token: 'tok' });
    expect(of('Bearer a b')).toEqual({
      kind: 'other',
      reason: 'malformed bearer token: one token expected after "Bearer", got 2 parts',
    });
    expect(of('Bearer')).toEqual({ kind: 'other', reason: 'malformed bearer token: no token after "Bearer"' });
    expect(of('Basic dXNlcjpwYXNz')).toEqual({
      kind: 'other',
      reason: 'Authorization scheme Basic is not supported; use Bearer',
    });
    const odd = of('{"secret":1} x');
    expect(odd).toEqual({ kind: 'other', reason: 'malformed Authorization header: expected "Bearer <token>"' });
    // The scheme forgotten: the token stands where the scheme goes, and is never named back.
    expect(of('test-admin-token-0123')).toEqual(odd);
    expect(of('sk_live_abc def')).toEqual(odd);
    expect(of('bASIC x')).toEqual({ kind: 'other', reason: 'Authorization scheme Basic is not supported; use Bearer' });
  });
});

describe('integer query parameters: one strict parser', () => {
  const limit = (raw: unknown) => parseIntegerParam(raw, { name: 'limit', min: 1, max: 1000, fallback: 100 });
  it('digits within the range; absent gives the default', () => {
    expect(limit(undefined)).toBe(100);
    expect(limit('1')).toBe(1);
    expect(limit('1000')).toBe(1000);
    expect(limit('010')).toBe(10);
  });
  it.each(['1e3', '1.0', '+5', '-1', ' 5', '5 ', '0x10', '', '0', '1001', '99999999999999999999', 'Infinity', 'NaN'])(
    'refuses %j with a 400 naming the range',
    (raw) => {
      expect(() => limit(raw)).toThrow(ApiError);
      expect(() => limit(raw)).toThrow(expect.objectContaining({ code: 'bad_param', status: 400 }) as unknown as Error);
      expect(() => limit(raw)).toThrow('limit must be an integer from 1 to 1000');
    },
  );
  it('refuses a repeated parameter', () => {
    expect(() => limit(['1', '2'])).toThrow(/limit must be an integer/);
  });
});
