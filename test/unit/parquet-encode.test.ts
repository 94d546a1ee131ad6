import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as arrow from 'apache-arrow';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EVENT_COLUMNS,
  buildEventColumns,
  encodeBatch,
  eventsToArrow,
  parseBatchEvents,
  type EventRecord,
} from '../../shared/parquet/index.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';

const RECEIVED_AT = 1782933157690; // 2026-07-01T19:12:37.690Z

function envelope(events: unknown[]): string {
  return JSON.stringify({ data: { events }, baseHash: null });
}

function realisticEvent(i: number): EventRecord {
  const id = i.toString(16).padStart(12, '0');
  return {
    event_type: 'track',
    event: ['Page Viewed', 'Button Clicked', 'Signed Up'][i % 3],
    distinct_id: `0b6f7a52-3c1e-4d8a-9f2b-${id}`,
    anonymous_id: `anon-${i % 97}`,
    ts: new Date(RECEIVED_AT - i * 1000).toISOString(),
    message_id: `6f1c2d3e-4b5a-4c6d-8e7f-${id}`,
    properties: { path: `/p/${i % 50}`, n: i, ok: i % 2 === 0, tags: ['a', 'ü'], nested: { x: i } },
    context: { app: { name: 'demo', version: '1.2.3' }, locale: i % 5 === 0 ? 'ja-JP 日本' : 'en-US' },
    dt: '2026-07-01',
    ...(i % 10 === 0 ? { campaign: `c${i}` } : {}),
  };
}

describe('parseBatchEvents', () => {
  it('returns the events of a push envelope given as text or bytes', () => {
    const body = envelope([{ event: 'a' }, { event: 'b' }]);
    expect(parseBatchEvents(body)).toEqual({ ok: true, events: [{ event: 'a' }, { event: 'b' }] });
    expect(parseBatchEvents(new TextEncoder().encode(body))).toEqual({
      ok: true,
      events: [{ event: 'a' }, { event: 'b' }],
    });
  });

  it.each([
    ['not json', '{"data":', 'body is not valid JSON'],
    ['a JSON array', '[]', 'body is not a JSON object'],
    ['no data', '{"baseHash":null}', 'data is not a JSON object'],
    ['events not an array', '{"data":{"events":{}}}', 'data.events is not an array'],
    ['a non-object event', '{"data":{"events":[{},[1],{}]}}', 'data.events[1] is not a JSON object'],
    ['a null event', '{"data":{"events":[null]}}', 'data.events[0] is not a JSON object'],
  ])('rejects %s with a reason instead of throwing', (_name, body, reason) => {
    expect(parseBatchEvents(body)).toEqual({ ok: false, reason });
  });

  it('rejects bytes that are not UTF-8', () => {
    expect(parseBatchEvents(new Uint8Array([0x7b, 0xff, 0x7d]))).toEqual({
      ok: false,
      reason: 'body is not valid UTF-8',
    });
  });
});

describe('buildEventColumns', () => {
  it('stores missing and null fields as "" and keeps strings as they are', () => {
    const cols = buildEventColumns([{ event: 'Signed Up', distinct_id: null, ts: '"quoted"' }, {}]);
    expect(cols.event).toEqual(['Signed Up', '']);
    expect(cols.distinct_id).toEqual(['', '']);
    expect(cols.ts).toEqual(['"quoted"', '']);
    for (const name of EVENT_COLUMNS) expect(cols[name]).toHaveLength(2);
    expect(cols.extra).toEqual([null, null]);
  });

  it('stores non-string values as JSON text, never [object Object]', () => {
    const cols = buildEventColumns([
      { ts: 1782933157690, dt: true, properties: { a: 1, b: { c: [1, 'x'] } }, context: [1, null], event: 1.5 },
    ]);
    expect(cols.ts[0]).toBe('1782933157690');
    expect(cols.dt[0]).toBe('true');
    expect(cols.properties[0]).toBe('{"a":1,"b":{"c":[1,"x"]}}');
    expect(cols.context[0]).toBe('[1,null]');
    expect(cols.event[0]).toBe('1.5');
  });

  it('puts unknown top-level fields (including client received_at/extra) into extra as JSON', () => {
    const cols = buildEventColumns([
      { event: 'e', campaign: 'spring', n: 2, received_at: 'client says', extra: { x: null } },
      { event: 'e' },
    ]);
    expect(cols.extra[1]).toBeNull();
    expect(JSON.parse(cols.extra[0] ?? '')).toEqual({
      campaign: 'spring',
      n: 2,
      received_at: 'client says',
      extra: { x: null },
    });
  });

  it('ignores inherited keys', () => {
    const event = Object.create({ event: 'inherited', sneaky: 1 }) as EventRecord;
    event.distinct_id = 'u';
    const cols = buildEventColumns([event]);
    expect(cols.event[0]).toBe('');
    expect(cols.distinct_id[0]).toBe('u');
    expect(cols.extra[0]).toBeNull();
  });

  it('keeps a __proto__ key as a plain key and pollutes nothing', () => {
    const parsed = parseBatchEvents(
      '{"data":{"events":[{"__proto__":{"polluted":true},"properties":{"__proto__":{"polluted":1}}}]}}',
    );
    if (!parsed.ok) throw new Error(parsed.reason);
    const cols = buildEventColumns(parsed.events);
    expect(JSON.parse(cols.extra[0] ?? '')).toEqual(JSON.parse('{"__proto__":{"polluted":true}}'));
    expect(cols.extra[0]).toBe('{"__proto__":{"polluted":true}}');
    expect(cols.properties[0]).toBe('{"__proto__":{"polluted":1}}');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.prototype).not.toHaveProperty('polluted');
  });

  it('keeps unicode text intact', () => {
    const cols = buildEventColumns([{ event: '🎉 café 中文', properties: { 名前: 'テスト' } }]);
    expect(cols.event[0]).toBe('🎉 café 中文');
    expect(cols.properties[0]).toBe('{"名前":"テスト"}');
  });
});

