/**
 * The one validator of a push body. The API runs it before enqueueing (so the queue never holds
 * a batch the encoder would refuse) and the encoder runs the same function again, with a sink,
 * to read each event's top-level members as the exact JSON text the client sent.
 *
 * It is a single-pass scanner over the body's UTF-8 bytes instead of `JSON.parse`: Node 20's
 * `JSON.parse` has no access to source text, so a value such as `1e400`, `-0` or a 30-digit
 * integer cannot survive a parse/stringify round trip. The scanner accepts exactly the JSON
 * grammar of RFC 8259 (the texts `JSON.parse` accepts), checks the envelope shape, the nesting
 * depth and duplicate keys, and hands each event member's byte range to the sink, which copies
 * the bytes straight into the Parquet columns.
 *
 * Why bytes and not the decoded string: every structural character of JSON is ASCII and no byte
 * of a multi-byte UTF-8 sequence is below 0x80, so scanning bytes is exact; and in a process that
 * has loaded ioredis (both services do: its `class VerbatimString extends String` defeats V8's
 * fast path for `String#charCodeAt`) a charCodeAt loop ran 4-5x slower than the same loop over a
 * Uint8Array (measured: 23 vs 5 ns per character on the bench machine).
 */
import { isUtf8 } from 'node:buffer';

/**
 * Deepest nesting of objects/arrays allowed inside an event. The event object itself is level 1,
 * so `{"a":1}` has depth 1, `{"a":[1]}` depth 2, and an event whose innermost container is at
 * level 64 is accepted while level 65 is refused. Other values of the envelope (`baseHash`, any
 * unknown member) count from their own value as level 1. Far above real events and far below
 * anything that strains the scanner's recursion (at most 64 + 3 frames deep).
 */
export const MAX_JSON_DEPTH = 64;

/** The envelope a push body must have, quoted in every error about its shape. */
export const EXPECTED_ENVELOPE = '{"data":{"events":[...]},"baseHash":null}';

/** What kind of JSON value a member holds (see {@link EventSink.member}). */
export const VALUE_STRING = 0;
export const VALUE_NUMBER = 1;
export const VALUE_BOOLEAN = 2;
export const VALUE_NULL = 3;
export const VALUE_OBJECT = 4;
export const VALUE_ARRAY = 5;
export type ValueKind = 0 | 1 | 2 | 3 | 4 | 5;

/**
 * Receives the events of a valid envelope member by member, in body order. Positions are byte
 * offsets into the body the scanner was given; ranges are half-open.
 */
export interface EventSink {
  /** Called before the members of `data.events[index]` (indexes count up from 0). */
  beginEvent(index: number): void;
  /**
   * One top-level member of the current event. Its key is unique within the event.
   *
   * @param keyStart - Offset of the key's opening quote; `keyEnd` is just past its closing quote.
   * @param keyEscaped - The key holds a backslash escape (decode it before comparing).
   * @param valueStart - Offset of the value's first byte; `valueEnd` is just past its last.
   * @param kind - One of the `VALUE_*` constants.
   * @param escaped - For a string value: it holds a backslash escape.
   * @param spaced - The value holds whitespace outside strings (a container from a pretty-printer).
   */
  member(keyStart: number, keyEnd: number, keyEscaped: boolean, valueStart: number, valueEnd: number, kind: ValueKind, escaped: boolean, spaced: boolean): void;
  /** Called after the last member of the event begun last. */
  endEvent(): void;
}

/** Outcome of {@link scanEnvelope}: the number of events, or an error naming the problem. */
export type EnvelopeScan = { ok: true; events: number } | { ok: false; error: string };

/** Outcome of {@link checkEnvelope}: also the decoded text when asked, for whoever encodes it next. */
export type EnvelopeCheck = { ok: true; text?: string; events: number } | { ok: false; error: string };

class ScanError extends Error {}

/** Longest key quoted in an error message; keys are field names, but bounded all the same. */
const MAX_QUOTED_KEY = 40;

function quoteKey(key: string): string {
  return JSON.stringify(key.length > MAX_QUOTED_KEY ? `${key.slice(0, MAX_QUOTED_KEY)}…` : key);
}

