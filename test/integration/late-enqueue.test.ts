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
import { waitFor } from '../helpers/proc.js';
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
    return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.parquet')).sort() : [];
  };
  async function push(app: string, body: string, key: string): Promise<{ status: number; batchId?: string; error?: string }> {
    const r = await fetch(`${stack.url}/push/events/${app}/x`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body });
    return { status: r.status, ...((await r.json()) as { batchId?: string; error?: string }) };
  }

  it('keeps the id in flight and the key claimed; the retry gets that batch, and one file is written', { timeout: 60_000 }, async () => {
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
    const job = await waitFor(async () => (await queue.getJobs(['wait'])).find((j) => j.data?.prefix === prefix), 10_000, 'the late job');
    const id = job.id as string;
    expect(job.data.batchId).toBe(id);
    await new Promise((r) => setTimeout(r, 300));
    // Its file is still to come, so the id must still hold the list back.
    expect(await ledger.isPending(prefix, id)).toBe(true);

    // The client retries with the same key: it gets the batch that is queued, not a new one.
    const retry = await push(app, body, 'late-1');
    expect(retry).toMatchObject({ status: 200, batchId: id });
    expect((await stack.api!.app.metrics.enqueueUnknown.get()).values[0]?.value).toBe(1);

    await Promise.all(workers().map((w) => w.resume()));
    await waitFor(async () => files(app).length >= 1 && !(await ledger.isPending(prefix, id)), 30_000, 'the file');
    expect(files(app)).toEqual([`${id}.parquet`]);
    const listed = await fetch(`${stack.url}/list/events/${app}?limit=10`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(((await listed.json()) as { items: string[] }).items).toEqual([`${id}.parquet`]);
  });
});
