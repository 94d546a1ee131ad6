/**
 * Acceptance 3 of the gap-free `?after=` promise: a batch id that will never be written
 * (its API died between minting and enqueueing, or its job failed for good) holds newer
 * batches back only for a bounded time, and the hold is visible in /metrics and /readyz.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { batchIdMs } from '../../shared/ids.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { BATCH_JOB_OPTIONS, type BatchJob, JOB_NAME, packBody } from '../../shared/redis/jobs/push.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

/** Short grace so the test is quick; the upkeep loop (reaper) runs every 5 s. */
const GRACE_SECONDS = 3;
const UPKEEP_INTERVAL_SECONDS = 5;
/** The documented bound for an orphan, plus room for a busy shared machine. */
const ORPHAN_BOUND_MS = (GRACE_SECONDS + UPKEEP_INTERVAL_SECONDS) * 1000;
const SLACK_MS = 7000;

describe('the watermark recovers from batches that will never be written', () => {
  let stack: TestStack;
  let redis: Redis;
  let ledger: BatchLedger;
  let queue: Queue;

  beforeAll(async () => {
    stack = await startTestStack({ ORPHAN_GRACE_SECONDS: String(GRACE_SECONDS) });
    redis = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
    // The same namespace and queue the stack's API uses: what a second API instance would see.
    ledger = new BatchLedger(redis, stack.queueName);
    queue = new Queue(stack.queueName, { connection: redis });
  });

  afterAll(async () => {
    await queue?.obliterate({ force: true }).catch(() => undefined);
    await queue?.close().catch(() => undefined);
    redis?.disconnect();
    await stack?.shutdown();
  });

  async function push(app: string, events = 3): Promise<string> {
    const r = await fetch(`${stack.url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: batchBody(events),
    });
    expect(r.status).toBe(200);
    return ((await r.json()) as { batchId: string }).batchId;
  }

  async function list(app: string): Promise<string[]> {
    const r = await fetch(`${stack.url}/list/events/${app}?limit=1000`, {
      headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(r.status).toBe(200);
    return ((await r.json()) as { items: string[] }).items.map((n) => n.replace(/\.parquet$/, ''));
  }

  function fileExists(app: string, id: string): boolean {
    return existsSync(join(stack.dataDir, 'events', app, `${id}.parquet`));
  }

  /** Sum of a metric's samples whose label set contains `labels` (e.g. `kind="orphan"`). */
  async function metric(name: string, labels = ''): Promise<number> {
    const text = await (await fetch(`${stack.url}/metrics`)).text();
    let sum = 0;
    for (const line of text.split('\n')) {
      const m = /^([a-z_]+)(\{[^}]*\})? (\S+)$/.exec(line);
      if (m && m[1] === name && (labels === '' || (m[2] ?? '').includes(labels))) sum += Number(m[3]);
    }
    return sum;
  }

  async function readyLag(): Promise<number> {
    const r = await fetch(`${stack.url}/readyz`);
    expect(r.status).toBe(200);
    const body = (await r.json()) as { watermarkLagSeconds: unknown };
    expect(typeof body.watermarkLagSeconds).toBe('number');
    return body.watermarkLagSeconds as number;
  }

  /** A job payload exactly as the API would enqueue it for `batchId`. */
  async function jobFor(app: string, batchId: string, body: string): Promise<BatchJob> {
    const prefix = `events/${app}/`;
    return {
      v: 1,
      collection: 'events',
      key: `${prefix}${batchId}.parquet`,
      prefix,
      params: { app },
      batchId,
      receivedAt: batchIdMs(batchId),
      events: 1,
      ...(await packBody(Buffer.from(body))),
    };
  }

  it('an id minted by an API that died before enqueueing holds the list back, then is reaped within ORPHAN_GRACE_SECONDS + the upkeep interval', async () => {
    const app = 'orphan';
    // What a crashed API leaves behind: the id is minted and in flight, but no job exists.
    const orphan = (await ledger.mint(`events/${app}/`)).batchId;
    const later = await push(app);
    expect(later > orphan).toBe(true);
    await waitFor(async () => fileExists(app, later), 20_000, 'the later batch to be written');

    // The later batch is on disk, yet hidden: a client whose cursor moved past it would
    // otherwise never see the orphan's id, should it still be written.
    expect(await list(app)).toEqual([]);
    expect(await ledger.isPending(`events/${app}/`, orphan)).toBe(true);
    expect(await readyLag()).toBeGreaterThan(0);

    const listed = await waitFor(
      async () => {
        const items = await list(app);
        return items.length > 0 ? items : null;
      },
      ORPHAN_BOUND_MS + SLACK_MS + 2000,
      'the orphan to be reaped',
    );
    const recoveredAfterMs = Date.now() - batchIdMs(orphan);
    expect(listed).toEqual([later]);
    expect(recoveredAfterMs).toBeLessThanOrEqual(ORPHAN_BOUND_MS + SLACK_MS);
    expect(await ledger.isPending(`events/${app}/`, orphan)).toBe(false);
    expect(await metric('ingest_orphans_reaped_total', 'kind="orphan"')).toBeGreaterThanOrEqual(1);
  }, 40_000);

  it('a batch still in the queue (e.g. waiting out a retry backoff) is never reaped; lag is reported until it is written', async () => {
    const app = 'slow';
    const slow = (await ledger.mint(`events/${app}/`)).batchId;
    // Delayed like a job between retries: it exists, so it is not an orphan however old it gets.
    const job = await queue.add(JOB_NAME, await jobFor(app, slow, batchBody(2)), {
      ...BATCH_JOB_OPTIONS,
      jobId: slow,
      delay: 120_000,
    });
    const later = await push(app);
    await waitFor(async () => fileExists(app, later), 20_000, 'the later batch to be written');
    expect(await list(app)).toEqual([]);
    expect(await readyLag()).toBeGreaterThan(0);

    // The upkeep loop publishes the gauge; wait until it shows an age past the grace, which
    // means at least one reaper pass saw the id old enough and still left it alone.
    const lag = await waitFor(
      async () => {
        const v = await metric('ingest_watermark_lag_seconds');
        return v > GRACE_SECONDS + 0.5 ? v : null;
      },
      ORPHAN_BOUND_MS + SLACK_MS + 2000,
      'ingest_watermark_lag_seconds above the grace',
    );
    expect(lag).toBeGreaterThan(GRACE_SECONDS);
    expect(await list(app)).toEqual([]);
    expect(await ledger.isPending(`events/${app}/`, slow)).toBe(true);

    await job.promote();
    const listed = await waitFor(
      async () => {
        const items = await list(app);
        return items.length === 2 ? items : null;
      },
      20_000,
      'both batches listed',
    );
    expect(listed).toEqual([slow, later]);
    await waitFor(async () => (await readyLag()) === 0, 10_000, 'readyz lag back to 0');
  }, 40_000);

  it('a dead-lettered batch releases the watermark and is counted (by the encoder, or by the reaper when that release was lost)', async () => {
    // Encoder path: a job that can never succeed fails for good and the worker releases its id.
    const app = 'dead';
    const before = await metric('ingest_encoder_batches_total', 'outcome="failed"');
    const dead = (await ledger.mint(`events/${app}/`)).batchId;
    await queue.add(JOB_NAME, await jobFor(app, dead, '{"data":{"events":[{"event":'), {
      ...BATCH_JOB_OPTIONS,
      jobId: dead,
    });
    const later = await push(app);
    const listed = await waitFor(
      async () => {
        const items = await list(app);
        return items.length > 0 ? items : null;
      },
      20_000,
      'the later batch listed after the dead one',
    );
    expect(listed).toEqual([later]);
    expect(await queue.getJobState(dead)).toBe('failed');
    expect(await ledger.isPending(`events/${app}/`, dead)).toBe(false);
    expect(await metric('ingest_encoder_batches_total', 'outcome="failed"')).toBe(before + 1);

    // Reaper path: the job is dead but its release never happened (here: the payload lacks
    // the prefix, as if the worker died right after failing it); the reaper releases it.
    const app2 = 'dead2';
    const lost = (await ledger.mint(`events/${app2}/`)).batchId;
    const { prefix: _dropped, ...withoutPrefix } = await jobFor(app2, lost, batchBody(1));
    await queue.add(JOB_NAME, withoutPrefix, { ...BATCH_JOB_OPTIONS, jobId: lost });
    const later2 = await push(app2);
    await waitFor(async () => fileExists(app2, later2), 20_000, 'the later batch to be written');
    await waitFor(async () => (await queue.getJobState(lost)) === 'failed', 20_000, 'the job to be dead-lettered');
    expect(await list(app2)).toEqual([]);
    const listed2 = await waitFor(
      async () => {
        const items = await list(app2);
        return items.length > 0 ? items : null;
      },
      ORPHAN_BOUND_MS + SLACK_MS + 2000,
      'the dead batch to be reaped',
    );
    expect(listed2).toEqual([later2]);
    expect(Date.now() - batchIdMs(lost)).toBeLessThanOrEqual(ORPHAN_BOUND_MS + SLACK_MS);
    expect(await metric('ingest_orphans_reaped_total', 'kind="dead"')).toBeGreaterThanOrEqual(1);
  }, 60_000);
});
