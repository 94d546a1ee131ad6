/**
 * Decision 0025: with REDIS_WAIT_REPLICAS > 0 the encoder writes a job's file only once the job is
 * known to be on that many replicas (services/encoder/replication.ts). A real master, a replica
 * started later, the product's stack in this process.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { confirmReplicated } from '../../services/encoder/replication.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { type RedisServer, startRedisServer } from '../helpers/redis-server.js';
import { waitFor } from '../helpers/proc.js';
import { retryWhile503 } from '../helpers/wait.js';

/** Batch ids of the files of `app` (STORE=fs). */
function filesOf(dataDir: string, app: string): string[] {
  const dir = join(dataDir, 'events', app);
  return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.parquet')) : [];
}

/** A counter or histogram sample of the stack's registry (0 when absent). */
async function sample(stack: TestStack, line: RegExp): Promise<number> {
  const text = await stack.registry.metrics();
  const m = text.split('\n').find((l) => line.test(l));
  return m ? Number(m.split(' ').pop()) : 0;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('the encoder and REDIS_WAIT_REPLICAS', () => {
  it('writes no file while no replica has the job (the job is delayed, no attempt counted); once a replica syncs, one file, and the retry gets its id', async () => {
    const master = await startRedisServer();
    let replica: RedisServer | undefined;
    let stack: TestStack | undefined;
    const probe = new Redis(master.url, { maxRetriesPerRequest: null });
    try {
      stack = await startTestStack(
        { REDIS_URL: master.url, REDIS_WAIT_REPLICAS: '1', REDIS_WAIT_TIMEOUT_MS: '200', ROLLUP: 'off' },
        { api: true, encoder: true },
      );
      const s = stack;
      const body = batchBody(3, sampleEvent);
      const push = (): Promise<Response> =>
        fetch(`${s.url}/push/events/rwapp/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'Idempotency-Key': 'rw-k1' },
          body,
        });
      const first = await push();
      expect(first.status).toBe(503);
      // The encoder takes the job, its WAIT finds no replica: held back, again and again.
      await waitFor(
        async () => (await sample(s, /^ingest_encoder_replica_waits_total\{outcome="timeout"[,}]/)) >= 3,
        20_000,
        'the encoder to hold the job back three times',
      );
      expect(filesOf(s.dataDir, 'rwapp')).toEqual([]);
      const queue = new Queue(s.queueName, { connection: probe });
      try {
        const counts = await queue.getJobCounts('failed', 'completed');
        expect(counts).toEqual({ failed: 0, completed: 0 });
        const [job] = await queue.getJobs(['delayed', 'wait', 'active', 'prioritized']);
        expect(job, 'the job is still queued').toBeDefined();
        expect(job?.attemptsMade, 'no attempt counted').toBe(0);
      } finally {
        await queue.close();
      }
      expect(await sample(s, /^ingest_encoder_replica_waits_total\{outcome="replicated"[,}]/)).toBe(0);

      replica = await startRedisServer({ args: ['--replicaof', '127.0.0.1', String(master.port)] });
      await waitFor(
        async () => /slave0:.*state=online/.test(await probe.info('replication')),
        20_000,
        'the replica to sync',
      );
      const files = await waitFor(
        async () => {
          const f = filesOf(s.dataDir, 'rwapp');
          return f.length > 0 ? f : null;
        },
        20_000,
        'the batch to be written once a replica has it',
      );
      // Retried as an SDK retries: on a busy machine the replica's acknowledgement may come after the
      // 200 ms WAIT once more (CI saw it), which must again be a 503, never a second batch.
      const second = await retryWhile503(push);
      expect(second.status).toBe(200);
      const { batchId } = (await second.json()) as { batchId: string };
      expect(files).toEqual([`${batchId}.parquet`]);
      expect(await sample(s, /^ingest_encoder_replica_waits_total\{outcome="replicated"[,}]/)).toBeGreaterThanOrEqual(
        1,
      );
      const listed = await waitFor(
        async () => {
          const r = await fetch(`${s.url}/list/events/rwapp`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
          const page = (await r.json()) as { items: string[] };
          return page.items.length > 0 ? page.items : null;
        },
        20_000,
        'the batch to be listed',
      );
      expect(listed).toEqual([`${batchId}.parquet`]);
      await sleep(300);
      expect(filesOf(s.dataDir, 'rwapp')).toHaveLength(1);

      // The check itself: a lock that holds another token is `lost` (and keeps its value).
      await probe.set('rw:lock', 'someone-else', 'PX', 30_000);
      const lost = await confirmReplicated(
        { replicas: 1, timeoutMs: 500, connection: probe },
        'rw:lock',
        'my-token',
        30_000,
      );
      expect(lost.outcome).toBe('lost');
      expect(await probe.get('rw:lock')).toBe('someone-else');
      await probe.set('rw:lock', 'my-token', 'PX', 1000);
      const ok = await confirmReplicated(
        { replicas: 1, timeoutMs: 2000, connection: probe },
        'rw:lock',
        'my-token',
        30_000,
      );
      expect(ok).toEqual({ outcome: 'replicated', acked: 1 });
      expect(await probe.pttl('rw:lock')).toBeGreaterThan(20_000);
      const tooMany = await confirmReplicated(
        { replicas: 2, timeoutMs: 200, connection: probe },
        'rw:lock',
        'my-token',
        30_000,
      );
      expect(tooMany).toEqual({ outcome: 'timeout', acked: 1 });
    } finally {
      await stack?.shutdown();
      probe.disconnect();
      await replica?.stop();
      await master.stop();
    }
  }, 90_000);

  it('with REDIS_WAIT_REPLICAS=0 (the default) the encoder makes no replica check', async () => {
    const master = await startRedisServer();
    let stack: TestStack | undefined;
    try {
      stack = await startTestStack({ REDIS_URL: master.url, ROLLUP: 'off' }, { api: true, encoder: true });
      const s = stack;
      const r = await fetch(`${s.url}/push/events/rw0app/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(2, sampleEvent),
      });
      expect(r.status).toBe(200);
      await waitFor(async () => filesOf(s.dataDir, 'rw0app').length === 1, 20_000, 'the batch to be written');
      expect(await sample(s, /^ingest_encoder_replica_wait_seconds_count[{ ]/)).toBe(0);
      expect(await sample(s, /^ingest_encoder_batches_total\{outcome="written"[,}]/)).toBe(1);
    } finally {
      await stack?.shutdown();
      await master.stop();
    }
  }, 60_000);
});
