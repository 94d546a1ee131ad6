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
 * docs/decisions/0006-byte-scanner-validator.md.
 */
import { isUtf8 } from 'node:buffer';
import { randomBytes } from 'node:crypto';

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
  member(
    keyStart: number,
    keyEnd: number,
    keyEscaped: boolean,
    valueStart: number,
    valueEnd: number,
    kind: ValueKind,
    escaped: boolean,
    spaced: boolean,
  ): void;
  /** Called after the last member of the event begun last. */
  endEvent(): void;
}

/**
 * Outcome of {@link scanEnvelope}: the number of events, or an error naming the problem.
 * `everyEventHasMessageId`: every event has a top-level `message_id` member whose value is a
 * non-empty JSON string (true for an empty `events` array). The key counts however it is spelled
 * (`"message\u005fid"` is the same key, stored in the same column); a nested `message_id`, a
 * number or `""` does not count. A push without an Idempotency-Key is deduplicated by its body
 * only when this is true (docs/reliability.md, "Retries").
 */
export type EnvelopeScan =
  { ok: true; events: number; everyEventHasMessageId: boolean } | { ok: false; error: string; code: EnvelopeErrorCode };

/** Outcome of {@link checkEnvelope}: also the decoded text when asked, for whoever encodes it next. */
export type EnvelopeCheck =
  | { ok: true; text?: string; events: number; everyEventHasMessageId: boolean }
  | { ok: false; error: string; code: EnvelopeErrorCode };

/**
 * What is wrong with a refused body, for whoever must tell problems apart (the API's status and
 * metric label) without reading the message: `bad_utf8` (not UTF-8), `bad_json` (not RFC 8259
 * JSON), `empty` (no bytes, or only whitespace), `bad_envelope` (JSON of the wrong shape),
 * `too_deep` (nesting past {@link MAX_JSON_DEPTH}), `duplicate_key` (an event with a top-level key twice).
 */
export type EnvelopeErrorCode = 'bad_utf8' | 'bad_json' | 'empty' | 'bad_envelope' | 'too_deep' | 'duplicate_key';

/** A refused body: the message names the problem (and a byte offset or event index), never body contents. */
export class EnvelopeError extends Error {
  override readonly name = 'EnvelopeError';
  constructor(
    readonly code: EnvelopeErrorCode,
    message: string,
  ) {
    super(message);
  }
}

const NOT_UTF8 = 'body is not valid UTF-8';

/** Longest key quoted in an error message; keys are field names, but bounded all the same. */
const MAX_QUOTED_KEY = 40;

function quoteKey(key: string): string {
  return JSON.stringify(key.length > MAX_QUOTED_KEY ? `${key.slice(0, MAX_QUOTED_KEY)}…` : key);
}

const textDecoder = new TextDecoder();

const TRUE = [116, 114, 117, 101];
const FALSE = [102, 97, 108, 115, 101];
const NULL = [110, 117, 108, 108];

/** The key whose presence in every event makes a keyless body a candidate for body dedup. */
const MESSAGE_ID = [109, 101, 115, 115, 97, 103, 101, 95, 105, 100];

/*
 * Duplicate keys are found by hashing each key's canonical bytes (see {@link unescapeInto}) into a
 * per-event open-addressing table: one pass over each key, whatever its spelling, so the check is
 * linear in the body for any number of keys per event. The hash is FNV-1a with a per-process
 * random seed and a finalising mix (every bit of the slot depends on every byte), so a client
 * cannot choose keys that collide. Should one probe all the same run past MAX_PROBES, the event's
 * keys go into a Set of strings instead (V8's own seeded hashing), so no input is quadratic.
 */
const MAX_PROBES = 32;
const KEY_HASH_SEED = randomBytes(4).readInt32LE(0);
let keyHashMask = -1;

/** Test hook: ANDs every key hash with `mask` (0 makes all keys collide; -1 restores). */
export function setKeyHashMaskForTests(mask: number): void {
  keyHashMask = mask | 0;
}

function mixHash(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h & keyHashMask;
}

/**
 * A recursive-descent scanner over one body. Recursion is bounded: a container deeper than
 * MAX_JSON_DEPTH is refused before it is entered, and values inside an event are scanned by one
 * loop with an explicit stack ({@link Scanner.container}).
 */
