import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as arrow from 'apache-arrow';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EVENT_COLUMNS,
  columnValues,
  columnsToIpcStream,
  encodeBatch,
  eventsToArrow,
  parseBatchColumns,
  prepareBatch,
  restampParquet,
  type EventColumns,
} from '../../shared/parquet/index.js';
import { checkEnvelope } from '../../shared/envelope.js';
import { Table as WasmTable } from 'parquet-wasm';
import { duckQuery, sqlString } from '../helpers/duckdb.js';

const RECEIVED_AT = 1782933157690; // 2026-07-01T19:12:37.690Z

function envelope(events: unknown[]): string {
  return JSON.stringify({ data: { events }, baseHash: null });
}

type EventRecord = Record<string, unknown>;

/** Column text of the events (given as JS values), through the real scanner. */
function columnsOf(events: readonly unknown[]): EventColumns {
  const r = parseBatchColumns(envelope([...events]));
  if (!r.ok) throw new Error(r.reason);
  return r.columns;
}

/** One column's values as strings (null for a missing extra). */
function texts(events: readonly unknown[]): Record<string, (string | null)[]> {
  const cols = columnsOf(events);
  return Object.fromEntries([...EVENT_COLUMNS, 'extra' as const].map((name) => [name, columnValues(cols[name])]));
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

describe('parseBatchColumns', () => {
  it('reads the events of a push envelope given as text or bytes', () => {
    const body = envelope([{ event: 'a' }, { event: 'b' }]);
    for (const input of [body, new TextEncoder().encode(body)]) {
      const r = parseBatchColumns(input);
      if (!r.ok) throw new Error(r.reason);
      expect(r.columns.rows).toBe(2);
      expect(columnValues(r.columns.event)).toEqual(['a', 'b']);
    }
  });

  it.each([
    ['not json', '{"data":', /^malformed JSON/],
    ['a JSON array', '[]', /^body must be a JSON object .* got an array/],
    ['no data', '{"baseHash":null}', /^body has no "data": got an object with the keys "baseHash"/],
    ['events not an array', '{"data":{"events":{}}}', /^"data.events" must be an array, got an object/],
    [
      'a non-object event',
      '{"data":{"events":[{},[1],{}]}}',
      /^data\.events\[1\] must be a JSON object, got an array$/,
    ],
    ['a null event', '{"data":{"events":[null]}}', /^data\.events\[0\] must be a JSON object, got null$/],
  ])('rejects %s with the API reason instead of throwing', (_name, body, reason) => {
    const r = parseBatchColumns(body);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toMatch(reason);
  });

  it('returns columns of its own: a later scan (which reuses the staging buffers) does not change them', () => {
    const first = parseBatchColumns(envelope([{ event: 'first', properties: { n: 1 } }]));
    expect(encodeBatch(envelope([{ event: 'second overwrites', properties: { n: 22222 } }]), RECEIVED_AT).ok).toBe(
      true,
    );
    parseBatchColumns(envelope([{ event: 'third overwrites', properties: { n: 33333 } }]));
    if (!first.ok) throw new Error(first.reason);
    expect(columnValues(first.columns.event)).toEqual(['first']);
    expect(columnValues(first.columns.properties)).toEqual(['{"n":1}']);
  });

  it('rejects bytes that are not UTF-8', () => {
    expect(parseBatchColumns(new Uint8Array([0x7b, 0xff, 0x7d]))).toEqual({
      ok: false,
      reason: 'body is not valid UTF-8',
    });
  });
});

describe('column text', () => {
  it('stores missing and null fields as "" and JSON strings decoded', () => {
    const cols = texts([{ event: 'Signed Up', distinct_id: null, ts: '"quoted"' }, {}]);
    expect(cols.event).toEqual(['Signed Up', '']);
    expect(cols.distinct_id).toEqual(['', '']);
    expect(cols.ts).toEqual(['"quoted"', '']);
    for (const name of EVENT_COLUMNS) expect(cols[name]).toHaveLength(2);
    expect(cols.extra).toEqual([null, null]);
  });

  it('stores non-string values as JSON text, never [object Object]', () => {
    const cols = texts([
      { ts: 1782933157690, dt: true, properties: { a: 1, b: { c: [1, 'x'] } }, context: [1, null], event: 1.5 },
    ]);
    expect(cols.ts[0]).toBe('1782933157690');
    expect(cols.dt[0]).toBe('true');
    expect(cols.properties[0]).toBe('{"a":1,"b":{"c":[1,"x"]}}');
    expect(cols.context[0]).toBe('[1,null]');
    expect(cols.event[0]).toBe('1.5');
  });

  it('puts unknown top-level fields (including client received_at/extra) into extra, in the order sent', () => {
    const cols = texts([
      { event: 'e', campaign: 'spring', n: 2, received_at: 'client says', extra: { x: null }, 2: 'integer-like key' },
      { event: 'e' },
    ]);
    expect(cols.extra[1]).toBeNull();
    // JSON.stringify writes the integer-like key first (JS object order); the body, and so extra, has it there too.
    expect(cols.extra[0]).toBe(
      '{"2":"integer-like key","campaign":"spring","n":2,"received_at":"client says","extra":{"x":null}}',
    );
  });

  it('keeps keys and values of extra as sent: escapes, digits, order', () => {
    const r = parseBatchColumns(String.raw`{"data":{"events":[{"z":1e400,"a":-0,"event":"A"}]}}`);
    if (!r.ok) throw new Error(r.reason);
    expect(columnValues(r.columns.extra)).toEqual([String.raw`{"z":1e400,"a":-0}`]);
    expect(columnValues(r.columns.event)).toEqual(['A']);
  });

  it('finds a fixed column under an escaped key', () => {
    const r = parseBatchColumns(String.raw`{"data":{"events":[{"event":"x","properties":{"a":1e400}}]}}`);
    if (!r.ok) throw new Error(r.reason);
    expect(columnValues(r.columns.event)).toEqual(['x']);
    expect(columnValues(r.columns.properties)).toEqual(['{"a":1e400}']);
    expect(columnValues(r.columns.extra)).toEqual([null]);
  });

  it('keeps a __proto__ key as a plain key and pollutes nothing', () => {
    const r = parseBatchColumns(
      '{"data":{"events":[{"__proto__":{"polluted":true},"properties":{"__proto__":{"polluted":1}}}]}}',
    );
    if (!r.ok) throw new Error(r.reason);
    expect(columnValues(r.columns.extra)).toEqual(['{"__proto__":{"polluted":true}}']);
    expect(columnValues(r.columns.properties)).toEqual(['{"__proto__":{"polluted":1}}']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.prototype).not.toHaveProperty('polluted');
  });

  it('keeps unicode text intact', () => {
    const cols = texts([{ event: '🎉 café 中文', properties: { 名前: 'テスト' } }]);
    expect(cols.event[0]).toBe('🎉 café 中文');
    expect(cols.properties[0]).toBe('{"名前":"テスト"}');
  });
});

describe('eventsToArrow', () => {
  it('builds the events schema in order with the right types and nullability', () => {
    const table = eventsToArrow(columnsOf([{ event: 'a' }]), RECEIVED_AT);
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
    const table = eventsToArrow(columnsOf(events), RECEIVED_AT);
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
    expect(() => eventsToArrow(columnsOf([]), 1.5)).toThrow(RangeError);
  });
});

describe('columnsToIpcStream', () => {
  /** Every column of a table as plain JS values, with the schema's field names, types and nullability. */
  function contents(table: arrow.Table): unknown {
    return {
      fields: table.schema.fields.map((f) => [f.name, String(f.type), f.nullable]),
      rows: table.numRows,
      columns: table.schema.fields.map((f) =>
        [...(table.getChild(f.name) ?? [])].map((v: unknown) => (typeof v === 'bigint' ? Number(v) : v)),
      ),
      nullCounts: table.schema.fields.map((f) => table.getChild(f.name)?.nullCount),
    };
  }

  const batches: [string, unknown[]][] = [
    ['no events', []],
    ['one event without unknown fields (extra all null)', [{ event: 'a', distinct_id: 'd' }]],
    ['one event with an unknown field (extra never null)', [{ event: 'a', campaign: 'c' }]],
    [
      '99 realistic events, some with extra (bitmap past one byte)',
      Array.from({ length: 99 }, (_, i) => realisticEvent(i)),
    ],
    [
      'non-ASCII and long values',
      ['🎉', '中文', 'a'.repeat(5000), ''].map((event, i) => ({
        event,
        properties: { i },
        ...(i % 2 ? { x: event } : {}),
      })),
    ],
  ];

  it.each(batches)('holds what apache-arrow would write for %s', (_, events) => {
    const columns = columnsOf(events);
    const ours = arrow.tableFromIPC(columnsToIpcStream(columns, RECEIVED_AT));
    expect(contents(ours)).toEqual(contents(eventsToArrow(columnsOf(events), RECEIVED_AT)));
  });

  it.each(batches)('is read by parquet-wasm (arrow-rs) with every row, for %s', (_, events) => {
    const table = WasmTable.fromIPCStream(columnsToIpcStream(columnsOf(events), RECEIVED_AT));
    try {
      expect(table.numBatches).toBe(1);
      const back = arrow.tableFromIPC(table.intoIPCStream());
      expect(contents(back)).toEqual(contents(eventsToArrow(columnsOf(events), RECEIVED_AT)));
    } finally {
      // intoIPCStream consumes the table; free is only for when it threw first.
      try {
        table.free();
      } catch {
        /* already consumed */
      }
    }
  });

  it('rejects a receivedAt that is not an integer', () => {
    expect(() => columnsToIpcStream(columnsOf([]), 1.5)).toThrow(RangeError);
  });
});

describe('prepareBatch (the API scans a body once and encodes its file itself)', () => {
  const bytesOf = (events: unknown[]): Buffer => Buffer.from(envelope(events));

  it.each([
    ['no events', []],
    ['one event', [{ event: 'a', distinct_id: 'd' }]],
    ['300 realistic events, some with extra', Array.from({ length: 300 }, (_, i) => realisticEvent(i))],
    [
      'non-ASCII and long values',
      ['🎉', '中文', 'a'.repeat(5000), ''].map((event, i) => ({
        event,
        properties: { i },
        ...(i % 2 ? { x: event } : {}),
      })),
    ],
  ])('gives the very bytes encodeBatch gives, for %s', (_, events) => {
    const body = bytesOf(events);
    const prepared = prepareBatch(body);
    if (!prepared.ok) throw new Error(prepared.reason);
    expect(prepared.batch.rows).toBe(events.length);
    expect(prepared.batch.ipcBytes).toBeGreaterThan(0);
    const encoded = encodeBatch(body, RECEIVED_AT);
    if (!encoded.ok) throw new Error(encoded.reason);
    expect(Buffer.from(prepared.batch.toParquet(RECEIVED_AT)).equals(Buffer.from(encoded.bytes))).toBe(true);
  });

  it('owns its bytes: scans of other bodies between the prepare and the encode change nothing', () => {
    const first = bytesOf(Array.from({ length: 40 }, (_, i) => realisticEvent(i)));
    const prepared = prepareBatch(first);
    if (!prepared.ok) throw new Error(prepared.reason);
    // Other pushes scan into the same staging buffers while this one waits for its id.
    for (let k = 0; k < 3; k++)
      expect(prepareBatch(bytesOf([{ event: `other-${k}`, campaign: 'x'.repeat(3000) }])).ok).toBe(true);
    expect(encodeBatch(bytesOf([{ event: 'and another' }]), RECEIVED_AT).ok).toBe(true);
    const encoded = encodeBatch(first, RECEIVED_AT + 1);
    if (!encoded.ok) throw new Error(encoded.reason);
    expect(Buffer.from(prepared.batch.toParquet(RECEIVED_AT + 1)).equals(Buffer.from(encoded.bytes))).toBe(true);
  });

  it("stamps the instant it is given each time (a push that mints again gets its new id's instant)", async () => {
    const prepared = prepareBatch(bytesOf([{ event: 'a' }, { event: 'b' }]));
    if (!prepared.ok) throw new Error(prepared.reason);
    const dir = await mkdtemp(join(tmpdir(), 'prepare-stamp-'));
    try {
      for (const [i, at] of [RECEIVED_AT, RECEIVED_AT + 86_400_000].entries()) {
        const path = join(dir, `${i}.parquet`);
        await writeFile(path, prepared.batch.toParquet(at));
        const rows = await duckQuery(
          `SELECT DISTINCT epoch_ms(received_at)::BIGINT AS at FROM read_parquet(${sqlString(path)})`,
        );
        expect(rows).toEqual([{ at: String(at) }]);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    expect(() => prepared.batch.toParquet(1.5)).toThrow(RangeError);
  });

  it("restampParquet gives the file encodeBatch gives at the new instant (a reissued batch's rows carry its new id's instant)", () => {
    for (const events of [[{ event: 'a' }], Array.from({ length: 300 }, (_, i) => realisticEvent(i))]) {
      const body = bytesOf(events);
      const [before, after] = [encodeBatch(body, RECEIVED_AT), encodeBatch(body, RECEIVED_AT + 5_000)];
      if (!before.ok || !after.ok) throw new Error('encode failed');
      expect(Buffer.from(restampParquet(before.bytes, RECEIVED_AT + 5_000)).equals(Buffer.from(after.bytes))).toBe(
        true,
      );
    }
    expect(() => restampParquet(new Uint8Array(8), RECEIVED_AT)).toThrow();
  });

  it.each([
    ['an empty body', Buffer.alloc(0)],
    ['malformed JSON', Buffer.from('{"data":{"events":[')],
    ['a wrong envelope', Buffer.from('{"data":{"events":[1]},"baseHash":null}')],
    ['bytes that are not UTF-8', Buffer.from([0x7b, 0xc3, 0x7d])],
  ])("refuses %s with the words of the API's check", (_, body) => {
    const check = checkEnvelope(body);
    expect(check.ok).toBe(false);
    expect(prepareBatch(body)).toEqual({
      ok: false,
      reason: check.ok ? '' : check.error,
      code: check.ok ? '' : check.code,
    });
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
      reason: 'data.events[0] must be a JSON object, got a number',
    });
    expect(encodeBatch(new Uint8Array([0xc3]), RECEIVED_AT)).toEqual({ ok: false, reason: 'body is not valid UTF-8' });
  });

  it('writes the documented columns, types and values, the default codec (SNAPPY) throughout', async () => {
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
    for (const chunk of chunks) expect(chunk.compression).toBe('SNAPPY');
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
    expect(chunks).toEqual([{ compression: 'SNAPPY' }]);
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
