/**
 * A Segment tracking API body → the push envelope the pipeline already encodes
 * (`{"data":{"events":[…]}}`), in linear time and without building a JS object from event data:
 * the byte scanner of shared/envelope.ts validates the body (UTF-8, RFC 8259, depth, duplicate
 * keys) and reports each member's byte range; each event is written out again with its mapped
 * keys and every value's bytes as sent, so the encoder stores them exactly as a Starfish push's.
 *
 * The mapping (docs/segment.md): `type` → `event_type`; `event` (track) or `name` (page, screen)
 * → `event`; `userId` → `distinct_id`; `anonymousId` → `anonymous_id`; `timestamp` → `ts`;
 * `messageId` → `message_id`; `properties` (track, page, screen) or `traits` (identify, group) →
 * `properties`; `context` → `context`; every other member goes to `extra` under its own name,
 * except a name that is one of our columns (`properties` on an identify, say), kept in `extra` as
 * `segment_<name>`. `writeKey` is a credential: taken, never stored. A batch's own members other
 * than `batch` and `writeKey` (`sentAt`, `context`, `integrations`, …) apply to each event that
 * does not carry that member itself, as Segment's batch endpoint does.
 */
import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import { type EventSink, VALUE_ARRAY, VALUE_STRING, type ValueKind, scanEnvelope } from '../../../shared/envelope.js';
import { EVENT_COLUMNS } from '../../../shared/parquet/columns.js';

export const SEGMENT_TYPES = ['track', 'identify', 'page', 'screen', 'group', 'alias'] as const;
export type SegmentType = (typeof SEGMENT_TYPES)[number];
/** The route a body came in on: `batch`, or one call whose type the route gives. */
export type SegmentRoute = SegmentType | 'batch';

/** A translated body, or why it is refused (never a body's contents). */
export type Translation =
  | {
      ok: true;
      /** The push envelope. */
      bytes: Buffer;
      events: number;
      /**
       * The request's idempotency identity: sha256 hex of its sorted messageIds, when every event
       * has a non-empty string messageId; else undefined.
       */
      messageIdsHash?: string;
      /** The body's `writeKey` (a JSON string), when it has one. */
      writeKey?: string;
    }
  | { ok: false; code: 'bad_json' | 'bad_envelope' | 'too_large'; error: string };

/** The members a type maps (beyond the common ones) to our columns. */
const COMMON: Readonly<Record<string, string>> = {
  userId: 'distinct_id',
  anonymousId: 'anonymous_id',
  timestamp: 'ts',
  messageId: 'message_id',
  context: 'context',
};
const BY_TYPE: Readonly<Record<SegmentType, Readonly<Record<string, string>>>> = {
  track: { ...COMMON, event: 'event', properties: 'properties' },
  page: { ...COMMON, name: 'event', properties: 'properties' },
  screen: { ...COMMON, name: 'event', properties: 'properties' },
  identify: { ...COMMON, traits: 'properties' },
  group: { ...COMMON, traits: 'properties' },
  alias: COMMON,
};
const COLUMN_NAMES: ReadonlySet<string> = new Set<string>(EVENT_COLUMNS);

/*
 * Keys told apart by a small id, found by comparing the key's bytes, so an event's members are
 * classified without making a string of each key: `type`, `writeKey`, every key a type maps, and
 * our column names (an unmapped one is kept as `segment_<name>`). Any other key is copied as sent.
 */
const KNOWN: readonly string[] = [
  ...new Set(['type', 'writeKey', ...Object.values(BY_TYPE).flatMap((m) => Object.keys(m)), ...EVENT_COLUMNS]),
];
const KNOWN_ID: ReadonlyMap<string, number> = new Map(KNOWN.map((k, i) => [k, i]));
const ID_TYPE = 0;
const ID_WRITE_KEY = 1;
const ID_MESSAGE_ID = KNOWN.indexOf('messageId');
/** KNOWN's keys as bytes (no quotes), by byte length. */
const KNOWN_BY_LENGTH: { id: number; bytes: Buffer }[][] = [];
for (const [id, k] of KNOWN.entries()) (KNOWN_BY_LENGTH[k.length] ??= []).push({ id, bytes: Buffer.from(k) });

