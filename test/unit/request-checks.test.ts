import { describe, expect, it } from 'vitest';
import { TokenRoles } from '../../services/api/auth.js';
import { contentTypeAllowed } from '../../services/api/body.js';
import { MAX_JSON_DEPTH, checkEnvelope, jsonDepthExceeds } from '../../shared/envelope.js';
import { BATCH_ID_RE, batchIdMs, parseBatchRef } from '../../shared/ids.js';
import { batchKey, checkParamValue, listPrefix, parseStoragePath, routePattern } from '../../shared/paths.js';

const body = (s: string): Buffer => Buffer.from(s, 'utf8');

describe('push envelope checks', () => {
  it('accepts the Starfish envelope and counts events', () => {
    expect(checkEnvelope(body('{"data":{"events":[{"a":1},{}]},"baseHash":null}'))).toMatchObject({ ok: true, events: 2 });
    expect(checkEnvelope(body('{"data":{"events":[]}}'))).toMatchObject({ ok: true, events: 0 });
  });

  it.each([
    ['', /empty body/],
    ['{"data":', /malformed JSON/],
    ['[1]', /must be a JSON object.*an array/],
    ['{"data":[]}', /"data" must be an object/],
    ['{"data":{"events":"x"}}', /"data.events" must be an array, got a string/],
    ['{"data":{"events":[{},null]}}', /data\.events\[1\] must be a JSON object, got null/],
    ['{"data":{"events":[{},{},[1]]}}', /data\.events\[2\] must be a JSON object, got an array/],
  ])('refuses %j', (text, message) => {
    const r = checkEnvelope(body(text));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(message);
  });

  it('never echoes body text in a JSON syntax error', () => {
    const r = checkEnvelope(body('{"data":{"events":[{"distinct_id":"secret-value" oops}]}}'));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).not.toContain('secret-value');
  });

  it('refuses invalid UTF-8 and deep nesting before parsing', () => {
    const bad = Buffer.from([...Buffer.from('{"data":{"events":[{"e":"'), 0xc3, 0x28, ...Buffer.from('"}]}}')]);
    expect(checkEnvelope(bad)).toEqual({ ok: false, error: 'body is not valid UTF-8' });
    const deep = `{"data":{"events":[${'['.repeat(5000)}${']'.repeat(5000)}]}}`;
    expect(checkEnvelope(body(deep))).toMatchObject({ ok: false });
    expect(jsonDepthExceeds(`${'['.repeat(MAX_JSON_DEPTH)}${']'.repeat(MAX_JSON_DEPTH)}`, MAX_JSON_DEPTH)).toBe(false);
    expect(jsonDepthExceeds(`${'['.repeat(MAX_JSON_DEPTH + 1)}`, MAX_JSON_DEPTH)).toBe(true);
    // brackets inside strings (and escaped quotes) do not count
    expect(jsonDepthExceeds(`["${'['.repeat(100)}\\"${'{'.repeat(100)}"]`, 2)).toBe(false);
  });
});

describe('storage paths and params', () => {
  const t = parseStoragePath('events/{app}/{batchId}');
  it('derives routes, list prefix and keys', () => {
    expect(t.batchParam).toBe('batchId');
    expect(t.prefixParams).toEqual(['app']);
    expect(routePattern(t.segments)).toBe('events/:app/:batchId');
    expect(listPrefix(t, { app: 'shop' })).toBe('events/shop/');
    expect(batchKey(t, { app: 'shop' }, '1782933157690-0000-735223')).toBe('events/shop/1782933157690-0000-735223.parquet');
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