/** Keys per event compared pairwise before a Set takes over (real events have about ten). */
const LINEAR_KEYS = 32;
const textDecoder = new TextDecoder();

const TRUE = [116, 114, 117, 101];
const FALSE = [102, 97, 108, 115, 101];
const NULL = [110, 117, 108, 108];

/**
 * A recursive-descent scanner over one body. Recursion is bounded: a container deeper than
 * MAX_JSON_DEPTH is refused before it is entered.
 */
class Scanner {
  pos: number;
  /** Set by skipWs when it skipped anything: the value just scanned holds whitespace. */
  sawWs = false;
  /** Set by string(): the string just scanned holds a backslash escape. */
  escaped = false;
  /** Where depth errors point: an event index, or -1 for a value outside data.events. */
  eventIndex = -1;
  /** Top-level keys seen, for the error about a missing "data" (at most 5 are named). */
  readonly topKeys: string[] = [];
  /**
   * Key ranges of the current event: start, end, escaped (0/1), three numbers per key, the first
   * `keyCount` of them. Fixed size and reused: truncating a JS array frees its storage, and every
   * event would allocate it again.
   */
  private readonly eventKeys = new Float64Array(LINEAR_KEYS * 3);
  private keyCount = 0;
  /** The current event's keys once it has more than LINEAR_KEYS of them. */
  private keySet: Set<string> | undefined;

  constructor(
    private readonly buf: Uint8Array,
    private readonly sink: EventSink | undefined,
    start: number,
  ) {
    this.pos = start;
  }

  fail(message: string): never {
    throw new ScanError(message);
  }

  syntax(expected: string): never {
    if (this.pos >= this.buf.length) this.fail(`malformed JSON: the body ends where ${expected} was expected`);
    this.fail(`malformed JSON at byte ${this.pos}: expected ${expected}`);
  }

  skipWs(): void {
    const b = this.buf;
    let p = this.pos;
    for (;;) {
      const c = b[p];
      if (c === 32 || c === 10 || c === 13 || c === 9) p++;
      else break;
    }
    if (p !== this.pos) {
      this.sawWs = true;
      this.pos = p;
    }
  }

  expect(code: number, what: string): void {
    if (this.buf[this.pos] !== code) this.syntax(what);
    this.pos++;
  }

  /** What the value at pos looks like, for shape errors (never its contents). */
  describe(): string {
    if (this.pos >= this.buf.length) return 'nothing';
    const c = this.buf[this.pos];
    switch (c) {
      case 123:
        return 'an object';
      case 91:
        return 'an array';
      case 34:
        return 'a string';
      case 116:
      case 102:
        return 'a boolean';
      case 110:
        return 'null';
      default:
        return c === 45 || isDigit(c) ? 'a number' : 'text that is not JSON';
    }
  }

  /**
   * A value of the wrong type where the envelope needs an object or array. A body that ends or
   * holds no JSON value there is malformed JSON, not a shape problem.
   */
  wrongType(message: (got: string) => string): never {
    const got = this.describe();
    if (got === 'nothing' || got === 'text that is not JSON') this.syntax('a JSON value');
    this.fail(message(got));
  }

  /** A string starting at pos (an opening quote); leaves pos after the closing quote. */
  string(): void {
    const b = this.buf;
    let p = this.pos + 1;
    let escaped = false;
    for (;;) {
      const c = b[p];
      if (c === 34) break;
      if (c === 92) {
        escaped = true;
        const e = b[p + 1];
        // " \ / b f n r t
        if (e === 34 || e === 92 || e === 47 || e === 98 || e === 102 || e === 110 || e === 114 || e === 116) {
          p += 2;
        } else if (e === 117 && isHex(b[p + 2]) && isHex(b[p + 3]) && isHex(b[p + 4]) && isHex(b[p + 5])) {
          p += 6;
        } else {
          this.pos = p;
          this.syntax('a valid escape (\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)');
        }
        continue;
      }
      // Control characters must be escaped; undefined means the body ended inside the string.
      if (!(c >= 32)) {
        this.pos = p;
        this.syntax('a closing quote (control characters must be escaped inside strings)');
      }
      p++;
    }
    this.pos = p + 1;
    this.escaped = escaped;
  }