/** `,"<name>":` of a name. */
const headOf = (name: string): Buffer => Buffer.from(`,${JSON.stringify(name)}:`);

/**
 * Per type, by known id: the head a member with that key is written under (`,"distinct_id":`),
 * or null when its key is copied as sent (a key a type maps to the same name, or no column's name).
 */
const HEADS: Readonly<Record<SegmentType, readonly (Buffer | null)[]>> = Object.fromEntries(
  SEGMENT_TYPES.map((type) => {
    const map = BY_TYPE[type];
    return [
      type,
      KNOWN.map((key) => {
        const to = Object.hasOwn(map, key) ? map[key] : COLUMN_NAMES.has(key) ? `segment_${key}` : undefined;
        return to === undefined || to === key ? null : headOf(to);
      }),
    ];
  }),
) as Record<SegmentType, (Buffer | null)[]>;
/** Per type: `{"event_type":"<type>"` (the first event) and `,{"event_type":"<type>"` (the others). */
const EVENT_HEADS: Readonly<Record<SegmentType, readonly [Buffer, Buffer]>> = Object.fromEntries(
  SEGMENT_TYPES.map((t) => [t, [Buffer.from(`{"event_type":"${t}"`), Buffer.from(`,{"event_type":"${t}"`)]]),
) as Record<SegmentType, [Buffer, Buffer]>;
/** The types as JSON strings' bytes (`"track"`), to read a `type` value without decoding it. */
const TYPE_BYTES: readonly (readonly [SegmentType, Buffer])[] = SEGMENT_TYPES.map((t) => [t, Buffer.from(`"${t}"`)]);

const OUTER_PREFIX = Buffer.from('{"data":{"events":[');
const OUTER_SUFFIX = Buffer.from(']}}');
const INNER_PREFIX = Buffer.from('{"data":{"events":');
const INNER_SUFFIX = Buffer.from('}}');

/** Past this many default × member comparisons in one event, its keys go into a Set (no input is quadratic). */
const MAX_LINEAR_DEFAULT_CHECKS = 1024;
/** Below this many bytes a range is copied by a loop (cheaper than a subarray and a native copy). */
const SHORT_COPY = 48;

const KEY_ESCAPED = 1;

class Refusal extends Error {
  constructor(
    readonly code: 'bad_json' | 'bad_envelope' | 'too_large',
    message: string,
  ) {
    super(message);
  }
}

/** The JSON string `buf[start, end)` (quotes included), decoded. */
function stringAt(buf: Buffer, start: number, end: number, escaped: boolean): string {
  return escaped ? (JSON.parse(buf.toString('utf8', start, end)) as string) : buf.toString('utf8', start + 1, end - 1);
}

/** The id of the key `buf[ks, ke)` (quotes included) in KNOWN, or -1. */
function knownId(buf: Buffer, ks: number, ke: number, escaped: boolean): number {
  if (escaped) return KNOWN_ID.get(stringAt(buf, ks, ke, true)) ?? -1;
  const len = ke - ks - 2;
  const candidates = len < KNOWN_BY_LENGTH.length ? KNOWN_BY_LENGTH[len] : undefined;
  if (!candidates) return -1;
  next: for (const c of candidates) {
    for (let i = 0; i < len; i++) if (buf[ks + 1 + i] !== c.bytes[i]) continue next;
    return c.id;
  }
  return -1;
}

/**
 * The top-level members of each object the scanner reports, as byte ranges in typed arrays reused
 * from one event to the next (no object or string per member); `onEvent` runs once an object ends.
 */
