/**
 * The API encodes a large push body to its Parquet file itself (API_ENCODE_MAX_BYTES): the body is
 * scanned once, the job carries the file, and the encoder only writes it. Real Redis, BullMQ, the
 * API over HTTP, an encoder, the filesystem store; the files are read back by DuckDB.
 */
import { gzipSync } from 'node:zlib';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { createEncoder } from '../../services/encoder/worker.js';
import { checkEnvelope } from '../../shared/envelope.js';
import { batchIdMs } from '../../shared/ids.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { createLogger } from '../../shared/logger.js';
import { createRegistry } from '../../shared/metrics.js';
import { encodeBatch, prepareBatch } from '../../shared/parquet/encode.js';
import { ParquetEncodeThread } from '../../shared/parquet/encode-thread-pool.js';
import { createEventsServerPlugin } from '../../services/api/plugin.js';
import { type BatchJob, unpackBody } from '../../shared/redis/jobs/push.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { duckQuery } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { useApiOnlyStack } from '../helpers/stack.js';
import type { TestStack } from '../helpers/stack.js';

const MAX = 400_000;

/** One series' value summed over its samples; undefined when the registry has no such series. */
async function sample(s: TestStack, series: string): Promise<number | undefined> {
  let total: number | undefined;
  for (const metric of await s.registry.getMetricsAsJSON()) {
    for (const v of metric.values as { value: number; metricName?: string }[]) {
      if ((v.metricName ?? metric.name) === series) total = (total ?? 0) + v.value;
    }
  }
  return total;
}

/** A body of `n` events whose distinct_id names the batch; every fifth event has a field outside the schema (it goes to `extra`). */
const bodyOf = (n: number, tag: string): string =>
  batchBody(n, (i) => ({
    ...sampleEvent(i),
    distinct_id: `${tag}-${i}`,
    ...(i % 5 === 0 ? { campaign: `c-${i}` } : {}),
  }));

