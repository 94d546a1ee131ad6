/**
 * Values exactly as sent: hard numbers and strings pushed through the real API, queue, encoder
 * and filesystem store come back from DuckDB with the digits and escapes the client wrote
 * (whitespace outside strings normalised away).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENT_COLUMNS } from '../../shared/parquet/encode.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import {
  HARD_CONTAINERS,
  HARD_NUMBERS,
  HARD_STRINGS,
  HARD_VALUES,
  arrayOf,
  decodedString,
  envelopeOf,
  member,
  objectOf,
  spaced,
} from '../helpers/exact-corpus.js';
import { waitFor } from '../helpers/proc.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

const at = <T>(xs: readonly T[], i: number): T => xs[i % xs.length];

interface Expected {
  readonly row: Record<string, string | null>;
}

/** One event per hard string, each also carrying every hard value in properties, context and extra. */
function corpusEvents(): { raw: string[]; expected: Expected[] } {
  const raw: string[] = [];
  const expected: Expected[] = [];
  for (let i = 0; i < HARD_STRINGS.length; i++) {
    const number = at(HARD_NUMBERS, i);
    const container = at(HARD_CONTAINERS, i);
    const members = [
      member('event_type', '"track"'),
      member('event', HARD_STRINGS[i]),
      member('distinct_id', number),
      member('ts', number),
      member('properties', spaced(objectOf(HARD_VALUES))),
      member('context', spaced(arrayOf(HARD_VALUES))),
      member('x_number', number),
      member('x_string', HARD_STRINGS[i]),
      member('x_container', spaced(container)),
      member('dt', 'null'),
      member('message_id', spaced(container)),
    ];
    raw.push(`{ ${members.join(' ,\n        ')} }`);
    expected.push({
      row: {
        event_type: 'track',
        event: decodedString(HARD_STRINGS[i]),
        distinct_id: number,
        anonymous_id: '',
        ts: number,
        message_id: container,
        properties: objectOf(HARD_VALUES),
        context: arrayOf(HARD_VALUES),
        dt: '',
        extra: `{"x_number":${number},"x_string":${HARD_STRINGS[i]},"x_container":${container}}`,
      },
    });
  }
  // An empty event, and one whose only fields are the server-owned names (kept in extra).
  raw.push('{ }');
  expected.push({ row: { ...Object.fromEntries(EVENT_COLUMNS.map((c) => [c, ''])), extra: null } });
  raw.push(String.raw`{"received_at": -0, "extra" : { "n" : 1e400 }, "__proto__": {"polluted": true}, "a\u0062": []}`);
  expected.push({
    row: {
      ...Object.fromEntries(EVENT_COLUMNS.map((c) => [c, ''])),
      extra: String.raw`{"received_at":-0,"extra":{"n":1e400},"__proto__":{"polluted":true},"a\u0062":[]}`,
    },
  });
  return { raw, expected };
}

describe('values exactly as sent: push → Parquet → DuckDB', () => {
  let s: TestStack;
  beforeAll(async () => {
    s = await startTestStack();
  });
  afterAll(async () => {
    await s?.shutdown();
  });

  async function push(
    app: string,
    body: string,
  ): Promise<{ status: number; json: { batchId?: string; error?: string } }> {
    const r = await fetch(`${s.url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body,
    });
    return { status: r.status, json: (await r.json()) as { batchId?: string; error?: string } };
  }

  it('stores every hard number and string byte for byte; the README queries run on the files', async () => {
    const { raw, expected } = corpusEvents();
    const body = envelopeOf(raw);
    // The body really is the hard case: JSON.parse + JSON.stringify would change it.
    expect(JSON.stringify(JSON.parse(body))).not.toContain('1e400');
    const r = await push('exact', body);
    expect(r.status).toBe(200);
    const batchId = r.json.batchId as string;
    await waitFor(
      async () => {
        const l = await fetch(`${s.url}/list/events/exact`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
        const items = ((await l.json()) as { items: string[] }).items;
        return items.includes(`${batchId}.parquet`);
      },
      30_000,
      'the batch file written',
    );

    const file = sqlString(`${s.dataDir}/events/exact/${batchId}.parquet`);
    const rows = await duckQuery(`SELECT * EXCLUDE (received_at) FROM read_parquet(${file})`);
    expect(rows).toHaveLength(expected.length);
    rows.forEach((row, i) => expect(row, `row ${i}`).toEqual(expected[i].row));

    // DuckDB's JSON functions read the stored text as JSON. (DuckDB refuses a lone escaped
    // surrogate such as "\ud83d" in them, so this looks at the first event's extra, which has none.)
    const [json] = await duckQuery(
      `SELECT json_valid(extra) AS valid, json_extract(extra, '$.x_number')::VARCHAR AS n, json_extract_string(extra, '$.x_string') AS s ` +
        `FROM read_parquet(${file}) LIMIT 1`,
    );
    expect(json).toEqual({ valid: true, n: HARD_NUMBERS[0], s: decodedString(HARD_STRINGS[0]) });
    // docs/analysts.md ("Columns") says so: text holding a lone escaped surrogate is not JSON to DuckDB.
    expect(await duckQuery(`SELECT bool_or(json_valid(properties)) AS any_valid FROM read_parquet(${file})`)).toEqual([
      { any_valid: false },
    ]);
    await expect(duckQuery(`SELECT json_extract(properties, '$.k0') FROM read_parquet(${file})`)).rejects.toThrow(
      /surrogate/,
    );

    // The README's two queries, verbatim but for <root> and <app>.
    const root = s.dataDir;
    const byType = await duckQuery(
      `SELECT event_type, COUNT(*) AS n FROM read_parquet('${root}/events/exact/**/*.parquet') GROUP BY event_type ORDER BY n DESC;`,
    );
    expect(byType).toEqual([
      { event_type: 'track', n: String(HARD_STRINGS.length) },
      { event_type: '', n: '2' },
    ]);
    const hourly =
      await duckQuery(`SELECT time_bucket(INTERVAL '1 hour', received_at::TIMESTAMPTZ) AS hour, COUNT(*) AS n
FROM read_parquet('${root}/events/exact/**/*.parquet') WHERE received_at >= now() - INTERVAL '7 days' GROUP BY 1 ORDER BY 1;`);
    expect(hourly.reduce((a, h) => a + Number(h.n), 0)).toBe(expected.length);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it.each([
    [
      '{"batch":[{"event":"a"}]}',
      /got an object with the keys "batch".*expected \{"data":\{"events":\[\.\.\.\]\},"baseHash":null\}/,
    ],
    ['{"events":[{"event":"a"}]}', /got an object with the keys "events".*belongs in "data\.events"/],
    ['[{"event":"a"}]', /body must be a JSON object \{"data":\{"events":\[\.\.\.\]\},"baseHash":null\}, got an array/],
    ['{"data":{"events":[{"a":1,"a":2}]}}', /data\.events\[0\] has the key "a" twice/],
  ])('answers an SDK-shaped or ambiguous body %s with a 400 that says what to send', async (body, error) => {
    const r = await push('shapes', body);
    expect(r.status).toBe(400);
    expect(r.json.error).toMatch(error);
  });
});