class Members implements EventSink {
  n = 0;
  index = 0;
  ks = new Int32Array(16);
  ke = new Int32Array(16);
  vs = new Int32Array(16);
  ve = new Int32Array(16);
  id = new Int32Array(16);
  kind = new Uint8Array(16);
  flags = new Uint8Array(16);
  valueEscaped = new Uint8Array(16);
  constructor(
    readonly buf: Buffer,
    private readonly onEvent: (index: number) => void,
  ) {}
  beginEvent(index: number): void {
    this.index = index;
    this.n = 0;
  }
  member(ks: number, ke: number, keyEscaped: boolean, vs: number, ve: number, kind: ValueKind, escaped: boolean): void {
    if (this.n === this.ks.length) this.grow();
    const i = this.n++;
    this.ks[i] = ks;
    this.ke[i] = ke;
    this.vs[i] = vs;
    this.ve[i] = ve;
    this.kind[i] = kind;
    this.flags[i] = keyEscaped ? KEY_ESCAPED : 0;
    this.valueEscaped[i] = escaped ? 1 : 0;
    this.id[i] = knownId(this.buf, ks, ke, keyEscaped);
  }
  endEvent(): void {
    this.onEvent(this.index);
  }
  private grow(): void {
    const n = 2 * this.ks.length;
    const int = (a: Int32Array<ArrayBuffer>): Int32Array<ArrayBuffer> => {
      const b = new Int32Array(n);
      b.set(a);
      return b;
    };
    const byte = (a: Uint8Array<ArrayBuffer>): Uint8Array<ArrayBuffer> => {
      const b = new Uint8Array(n);
      b.set(a);
      return b;
    };
    this.ks = int(this.ks);
    this.ke = int(this.ke);
    this.vs = int(this.vs);
    this.ve = int(this.ve);
    this.id = int(this.id);
    this.kind = byte(this.kind);
    this.flags = byte(this.flags);
    this.valueEscaped = byte(this.valueEscaped);
  }
  /** Member i's key, decoded. */
  key(i: number): string {
    return stringAt(this.buf, this.ks[i], this.ke[i], (this.flags[i] & KEY_ESCAPED) !== 0);
  }
  /** Member i's value as a string (a JSON string member). */
  string(i: number): string {
    return stringAt(this.buf, this.vs[i], this.ve[i], this.valueEscaped[i] === 1);
  }
  /** The first member whose key has this known id, or -1. */
  find(id: number): number {
    for (let i = 0; i < this.n; i++) if (this.id[i] === id) return i;
    return -1;
  }
}

/** A growable output buffer that refuses to pass `max` bytes. */
class Writer {
  buf: Buffer;
  at = 0;
  constructor(
    initial: number,
    private readonly max: number,
  ) {
    this.buf = Buffer.allocUnsafe(Math.max(64, Math.min(initial, max)));
  }
  private ensure(n: number): void {
    const need = this.at + n;
    if (need <= this.buf.length) return;
    if (need > this.max)
      throw new Refusal(
        'too_large',
        `the translated batch would pass ${this.max} bytes (twice the collection's maxBodyBytes): the batch-level members copied into each event make it too large`,
      );
    const next = Buffer.allocUnsafe(Math.min(this.max, Math.max(need, this.buf.length * 2)));
    this.buf.copy(next, 0, 0, this.at);
    this.buf = next;
  }
  byte(c: number): void {
    this.ensure(1);
    this.buf[this.at++] = c;
  }
  bytes(src: Uint8Array): void {
    this.copy(src, 0, src.length);
  }
  copy(src: Uint8Array, start: number, end: number): void {
    const n = end - start;
    this.ensure(n);
    const out = this.buf;
    let at = this.at;
    if (n < SHORT_COPY) for (let i = start; i < end; i++) out[at++] = src[i];
    else {
      out.set(src.subarray(start, end), at);
      at += n;
    }
    this.at = at;
  }
  done(): Buffer {
    return this.buf.subarray(0, this.at);
  }
}

/** The scanner's message about the wrapped buffer, told about the body as sent. */
function told(message: string, offset: number, what: string): string {
  return message
    .replace(/byte (\d+)/g, (_m, n: string) => `byte ${Math.max(0, Number(n) - offset)}`)
    .replace(/data\.events\[(\d+)\]/g, (_m, i: string) => (what === 'the body' ? 'the body' : `${what}[${i}]`))
    .replace(/data\.events/g, what);
}

function scanOrRefuse(buf: Buffer, sink: EventSink, offset: number, what: string): number {
  const r = scanEnvelope(buf, sink, true);
  if (r.ok) return r.events;
  const code = r.code === 'bad_json' || r.code === 'bad_utf8' || r.code === 'empty' ? 'bad_json' : 'bad_envelope';
  throw new Refusal(code, told(r.error, offset, what));
}

