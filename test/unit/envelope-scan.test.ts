/**
 * The push-body scanner (shared/envelope.ts) on its own: it must accept exactly what JSON.parse
 * accepts, and hand the sink each event member's bytes as sent.
 */
import { describe, expect, it } from 'vitest';
import {
  VALUE_ARRAY,
  VALUE_BOOLEAN,
  VALUE_NULL,
  VALUE_NUMBER,
  VALUE_OBJECT,
  VALUE_STRING,
  type EventSink,
  type ValueKind,
  scanEnvelope,
} from '../../shared/envelope.js';
import { columnValues, parseBatchColumns } from '../../shared/parquet/encode.js';
import { HARD_VALUES, arrayOf, decodedString, envelopeOf, member, objectOf, spaced } from '../helpers/exact-corpus.js';

const bytes = (s: string): Uint8Array => Buffer.from(s, 'utf8');

/** A sink that records what it is told, as text. */
class RecordingSink implements EventSink {
  readonly calls: string[] = [];
  readonly members: { key: string; raw: string; kind: ValueKind; escaped: boolean; spaced: boolean }[] = [];
  constructor(private readonly body: Uint8Array) {}
  private text(start: number, end: number): string {
    return Buffer.from(this.body.subarray(start, end)).toString('utf8');
  }
  beginEvent(index: number): void {
    this.calls.push(`begin ${index}`);
  }
  member(
    keyStart: number,
    keyEnd: number,
    _keyEscaped: boolean,
    valueStart: number,
    valueEnd: number,
    kind: ValueKind,
    escaped: boolean,
    spacedValue: boolean,
  ): void {
    this.members.push({
      key: this.text(keyStart, keyEnd),
      raw: this.text(valueStart, valueEnd),
      kind,
      escaped,
      spaced: spacedValue,
    });
    this.calls.push('member');
  }
  endEvent(): void {
    this.calls.push('end');
  }
}

/** Deterministic PRNG (mulberry32), so a failure names a case that can be re-run. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Near-JSON seeds: valid values, and the classic near misses. */
const SEEDS = [
  ...HARD_VALUES,
  '01',
  '-',
  '1.',
  '.5',
  '+1',
  '1e',
  '1e+',
  '0x10',
  'tru',
  'nul',
  'falsey',
  'NaN',
  'Infinity',
  '[1,]',
  '[,1]',
  '{"a"1}',
  '{"a":1,}',
  '{a:1}',
  "'x'",
  String.raw`"\x"`,
  String.raw`"\u12"`,
  String.raw`"\u12G4"`,
  '"tab\there"',
  '"new\nline"',
  '"\u007f is fine"',
  '"\u0080 is fine"',
  '[1 2]',
  '{"a":1 "b":2}',
  '"unterminated',
];
const ALPHABET = [
  '{',
  '}',
  '[',
  ']',
  '"',
  ',',
  ':',
  '.',
  '-',
  '+',
  'e',
  'E',
  '0',
  '1',
  '9',
  '\\',
  'u',
  'n',
  't',
  'f',
  ' ',
  '\t',
  '\n',
  '\u0001',
  'x',
  'é',
];

describe('scanEnvelope accepts exactly what JSON.parse accepts', () => {
  it('on 4,000 mutations of near-JSON values placed inside an event', () => {
    const rand = prng(20261201);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
    let accepted = 0;
    for (let n = 0; n < 4000; n++) {
      let v = pick(SEEDS);
      const edits = Math.floor(rand() * 3);
      for (let e = 0; e < edits; e++) {
        const at = Math.floor(rand() * (v.length + 1));
        const op = rand();
        if (op < 0.4) v = v.slice(0, at) + pick(ALPHABET) + v.slice(at);
        else if (op < 0.7) v = v.slice(0, at) + v.slice(at + 1);
        else v = v.slice(0, at) + pick(ALPHABET) + v.slice(at + 1);
      }
      const body = `{"data":{"events":[{"p":${v}}]}}`;
      let parses = true;
      try {
        JSON.parse(body);
      } catch {
        parses = false;
      }
      const scan = scanEnvelope(bytes(body));
      if (scan.ok !== parses)
        throw new Error(
          `case ${n}: scanner ${scan.ok ? 'accepts' : 'refuses'} ${JSON.stringify(v)}, JSON.parse ${parses ? 'accepts' : 'refuses'}`,
        );
      if (parses) accepted++;
    }
    // Both sides of the grammar were exercised.
    expect(accepted).toBeGreaterThan(800);
    expect(accepted).toBeLessThan(3200);
  });
});

describe('scanEnvelope members', () => {
  it('reports each top-level member with its kind, raw text and flags, event by event', () => {
    const body = bytes(
      String.raw`{"data":{"events":[{"s":"a\"b","n":-0.5e+3,"t":true,"z":null,"o":{ "a" : 1 },"a":[]},{}]},"baseHash":null}`,
    );
    const sink = new RecordingSink(body);
    expect(scanEnvelope(body, sink)).toEqual({ ok: true, events: 2, everyEventHasMessageId: false });
    expect(sink.calls).toEqual([
      'begin 0',
      'member',
      'member',
      'member',
      'member',
      'member',
      'member',
      'end',
      'begin 1',
      'end',
    ]);
    expect(sink.members).toEqual([
      { key: '"s"', raw: String.raw`"a\"b"`, kind: VALUE_STRING, escaped: true, spaced: false },
      { key: '"n"', raw: '-0.5e+3', kind: VALUE_NUMBER, escaped: false, spaced: false },
      { key: '"t"', raw: 'true', kind: VALUE_BOOLEAN, escaped: false, spaced: false },
      { key: '"z"', raw: 'null', kind: VALUE_NULL, escaped: false, spaced: false },
      { key: '"o"', raw: '{ "a" : 1 }', kind: VALUE_OBJECT, escaped: false, spaced: true },
      { key: '"a"', raw: '[]', kind: VALUE_ARRAY, escaped: false, spaced: false },
    ]);
  });

  it('names the byte where JSON goes wrong, counting multi-byte characters as bytes', () => {
    expect(scanEnvelope(bytes('{"data":{"events":[{"é":1 2}]}}'))).toEqual({
      ok: false,
      error: "malformed JSON at byte 27: expected ',' or '}' after a member of an event",
      code: 'bad_json',
    });
  });
});

describe('stored text of the hard corpus (encoder columns)', () => {
  it('keeps every value as sent, whitespace outside strings removed', () => {
    const events = HARD_VALUES.map(
      (v) => `{ ${member('properties', spaced(v))} , ${member('x', spaced(objectOf([v, v])))} }`,
    );
    const r = parseBatchColumns(envelopeOf(events));
    if (!r.ok) throw new Error(r.reason);
    expect(columnValues(r.columns.properties)).toEqual(
      HARD_VALUES.map((v) => (v.startsWith('"') ? decodedString(v) : v)),
    );
    expect(columnValues(r.columns.extra)).toEqual(HARD_VALUES.map((v) => `{"x":${objectOf([v, v])}}`));
  });

  it('keeps a pretty-printed container byte for byte once minified', () => {
    const compact = arrayOf(HARD_VALUES);
    const r = parseBatchColumns(envelopeOf([`{ ${member('context', spaced(compact))} }`]));
    if (!r.ok) throw new Error(r.reason);
    expect(columnValues(r.columns.context)).toEqual([compact]);
  });
});