  /** A key of the envelope or of `data`, decoded (a handful per body). */
  envelopeKey(): string {
    if (this.buf[this.pos] !== 34) this.syntax('a string key');
    const start = this.pos;
    this.string();
    return this.decode(start, this.pos);
  }

  number(): void {
    const b = this.buf;
    let p = this.pos;
    if (b[p] === 45) p++;
    let c = b[p];
    if (c === 48) p++;
    else if (c >= 49 && c <= 57) {
      p++;
      while (isDigit(b[p])) p++;
    } else {
      this.pos = p;
      this.syntax('a digit');
    }
    if (b[p] === 46) {
      p++;
      if (!isDigit(b[p])) {
        this.pos = p;
        this.syntax('a digit after the decimal point');
      }
      while (isDigit(b[p])) p++;
    }
    c = b[p];
    if (c === 101 || c === 69) {
      p++;
      c = b[p];
      if (c === 43 || c === 45) p++;
      if (!isDigit(b[p])) {
        this.pos = p;
        this.syntax('a digit in the exponent');
      }
      while (isDigit(b[p])) p++;
    }
    this.pos = p;
  }

  literal(word: readonly number[], kind: ValueKind): ValueKind {
    const b = this.buf;
    const p = this.pos;
    for (let i = 1; i < word.length; i++) {
      if (b[p + i] !== word[i]) {
        this.pos = p + i;
        this.syntax('a JSON value (true, false or null)');
      }
    }
    this.pos = p + word.length;
    return kind;
  }

  /** Any JSON value at pos; `depth` is the level a container here would have. */
  value(depth: number): ValueKind {
    const c = this.buf[this.pos];
    switch (c) {
      case 34:
        this.string();
        return VALUE_STRING;
      case 123:
        this.object(depth);
        return VALUE_OBJECT;
      case 91:
        this.array(depth);
        return VALUE_ARRAY;
      case 116:
        return this.literal(TRUE, VALUE_BOOLEAN);
      case 102:
        return this.literal(FALSE, VALUE_BOOLEAN);
      case 110:
        return this.literal(NULL, VALUE_NULL);
      default:
        if (c === 45 || (c >= 48 && c <= 57)) {
          this.number();
          return VALUE_NUMBER;
        }
        return this.syntax('a JSON value');
    }
  }

  tooDeep(): never {
    const where = this.eventIndex >= 0 ? `data.events[${this.eventIndex}]` : 'a value of the envelope';
    this.fail(`JSON nesting deeper than ${MAX_JSON_DEPTH} levels in ${where} (the event object is level 1)`);
  }

  /** Past a member or element: `,` (returns false) or the closing `close` (returns true). */
  next(close: number, what: string): boolean {
    this.skipWs();
    const c = this.buf[this.pos];
    if (c === close) {
      this.pos++;
      return true;
    }
    if (c !== 44) this.syntax(what);
    this.pos++;
    this.skipWs();
    return false;
  }

  object(depth: number): void {
    if (depth > MAX_JSON_DEPTH) this.tooDeep();
    this.pos++;
    this.skipWs();
    if (this.buf[this.pos] === 125) {
      this.pos++;
      return;
    }
    do {
      if (this.buf[this.pos] !== 34) this.syntax('a string key');
      this.string();
      this.skipWs();
      this.expect(58, "':'");
      this.skipWs();
      this.value(depth + 1);
    } while (!this.next(125, "',' or '}'"));
  }

  array(depth: number): void {
    if (depth > MAX_JSON_DEPTH) this.tooDeep();
    this.pos++;
    this.skipWs();
    if (this.buf[this.pos] === 93) {
      this.pos++;
      return;
    }
    do this.value(depth + 1);
    while (!this.next(93, "',' or ']'"));
  }