function typeOf(m: Members): SegmentType {
  const i = m.find(ID_TYPE);
  if (i >= 0 && m.kind[i] === VALUE_STRING) {
    const { buf } = m;
    const vs = m.vs[i];
    const len = m.ve[i] - vs;
    if (m.valueEscaped[i] === 0) {
      next: for (const [t, bytes] of TYPE_BYTES) {
        if (bytes.length !== len) continue;
        for (let j = 1; j < len - 1; j++) if (buf[vs + j] !== bytes[j]) continue next;
        return t;
      }
    } else {
      const t = m.string(i);
      if ((SEGMENT_TYPES as readonly string[]).includes(t)) return t as SegmentType;
    }
  }
  throw new Refusal('bad_envelope', `batch[${m.index}].type must be one of ${SEGMENT_TYPES.join(', ')}`);
}

/** A batch-level member, applied to each event that lacks it. */
interface Default {
  /** Decoded. */
  key: string;
  /** Its id in KNOWN, or -1. */
  id: number;
  /** The key's bytes (no quotes) when sent without escapes: compared with an event's unescaped keys as bytes. */
  plain: Buffer | null;
  /** `,"<key>":`. */
  head: Buffer;
  value: Buffer;
}

/** What translating one body keeps between its events. */
interface Run {
  out: Writer;
  events: number;
  messageIds: string[] | null;
}

/** Whether the event has the default's key. */
function hasKey(m: Members, d: Default, keys: Set<string> | null): boolean {
  if (keys) return keys.has(d.key);
  const { buf } = m;
  for (let i = 0; i < m.n; i++) {
    const id = m.id[i];
    // Two known keys are the same key exactly when their ids are; a known key is no unknown one.
    if (d.id >= 0 || id >= 0) {
      if (id === d.id) return true;
      continue;
    }
    const plain = d.plain;
    if (plain && (m.flags[i] & KEY_ESCAPED) === 0) {
      const ks = m.ks[i] + 1;
      if (m.ke[i] - 1 - ks !== plain.length) continue;
      let same = true;
      for (let j = 0; j < plain.length && same; j++) same = buf[ks + j] === plain[j];
      if (same) return true;
    } else if (m.key(i) === d.key) return true;
  }
  return false;
}

/**
 * Writes one event: `event_type`, its members (mapped keys under their column's name, the others
 * as sent, runs of those copied in one piece), then the batch-level defaults it lacks.
 */
function writeEvent(run: Run, m: Members, type: SegmentType, defaults: readonly Default[]): void {
  const { out } = run;
  const { buf } = m;
  const heads = HEADS[type];
  out.bytes(EVENT_HEADS[type][run.events === 0 ? 0 : 1]);
  run.events++;
  let messageId = -1;
  let from = -1;
  let to = -1;
  for (let i = 0; i < m.n; i++) {
    const id = m.id[i];
    const head = id < 0 ? null : heads[id];
    if (head === null && id !== ID_TYPE && id !== ID_WRITE_KEY) {
      // Copied as sent: key, colon and value, with the members before it that were too.
      if (from < 0) from = m.ks[i];
      to = m.ve[i];
      continue;
    }
    if (from >= 0) {
      out.byte(0x2c);
      out.copy(buf, from, to);
      from = -1;
    }
    if (head === null) continue;
    if (id === ID_MESSAGE_ID && m.kind[i] === VALUE_STRING) messageId = i;
    out.bytes(head);
    out.copy(buf, m.vs[i], m.ve[i]);
  }
  if (from >= 0) {
    out.byte(0x2c);
    out.copy(buf, from, to);
  }
  if (defaults.length > 0) {
    let keys: Set<string> | null = null;
    if (defaults.length * m.n > MAX_LINEAR_DEFAULT_CHECKS) {
      keys = new Set();
      for (let i = 0; i < m.n; i++) keys.add(m.key(i));
    }
    for (const d of defaults) {
      if (hasKey(m, d, keys)) continue;
      out.bytes((d.id >= 0 ? heads[d.id] : null) ?? d.head);
      out.bytes(d.value);
    }
  }
  out.byte(0x7d);
  if (run.messageIds) {
    const id = messageId >= 0 ? m.string(messageId) : '';
    if (id) run.messageIds.push(id);
    else run.messageIds = null;
  }
}

