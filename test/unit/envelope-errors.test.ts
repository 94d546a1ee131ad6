/**
 * A refused push body carries an EnvelopeErrorCode, and the API's status and metric label come
 * from the code, never from the message (services/api/push/admission/5-envelope.ts).
 */
import { describe, expect, it } from 'vitest';
import {
  EnvelopeError,
  type EnvelopeErrorCode,
  MAX_JSON_DEPTH,
  checkEnvelope,
  scanEnvelope,
} from '../../shared/envelope.js';
import { prepareBatch } from '../../shared/parquet/encode.js';
import { envelopeRejectReason } from '../../services/api/push/admission/5-envelope.js';

const cases: [string, Buffer, EnvelopeErrorCode, 'bad_json' | 'bad_envelope'][] = [
  ['no bytes', Buffer.alloc(0), 'empty', 'bad_envelope'],
  ['only whitespace', Buffer.from(' \n'), 'empty', 'bad_envelope'],
  ['bytes that are not UTF-8', Buffer.from([0x7b, 0xff, 0x7d]), 'bad_utf8', 'bad_json'],
  ['malformed JSON', Buffer.from('{"data":{"events":['), 'bad_json', 'bad_json'],
  ['text that is not JSON', Buffer.from('hello'), 'bad_json', 'bad_json'],
  ['an array of events', Buffer.from('[{"event":"a"}]'), 'bad_envelope', 'bad_envelope'],
  ['no "data"', Buffer.from('{"events":[]}'), 'bad_envelope', 'bad_envelope'],
  ['an event that is not an object', Buffer.from('{"data":{"events":[1]}}'), 'bad_envelope', 'bad_envelope'],
  ['"data" twice', Buffer.from('{"data":{"events":[]},"data":{"events":[]}}'), 'bad_envelope', 'bad_envelope'],
  ['an event key twice', Buffer.from('{"data":{"events":[{"a":1,"a":2}]}}'), 'duplicate_key', 'bad_envelope'],
  [
    'nesting too deep',
    Buffer.from(`{"data":{"events":[{"a":${'['.repeat(MAX_JSON_DEPTH)}${']'.repeat(MAX_JSON_DEPTH)}}]}}`),
    'too_deep',
    'bad_envelope',
  ],
  // The words of a message prove nothing: a key named "UTF-8" is a shape problem, not bad JSON.
  [
    'a duplicate key named "UTF-8"',
    Buffer.from('{"data":{"events":[{"UTF-8":1,"UTF-8":2}]}}'),
    'duplicate_key',
    'bad_envelope',
  ],
  ['no "data" but a key "malformed JSON"', Buffer.from('{"malformed JSON":1}'), 'bad_envelope', 'bad_envelope'],
];

describe('envelope error codes', () => {
  it.each(cases)('%s: %s', (_name, body, code, reason) => {
    const checked = checkEnvelope(body);
    expect(checked).toMatchObject({ ok: false, code });
    expect(checkEnvelope(body, { text: true })).toMatchObject({ ok: false, code });
    // The plugin's own scan (bodies it encodes) gives the same code and words.
    expect(prepareBatch(body)).toEqual({ ok: false, code, reason: checked.ok ? '' : checked.error });
    expect(envelopeRejectReason(code)).toBe(reason);
  });

  it('scanEnvelope reports the code of the EnvelopeError it caught', () => {
    const r = scanEnvelope(Buffer.from('{"data":{"events":[{"a":1} 2]}}'));
    expect(r).toMatchObject({ ok: false, code: 'bad_json', error: expect.stringMatching(/^malformed JSON at byte/) });
    const e = new EnvelopeError('too_deep', 'deep');
    expect([e.name, e.code, e.message, e instanceof Error]).toEqual(['EnvelopeError', 'too_deep', 'deep', true]);
  });
});
