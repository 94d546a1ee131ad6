/**
 * An add that reaches Redis after the API stopped waiting for it (a Redis that stalls while the
 * command is on its way). The push was answered 503, but its job exists and will be written, so
 * its id must stay in flight (the list must not pass it before its file exists) and its
 * idempotency claim must stay (the client's retry must get that batch's id, not a second file).
 * Real redis-server, BullMQ and the product's stack; the stall is a loopback proxy that holds
 * the API's commands back from the add on (FaultProxy.holdNext, scripts/chaos-kit.ts).
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Queue, Worker } from 'bullmq';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { BatchLedger } from '../../shared/ledger/ledger.js';
import { batchBody } from '../helpers/events.js';
import { FaultProxy } from '../../scripts/chaos-kit.js';
import { holdsFor, waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, type StackProbe, type TestStack, stackProbe, startTestStack } from '../helpers/stack.js';

describe('an enqueue that lands after the API answered 503', () => {
  let proxy: FaultProxy;
  let stack: TestStack;
  let queue: Queue;
  let ledger: BatchLedger;
  let probe: StackProbe;

  beforeAll(async () => {
    const target = new URL(inject('redisUrl'));
    proxy = await FaultProxy.start(Number(target.port));
    // The reaper's grace stays at its default (60 s), far beyond this test's stall.
    stack = await startTestStack({ REDIS_URL: `redis://127.0.0.1:${proxy.port}`, IDEMPOTENCY_WINDOW_SECONDS: '600' });
    probe = stackProbe(stack.queueName);
    ({ queue, ledger } = probe);
  });
  afterAll(async () => {
    await probe?.close();
    await stack?.shutdown();
    await proxy?.close();
  });

  const workers = (): Worker[] => [...(stack.encoder?.workers ?? [])];
  const files = (app: string): string[] => {
    const dir = join(stack.dataDir, 'events', app);
    return existsSync(dir)
      ? readdirSync(dir)
          .filter((f) => f.endsWith('.parquet'))
          .sort()
      : [];
  };
  async function push(
    app: string,
    body: string,
    key: string,
  ): Promise<{ status: number; batchId?: string; error?: string }> {
    const r = await fetch(`${stack.url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body,
    });
    return { status: r.status, ...((await r.json()) as { batchId?: string; error?: string }) };
  }

  it(
    'keeps the id in flight and the key claimed; the retry gets that batch, and one file is written',
    { timeout: 60_000 },
    async () => {
      const app = 'lateadd';
      const prefix = `events/${app}/`;
      const body = batchBody(5);
      await Promise.all(workers().map((w) => w.pause()));

      // Only BullMQ's add carries the job's `bodyBytes`: the mint goes through, the add and every
      // later command of that connection reach Redis 8 s later, well after the API gave up (3 s).
      proxy.holdNext('"bodyBytes"', 8000);
      const first = await push(app, body, 'late-1');
      expect(first.status).toBe(503);
      expect(first.error).toMatch(/may still be queued: send the same body/);
      expect(proxy.held).toBe(1);
      // Answered while the add was still held back: the API could not know whether it would run.
      expect(proxy.released).toBe(0);
      // The stall ends: the add runs in Redis after all (and whatever that connection sent after it).
      await waitFor(async () => proxy.released === 1, 10_000, 'the held commands to reach Redis');
      const job = await waitFor(
        async () => (await queue.getJobs(['wait'])).find((j) => j.data?.prefix === prefix),
        10_000,
        'the late job',
      );
      const id = job.id as string;
      expect(job.data.batchId).toBe(id);
      // Its file is still to come, so the id must still hold the list back.
      await holdsFor(() => ledger.isPending(prefix, id), 300, 'the late id pending');

      // The client retries with the same key: it gets the batch that is queued, not a new one.
      const retry = await push(app, body, 'late-1');
      expect(retry).toMatchObject({ status: 200, batchId: id });
      expect((await stack.api!.app.metrics.enqueueUnknown.get()).values[0]?.value).toBe(1);

      await Promise.all(workers().map((w) => w.resume()));
      await waitFor(async () => files(app).length >= 1 && !(await ledger.isPending(prefix, id)), 30_000, 'the file');
      expect(files(app)).toEqual([`${id}.parquet`]);
      const listed = await fetch(`${stack.url}/list/events/${app}?limit=10`, {
        headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      expect(((await listed.json()) as { items: string[] }).items).toEqual([`${id}.parquet`]);
    },
  );
});

/**
 * The other side of the same catch: an add that Redis refused before running it (here: the API's
 * Redis user may read BullMQ's keys but not write them, so the add is answered NOPERM while the
 * mint, on the ledger's keys, goes through). Nothing of the batch is queued, so its id must leave
 * flight at once (or it holds the list back until the reaper's grace ends) and its key must be
 * forgotten (or the client's retry waits for a batch that will never exist).
 */