function messageIdsHash(ids: string[]): string {
  let text = '';
  for (const id of ids.sort()) text += `${Buffer.byteLength(id)}:${id}\n`;
  return createHash('sha256').update(text).digest('hex');
}

/**
 * Translates a Segment body (as decoded) into a push envelope, linear in the body's size; the
 * output never passes `maxOutBytes` (else `too_large`). Errors name the problem and a byte offset
 * or a `batch[i]` index, never contents.
 */
export function translateSegment(body: Uint8Array, route: SegmentRoute, maxOutBytes: number): Translation {
  const start = body.length >= 3 && body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
  if (!isUtf8(body)) return { ok: false, code: 'bad_json', error: 'body is not valid UTF-8' };
  const outer = Buffer.concat([OUTER_PREFIX, body.subarray(start), OUTER_SUFFIX]);
  // A quarter more than the body: each event gains `event_type` and the batch's defaults (SDKs send
  // `sentAt`), so the output rarely has to grow (and be copied) on the way.
  const run: Run = {
    out: new Writer(outer.length + (outer.length >> 2) + 256, maxOutBytes),
    events: 0,
    messageIds: [],
  };
  try {
    const top = new Members(outer, () => undefined);
    const n = scanOrRefuse(outer, top, OUTER_PREFIX.length - start, 'the body');
    if (n !== 1)
      throw new Refusal(
        'bad_json',
        n === 0 ? 'empty body: expected one JSON object' : 'the body must be one JSON object',
      );
    const key = top.find(ID_WRITE_KEY);
    const writeKey = key >= 0 && top.kind[key] === VALUE_STRING ? top.string(key) : undefined;
    run.out.bytes(OUTER_PREFIX);
    if (route === 'batch') translateBatch(run, top, start);
    else writeEvent(run, top, route, []);
    run.out.bytes(OUTER_SUFFIX);
    const ids = run.messageIds;
    return {
      ok: true,
      bytes: run.out.done(),
      events: run.events,
      ...(ids && run.events > 0 ? { messageIdsHash: messageIdsHash(ids) } : {}),
      ...(writeKey !== undefined ? { writeKey } : {}),
    };
  } catch (err) {
    if (err instanceof Refusal) return { ok: false, code: err.code, error: err.message };
    throw err;
  }
}

/** `{"batch": [...], …}`: each event of the array, with the batch's other members as defaults. */
function translateBatch(run: Run, top: Members, start: number): void {
  const outer = top.buf;
  let batch = -1;
  const defaults: Default[] = [];
  for (let i = 0; i < top.n; i++) {
    const key = top.key(i);
    if (key === 'batch') batch = i;
    else if (key !== 'writeKey') {
      const escaped = (top.flags[i] & KEY_ESCAPED) !== 0;
      defaults.push({
        key,
        id: top.id[i],
        plain: escaped ? null : Buffer.from(key),
        head: headOf(key),
        value: outer.subarray(top.vs[i], top.ve[i]),
      });
    }
  }
  if (batch < 0 || top.kind[batch] !== VALUE_ARRAY)
    throw new Refusal('bad_envelope', 'the body must be {"batch": [ {…}, … ]}: "batch" is missing or not an array');
  const inner = Buffer.concat([INNER_PREFIX, outer.subarray(top.vs[batch], top.ve[batch]), INNER_SUFFIX]);
  // Offsets in `inner` told as offsets in the body as sent.
  const offset = INNER_PREFIX.length - (top.vs[batch] - OUTER_PREFIX.length + start);
  const events: Members = new Members(inner, () => writeEvent(run, events, typeOf(events), defaults));
  scanOrRefuse(inner, events, offset, 'batch');
}

/** The door's paths under `/v1/`: each call type and analytics.js' one-letter short form. */
export const SEGMENT_PATHS: readonly (readonly [string, SegmentRoute])[] = [
  ['batch', 'batch'],
  ['b', 'batch'],
  ['track', 'track'],
  ['t', 'track'],
  ['identify', 'identify'],
  ['i', 'identify'],
  ['page', 'page'],
  ['p', 'page'],
  ['screen', 'screen'],
  ['s', 'screen'],
  ['group', 'group'],
  ['g', 'group'],
  ['alias', 'alias'],
  ['a', 'alias'],
];