describe('API_ENCODE_MAX_BYTES: the API queues a large body as its Parquet file', () => {
  const setup = useApiOnlyStack({ API_ENCODE_MAX_BYTES: String(MAX) });

  const push = async (body: string | Uint8Array, headers: Record<string, string> = {}): Promise<Response> =>
    fetch(`${setup.stack().url}/push/events/apienc/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : new Uint8Array(body),
    });

  it('carries a body from 128 KiB up to the limit as its file, smaller and larger ones as JSON; the encoder writes each and DuckDB reads every row', async () => {
    const stack = setup.stack();
    const conn = setup.conn();
    const cases = [
      { tag: 'small', json: bodyOf(100, 'small'), gzip: false, encoding: 'deflate-raw' },
      { tag: 'large', json: bodyOf(300, 'large'), gzip: false, encoding: 'parquet' },
      { tag: 'gzip', json: bodyOf(400, 'gzip'), gzip: true, encoding: 'parquet' },
      { tag: 'over', json: bodyOf(800, 'over'), gzip: false, encoding: 'deflate-raw' },
    ];
    // The sizes the cases are about: under 128 KiB, between it and the limit (decoded, for gzip), over the limit.
    expect(cases.map((c) => Buffer.byteLength(c.json) >= 128 * 1024 && Buffer.byteLength(c.json) <= MAX)).toEqual([
      false,
      true,
      true,
      false,
    ]);

    // The encode thread starts with the first body the API encodes; on a loaded machine its start
    // (a worker and parquet-wasm) can outlast the push's 3 s bound, and that push then goes as JSON
    // by design. Warm it first with pushes to another app (at most five), and take their jobs out
    // of the queue before the encoder below runs, so the cases see a running thread.
    const queue = new Queue(stack.queueName, { connection: conn });
    for (let attempt = 0; attempt < 5; attempt++) {
      const failuresBefore = (await sample(stack, 'ingest_push_encode_failures_total')) ?? 0;
      const warm = await fetch(`${stack.url}/push/events/apiwarm/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: bodyOf(300, 'warm'),
      });
      expect(warm.status).toBe(200);
      const warmId = ((await warm.json()) as { batchId: string }).batchId;
      await (await queue.getJob(warmId))?.remove();
      if (((await sample(stack, 'ingest_push_encode_failures_total')) ?? 0) === failuresBefore) break;
    }
    const encodesBefore = (await sample(stack, 'ingest_push_encode_duration_seconds_count')) ?? 0;

    const ids: string[] = [];
    for (const c of cases) {
      const r = await push(c.gzip ? gzipSync(c.json) : c.json, c.gzip ? { 'Content-Encoding': 'gzip' } : {});
      expect(r.status).toBe(200);
      ids.push(((await r.json()) as { batchId: string }).batchId);
    }

    try {
      for (const [i, c] of cases.entries()) {
        const job = await queue.getJob(ids[i] as string);
        const data = job?.data as BatchJob;
        expect({ tag: c.tag, encoding: data.encoding }).toEqual({ tag: c.tag, encoding: c.encoding });
        const restored = await unpackBody(data);
        if (c.encoding === 'parquet') {
          // The file encodeBatch gives for the decoded body, stamped with the id's instant.
          const file = encodeBatch(Buffer.from(c.json), batchIdMs(ids[i] as string));
          if (!file.ok) throw new Error(file.reason);
          expect(restored.equals(Buffer.from(file.bytes))).toBe(true);
          expect(data.jsonBytes).toBe(Buffer.byteLength(c.json));
        } else {
          expect(restored.toString('utf8')).toBe(c.json);
        }
      }
    } finally {
      await queue.close();
    }
    expect(await sample(stack, 'ingest_push_encode_duration_seconds_count')).toBe(encodesBefore + 2);

    const store = new FilesystemObjectStore({ root: stack.dataDir });
    const registry = createRegistry('apienc', false);
    const encoder = createEncoder({
      queueName: stack.queueName,
      connection: conn,
      ledger: new BatchLedger(conn, stack.queueName),
      store,
      registry,
      logger: createLogger({ level: 'silent', name: 'apienc' }),
      concurrency: 4,
    });
    try {
      await waitFor(
        async () => (await store.listKeys('events/apienc/')).length === cases.length,
        30_000,
        'every batch written',
      );
    } finally {
      await encoder.close(5000);
    }
    const written = (await encoder.metrics.batches.get()).values.find((v) => v.labels.outcome === 'written')?.value;
    expect(written).toBe(cases.length);
    // Input bytes are the JSON bodies' bytes (decoded), whichever form the job carried.
    expect((await encoder.metrics.inputBytes.get()).values[0]?.value).toBe(
      cases.reduce((n, c) => n + Buffer.byteLength(c.json), 0),
    );

    const dir = join(stack.dataDir, 'events', 'apienc');
    const rows = await duckQuery(
      `SELECT split_part(distinct_id, '-', 1) AS tag, count(*)::INTEGER AS n, count(extra)::INTEGER AS extra, count(DISTINCT epoch_ms(received_at))::INTEGER AS instants, min(epoch_ms(received_at))::BIGINT AS at FROM read_parquet('${dir}/*.parquet') GROUP BY 1 ORDER BY 1`,
    );
    const want = cases.map((c, i) => {
      const n = JSON.parse(c.json).data.events.length as number;
      return { tag: c.tag, n, extra: Math.ceil(n / 5), instants: 1, at: String(batchIdMs(ids[i] as string)) };
    });
    expect(rows).toEqual(want.sort((a, b) => a.tag.localeCompare(b.tag)));
    // A file the API encoded is written byte for byte as queued.
    const large = encodeBatch(Buffer.from(cases[1]!.json), batchIdMs(ids[1] as string));
    if (!large.ok) throw new Error(large.reason);
    expect(readFileSync(join(dir, `${ids[1] as string}.parquet`)).equals(Buffer.from(large.bytes))).toBe(true);
  });

  it('queues the batch as JSON, and counts it, when the encode thread is gone', async () => {
    const stack = setup.stack();
    const conn = setup.conn();
    const queue = new Queue(stack.queueName, { connection: conn });
    const closed = new ParquetEncodeThread();
    await closed.close();
    const failures: string[] = [];
    try {
      const plugin = createEventsServerPlugin({
        store: new FilesystemObjectStore({ root: stack.dataDir }),
        collection: 'events',
        storagePath: 'events/{app}/{batchId}',
        queue: {
          queue,
          ledger: new BatchLedger(conn, stack.queueName),
          encodeMaxBytes: MAX,
          encodeThread: () => closed,
        },
        observe: { encodeFailed: (err) => failures.push(err.message) },
      });
      const body = Buffer.from(bodyOf(300, 'fallback'));
      expect(plugin.encodesBody(body.length)).toBe(true);
      const prepared = prepareBatch(body);
      if (!prepared.ok) throw new Error(prepared.reason);
      const r = await plugin.push({ app: 'apienc-fallback' }, body, {
        text: '',
        events: 300,
        prepared: prepared.batch,
      });
      const data = (await queue.getJob(r.batchId as string))?.data as BatchJob;
      expect(data.encoding).toBe('deflate-raw');
      expect((await unpackBody(data)).equals(body)).toBe(true);
      expect(failures).toEqual([expect.stringMatching(/closed/)]);
    } finally {
      await queue.close();
    }
  });

  it('answers a bad body of that size 400 in the words of the plain check, and queues nothing', async () => {
    const stack = setup.stack();
    const before = await sample(stack, 'ingest_push_encode_duration_seconds_count');
    const good = bodyOf(300, 'bad');
    const bad = `${good.slice(0, -30)}]}`;
    const check = checkEnvelope(Buffer.from(bad));
    expect(check.ok).toBe(false);
    const r = await push(bad);
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: string }).error).toBe(check.ok ? '' : check.error);
    expect(await sample(stack, 'ingest_push_encode_duration_seconds_count')).toBe(before);
    const wrongEvent = good.replace('"event":"app_open"', '"event":{"nested":true}');
    const r2 = await push(wrongEvent);
    expect(r2.status).toBe(200);
    // A non-string value is kept as its JSON text (as the encoder does), not refused.
    expect(await sample(stack, 'ingest_push_encode_duration_seconds_count')).toBe((before ?? 0) + 1);
  });

  it('refuses a body of more events than maxEventsPerBatch by its count, prepared on the scan thread or not', async () => {
    const stack = setup.stack();
    const before = await sample(stack, 'ingest_push_encode_duration_seconds_count');
    // 100,001 empty events: 300 KB, over the scan thread's 256 KiB, under API_ENCODE_MAX_BYTES.
    const many = batchBody(100_001, () => ({}));
    expect(Buffer.byteLength(many)).toBeGreaterThan(256 * 1024);
    expect(Buffer.byteLength(many)).toBeLessThan(MAX);
    const r = await push(many);
    expect(r.status).toBe(413);
    const answer = (await r.json()) as { code: string; error: string };
    expect(answer.code).toBe('too_large');
    expect(answer.error).toContain('data.events has 100001 events');
    // One event fewer is prepared and queued as its file.
    const r2 = await push(batchBody(100_000, () => ({})));
    expect(r2.status).toBe(200);
    expect(await sample(stack, 'ingest_push_encode_duration_seconds_count')).toBe((before ?? 0) + 1);
  });
});