class Scanner {
  pos: number;
  /** Set by value(): the value just scanned holds whitespace outside its strings. */
  sawWs = false;
  /** Set by string() and value(): the string just scanned holds a backslash escape. */
  escaped = false;
  /** Where depth errors point: an event index, or -1 for a value outside data.events. */
  eventIndex = -1;
  /** Set by events(): every event has a non-empty string `message_id`. */
  everyEventHasMessageId = true;
  /** Top-level keys seen, for the error about a missing "data" (at most 5 are named). */
  readonly topKeys: string[] = [];
  /** Closing bytes of the containers open in container(). */
  private readonly stack = new Uint8Array(MAX_JSON_DEPTH + 1);

  /** Set by key(): the key read last is `message_id` (however it was spelled). */
  private keyIsMessageId = false;
  /** Canonical bytes of the current event's escaped keys. */
  private arena = new Uint8Array(256);
  private arenaEnd = 0;
  /** The current event's keys, `keyCount` of them: where their canonical bytes are (>= 0: in the body; < 0: at ~at in the arena) and their length. */
  private kAt = new Int32Array(16);
  private kLen = new Int32Array(16);
  private keyCount = 0;
  /**
   * Open-addressing table of the current event's keys, at most a quarter full: a slot is taken
   * when its `slotGen` is `gen`, which moves on with each event (so nothing is cleared), and then
   * holds a key's hash and index.
   */
  private slotGen = new Int32Array(64);
  private slotHash = new Int32Array(64);
  private slotKey = new Int32Array(64);
  private gen = 1;
  /** Keys the arrays above take before they grow: kAt's length, and a quarter of the table's. */
  private keyRoom = 16;
  /** The current event's keys as latin1 strings of their canonical bytes, once a probe ran too long. */
  private keySet: Set<string> | undefined;

  constructor(
    private readonly buf: Uint8Array,
    private readonly sink: EventSink | undefined,
    start: number,
  ) {
    this.pos = start;
  }

  fail(message: string, code: EnvelopeErrorCode = 'bad_envelope'): never {
    throw new EnvelopeError(code, message);
  }

  syntax(expected: string): never {
    if (this.pos >= this.buf.length)
      this.fail(`malformed JSON: the body ends where ${expected} was expected`, 'bad_json');
    this.fail(`malformed JSON at byte ${this.pos}: expected ${expected}`, 'bad_json');
  }

