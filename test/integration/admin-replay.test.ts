/**
 * Review fixes in services/api/admin.ts, on a real redis-server and BullMQ: a replay cannot be
 * undone by a reaper pass that runs between its two steps, and the admin routes answer 503 +
 * Retry-After (not 500) while Redis is down.
 */
import express from 'express';
import { type Job, Queue, UnrecoverableError, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createAdminRouter, replayOne } from '../../services/api/admin.js';
import { jsonErrorHandler } from '../../services/api/error-map.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { reapOnce } from '../../shared/ledger/reaper.js';
import { BATCH_JOB_OPTIONS, type BatchJob, JOB_NAME } from '../../shared/redis/jobs/push.js';
import { createRedis } from '../../shared/redis/connection.js';
import { ADMIN_TOKEN } from '../helpers/stack.js';
import { uniqueName } from '../helpers/names.js';
import { waitFor } from '../helpers/proc.js';
import { startRedisServer } from '../helpers/redis-server.js';

/** Dead-letters one batch job under `prefix` (a worker that fails it for good), its id released like the encoder does. */
async function deadLetter(redis: Redis, queue: Queue, ledger: BatchLedger, prefix: string): Promise<string> {
  const { batchId } = await ledger.mint(prefix);
  const job: BatchJob = {
    v: 1,
    collection: 'events',
    key: `${prefix}${batchId}.parquet`,
    prefix,
    params: {},
    batchId,
    receivedAt: Date.now(),
    events: 1,
    encoding: 'identity',
    body: '{}',
    bodyBytes: 2,
  };
  await queue.add(JOB_NAME, job, { ...BATCH_JOB_OPTIONS, jobId: batchId });
  const worker = new Worker(
    queue.name,
    async () => {
      throw new UnrecoverableError('test: fails for good');
    },
    { connection: redis.duplicate({ maxRetriesPerRequest: null }) },
  );
  try {
    await waitFor(async () => (await queue.getJobState(batchId)) === 'failed', 20_000, 'job dead-lettered');
  } finally {
    await worker.close();
  }
  await ledger.release(prefix, batchId);
  return batchId;
}

describe('replay against the reaper', () => {
  let redis: Redis;
  let queue: Queue;
  let ledger: BatchLedger;
  beforeAll(() => {
    redis = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
    const name = uniqueName('replay');
    queue = new Queue(name, { connection: redis });
    ledger = new BatchLedger(redis, name);
  });
  afterAll(async () => {
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    redis.disconnect();
  });

  it('a reaper pass between putting the id back in flight and retrying the job does not release it', async () => {
    const prefix = 'events/race/';
    const id = await deadLetter(redis, queue, ledger, prefix);
    expect(await ledger.isPending(prefix, id)).toBe(false);
    let reaped: Awaited<ReturnType<typeof reapOnce>> | undefined;
    // The queue replayOne sees hands out the real job, whose retry first lets a whole reaper pass
    // run (grace 0): the reaper then finds the id in flight and its job still failed.
    const racing = new Proxy(queue, {
      get(target, prop) {
        if (prop === 'getJob') {
          return async (jobId: string) => {
            const job = await target.getJob(jobId);
            if (!job) return job;
            return new Proxy(job, {
              get(j: Job, p) {
                if (p === 'retry') {
                  return async (...args: Parameters<Job['retry']>) => {
                    reaped = await reapOnce(ledger, queue, 0);
                    return j.retry(...args);
                  };
                }
                const v = Reflect.get(j, p) as unknown;
                return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(j) : v;
              },
            });
          };
        }
        const v = Reflect.get(target, prop) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const outcome = await replayOne(racing, ledger, id);
    expect(outcome.outcome).toBe('replayed');
    expect(reaped).toEqual({ orphans: 0, dead: 0 });
    expect(await queue.getJobState(id)).toBe('waiting');
    // Still in flight: the list keeps waiting for the replayed batch until it is written.
    expect(await ledger.isPending(prefix, id)).toBe(true);
    expect(await ledger.listBound(prefix)).toEqual({ kind: 'below', id });
    // And once the job is no longer failed, a later reaper pass leaves it alone too.
    expect(await reapOnce(ledger, queue, 0)).toEqual({ orphans: 0, dead: 0 });
    expect(await ledger.isPending(prefix, id)).toBe(true);
  });
});

describe('admin routes while Redis is down', () => {
  it('GET /admin/failed and POST /admin/replay answer 503 + Retry-After, not 500', { timeout: 60_000 }, async () => {
    const server = await startRedisServer();
    const producer = createRedis(server.url, 'producer');
    const name = uniqueName('admin-down');
    const queue = new Queue(name, { connection: producer });
    queue.on('error', () => undefined);
    const app = express();
    app.use(
      createAdminRouter({
        queue,
        ledger: new BatchLedger(producer, name),
        redis: producer,
        tokens: new Map([[ADMIN_TOKEN, ['admin']]]),
      }),
    );
    // The product's one error map (services/api/error-map.ts), as services/api/app.ts mounts it.
    app.use(jsonErrorHandler());
    const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
    try {
      const up = await request(app).get('/admin/failed').set(auth);
      expect(up.status).toBe(200);
      expect(up.body).toEqual({ total: 0, items: [] });
      await server.stop();
      for (const r of [
        await request(app).get('/admin/failed').set(auth),
        await request(app).post('/admin/replay').set(auth),
      ]) {
        expect(r.status).toBe(503);
        expect(r.headers['retry-after']).toBe('1');
        expect(r.body).toEqual({ error: 'queue unavailable (Redis); retry later', code: 'unavailable' });
      }
    } finally {
      await queue.close().catch(() => undefined);
      producer.disconnect();
      await server.stop().catch(() => undefined);
    }
  });
});
