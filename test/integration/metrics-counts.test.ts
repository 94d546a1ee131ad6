import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { JOB_NAME } from '../../shared/redis/jobs/push.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

const MAX_BODY = 50_000;
const PUSH_ROUTE = '/push/events/:app/:batchId';
/** The steps of a push, admission's then the queued path's (services/api/push/). */
const STEPS = [
  'shed',
  'params',
  'headers',
  'read-body',
  'envelope',
  'app-budget',
  'claim-id',
  'build-payload',
  'enqueue',
  'durability-wait',
];

/**
 * Sums the samples of one exposed series (`name`, or `name_count`/`name_sum`/`name_bucket` of a
 * histogram) whose labels include `labels`; undefined when no sample matches, so a renamed
 * metric fails loudly instead of reading as 0.
 */
async function sample(s: TestStack, series: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  let total: number | undefined;
  for (const metric of await s.registry.getMetricsAsJSON()) {
    for (const v of metric.values as {
      value: number;
      labels: Record<string, string | number>;
      metricName?: string;
    }[]) {
      if ((v.metricName ?? metric.name) !== series) continue;
      if (!Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want)) continue;
      total = (total ?? 0) + v.value;
    }
  }
  return total;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((f) => join(dir, f))
    .filter((f) => statSync(f).isFile());
}