  skipWs(): void {
    this.pos = skipWsFrom(this.buf, this.pos);
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

  /** A string starting at p (an opening quote); returns the offset after its closing quote and sets `escaped`. */
  str(p: number): number {
    const b = this.buf;
    p++;
    for (;;) {
      const c = b[p];
      if (c === 34) break;
      if (c === 92) return this.escapedStr(p);
      // Control characters must be escaped; undefined means the body ended inside the string.
      if (!(c >= 32)) {
        this.pos = p;
        this.syntax('a closing quote (control characters must be escaped inside strings)');
      }
      p++;
    }
    this.escaped = false;
    return p + 1;
  }

  /** The rest of a string from its first backslash at p. */
  escapedStr(p: number): number {
    const b = this.buf;
    for (;;) {
      const c = b[p];
      if (c === 34) break;
      if (c === 92) {
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
      if (!(c >= 32)) {
        this.pos = p;
        this.syntax('a closing quote (control characters must be escaped inside strings)');
      }
      p++;
    }
    this.escaped = true;
    return p + 1;
  }

  /** A string starting at pos; leaves pos after the closing quote. */
  string(): void {
    this.pos = this.str(this.pos);
  }

  /** A key of the envelope or of `data`, decoded (a handful per body). */
  envelopeKey(): string {
    if (this.buf[this.pos] !== 34) this.syntax('a string key');
    const start = this.pos;
    this.string();
    return this.decode(start, this.pos);
  }

  /** A number starting at p; returns the offset after it. */
  num(p: number): number {
    const b = this.buf;
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
    c = b[p];
    if (c === 46) {
      p++;
      if (!isDigit(b[p])) {
        this.pos = p;
        this.syntax('a digit after the decimal point');
      }
      while (isDigit(b[p])) p++;
      c = b[p];
    }
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
    return p;
  }

  /** The literal `word` at p (its first byte already matched); returns the offset after it. */
  lit(p: number, word: readonly number[]): number {
    const b = this.buf;
    for (let i = 1; i < word.length; i++) {
      if (b[p + i] !== word[i]) {
        this.pos = p + i;
        this.syntax('a JSON value (true, false or null)');
      }
    }
    return p + word.length;
  }

  /**
   * Any JSON value at pos; `depth` is the level a container here would have. Leaves pos after it
   * and sets `escaped` (a string holding an escape) and `sawWs` (whitespace outside strings).
   */
  value(depth: number): ValueKind {
    const p = this.pos;
    const c = this.buf[p];
    this.sawWs = false;
    switch (c) {
      case 34:
        this.pos = this.str(p);
        return VALUE_STRING;
      case 123:
        this.escaped = false;
        this.pos = this.container(p, depth);
        return VALUE_OBJECT;
      case 91:
        this.escaped = false;
        this.pos = this.container(p, depth);
        return VALUE_ARRAY;
      case 116:
        this.escaped = false;
        this.pos = this.lit(p, TRUE);
        return VALUE_BOOLEAN;
      case 102:
        this.escaped = false;
        this.pos = this.lit(p, FALSE);
        return VALUE_BOOLEAN;
      case 110:
        this.escaped = false;
        this.pos = this.lit(p, NULL);
        return VALUE_NULL;
      default:
        if (c === 45 || (c >= 48 && c <= 57)) {
          this.escaped = false;
          this.pos = this.num(p);
          return VALUE_NUMBER;
        }
        this.pos = p;
        return this.syntax('a JSON value');
    }
  }

  /**
   * The object or array at p, and everything inside it, in one loop: the containers still open are
   * a stack of their closing bytes, so nesting costs no call frames and no state but one byte per
   * level. Returns the offset after it; sets `sawWs` when it skipped whitespace.
   */
  container(p: number, depth: number): number {
    const b = this.buf;
    const stack = this.stack;
    let sp = 0;
    let c: number;
    for (;;) {
      // A value starts at p.
      c = b[p];
      if (c === 123 || c === 91) {
        if (depth + sp > MAX_JSON_DEPTH) this.tooDeep();
        const close = c + 2; // '{' + 2 is '}', '[' + 2 is ']'
        c = b[++p];
        if (c === 32 || c === 10 || c === 13 || c === 9) {
          this.sawWs = true;
          p = skipWsFrom(b, p);
          c = b[p];
        }
        if (c === close) {
          p++;
        } else {
          stack[sp++] = close;
          if (close === 125) p = this.memberKey(p);
          continue;
        }
      } else if (c === 34) {
        p = this.str(p);
      } else if (c === 45 || (c >= 48 && c <= 57)) {
        p = this.num(p);
      } else if (c === 116) {
        p = this.lit(p, TRUE);
      } else if (c === 102) {
        p = this.lit(p, FALSE);
      } else if (c === 110) {
        p = this.lit(p, NULL);
      } else {
        this.pos = p;
        this.syntax('a JSON value');
      }
      // After a value: close what ends here, then on to the next element or member.
      for (;;) {
        if (sp === 0) return p;
        c = b[p];
        if (c === 32 || c === 10 || c === 13 || c === 9) {
          this.sawWs = true;
          p = skipWsFrom(b, p);
          c = b[p];
        }
        const close = stack[sp - 1];
        if (c === 44) {
          c = b[++p];
          if (c === 32 || c === 10 || c === 13 || c === 9) {
            this.sawWs = true;
            p = skipWsFrom(b, p);
          }
          if (close === 125) p = this.memberKey(p);
          break;
        }
        if (c !== close) {
          this.pos = p;
          this.syntax(close === 125 ? "',' or '}'" : "',' or ']'");
        }
        p++;
        sp--;
      }
    }
  }

  /** A member's key and colon at p (inside container()); returns where its value starts. */
  memberKey(p: number): number {
    const b = this.buf;
    if (b[p] !== 34) {
      this.pos = p;
      this.syntax('a string key');
    }
    p = this.str(p);
    let c = b[p];
    if (c === 32 || c === 10 || c === 13 || c === 9) {
      this.sawWs = true;
      p = skipWsFrom(b, p);
      c = b[p];
    }
    if (c !== 58) {
      this.pos = p;
      this.syntax("':'");
    }
    c = b[++p];
    if (c === 32 || c === 10 || c === 13 || c === 9) {
      this.sawWs = true;
      p = skipWsFrom(b, p);
    }
    return p;
  }

  tooDeep(): never {
    const where = this.eventIndex >= 0 ? `data.events[${this.eventIndex}]` : 'a value of the envelope';
    this.fail(
      `JSON nesting deeper than ${MAX_JSON_DEPTH} levels in ${where} (the event object is level 1)`,
      'too_deep',
    );
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

  /**
   * A top-level key of an event at `start` (an opening quote), checked unique: returns the offset
   * after it and sets `escaped`, and keyAt/keyLen to its canonical bytes. A key without escapes
   * is hashed in the same pass that finds its end; an escaped one is decoded into the arena first.
   */
  key(index: number, start: number): number {
    const b = this.buf;
    let p = start + 1;
    let h = KEY_HASH_SEED;
    for (;;) {
      const c = b[p];
      if (c === 34) break;
      if (c === 92 || !(c >= 32)) return this.escapedKey(index, start);
      h = Math.imul(h ^ c, 0x01000193);
      p++;
    }
    this.escaped = false;
    this.checkUnique(index, start, p + 1, mixHash(h), start + 1, p - start - 1);
    return p + 1;
  }

  escapedKey(index: number, start: number): number {
    // Validates the escapes (or throws the string's error) before they are decoded.
    const end = this.str(start) - 1;
    const at = this.arenaEnd;
    // Canonical bytes are never longer than the escaped text.
    if (at + (end - start) > this.arena.length) {
      const grown = new Uint8Array(Math.max(2 * this.arena.length, at + (end - start)));
      grown.set(this.arena.subarray(0, at));
      this.arena = grown;
    }
    const arena = this.arena;
    const len = unescapeInto(this.buf, start + 1, end, arena, at);
    let h = KEY_HASH_SEED;
    for (let i = at; i < at + len; i++) h = Math.imul(h ^ arena[i], 0x01000193);
    this.arenaEnd = at + len;
    this.checkUnique(index, start, end + 1, mixHash(h), ~at, len);
    return end + 1;
  }

  /** Whether the canonical bytes at `a` and `b` (as keyAt) are the same `len` bytes. */
  sameBytes(a: number, b: number, len: number): boolean {
    const x = a >= 0 ? this.buf : this.arena;
    const y = b >= 0 ? this.buf : this.arena;
    const i = a >= 0 ? a : ~a;
    const j = b >= 0 ? b : ~b;
    for (let k = 0; k < len; k++) if (x[i + k] !== y[j + k]) return false;
    return true;
  }

  /** Whether the 10 canonical bytes at `at` spell `message_id`. */
  isMessageId(at: number): boolean {
    const x = at >= 0 ? this.buf : this.arena;
    const i = at >= 0 ? at : ~at;
    for (let k = 0; k < MESSAGE_ID.length; k++) if (x[i + k] !== MESSAGE_ID[k]) return false;
    return true;
  }

  /**
   * Refuses a key the current event already has (`body[keyStart, keyEnd)`, whose canonical bytes
   * are `len` at `at` with this hash): storing both is impossible, dropping one silent. Two
   * spellings of one key (`"a"` and `"\u0061"`) have the same canonical bytes, so they are the
   * same key, as for JSON.parse. Records the key for the rest of the event, and whether it is
   * `message_id` (keyIsMessageId).
   */
  checkUnique(index: number, keyStart: number, keyEnd: number, hash: number, at: number, len: number): void {
    this.keyIsMessageId = len === MESSAGE_ID.length && this.isMessageId(at);
    if (this.keySet !== undefined) {
      this.checkInSet(index, keyStart, keyEnd, at, len);
      return;
    }
    const n = this.keyCount;
    if (n === this.keyRoom) this.makeRoom();
    const slotGen = this.slotGen;
    const slotHash = this.slotHash;
    const gen = this.gen;
    const mask = slotGen.length - 1;
    let s = hash & mask;
    let probes = 0;
    while (slotGen[s] === gen) {
      if (slotHash[s] === hash) this.refuseSame(index, keyStart, keyEnd, this.slotKey[s], at, len);
      if (++probes > MAX_PROBES) {
        this.toKeySet();
        this.checkInSet(index, keyStart, keyEnd, at, len);
        return;
      }
      s = (s + 1) & mask;
    }
    slotGen[s] = gen;
    slotHash[s] = hash;
    this.slotKey[s] = n;
    this.kAt[n] = at;
    this.kLen[n] = len;
    this.keyCount = n + 1;
  }

  /** A key whose hash equals that of key k: a duplicate if its bytes are the same too. */
  refuseSame(index: number, keyStart: number, keyEnd: number, k: number, at: number, len: number): void {
    if (this.kLen[k] === len && this.sameBytes(this.kAt[k], at, len))
      this.duplicate(index, this.decode(keyStart, keyEnd));
  }

  /** From now on (to the end of the event), keys go into a Set: a probe ran past MAX_PROBES. */
  toKeySet(): void {
    this.keySet = new Set<string>();
    for (let k = 0; k < this.keyCount; k++) this.keySet.add(this.canonicalString(this.kAt[k], this.kLen[k]));
  }

  checkInSet(index: number, keyStart: number, keyEnd: number, at: number, len: number): void {
    const keys = this.keySet as Set<string>;
    const key = this.canonicalString(at, len);
    if (keys.has(key)) this.duplicate(index, this.decode(keyStart, keyEnd));
    keys.add(key);
  }

  /** Empties the key table for the next event (its slots are freed by moving `gen` on). */
  clearKeys(): void {
    this.gen++;
    this.keyCount = 0;
    this.arenaEnd = 0;
    this.keySet = undefined;
  }

  /** Doubles the table: the current event's keys are the slots of this `gen`. */
  growSlots(): void {
    const size = 2 * this.slotGen.length;
    const slotGen = new Int32Array(size);
    const slotHash = new Int32Array(size);
    const slotKey = new Int32Array(size);
    const mask = size - 1;
    const gen = this.gen;
    for (let t = 0; t < this.slotGen.length; t++) {
      if (this.slotGen[t] !== gen) continue;
      const hash = this.slotHash[t];
      let s = hash & mask;
      while (slotGen[s] === gen) s = (s + 1) & mask;
      slotGen[s] = gen;
      slotHash[s] = hash;
      slotKey[s] = this.slotKey[t];
    }
    this.slotGen = slotGen;
    this.slotHash = slotHash;
    this.slotKey = slotKey;
  }

  /** Grows the key arrays or the table (or both), whichever is full. */
  makeRoom(): void {
    if (this.keyCount === this.kAt.length) this.growKeys();
    if (4 * (this.keyCount + 1) > this.slotGen.length) this.growSlots();
    this.keyRoom = Math.min(this.kAt.length, this.slotGen.length >> 2);
  }

  growKeys(): void {
    const grow = (a: Int32Array<ArrayBuffer>): Int32Array<ArrayBuffer> => {
      const next = new Int32Array(2 * a.length);
      next.set(a);
      return next;
    };
    this.kAt = grow(this.kAt);
    this.kLen = grow(this.kLen);
  }

  /** Canonical bytes as a latin1 string (one char per byte, so equal strings are equal bytes). */
  canonicalString(at: number, len: number): string {
    const src = at >= 0 ? this.buf : this.arena;
    const i = at >= 0 ? at : ~at;
    return Buffer.from(src.buffer, src.byteOffset + i, len).toString('latin1');
  }

  duplicate(index: number, key: string): never {
    this.fail(
      `data.events[${index}] has the key ${quoteKey(key)} twice; each top-level key of an event must be unique`,
      'duplicate_key',
    );
  }

  /** The key or string `buf[start, end)` (quotes included) as a JS string. */
  decode(start: number, end: number): string {
    const text = textDecoder.decode(this.buf.subarray(start, end));
    return text.includes('\\') ? (JSON.parse(text) as string) : text.slice(1, -1);
  }

  /**
   * One event object at pos (level 1), its top-level members handed to the sink. Returns whether
   * it has a `message_id` holding a non-empty string. Separators are read inline: an event of
   * `{}` costs a few comparisons, so millions of tiny events cost no more per byte than real ones.
   */
  event(index: number): boolean {
    const sink = this.sink;
    const b = this.buf;
    if (this.keyCount !== 0 || this.keySet !== undefined) this.clearKeys();
    this.eventIndex = index;
    sink?.beginEvent(index);
    let p = this.pos + 1;
    let c = b[p];
    if (c === 32 || c === 10 || c === 13 || c === 9) c = b[(p = skipWsFrom(b, p))];
    let messageId = false;
    if (c !== 125) {
      for (;;) {
        if (c !== 34) {
          this.pos = p;
          this.syntax('a string key');
        }
        const keyEnd = this.key(index, p);
        const keyEscaped = this.escaped;
        const isMessageId = this.keyIsMessageId;
        const keyStart = p;
        p = keyEnd;
        c = b[p];
        if (c === 32 || c === 10 || c === 13 || c === 9) c = b[(p = skipWsFrom(b, p))];
        if (c !== 58) {
          this.pos = p;
          this.syntax("':'");
        }
        c = b[++p];
        if (c === 32 || c === 10 || c === 13 || c === 9) c = b[(p = skipWsFrom(b, p))];
        // Strings and numbers, most values, without value()'s dispatch.
        let kind: ValueKind;
        let valueEnd: number;
        if (c === 34) {
          kind = VALUE_STRING;
          valueEnd = this.str(p);
          this.sawWs = false;
        } else if (c >= 48 && c <= 57) {
          kind = VALUE_NUMBER;
          valueEnd = this.num(p);
          this.sawWs = false;
          this.escaped = false;
        } else {
          this.pos = p;
          kind = this.value(2);
          valueEnd = this.pos;
        }
        // A non-empty string: more than its two quotes (an escape never decodes to nothing).
        if (isMessageId && kind === VALUE_STRING && valueEnd - p > 2) messageId = true;
        sink?.member(keyStart, keyEnd, keyEscaped, p, valueEnd, kind, this.escaped, this.sawWs);
        p = valueEnd;
        c = b[p];
        if (c === 32 || c === 10 || c === 13 || c === 9) c = b[(p = skipWsFrom(b, p))];
        if (c === 125) break;
        if (c !== 44) {
          this.pos = p;
          this.syntax("',' or '}' after a member of an event");
        }
        c = b[++p];
        if (c === 32 || c === 10 || c === 13 || c === 9) c = b[(p = skipWsFrom(b, p))];
      }
    }
    this.pos = p + 1;
    sink?.endEvent();
    return messageId;
  }

  /** The `data.events` array at pos; returns its length. */
  events(): number {
    const b = this.buf;
    let p = skipWsFrom(b, this.pos + 1);
    if (b[p] === 93) {
      this.pos = p + 1;
      return 0;
    }
    const sink = this.sink;
    let i = 0;
    let all = true;
    for (;;) {
      if (b[p] === 123 && b[p + 1] === 125) {
        // `{}`: no member, no key table; millions of them cost a few comparisons each.
        sink?.beginEvent(i);
        sink?.endEvent();
        all = false;
        p += 2;
      } else {
        this.pos = p;
        if (b[p] !== 123) this.wrongType((got) => `data.events[${i}] must be a JSON object, got ${got}`);
        if (!this.event(i)) all = false;
        p = this.pos;
      }
      i++;
      let c = b[p];
      if (c === 32 || c === 10 || c === 13 || c === 9) c = b[(p = skipWsFrom(b, p))];
      if (c === 93) break;
      if (c !== 44) {
        this.eventIndex = -1;
        this.pos = p;
        this.syntax("',' or ']' after an event");
      }
      c = b[++p];
      if (c === 32 || c === 10 || c === 13 || c === 9) p = skipWsFrom(b, p);
    }
    this.eventIndex = -1;
    this.pos = p + 1;
    this.everyEventHasMessageId = all;
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
      if (this.pos >= this.buf.length) this.fail(`empty body: expected ${EXPECTED_ENVELOPE}`, 'empty');
      // A bare array of events is what several SDKs send; say where the array belongs.
      this.wrongType(
        (got) =>
          `body must be a JSON object ${EXPECTED_ENVELOPE}, got ${got}${got === 'an array' ? ' (an array of events belongs in "data.events")' : ''}`,
      );
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
            this.wrongType(
              (got) => `"data" must be an object holding "events", got ${got}; expected ${EXPECTED_ENVELOPE}`,
            );
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
    const hint = this.topKeys.some((k) => k === 'events' || k === 'batch')
      ? ' (the array of events belongs in "data.events")'
      : '';
    return `body has no "data": got an object with the keys ${shown}${more}${hint}, expected ${EXPECTED_ENVELOPE}`;
  }
}

function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

function isHex(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70);
}

/** Past the whitespace from p. */
function skipWsFrom(b: Uint8Array, p: number): number {
  for (;;) {
    const c = b[p];
    if (c === 32 || c === 10 || c === 13 || c === 9) p++;
    else return p;
  }
}

/** The value of the hex digit c (already checked to be one). */
function hexValue(c: number): number {
  return c <= 57 ? c - 48 : (c | 32) - 87;
}

function hex4(b: Uint8Array, p: number): number {
  return (hexValue(b[p]) << 12) | (hexValue(b[p + 1]) << 8) | (hexValue(b[p + 2]) << 4) | hexValue(b[p + 3]);
}

/**
 * Decodes the inside of a valid JSON string, `src[start, end)` (quotes excluded), into `out` from
 * `at`; returns the number of bytes written, never more than `end - start`. The bytes are the
 * string's canonical form: UTF-8, with a `\uD83D\uDE00` pair as the one 4-byte character it
 * stands for, and a lone surrogate as its 3-byte WTF-8 sequence (which valid UTF-8 never holds, so
 * it can equal no other text). Two spellings of one string give the same bytes, and two strings
 * JSON.parse tells apart give different bytes: keys compare by these bytes, allocation-free.
 */
export function unescapeInto(src: Uint8Array, start: number, end: number, out: Uint8Array, at: number): number {
  let o = at;
  let i = start;
  while (i < end) {
    const c = src[i];
    if (c !== 92) {
      out[o++] = c;
      i++;
      continue;
    }
    const e = src[i + 1];
    if (e !== 117) {
      // \" \\ \/ stand for themselves.
      out[o++] = e === 98 ? 8 : e === 102 ? 12 : e === 110 ? 10 : e === 114 ? 13 : e === 116 ? 9 : e;
      i += 2;
      continue;
    }
    let cp = hex4(src, i + 2);
    i += 6;
    if (cp >= 0xd800 && cp <= 0xdbff && src[i] === 92 && src[i + 1] === 117) {
      const low = hex4(src, i + 2);
      if (low >= 0xdc00 && low <= 0xdfff) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        i += 6;
      }
    }
    if (cp < 0x80) out[o++] = cp;
    else if (cp < 0x800) {
      out[o++] = 0xc0 | (cp >> 6);
      out[o++] = 0x80 | (cp & 0x3f);
    } else if (cp < 0x10000) {
      out[o++] = 0xe0 | (cp >> 12);
      out[o++] = 0x80 | ((cp >> 6) & 0x3f);
      out[o++] = 0x80 | (cp & 0x3f);
    } else {
      out[o++] = 0xf0 | (cp >> 18);
      out[o++] = 0x80 | ((cp >> 12) & 0x3f);
      out[o++] = 0x80 | ((cp >> 6) & 0x3f);
      out[o++] = 0x80 | (cp & 0x3f);
    }
  }
  return o - at;
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
  if (!utf8Checked && !isUtf8(body)) return { ok: false, error: NOT_UTF8, code: 'bad_utf8' };
  const scanner = new Scanner(body, sink, bodyStart(body));
  try {
    const events = scanner.envelope();
    return { ok: true, events, everyEventHasMessageId: scanner.everyEventHasMessageId };
  } catch (err) {
    if (err instanceof EnvelopeError) return { ok: false, error: err.message, code: err.code };
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
  if (body.length === 0) return { ok: false, error: `empty body: expected ${EXPECTED_ENVELOPE}`, code: 'empty' };
  if (!opts.text) return scanEnvelope(body);
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    return { ok: false, error: NOT_UTF8, code: 'bad_utf8' };
  }
  const scan = scanEnvelope(body, undefined, true);
  return scan.ok ? { ok: true, text, events: scan.events, everyEventHasMessageId: scan.everyEventHasMessageId } : scan;
}