describe('eventsToArrow', () => {
  it('builds the events schema in order with the right types and nullability', () => {
    const table = eventsToArrow(buildEventColumns([{ event: 'a' }]), RECEIVED_AT);
    expect(table.schema.fields.map((f) => f.name)).toEqual([...EVENT_COLUMNS, 'received_at', 'extra']);
    for (const field of table.schema.fields.slice(0, 9)) {
      expect(arrow.DataType.isUtf8(field.type)).toBe(true);
      expect(field.nullable).toBe(false);
    }
    const receivedAt = table.schema.fields[9];
    expect(receivedAt.type).toBeInstanceOf(arrow.Timestamp);
    expect((receivedAt.type as arrow.Timestamp).unit).toBe(arrow.TimeUnit.MILLISECOND);
    expect((receivedAt.type as arrow.Timestamp).timezone).toBe('UTC');
    expect(receivedAt.nullable).toBe(false);
    expect(arrow.DataType.isUtf8(table.schema.fields[10].type)).toBe(true);
    expect(table.schema.fields[10].nullable).toBe(true);
  });

  it('round-trips ASCII, non-ASCII and null values through the packed buffers', () => {
    const values = ['plain', '', '🎉 emoji', '中文字符', 'é', 'a'.repeat(1000), '\ud800 lone'];
    const events = values.map((event, i): EventRecord => (i % 2 ? { event, x: event } : { event }));
    const table = eventsToArrow(buildEventColumns(events), RECEIVED_AT);
    expect(table.numRows).toBe(values.length);
    // A lone surrogate has no UTF-8 form; the encoder writes U+FFFD like every UTF-8 writer.
    const expected = values.map((v) => v.replace('\ud800', '\ufffd'));
    expect(table.getChild('event')?.toArray()).toEqual(expected);
    expect(table.getChild('distinct_id')?.toArray()).toEqual(values.map(() => ''));
    const extra = table.getChild('extra');
    expect(extra?.nullCount).toBe(4);
    expect([...(extra ?? [])]).toEqual(
      expected.map((v, i) => (i % 2 ? JSON.stringify({ x: values[i] }).replace('\ud800', '\ufffd') : null)),
    );
    expect([...(table.getChild('received_at') ?? [])]).toEqual(values.map(() => RECEIVED_AT));
  });

  it('rejects a receivedAt that is not an integer', () => {
    expect(() => eventsToArrow(buildEventColumns([]), 1.5)).toThrow(RangeError);
  });
});

