/**
 * The push envelope's JSON Schema in the OpenAPI document (contract/envelope-schema.ts) against
 * the byte scanner that validates pushes (shared/envelope.ts): one corpus of bodies, the same
 * verdict from both, except the named refusals JSON Schema cannot express (it sees parsed JSON).
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, scanEnvelope } from '../../shared/envelope.js';
import { DEFAULT_SYNC_CONFIG, parseSyncConfig } from '../../shared/config.js';
import { openApiDocument } from '../../services/api/contract/document.js';
import { ADVERSARIAL_SHAPES, adversarialBody, plainBody } from '../helpers/adversarial-bodies.js';

const deep = (n: number): string => `${'['.repeat(n)}${']'.repeat(n)}`;

/** Accepted by JSON Schema, refused by the scanner alone: a duplicate key (in an event, or data/events twice), depth over 64, bytes that are not UTF-8. */
const SCANNER_ONLY: Record<string, string | Buffer> = {
  'a duplicate key in an event': '{"data":{"events":[{"a":1,"a":2}]}}',
  'a duplicate key, spelled with an escape': '{"data":{"events":[{"a_b":1,"a\\u005fb":2}]}}',
  '"data" twice': '{"data":{"events":[]},"data":{"events":[]}}',
  '"events" twice': '{"data":{"events":[],"events":[]}}',
  'nesting over 64 in an event': `{"data":{"events":[{"a":${deep(MAX_JSON_DEPTH)}}]}}`,
  'nesting over 64 in another member': `{"data":{"events":[]},"x":${deep(MAX_JSON_DEPTH + 1)}}`,
  'bytes that are not UTF-8 in a string': Buffer.concat([
    Buffer.from('{"data":{"events":[{"a":"'),
    Buffer.from([0xff]),
    Buffer.from('"}]}}'),
  ]),
};

/** Both accept or both refuse. */
const SAME: Record<string, string | Buffer> = {
  'empty events': '{"data":{"events":[]}}',
  // Duplicate keys are refused in events and for "data"/"events" only: elsewhere the scanner lets them by, as JSON Schema does.
  'a duplicate key in baseHash': '{"data":{"events":[]},"baseHash":{"x":1,"x":1}}',
  'with baseHash null': '{"data":{"events":[{"a":1}]},"baseHash":null}',
  'baseHash a string': '{"data":{"events":[{}]},"baseHash":"abc"}',
  'other top-level members': '{"x":[1,2,{"y":null}],"data":{"events":[{}]},"z":"w"}',
  'other members of data': '{"data":{"events":[{}],"n":1e400}}',
  'numbers JSON.parse rounds': '{"data":{"events":[{"a":1e400,"b":-0,"c":123456789012345678901234567890}]}}',
  'a lone surrogate escape': '{"data":{"events":[{"a":"\\ud800"}]}}',
  'nesting at 64 in an event': `{"data":{"events":[{"a":${deep(MAX_JSON_DEPTH - 1)}}]}}`,
  unicode: '{"data":{"events":[{"é":"日本"}]}}',
  whitespace: ' \n{ "data" : { "events" : [ { } ] } }\t',
  'no bytes': '',
  'only whitespace': ' \n',
  'not JSON': 'hello',
  truncated: '{"data":{"events":[',
  'trailing bytes': '{"data":{"events":[]}} x',
  'trailing comma': '{"data":{"events":[{},]}}',
  'a bare array of events': '[{"event":"a"}]',
  'a string': '"data"',
  null: 'null',
  'no data': '{"events":[]}',
  'an empty object': '{}',
  'data an array': '{"data":[]}',
  'data null': '{"data":null}',
  'data without events': '{"data":{}}',
  'events an object': '{"data":{"events":{}}}',
  'events null': '{"data":{"events":null}}',
  'an event a number': '{"data":{"events":[1]}}',
  'an event an array': '{"data":{"events":[[]]}}',
  'an event null': '{"data":{"events":[{},null]}}',
  'an event a string': '{"data":{"events":["x"]}}',
  'single quotes': "{'data':{'events':[]}}",
  'a comment': '{"data":{"events":[]}/* */}',
  NaN: '{"data":{"events":[{"a":NaN}]}}',
  'a leading zero': '{"data":{"events":[{"a":01}]}}',
  'a control character in a string': '{"data":{"events":[{"a":"\u0001"}]}}',
  'a BOM': '\ufeff{"data":{"events":[]}}',
  'plain events (8 KB)': plainBody(8192),
  ...Object.fromEntries(
    Object.keys(ADVERSARIAL_SHAPES).map((shape) => [`adversarial: ${shape}`, adversarialBody(shape, 16_384)]),
  ),
};

const envelopeSchema = (() => {
  const doc = openApiDocument(parseSyncConfig(DEFAULT_SYNC_CONFIG)) as {
    paths: Record<string, { post?: { requestBody: { content: Record<string, { schema: object }> } } }>;
  };
  const push = doc.paths['/push/events/{app}/{batchId}']?.post;
  if (!push) throw new Error('no push route in the document');
  return push.requestBody.content['application/json']?.schema ?? {};
})();
const validate = new Ajv2020({ strict: true }).compile(envelopeSchema);

/**
 * JSON Schema's verdict: the body parses as JSON (decoded as UTF-8, a leading byte order mark
 * ignored as RFC 8259 §8.1 lets a parser do, and as the scanner does) and fits the schema.
 */
function schemaAccepts(body: Buffer): boolean {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8').replace(/^\ufeff/, ''));
  } catch {
    return false;
  }
  return validate(value);
}

describe('the push envelope schema of the document describes what the scanner accepts', () => {
  it('same verdict for every body of the corpus', () => {
    const counts = { accepted: 0, refused: 0 };
    for (const [name, text] of Object.entries(SAME)) {
      const body = Buffer.isBuffer(text) ? text : Buffer.from(text);
      const scanner = scanEnvelope(body).ok;
      expect(schemaAccepts(body), name).toBe(scanner);
      counts[scanner ? 'accepted' : 'refused']++;
    }
    // The corpus has both kinds, enough of each to mean something.
    expect(counts.accepted).toBeGreaterThanOrEqual(20);
    expect(counts.refused).toBeGreaterThanOrEqual(20);
  });

  it('the scanner-only refusals: accepted by JSON Schema, refused by the scanner (said in the schema description)', () => {
    for (const [name, text] of Object.entries(SCANNER_ONLY)) {
      const body = Buffer.isBuffer(text) ? text : Buffer.from(text);
      expect(scanEnvelope(body).ok, name).toBe(false);
      expect(schemaAccepts(body), name).toBe(true);
    }
    expect(JSON.stringify(envelopeSchema)).toMatch(/duplicate key.*64 levels.*UTF-8/);
  });
});
