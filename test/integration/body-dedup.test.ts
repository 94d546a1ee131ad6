/**
 * Issue 37, "A 200 that merges two devices": without an Idempotency-Key, a byte-identical body
 * within BODY_DEDUP_WINDOW_SECONDS is taken for a retry only when every event carries a
 * `message_id`; two devices sending the same heartbeat otherwise get two batches and both files.
 * API + encoder in this process, real Redis, filesystem store, default windows.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import * as arrow from 'apache-arrow';
import { readParquet } from 'parquet-wasm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_ENCODE_MIN_BYTES } from '../../shared/redis/jobs/push.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

/** An event as a device's heartbeat has it: no message_id. */
function heartbeat(i: number): Record<string, unknown> {
  const e = sampleEvent(i, '00000000-0000-4000-8000-00000000beef');
  delete e.message_id;
  return e;
}

describe('body dedup without an Idempotency-Key needs a message_id on every event', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack({ ROLLUP: 'off' });
  });
  afterAll(async () => {
    await stack?.shutdown();
  });

  async function push(app: string, body: string): Promise<{ status: number; batchId?: string }> {
    const r = await fetch(`${stack.url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    const json = (await r.json()) as { batchId?: string; error?: string };
    expect(r.status, json.error).toBe(200);
    return { status: r.status, batchId: json.batchId };
  }
  const files = (app: string): string[] => {
    const dir = join(stack.dataDir, 'events', app);
    return existsSync(dir)
      ? readdirSync(dir)
          .filter((f) => f.endsWith('.parquet'))
          .sort()
      : [];
  };
  const rows = (app: string, file: string): number =>
    arrow.tableFromIPC(readParquet(readFileSync(join(stack.dataDir, 'events', app, file))).intoIPCStream()).numRows;

  it('two identical pushes without message_id are two batches, and both files hold their rows', async () => {
    const body = batchBody(3, heartbeat);
    const a = await push('dedup-none', body);
    const b = await push('dedup-none', body);
    expect(a.batchId).toBeTruthy();
    expect(b.batchId).toBeTruthy();
    expect(b.batchId).not.toBe(a.batchId);
    await waitFor(async () => files('dedup-none').length === 2, 30_000, 'two files written');
    expect(files('dedup-none')).toEqual([`${a.batchId}.parquet`, `${b.batchId}.parquet`].sort());
    for (const f of files('dedup-none')) expect(rows('dedup-none', f)).toBe(3);
  });

  it('with a message_id on every event, the second identical push is the first batch: one file', async () => {
    const body = batchBody(3);
    const a = await push('dedup-all', body);
    const b = await push('dedup-all', body);
    expect(b.batchId).toBe(a.batchId);
    await waitFor(async () => files('dedup-all').length === 1, 30_000, 'file written');
    // A third push after the file is written is still the same batch (within the window).
    expect((await push('dedup-all', body)).batchId).toBe(a.batchId);
    expect(files('dedup-all')).toEqual([`${a.batchId}.parquet`]);
    expect(rows('dedup-all', `${a.batchId}.parquet`)).toBe(3);
  });

  it('one event without message_id: two batches', async () => {
    const body = batchBody(3, (i) => (i === 1 ? heartbeat(i) : sampleEvent(i)));
    const a = await push('dedup-one', body);
    const b = await push('dedup-one', body);
    expect(b.batchId).not.toBe(a.batchId);
    await waitFor(async () => files('dedup-one').length === 2, 30_000, 'two files written');
    for (const f of files('dedup-one')) expect(rows('dedup-one', f)).toBe(3);
  });

  it('the same rule for a body the API encodes itself (API_ENCODE_MAX_BYTES)', async () => {
    const n = Math.ceil(API_ENCODE_MIN_BYTES / 400);
    const none = batchBody(n, heartbeat);
    const all = batchBody(n);
    expect(Buffer.byteLength(none)).toBeGreaterThan(API_ENCODE_MIN_BYTES);
    const a = await push('dedup-big', none);
    const b = await push('dedup-big', none);
    expect(b.batchId).not.toBe(a.batchId);
    const c = await push('dedup-big', all);
    const d = await push('dedup-big', all);
    expect(d.batchId).toBe(c.batchId);
    await waitFor(async () => files('dedup-big').length === 3, 30_000, 'three files written');
    for (const f of files('dedup-big')) expect(rows('dedup-big', f)).toBe(n);
  });
});