  /**
   * Refuses a key the current event already has: storing both is impossible, dropping one
   * silent. Events have a handful of keys, compared byte by byte; past LINEAR_KEYS an event's
   * keys go into a Set, so a hostile event with a million keys costs linear time, not quadratic.
   */
  checkUnique(index: number, start: number, end: number, escaped: boolean): void {
    const keys = this.eventKeys;
    const n = this.keyCount * 3;
    let seen = this.keySet;
    if (seen === undefined && n === keys.length) {
      seen = this.keySet = new Set<string>();
      for (let k = 0; k < n; k += 3) seen.add(this.decode(keys[k], keys[k + 1]));
    }
    if (seen !== undefined) {
      const key = this.decode(start, end);
      if (seen.has(key)) this.duplicate(index, key);
      seen.add(key);
      return;
    }
    const b = this.buf;
    const len = end - start;
    for (let k = 0; k < n; k += 3) {
      const s = keys[k];
      const e = keys[k + 1];
      let same: boolean;
      if (escaped || keys[k + 2] === 1) {
        same = this.decode(s, e) === this.decode(start, end);
      } else {
        if (e - s !== len) continue;
        let i = 1;
        while (i < len && b[s + i] === b[start + i]) i++;
        same = i === len;
      }
      if (same) this.duplicate(index, this.decode(start, end));
    }
    keys[n] = start;
    keys[n + 1] = end;
    keys[n + 2] = escaped ? 1 : 0;
    this.keyCount++;
  }

  duplicate(index: number, key: string): never {
    this.fail(`data.events[${index}] has the key ${quoteKey(key)} twice; each top-level key of an event must be unique`);
  }

  /** The key or string `buf[start, end)` (quotes included) as a JS string. */
  decode(start: number, end: number): string {
    const text = textDecoder.decode(this.buf.subarray(start, end));
    return text.includes('\\') ? (JSON.parse(text) as string) : text.slice(1, -1);
  }

  /** One event object at pos (level 1), its top-level members handed to the sink. */
  event(index: number): void {
    const sink = this.sink;
    this.keyCount = 0;
    this.keySet = undefined;
    this.eventIndex = index;
    sink?.beginEvent(index);
    this.pos++;
    this.skipWs();
    if (this.buf[this.pos] === 125) {
      this.pos++;
      sink?.endEvent();
      return;
    }
    do {
      if (this.buf[this.pos] !== 34) this.syntax('a string key');
      const keyStart = this.pos;
      this.string();
      const keyEnd = this.pos;
      const keyEscaped = this.escaped;
      this.checkUnique(index, keyStart, keyEnd, keyEscaped);
      this.skipWs();
      this.expect(58, "':'");
      this.skipWs();
      const valueStart = this.pos;
      this.sawWs = false;
      const kind = this.value(2);
      sink?.member(keyStart, keyEnd, keyEscaped, valueStart, this.pos, kind, this.escaped, this.sawWs);
    } while (!this.next(125, "',' or '}' after a member of an event"));
    sink?.endEvent();
  }

  /** The `data.events` array at pos; returns its length. */
  events(): number {
    this.pos++;
    this.skipWs();
    if (this.buf[this.pos] === 93) {
      this.pos++;
      return 0;
    }
    let i = 0;
    do {
      if (this.buf[this.pos] !== 123) this.wrongType((got) => `data.events[${i}] must be a JSON object, got ${got}`);
      this.event(i++);
      this.eventIndex = -1;
    } while (!this.next(93, "',' or ']' after an event"));
    return i;
  }

  /** The `data` object at pos; returns the number of events. */
  data(): number {
    this.pos++;
    this.skipWs();
    let events = -1;
    if (this.buf[this.pos] === 125) this.pos++;
    else {
      do {
        const key = this.envelopeKey();
        this.skipWs();
        this.expect(58, "':'");
        this.skipWs();
        if (key === 'events') {
          if (events >= 0) this.fail('"data" has the key "events" twice');
          if (this.buf[this.pos] !== 91) {
            this.wrongType((got) => `"data.events" must be an array, got ${got}; expected ${EXPECTED_ENVELOPE}`);
          }
          events = this.events();
        } else {
          this.value(1);
        }
      } while (!this.next(125, "',' or '}'"));
    }
    if (events < 0) this.fail(`"data" has no "events" array; expected ${EXPECTED_ENVELOPE}`);
    return events;
  }