describe('encodeBatch → DuckDB', () => {
  let dir: string;
  let fileNo = 0;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'parquet-encode-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** Encodes `events`, writes the file and returns its path as a SQL literal. */
  async function encodeToFile(events: unknown[], receivedAtMs = RECEIVED_AT): Promise<string> {
    const result = encodeBatch(envelope(events), receivedAtMs);
    if (!result.ok) throw new Error(result.reason);
    expect(result.rows).toBe(events.length);
    const path = join(dir, `batch-${fileNo++}.parquet`);
    await writeFile(path, result.bytes);
    return sqlString(path);
  }

  it('returns a reason for bad data', () => {
    expect(encodeBatch('{"data":{"events":[1]}}', RECEIVED_AT)).toEqual({
      ok: false,
      reason: 'data.events[0] is not a JSON object',
    });
    expect(encodeBatch(new Uint8Array([0xc3]), RECEIVED_AT)).toEqual({ ok: false, reason: 'body is not valid UTF-8' });
  });

  it('writes the documented columns, types and values, ZSTD throughout', async () => {
    const file = await encodeToFile([
      {
        event_type: 'track',
        event: 'Héllo 🎉 中文',
        distinct_id: 'u1',
        ts: 5,
        properties: { a: 1, b: [1, 2] },
        dt: '2026-07-01',
        received_at: 'client',
        foo: { bar: 1 },
      },
      { event_type: 'identify', context: { os: 'iOS' } },
    ]);

    const described = await duckQuery(`DESCRIBE SELECT * FROM read_parquet(${file})`);
    expect(described.map((r) => [r.column_name, r.column_type])).toEqual([
      ...EVENT_COLUMNS.map((name) => [name, 'VARCHAR']),
      ['received_at', 'TIMESTAMP WITH TIME ZONE'],
      ['extra', 'VARCHAR'],
    ]);
    // DuckDB's DESCRIBE reports every Parquet column as nullable; the file's schema is stricter.
    const schema = await duckQuery(
      `SELECT name, repetition_type, logical_type FROM parquet_schema(${file}) WHERE name <> 'arrow_schema'`,
    );
    expect(schema.map((r) => [r.name, r.repetition_type])).toEqual([
      ...EVENT_COLUMNS.map((name) => [name, 'REQUIRED']),
      ['received_at', 'REQUIRED'],
      ['extra', 'OPTIONAL'],
    ]);
    expect(String(schema[9].logical_type)).toContain('isAdjustedToUTC=1');
    expect(String(schema[9].logical_type)).toContain('MILLIS=');

    const rows = await duckQuery(
      `SELECT * EXCLUDE (received_at), epoch_ms(received_at) AS received_ms FROM read_parquet(${file})`,
    );
    expect(rows).toEqual([
      {
        event_type: 'track',
        event: 'Héllo 🎉 中文',
        distinct_id: 'u1',
        anonymous_id: '',
        ts: '5',
        message_id: '',
        properties: '{"a":1,"b":[1,2]}',
        context: '',
        dt: '2026-07-01',
        extra: '{"received_at":"client","foo":{"bar":1}}',
        received_ms: String(RECEIVED_AT),
      },
      {
        event_type: 'identify',
        event: '',
        distinct_id: '',
        anonymous_id: '',
        ts: '',
        message_id: '',
        properties: '',
        context: '{"os":"iOS"}',
        dt: '',
        extra: null,
        received_ms: String(RECEIVED_AT),
      },
    ]);

    const chunks = await duckQuery(
      `SELECT path_in_schema, compression, encodings, stats_null_count FROM parquet_metadata(${file})`,
    );
    expect(chunks).toHaveLength(11);
    for (const chunk of chunks) expect(chunk.compression).toBe('ZSTD');
    const byColumn = new Map(chunks.map((c) => [c.path_in_schema, c]));
    expect(String(byColumn.get('event_type')?.encodings)).toContain('RLE_DICTIONARY');
    expect(byColumn.get('extra')?.stats_null_count).toBe('1');
  });

  it('encodes an empty events array as a valid zero-row file', async () => {
    const result = encodeBatch(envelope([]), RECEIVED_AT);
    expect(result).toMatchObject({ ok: true, rows: 0 });
    const file = await encodeToFile([]);
    expect(await duckQuery(`SELECT count(*) AS n FROM read_parquet(${file})`)).toEqual([{ n: '0' }]);
    const described = await duckQuery(`DESCRIBE SELECT * FROM read_parquet(${file})`);
    expect(described.map((r) => r.column_name)).toEqual([...EVENT_COLUMNS, 'received_at', 'extra']);
  });

  it('round-trips a 5,000-event batch', async () => {
    const events = Array.from({ length: 5000 }, (_, i) => realisticEvent(i));
    const file = await encodeToFile(events);
    const rows = await duckQuery(
      `SELECT message_id, event, ts, properties, context, extra, epoch_ms(received_at) AS ms FROM read_parquet(${file})`,
    );
    expect(rows).toHaveLength(5000);
    rows.forEach((row, i) => {
      const event = events[i];
      expect(row).toEqual({
        message_id: event.message_id,
        event: event.event,
        ts: event.ts,
        properties: JSON.stringify(event.properties),
        context: JSON.stringify(event.context),
        extra: i % 10 === 0 ? JSON.stringify({ campaign: `c${i}` }) : null,
        ms: String(RECEIVED_AT),
      });
    });
    const chunks = await duckQuery(`SELECT DISTINCT compression FROM parquet_metadata(${file})`);
    expect(chunks).toEqual([{ compression: 'ZSTD' }]);
  });

  it('runs the documented hourly query with the 7-day filter', async () => {
    const file = await encodeToFile(
      Array.from({ length: 3 }, (_, i) => realisticEvent(i)),
      Date.now(),
    );
    const rows = await duckQuery(
      `SELECT time_bucket(INTERVAL '1 hour', received_at::TIMESTAMPTZ) AS hour, COUNT(*) AS n ` +
        `FROM read_parquet(${file}) WHERE received_at >= now() - INTERVAL '7 days' GROUP BY 1 ORDER BY 1`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].n).toBe('3');
  });
});
