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

const OUTER_PREFIX = Buffer.from('{"data":{"events":[');
const OUTER_SUFFIX = Buffer.from(']}}');
const INNER_PREFIX = Buffer.from('{"data":{"events":');
const INNER_SUFFIX = Buffer.from('}}');

/** One top-level member of an object, by byte range in the buffer scanned. */
interface Member {
  key: string;
  /** The key's bytes as sent, quotes included: `[keyStart, keyEnd)`. */
  keyStart: number;
  keyEnd: number;
  valueStart: number;
  valueEnd: number;
  kind: ValueKind;
  escaped: boolean;
}

class Refusal extends Error {
  constructor(
    readonly code: 'bad_json' | 'bad_envelope' | 'too_large',
    message: string,
  ) {
    super(message);
  }
}

function keyOf(buf: Uint8Array, start: number, end: number, escaped: boolean): string {
  const b = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  return escaped ? (JSON.parse(b.toString('utf8', start, end)) as string) : b.toString('utf8', start + 1, end - 1);
}

function stringOf(buf: Buffer, m: Member): string {
  return m.escaped
    ? (JSON.parse(buf.toString('utf8', m.valueStart, m.valueEnd)) as string)
    : buf.toString('utf8', m.valueStart + 1, m.valueEnd - 1);
}

/** Collects the members of each object the scanner reports; `onEvent` gets them once an object ends. */
class MemberSink implements EventSink {
  private members: Member[] = [];
  private index = 0;
  constructor(
    private readonly buf: Buffer,
    private readonly onEvent: (index: number, members: Member[]) => void,
  ) {}
  beginEvent(index: number): void {
    this.index = index;
    this.members = [];
  }
  member(ks: number, ke: number, keyEscaped: boolean, vs: number, ve: number, kind: ValueKind, escaped: boolean): void {
    this.members.push({
      key: keyOf(this.buf, ks, ke, keyEscaped),
      keyStart: ks,
      keyEnd: ke,
      valueStart: vs,
      valueEnd: ve,
      kind,
      escaped,
    });
  }
  endEvent(): void {
    this.onEvent(this.index, this.members);
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
  text(s: string): void {
    this.ensure(Buffer.byteLength(s));
    this.at += this.buf.write(s, this.at);
  }
  copy(src: Buffer, start: number, end: number): void {
    end = Math.min(end, src.length);
    this.ensure(end - start);
    this.at += src.copy(this.buf, this.at, start, end);
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

function typeOf(buf: Buffer, members: Member[], index: number): SegmentType {
  const m = members.find((x) => x.key === 'type');
  const t = m && m.kind === VALUE_STRING ? stringOf(buf, m) : undefined;
  if (t !== undefined && (SEGMENT_TYPES as readonly string[]).includes(t)) return t as SegmentType;
  throw new Refusal('bad_envelope', `batch[${index}].type must be one of ${SEGMENT_TYPES.join(', ')}`);
}

/** What translating one body keeps between its events. */
interface Run {
  out: Writer;
  events: number;
  messageIds: string[] | null;
}

/** `,"<name>":` of every name a member is renamed to, made once. */
const RENAMED = new Map<string, Buffer>();
function memberHead(name: string): Buffer {
  let b = RENAMED.get(name);
  if (!b) RENAMED.set(name, (b = Buffer.from(`,${JSON.stringify(name)}:`)));
  return b;
}

/** The head of a member whose key is renamed (mapped, or one of our column names), else undefined: the key is copied as sent. */
function renamed(map: Readonly<Record<string, string>>, key: string): Buffer | undefined {
  const to = Object.hasOwn(map, key) ? map[key] : undefined;
  if (to !== undefined) return memberHead(to);
  return COLUMN_NAMES.has(key) ? memberHead(`segment_${key}`) : undefined;
}

/** Writes one event: `event_type`, its members mapped, then the batch-level defaults it lacks. */
function writeEvent(
  run: Run,
  buf: Buffer,
  members: Member[],
  type: SegmentType,
  defaults: readonly { key: string; value: Buffer }[],
): void {
  const { out } = run;
  const map = BY_TYPE[type];
  out.text(run.events === 0 ? `{"event_type":"${type}"` : `,{"event_type":"${type}"`);
  run.events++;
  let messageId: string | undefined;
  for (const m of members) {
    if (m.key === 'type' || m.key === 'writeKey') continue;
    if (m.key === 'messageId' && m.kind === VALUE_STRING) messageId = stringOf(buf, m);
    const named = renamed(map, m.key);
    if (named) out.copy(named, 0, named.length);
    else {
      out.text(',');
      out.copy(buf, m.keyStart, m.keyEnd);
      out.text(':');
    }
    out.copy(buf, m.valueStart, m.valueEnd);
  }
  for (const d of defaults) {
    if (members.some((m) => m.key === d.key)) continue;
    out.copy(renamed(map, d.key) ?? Buffer.from(`,${JSON.stringify(d.key)}:`), 0, Infinity);
    out.copy(d.value, 0, d.value.length);
  }
  out.text('}');
  if (run.messageIds) {
    if (messageId) run.messageIds.push(messageId);
    else run.messageIds = null;
  }
}

function messageIdsHash(ids: string[]): string {
  const h = createHash('sha256');
  for (const id of ids.sort()) h.update(`${Buffer.byteLength(id)}:${id}\n`);
  return h.digest('hex');
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
  const run: Run = { out: new Writer(outer.length + 256, maxOutBytes), events: 0, messageIds: [] };
  try {
    let top: Member[] = [];
    const n = scanOrRefuse(
      outer,
      new MemberSink(outer, (_i, ms) => (top = ms)),
      OUTER_PREFIX.length - start,
      'the body',
    );
    if (n !== 1)
      throw new Refusal(
        'bad_json',
        n === 0 ? 'empty body: expected one JSON object' : 'the body must be one JSON object',
      );
    const key = top.find((m) => m.key === 'writeKey' && m.kind === VALUE_STRING);
    const writeKey = key ? stringOf(outer, key) : undefined;
    run.out.text('{"data":{"events":[');
    if (route === 'batch') translateBatch(run, outer, top, start);
    else writeEvent(run, outer, top, route, []);
    run.out.text(']}}');
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
function translateBatch(run: Run, outer: Buffer, top: Member[], start: number): void {
  const batch = top.find((m) => m.key === 'batch');
  if (!batch || batch.kind !== VALUE_ARRAY)
    throw new Refusal('bad_envelope', 'the body must be {"batch": [ {…}, … ]}: "batch" is missing or not an array');
  const defaults = top
    .filter((m) => m.key !== 'batch' && m.key !== 'writeKey')
    .map((m) => ({ key: m.key, value: outer.subarray(m.valueStart, m.valueEnd) }));
  const inner = Buffer.concat([INNER_PREFIX, outer.subarray(batch.valueStart, batch.valueEnd), INNER_SUFFIX]);
  // Offsets in `inner` told as offsets in the body as sent.
  const offset = INNER_PREFIX.length - (batch.valueStart - OUTER_PREFIX.length + start);
  scanOrRefuse(
    inner,
    new MemberSink(inner, (i, ms) => writeEvent(run, inner, ms, typeOf(inner, ms, i), defaults)),
    offset,
    'batch',
  );
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
