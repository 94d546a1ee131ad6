/**
 * Events for the erasure tests (issue 36): several users, one distinct id and one anonymous id to
 * erase, JSON text in `properties` and `extra`; and the erasure API's calls (request, state, wait).
 */
import { expect } from 'vitest';
import { waitFor } from './wait.js';

const USERS = 8;
export const ERASE_DISTINCT = 'user-3-ß"quote';
export const ERASE_ANON = 'anon-5';

/** Event `i` of batch `b`: users and anonymous ids cycle independently, so the two erased ids overlap only partly. */
export function event(b: number, i: number): Record<string, unknown> {
  const u = (b * 7 + i) % USERS;
  const a = (b * 3 + i * 5) % (USERS + 1);
  return {
    event_type: 'track',
    event: ['open', 'click', 'buy'][(b + i) % 3],
    distinct_id: u === 3 ? ERASE_DISTINCT : `user-${u}`,
    anonymous_id: `anon-${a}`,
    ts: new Date(1_780_000_000_000 + b * 1000 + i).toISOString(),
    message_id: `m-${b}-${i}`,
    // Unicode, nesting and nulls; the stored text is compared as stored.
    properties: JSON.parse(`{"z": 1.50, "a":"é\\u00e9 ${b}", "n":[1 ,2], "deep":{"x":null}}`) as unknown,
    context: { lib: 'test', i },
    dt: '2026-12-04',
    // Unknown fields go to `extra` as sent.
    custom_field: { k: `v-${b}-${i}` },
  };
}

/** The body as raw JSON text, so spacing inside `properties` is what the encoder sees. */
export function body(b: number, n: number, make: (b: number, i: number) => Record<string, unknown> = event): string {
  const events = Array.from({ length: n }, (_, i) => {
    const e = make(b, i);
    return JSON.stringify(e)
      .replace('"properties":{', '"properties": {"sp" :  true, ')
      .replace('"custom_field":{', '"custom_field":{"big": 12345678901234567890, ');
  });
  return `{"data":{"events":[${events.join(',')}]},"baseHash":null}`;
}

export const ROW = `event_type, event, distinct_id, anonymous_id, ts, message_id, properties, context, dt, epoch_ms(received_at)::BIGINT AS rat, extra`;

/**
 * `POST /admin/erase/events/<app>` naming the ids to erase, with `headers` (an admin token); the
 * test fails unless the API accepts it (202). Returns the job's id.
 */
export async function requestErasure(
  base: string,
  app: string,
  headers: Record<string, string>,
  ids: { distinct_ids?: string[]; anonymous_ids?: string[] },
): Promise<string> {
  const r = await fetch(`${base}/admin/erase/events/${app}`, {
    method: 'POST',
    headers,
    body: JSON.stringify(ids),
  });
  expect(r.status).toBe(202);
  return String(((await r.json()) as { id: string }).id);
}

/** `GET /admin/erase/<id>`: the job's state as the API answers it. */
export async function erasureState(
  base: string,
  id: string,
  headers: Record<string, string>,
): Promise<Record<string, unknown>> {
  return (await (await fetch(`${base}/admin/erase/${id}`, { headers })).json()) as Record<string, unknown>;
}

/** Polls the job until it is `completed` or `failed` (bounded by `ms`) and returns that state. */
export function erasureFinished(
  base: string,
  id: string,
  headers: Record<string, string>,
  ms: number,
  what = 'the erasure',
): Promise<Record<string, unknown>> {
  return waitFor(
    async () => {
      const s = await erasureState(base, id, headers);
      return s.state === 'completed' || s.state === 'failed' ? s : null;
    },
    ms,
    what,
  );
}
