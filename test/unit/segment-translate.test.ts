/**
 * Issue 46: the Segment body → push envelope translation (pure), and the write keys file's checks.
 */
import { describe, expect, it } from 'vitest';
import { checkEnvelope } from '../../shared/envelope.js';
import { ConfigError, DEFAULT_SYNC_CONFIG, parseSyncConfig } from '../../shared/config.js';
import { translateSegment } from '../../services/api/segment/translate.js';
import { basicUser, parseWriteKeys } from '../../services/api/segment/write-keys.js';

const ok = (body: string, route: Parameters<typeof translateSegment>[1] = 'batch') => {
  const t = translateSegment(Buffer.from(body), route, 1e6);
  if (!t.ok) throw new Error(t.error);
  expect(checkEnvelope(t.bytes).ok).toBe(true);
  return { ...t, json: JSON.parse(t.bytes.toString()) as { data: { events: Record<string, unknown>[] } } };
};

describe('translateSegment', () => {
  it('maps every documented member, keeps the rest (and values) as sent, and drops writeKey', () => {
    const t = ok(
      '{"batch":[{"type":"track","event":"E","userId":"u","anonymousId":"a","timestamp":"T","messageId":"m","properties":{"n":1e400},"context":{"c":1},"name":"x","integrations":{}}],"sentAt":"S","writeKey":"secret-key"}',
    );
    expect(t.bytes.toString()).toBe(
      '{"data":{"events":[{"event_type":"track","event":"E","distinct_id":"u","anonymous_id":"a","ts":"T","message_id":"m","properties":{"n":1e400},"context":{"c":1},"name":"x","integrations":{},"sentAt":"S"}]}}',
    );
    expect(t.writeKey).toBe('secret-key');
    expect(t.bytes.toString()).not.toContain('secret-key');
  });

  it('page and screen map name; identify and group map traits; a colliding member is kept as segment_<name>', () => {
    expect(ok('{"name":"Home","properties":{},"event":"e"}', 'page').json.data.events[0]).toEqual({
      event_type: 'page',
      event: 'Home',
      properties: {},
      segment_event: 'e',
    });
    expect(ok('{"traits":{"a":1},"properties":{"b":2},"type":"track"}', 'identify').json.data.events[0]).toEqual({
      event_type: 'identify',
      properties: { a: 1 },
      segment_properties: { b: 2 },
    });
  });

  it('a batch member applies to each event that lacks it; the event keeps its own', () => {
    const t = ok(
      '{"batch":[{"type":"alias","previousId":"p","sentAt":"own"},{"type":"group","groupId":"g"}],"sentAt":"S","context":{"k":1}}',
    );
    expect(t.json.data.events).toEqual([
      { event_type: 'alias', previousId: 'p', sentAt: 'own', context: { k: 1 } },
      { event_type: 'group', groupId: 'g', sentAt: 'S', context: { k: 1 } },
    ]);
  });

  it('the messageIds decide the idempotency identity: order and sentAt do not matter, a missing one turns it off', () => {
    const a = ok('{"batch":[{"type":"track","messageId":"1"},{"type":"track","messageId":"2"}],"sentAt":"A"}');
    const b = ok('{"batch":[{"type":"track","messageId":"2"},{"type":"track","messageId":"1"}],"sentAt":"B"}');
    expect(a.messageIdsHash).toBeDefined();
    expect(b.messageIdsHash).toBe(a.messageIdsHash);
    expect(ok('{"batch":[{"type":"track","messageId":"1"},{"type":"track"}]}').messageIdsHash).toBeUndefined();
  });

  it('reads keys however they are escaped, keeps spacing valid, and copies unmapped members as sent', () => {
    const t = ok(
      '{"batch":[ { "t\\u0079pe" : "tr\\u0061ck" , "user\\u0049d" : "u" , "a" : [ 1 , 2 ] , "sent\\u0041t" : "own" , "b" : {"c" : null} } ],"sentAt":"S"}',
    );
    expect(t.json.data.events).toEqual([
      { event_type: 'track', distinct_id: 'u', a: [1, 2], sentAt: 'own', b: { c: null } },
    ]);
    // An unmapped key keeps its bytes (escapes included); a mapped one is written under its column.
    expect(t.bytes.toString()).toContain('"sent\\u0041t" : "own"');
    expect(t.bytes.toString()).toContain('"distinct_id":"u"');
  });

  it('many batch-level members and many members per event: each event gets exactly the ones it lacks', () => {
    const top = Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`k${i}`, i]));
    const events = Array.from({ length: 3 }, (_, e) => ({
      type: 'track',
      ...Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${2 * i + e}`, `own-${e}`])),
    }));
    const t = ok(JSON.stringify({ batch: events, ...top }));
    for (const [e, got] of t.json.data.events.entries()) {
      const own = new Set(Array.from({ length: 50 }, (_, i) => `k${2 * i + e}`));
      expect(Object.keys(got)).toHaveLength(1 + 50 + [...Object.keys(top)].filter((k) => !own.has(k)).length);
      for (const k of Object.keys(top)) expect(got[k]).toBe(own.has(k) ? `own-${e}` : top[k]);
    }
  });

  it('refuses what an SDK must drop, naming the problem', () => {
    const no = (body: string, route: Parameters<typeof translateSegment>[1] = 'batch') =>
      translateSegment(Buffer.from(body), route, 1e6);
    expect(no('{"batch":[{"type":"track",}]}')).toMatchObject({
      ok: false,
      code: 'bad_json',
      error: expect.stringContaining('byte 26'),
    });
    expect(no('{"batch":{}}')).toMatchObject({
      ok: false,
      code: 'bad_envelope',
      error: expect.stringContaining('"batch"'),
    });
    expect(no('{"batch":[{"event":"x"}]}')).toMatchObject({
      ok: false,
      code: 'bad_envelope',
      error: expect.stringContaining('batch[0].type'),
    });
    expect(no('{"batch":[{"type":"track","a":1,"a":2}]}')).toMatchObject({
      ok: false,
      code: 'bad_envelope',
      error: expect.stringContaining('batch[0]'),
    });
    expect(no('[]', 'track')).toMatchObject({ ok: false, code: 'bad_envelope' });
    expect(no('', 'track')).toMatchObject({ ok: false, code: 'bad_json' });
    expect(no(Buffer.from([0x7b, 0xff, 0x7d]).toString('latin1'), 'track')).toMatchObject({ ok: false });
  });

  it('bounds the output: batch members copied into many events past the cap are too_large', () => {
    const body = JSON.stringify({
      batch: Array.from({ length: 1000 }, () => ({ type: 'track' })),
      context: { pad: 'x'.repeat(1000) },
    });
    expect(translateSegment(Buffer.from(body), 'batch', 2 * body.length)).toMatchObject({
      ok: false,
      code: 'too_large',
    });
  });
});

describe('write keys', () => {
  const collections = parseSyncConfig(DEFAULT_SYNC_CONFIG).collections;
  it('looks keys up and names the problem of a bad file without the key', () => {
    const keys = parseWriteKeys({ 'key-0123456789': { app: 'web' } }, collections, 'file');
    expect(keys.lookup('key-0123456789')).toEqual({ app: 'web', collection: 'events' });
    expect(keys.lookup('key-012345678')).toBeUndefined();
    expect(() => parseWriteKeys({ 'key-0123456789': { app: 'web', collection: 'nope' } }, collections, 'file')).toThrow(
      /no collection "nope"/,
    );
    expect(() => parseWriteKeys({ 'key-0123456789': { app: '..' } }, collections, 'file')).toThrow(ConfigError);
    expect(() => parseWriteKeys({ 'key-0123456789': { app: 'a', extra: 1 } }, collections, 'file')).toThrow(
      ConfigError,
    );
    const twoParams = parseSyncConfig({
      version: 1,
      collections: [{ ...DEFAULT_SYNC_CONFIG.collections[0], name: 'e2', storagePath: 'e2/{org}/{app}/{batchId}' }],
    }).collections;
    expect(() => parseWriteKeys({ 'key-0123456789': { app: 'a', collection: 'e2' } }, twoParams, 'file')).toThrow(
      /exactly one/,
    );
    try {
      parseWriteKeys({ 'key-0123456789': { app: 'a', collection: 'nope' } }, collections, 'file');
    } catch (err) {
      expect((err as Error).message).not.toContain('key-0123456789');
    }
  });
  it('reads the Basic user name', () => {
    expect(basicUser(`Basic ${Buffer.from('wk:').toString('base64')}`)).toBe('wk');
    expect(basicUser(undefined)).toBeUndefined();
    expect(basicUser('Bearer x')).toBeNull();
  });
});
