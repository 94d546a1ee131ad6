/**
 * Push bodies of a chosen size in the shapes that cost a JSON validator the most per byte (issue
 * 37, "One request can stall the API for seconds"), and a plain body of typical events to compare
 * them with. Deterministic: the same size gives the same bytes. Used by the scanner's unit test,
 * the API's event-loop test and the `scanner` bench scenario.
 */

/** A JSON string literal with every character written as a `\uXXXX` escape. */
export function escapeAll(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) out += `\\u${s.charCodeAt(i).toString(16).padStart(4, '0')}`;
  return `${out}"`;
}

/** As many `event(i)` (each a JSON object text, ASCII) as fit in `bytes` (at least one). */
function fill(bytes: number, event: (i: number) => string): string {
  const head = '{"data":{"events":[';
  const tail = ']},"baseHash":null}';
  const parts: string[] = [];
  let size = head.length + tail.length - 1;
  for (let i = 0; ; i++) {
    const e = event(i);
    if (parts.length > 0 && size + e.length + 1 > bytes) break;
    parts.push(e);
    size += e.length + 1;
  }
  return head + parts.join(',') + tail;
}

const hex = (n: number, width: number): string => (n >>> 0).toString(16).padStart(width, '0').slice(-width);
const uuid = (i: number): string =>
  `${hex(i * 2654435761, 8)}-${hex(i, 4)}-4${hex(i >> 4, 3)}-a${hex(i * 7, 3)}-${hex(i * 40503, 12)}`;

/** A typical ~300-byte event with the nine known columns. */
export function plainEvent(i: number): string {
  return JSON.stringify({
    event_type: 'track',
    event: ['app_open', 'button_click', 'purchase', 'page_view'][i % 4],
    distinct_id: uuid(i >> 3),
    anonymous_id: uuid(i + 1e6),
    ts: new Date(1_780_000_000_000 + i * 1000).toISOString(),
    message_id: uuid(i + 2e6),
    properties: { screen: `s${i % 17}`, value: i * 1.5, ok: true },
    context: { app: '3.1.4', os: 'Android 15', locale: 'fr-FR' },
    dt: '2026-06-01',
  });
}

/** 32 keys per event, every character of every key a `\u` escape (the issue's body). */
function escapedKeys(count: number): (i: number) => string {
  const keys = Array.from({ length: count }, (_, k) => escapeAll(`key_${String(k).padStart(3, '0')}`));
  return () => `{${keys.map((k) => `${k}:1`).join(',')}}`;
}

/** Events of `count` short raw keys (past 32 keys the scanner's per-event Set takes over). */
function manyKeys(count: number, escaped: boolean): (i: number) => string {
  const keys = Array.from({ length: count }, (_, k) => (escaped ? escapeAll(`k${k}`) : `"k${k}"`));
  const event = `{${keys.map((k) => `${k}:0`).join(',')}}`;
  return () => event;
}

/** 62 one-letter keys per event: the most members per byte an event can hold without a duplicate. */
function letterKeys(): (i: number) => string {
  const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
  const event = `{${[...letters].map((k) => `"${k}":0`).join(',')}}`;
  return () => event;
}

/** 32 keys of `length` bytes that differ only in their last characters (a byte compare reads them whole). */
function longKeys(length: number, escaped: boolean): (i: number) => string {
  const stem = 'k'.repeat(length - 3);
  const keys = Array.from({ length: 32 }, (_, k) => `${stem}${String(k).padStart(3, '0')}`);
  const event = `{${keys.map((k) => `${escaped ? escapeAll(k) : JSON.stringify(k)}:0`).join(',')}}`;
  return () => event;
}

/** A ~4 KB escaped string in a fixed column and in an unknown one. */
function escapedStrings(): (i: number) => string {
  const s = escapeAll('é\n\t"x😀'.repeat(100));
  return (i) => `{"event":${s},"properties":${s},"message_id":"m${i}","note":${s}}`;
}

/** Containers nested up to the depth limit (64, the event object being level 1). */
function deep(): (i: number) => string {
  const nest = (levels: number): string => `${'['.repeat(levels)}{"a":1}${']'.repeat(levels)}`;
  return () => `{"properties":${nest(62)},"context":{"x":${nest(61)}}}`;
}

/** Events holding a wide array of tiny elements. */
function wideArrays(): (i: number) => string {
  const arr = `[${Array.from({ length: 5000 }, () => '0').join(',')}]`;
  const objs = `[${Array.from({ length: 1000 }, () => '{}').join(',')}]`;
  return () => `{"properties":${arr},"x":${objs}}`;
}

/** Typical events pretty-printed with a lot of whitespace. */
function whitespace(): (i: number) => string {
  return (i) => JSON.stringify(JSON.parse(plainEvent(i)), null, 16).replace(/\n/g, '\n\n\t \r\n');
}

/** The adversarial shapes, by name. */
export const ADVERSARIAL_SHAPES: Readonly<Record<string, (i: number) => string>> = {
  'escaped keys (32 per event)': escapedKeys(32),
  'empty events ({} × millions)': () => '{}',
  'one-member events ({"a":0})': () => '{"a":0}',
  'one-letter keys (62 per event)': letterKeys(),
  '2000 keys per event': manyKeys(2000, false),
  '2000 escaped keys per event': manyKeys(2000, true),
  '40 keys per event, escaped': escapedKeys(40),
  'long keys (32 × 1 KB)': longKeys(1024, false),
  'long escaped keys (32 × 1 KB)': longKeys(1024, true),
  'long escaped strings': escapedStrings(),
  'nesting at the depth limit': deep(),
  'wide arrays': wideArrays(),
  whitespace: whitespace(),
};

/** A body of about `bytes` bytes of typical ~300-byte events. */
export function plainBody(bytes: number): string {
  return fill(bytes, plainEvent);
}

/** A body of about `bytes` bytes in one of the {@link ADVERSARIAL_SHAPES}. */
export function adversarialBody(shape: string, bytes: number): string {
  const event = ADVERSARIAL_SHAPES[shape];
  if (!event) throw new Error(`unknown shape ${shape}`);
  return fill(bytes, event);
}