  /** The whole body: one envelope object and nothing after it but whitespace. */
  envelope(): number {
    this.skipWs();
    if (this.buf[this.pos] !== 123) {
      if (this.pos >= this.buf.length) this.fail(`empty body: expected ${EXPECTED_ENVELOPE}`);
      // A bare array of events is what several SDKs send; say where the array belongs.
      this.wrongType((got) => `body must be a JSON object ${EXPECTED_ENVELOPE}, got ${got}${got === 'an array' ? ' (an array of events belongs in "data.events")' : ''}`);
    }
    this.pos++;
    this.skipWs();
    let events = -1;
    if (this.buf[this.pos] === 125) this.pos++;
    else {
      do {
        const key = this.envelopeKey();
        if (this.topKeys.length < 6) this.topKeys.push(key);
        this.skipWs();
        this.expect(58, "':'");
        this.skipWs();
        if (key === 'data') {
          if (events >= 0) this.fail('the body has the key "data" twice');
          if (this.buf[this.pos] !== 123) {
            this.wrongType((got) => `"data" must be an object holding "events", got ${got}; expected ${EXPECTED_ENVELOPE}`);
          }
          events = this.data();
        } else {
          this.value(1);
        }
      } while (!this.next(125, "',' or '}'"));
    }
    this.skipWs();
    if (this.pos < this.buf.length) this.syntax('the end of the body');
    if (events < 0) this.fail(this.missingData());
    return events;
  }

  /** The error for an object without "data", naming the keys it has (SDK-shaped bodies land here). */
  missingData(): string {
    if (this.topKeys.length === 0) return `body has no "data": got an empty object, expected ${EXPECTED_ENVELOPE}`;
    const shown = this.topKeys.slice(0, 5).map(quoteKey).join(', ');
    const more = this.topKeys.length > 5 ? ', …' : '';
    const hint = this.topKeys.some((k) => k === 'events' || k === 'batch') ? ' (the array of events belongs in "data.events")' : '';
    return `body has no "data": got an object with the keys ${shown}${more}${hint}, expected ${EXPECTED_ENVELOPE}`;
  }
}

function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

function isHex(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70);
}

/** Offset of the first byte after a leading UTF-8 BOM (which `TextDecoder` also drops). */
function bodyStart(body: Uint8Array): number {
  return body.length >= 3 && body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
}

/**
 * Validates a push body: UTF-8, RFC 8259 JSON, the `{ "data": { "events": [ {…} ] } }` shape,
 * nesting within {@link MAX_JSON_DEPTH}, no duplicate top-level key inside an event and no
 * duplicate `data`/`events`. With a sink, also reports every event member's byte range. Errors
 * name the problem and a byte offset or an event index, never body contents.
 *
 * @param body - The body's bytes; a leading BOM is skipped.
 * @param utf8Checked - The caller already proved the bytes are UTF-8 (skips a second check).
 */
export function scanEnvelope(body: Uint8Array, sink?: EventSink, utf8Checked = false): EnvelopeScan {
  if (!utf8Checked && !isUtf8(body)) return { ok: false, error: 'body is not valid UTF-8' };
  const scanner = new Scanner(body, sink, bodyStart(body));
  try {
    return { ok: true, events: scanner.envelope() };
  } catch (err) {
    if (err instanceof ScanError) return { ok: false, error: err.message };
    throw err;
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/**
 * The API's check of a push body: {@link scanEnvelope}, and with `text` the body decoded once for
 * an inline encoder. A queued push does not need the text: decoding it would allocate a string the
 * size of the body on every push, only to drop it.
 */
export function checkEnvelope(body: Uint8Array, opts: { text?: boolean } = {}): EnvelopeCheck {
  if (body.length === 0) return { ok: false, error: `empty body: expected ${EXPECTED_ENVELOPE}` };
  if (!opts.text) return scanEnvelope(body);
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    return { ok: false, error: 'body is not valid UTF-8' };
  }
  const scan = scanEnvelope(body, undefined, true);
  return scan.ok ? { ok: true, text, events: scan.events } : scan;
}