describe('metric values after a known sequence of pushes (read back from the registry)', () => {
  let s: TestStack;
  let cfgDir: string;
  let redis: Redis;
  let queue: Queue;
  const app = () => s.api!.app.app;
  const post = (body: string | Buffer, type = 'application/json') =>
    request(app()).post('/push/events/counts/any').set('Content-Type', type).send(body);

  beforeAll(async () => {
    cfgDir = mkdtempSync(join(tmpdir(), 'ingest-metrics-cfg-'));
    const cfg = join(cfgDir, 'config.json');
    // A small body limit so the 413 case needs no multi-megabyte upload.
    writeFileSync(
      cfg,
      JSON.stringify({
        version: 1,
        collections: [
          {
            name: 'events',
            storagePath: 'events/{app}/{batchId}',
            readRoles: ['admin'],
            writeRoles: ['public'],
            encryption: 'none',
            allowedMimeTypes: ['application/json'],
            maxBodyBytes: MAX_BODY,
            listable: true,
          },
        ],
      }),
    );
    s = await startTestStack({ CONFIG_FILE: cfg, ENCODER_CONCURRENCY: '3' });
    redis = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
    queue = new Queue(s.queueName, { connection: redis });
  });
  afterAll(async () => {
    await queue?.obliterate({ force: true }).catch(() => undefined);
    await queue?.close();
    redis?.disconnect();
    await s?.shutdown();
    rmSync(cfgDir, { recursive: true, force: true });
  });

  it('counts pushes by outcome, rejections by reason, events and bytes, and the encoder written count', async () => {
    const bodies = [batchBody(10), batchBody(20), batchBody(30)];
    const accepted = [
      await post(bodies[0]!).set('Idempotency-Key', 'counts-key-1'),
      await post(bodies[1]!),
      await post(bodies[2]!),
    ];
    expect(accepted.map((r) => r.status)).toEqual([200, 200, 200]);
    const dup = await post(bodies[0]!).set('Idempotency-Key', 'counts-key-1');
    expect(dup.status).toBe(200);
    expect(dup.body.batchId).toBe(accepted[0]!.body.batchId);
    expect((await post(bodies[1]!, 'text/plain')).status).toBe(415);
    expect((await post('{"data":{"events":[')).status).toBe(400);
    expect((await post(batchBody(200))).status).toBe(413);
    const empty = await post(JSON.stringify({ data: { events: [] }, baseHash: null }));
    expect(empty.status).toBe(200);
    expect(empty.body.batchId).toBeNull();

    expect(await sample(s, 'ingest_pushes_total', { outcome: 'accepted' })).toBe(3);
    expect(await sample(s, 'ingest_pushes_total', { outcome: 'deduplicated' })).toBe(1);
    expect(await sample(s, 'ingest_pushes_total', { outcome: 'empty' })).toBe(1);
    expect(await sample(s, 'ingest_pushes_total', { outcome: 'rejected' })).toBe(3);
    expect(await sample(s, 'ingest_pushes_total', { outcome: 'shed' })).toBe(0);
    expect(await sample(s, 'ingest_pushes_total')).toBe(8);
    expect(await sample(s, 'ingest_push_rejections_total', { reason: 'content_type' })).toBe(1);
    expect(await sample(s, 'ingest_push_rejections_total', { reason: 'bad_json' })).toBe(1);
    expect(await sample(s, 'ingest_push_rejections_total', { reason: 'too_large' })).toBe(1);
    expect(await sample(s, 'ingest_push_rejections_total')).toBe(3);
    expect(await sample(s, 'ingest_events_accepted_total')).toBe(60);
    const acceptedBytes = bodies.reduce((a, b) => a + Buffer.byteLength(b), 0);
    expect(await sample(s, 'ingest_bytes_accepted_total')).toBe(acceptedBytes);
    // The deduplicated retry mints (and finds the first id); only new batches are enqueued.
    expect(await sample(s, 'ingest_mint_duration_seconds_count')).toBe(4);
    expect(await sample(s, 'ingest_enqueue_duration_seconds_count')).toBe(3);
    // Each step of a push, timed: all eight pushes start admission; the 415 ends at headers, the 413
    // at read-body, the 400 at envelope; the empty batch is answered after admission without a
    // step of the queued path; the keyed retry runs all four (its claim finds the first batch).
    const steps: Record<string, number | undefined> = {};
    for (const step of STEPS) steps[step] = await sample(s, 'ingest_push_step_duration_seconds_count', { step });
    expect(steps).toEqual({
      shed: 8,
      params: 8,
      headers: 8,
      'read-body': 7,
      envelope: 6,
      'app-budget': 5,
      'claim-id': 4,
      'build-payload': 4,
      enqueue: 4,
      'durability-wait': 4,
    });
    expect(await sample(s, 'ingest_push_step_duration_seconds_count')).toBe(58);
    for (const [status, n] of [
      ['200', 5],
      ['415', 1],
      ['400', 1],
      ['413', 1],
    ] as const) {
      expect(
        await sample(s, 'ingest_http_request_duration_seconds_count', { route: PUSH_ROUTE, method: 'POST', status }),
      ).toBe(n);
    }
    // Every bucket set ends in +Inf, which holds every observation.
    expect(
      await sample(s, 'ingest_http_request_duration_seconds_bucket', { route: PUSH_ROUTE, status: '200', le: '+Inf' }),
    ).toBe(5);

    await waitFor(
      async () => (await sample(s, 'ingest_encoder_batches_total', { outcome: 'written' })) === 3,
      30_000,
      'three batches written',
    );
    expect(await sample(s, 'ingest_encoder_batches_total', { outcome: 'retried' })).toBe(0);
    expect(await sample(s, 'ingest_encoder_batches_total', { outcome: 'failed' })).toBe(0);
    expect(await sample(s, 'ingest_encoder_events_written_total')).toBe(60);
    expect(await sample(s, 'ingest_encoder_input_bytes_total')).toBe(acceptedBytes);
    // The batch files, not the store's metadata sidecars beside them.
    const files = filesUnder(join(s.dataDir, 'events', 'counts')).filter((f) => f.endsWith('.parquet'));
    expect(files).toHaveLength(3);
    const fileBytes = files.map((f) => statSync(f).size);
    expect(await sample(s, 'ingest_encoder_parquet_bytes_total')).toBe(fileBytes.reduce((a, b) => a + b, 0));
    for (const h of [
      'ingest_encoder_encode_duration_seconds_count',
      'ingest_encoder_write_duration_seconds_count',
      'ingest_encoder_end_to_end_seconds_count',
      'ingest_encoder_compression_ratio_count',
      'ingest_encoder_wait_seconds_count',
    ]) {
      expect({ h, n: await sample(s, h) }).toEqual({ h, n: 3 });
    }
    // Each observed ratio is one batch's JSON bytes over the bytes of its own file.
    const ratios = bodies.map(
      (b, i) =>
        Buffer.byteLength(b) /
        statSync(join(s.dataDir, 'events', 'counts', `${accepted[i]!.body.batchId as string}.parquet`)).size,
    );
    expect(await sample(s, 'ingest_encoder_compression_ratio_sum')).toBeCloseTo(
      ratios.reduce((a, b) => a + b, 0),
      9,
    );
    expect(await sample(s, 'ingest_encoder_store_errors_total')).toBe(0);
    expect(await sample(s, 'ingest_encoder_workers')).toBe(1);
    expect(await sample(s, 'ingest_encoder_concurrency')).toBe(3);
    expect(await sample(s, 'ingest_encoder_active_jobs')).toBe(0);

    // Queue gauges are read from Redis when the registry is read: no upkeep pass needed. The
    // encoder counts a batch written before BullMQ moves its job out of the active list (one more
    // Redis round trip), so the last job can still be active for a moment.
    await waitFor(
      async () => (await sample(s, 'ingest_queue_jobs', { state: 'active' })) === 0,
      10_000,
      'no job active',
    ).catch(() => undefined);
    expect(await sample(s, 'ingest_queue_jobs', { state: 'waiting' })).toBe(0);
    expect(await sample(s, 'ingest_queue_jobs', { state: 'active' })).toBe(0);
    expect(await sample(s, 'ingest_queue_jobs', { state: 'failed' })).toBe(0);
    expect(await sample(s, 'ingest_queue_oldest_waiting_age_seconds')).toBe(0);
    expect(await sample(s, 'ingest_watermark_lag_seconds')).toBe(0);
    expect(await sample(s, 'ingest_queue_workers')).toBe(1);
  });

  it('a job the encoder cannot decode is counted as failed once and shows in the failed queue gauge', async () => {
    await queue.add(
      JOB_NAME,
      { v: 99, note: 'not a batch job' },
      { jobId: 'counts-bad-job', attempts: 1, removeOnFail: false },
    );
    await waitFor(
      async () => (await sample(s, 'ingest_encoder_batches_total', { outcome: 'failed' })) === 1,
      30_000,
      'one failed batch',
    );
    expect(await sample(s, 'ingest_queue_jobs', { state: 'failed' })).toBe(1);
    expect(await sample(s, 'ingest_encoder_batches_total', { outcome: 'retried' })).toBe(0);
    expect(await sample(s, 'ingest_encoder_batches_total', { outcome: 'written' })).toBe(3);
  });

  it('the queue age gauge sees a waiting job while no encoder runs', async () => {
    await s.encoder!.close(5000);
    expect(await sample(s, 'ingest_encoder_workers')).toBe(0);
    const r = await post(batchBody(5));
    expect(r.status).toBe(200);
    await waitFor(
      async () => (await sample(s, 'ingest_queue_jobs', { state: 'waiting' })) === 1,
      10_000,
      'one waiting job',
    );
    // Both gauges grow with the job's age: they pass 1 s once it has waited that long.
    await waitFor(
      async () => ((await sample(s, 'ingest_queue_oldest_waiting_age_seconds')) ?? 0) >= 1,
      10_000,
      'the oldest waiting job 1 s old',
    );
    await waitFor(
      async () => ((await sample(s, 'ingest_watermark_lag_seconds')) ?? 0) >= 1,
      10_000,
      'the watermark lag at 1 s',
    );
    await waitFor(async () => (await sample(s, 'ingest_queue_workers')) === 0, 10_000, 'no workers attached');
  });
});