describe('an enqueue that Redis refused', () => {
  const user = `t-api-${Date.now().toString(36)}`;
  let stack: TestStack;
  let probe: StackProbe;

  beforeAll(async () => {
    probe = stackProbe(`q-acl-${Date.now().toString(36)}`);
    await probe.redis.call('ACL', 'SETUSER', user, 'on', '>secret', '~*', '&*', '+@all');
    const target = new URL(inject('redisUrl'));
    stack = await startTestStack({
      REDIS_URL: `redis://${user}:secret@127.0.0.1:${target.port}`,
      QUEUE_NAME: probe.queue.name,
      IDEMPOTENCY_WINDOW_SECONDS: '600',
    });
  });
  afterAll(async () => {
    await stack?.shutdown();
    await probe?.redis.call('ACL', 'DELUSER', user).catch(() => undefined);
    await probe?.close();
  });

  it(
    'releases the id at once and forgets the key; the retry after the fix is accepted and written once',
    { timeout: 60_000 },
    async () => {
      const app = 'refusedadd';
      const prefix = `events/${app}/`;
      const body = batchBody(4);
      const push = async (): Promise<{ status: number; batchId?: string; error?: string }> => {
        const r = await fetch(`${stack.url}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': 'refused-1' },
          body,
        });
        return { status: r.status, ...((await r.json()) as { batchId?: string; error?: string }) };
      };
      const workers = [...(stack.encoder?.workers ?? [])];
      await Promise.all(workers.map((w) => w.pause()));
      // From now on the API's user may write the ledger's keys ({<queue>}:…) and only read BullMQ's (bull:…).
      await probe.redis.call('ACL', 'SETUSER', user, 'resetkeys', `~{${stack.queueName}}:*`, '%R~bull:*');

      const t0 = performance.now();
      const refused = await push();
      expect(refused.status).toBe(503);
      expect(refused.error).toBe('queue unavailable (Redis); retry later');
      // Answered without waiting out the enqueue timeout (3 s): Redis said no.
      expect(performance.now() - t0).toBeLessThan(2500);
      // The mint ran (the clock moved) and its id is already out of flight.
      expect(await probe.ledger.lastMintedMs()).toBeGreaterThan(0);
      expect(await probe.redis.zcard(probe.ledger.pendingKey(prefix))).toBe(0);
      expect((await stack.api!.app.metrics.enqueueUnknown.get()).values[0]?.value ?? 0).toBe(0);
      expect(await probe.queue.getJobCounts('wait', 'active', 'delayed', 'completed', 'failed')).toEqual({
        wait: 0,
        active: 0,
        delayed: 0,
        completed: 0,
        failed: 0,
      });

      // Redis is fixed; the client retries with the same key and is accepted at once (a key still
      // claimed would first wait for the refused batch's job, seconds, then take its id over).
      await probe.redis.call('ACL', 'SETUSER', user, 'resetkeys', '~*');
      const t1 = performance.now();
      const retry = await push();
      expect(retry.status).toBe(200);
      expect(performance.now() - t1).toBeLessThan(2500);
      const id = retry.batchId as string;
      await Promise.all(workers.map((w) => w.resume()));
      const dir = join(stack.dataDir, 'events', app);
      await waitFor(
        async () => existsSync(join(dir, `${id}.parquet`)) && !(await probe.ledger.isPending(prefix, id)),
        30_000,
        'the retried batch written',
      );
      expect(readdirSync(dir).filter((f) => f.endsWith('.parquet'))).toEqual([`${id}.parquet`]);
      // The same key again: the same batch, not a third.
      expect(await push()).toMatchObject({ status: 200, batchId: id });
    },
  );
});
